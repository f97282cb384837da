import { errorCodes, type FastifyInstance } from 'fastify';
import { Tinypool } from 'tinypool';
import { withExactSeed } from './exact-seed.js';
import type { ParsedBody } from './json-body-worker.js';

/**
 * Bodies larger than this are parsed on a thread of their own: parsing a few MiB of JSON (a long
 * prompt) takes tens of milliseconds, which the event loop would spend away from every stream.
 */
const OFF_THREAD_BYTES = 256 * 1024;

/**
 * `application/json` as fastify parses it (same errors, same `__proto__` and `constructor`
 * poisoning checks; a 64-bit seed read exactly, exact-seed.ts), but off the HTTP thread for large
 * bodies. The thread starts with the server (starting one takes the event loop tens of
 * milliseconds, not to be spent on a request); should it fail, large bodies are parsed inline as
 * small ones are.
 */
export function registerJsonBody(app: FastifyInstance): void {
  const inline = app.getDefaultJsonParser('error', 'error');
  let pool: Tinypool | undefined;
  app.addHook('onReady', async () => {
    const started = new Tinypool({ filename: new URL('./json-body-worker.js', import.meta.url), minThreads: 1, maxThreads: 1 });
    started.on('error', (error: Error) => {
      app.log.warn({ err: error.message }, 'the JSON body thread failed; large bodies are parsed on the HTTP thread');
      if (pool === started) pool = undefined;
    });
    pool = started;
  });
  app.addHook('onClose', async () => {
    await pool?.destroy();
  });
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body: Buffer, done) => {
    // fastify's parser takes a buffer as well as a string (its types say string only).
    if (!pool || body.length <= OFF_THREAD_BYTES) {
      return inline(request, body as unknown as string, (error, value) => (error ? done(error, undefined) : done(null, withExactSeed(value, body))));
    }
    // A buffer of its own moves to the thread without a copy.
    const own = body.byteOffset === 0 && body.byteLength === body.buffer.byteLength;
    pool.run(body, own ? { transferList: [body.buffer as ArrayBuffer] } : {}).then(
      (parsed: ParsedBody) => ('value' in parsed ? done(null, parsed.value) : done(new errorCodes.FST_ERR_CTP_INVALID_JSON_BODY(), undefined)),
      (error: Error) => done(error, undefined),
    );
  });
}
