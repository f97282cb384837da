import type { ServerResponse } from 'node:http';
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { ApiError } from '../../src/server/api-error.js';
import { ChoiceStream } from '../../src/server/choice-stream.js';
import type { ChoiceFormat } from '../../src/server/choice-runner.js';
import { SseWriter } from '../../src/server/sse.js';

const HIGH_WATER = 16 * 1024;

/** A response whose reader has stopped reading: nothing it is given leaves until `resume()`. */
function stalledResponse() {
  const pending: (() => void)[] = [];
  const chunks: string[] = [];
  let reading = false;
  const sink = new Writable({
    highWaterMark: HIGH_WATER,
    write(chunk: Buffer, _encoding, callback) {
      chunks.push(chunk.toString('utf8'));
      if (reading) callback();
      else pending.push(callback);
    },
  });
  const response = Object.assign(sink, { writeHead: () => response, flushHeaders: () => {} });
  return {
    response: response as unknown as ServerResponse,
    sink,
    chunks,
    resume() {
      reading = true;
      for (const callback of pending.splice(0)) callback();
    },
  };
}

const format: ChoiceFormat = {
  opening: (index) => ({ index, role: 'assistant' }),
  chunk: (index, text, finish) => ({ index, text, finish }),
  usageChunk: (usage) => ({ usage }),
  response: () => undefined,
};

/** The events in what was written: parsed data lines, then whether [DONE] ended them. */
function parse(chunks: readonly string[]): { events: any[]; done: boolean } {
  const lines = chunks.join('').split('\n\n').filter(Boolean).map((l) => l.slice('data: '.length));
  const done = lines.at(-1) === '[DONE]';
  return { events: (done ? lines.slice(0, -1) : lines).map((l) => JSON.parse(l)), done };
}

describe('streaming to a reader that stops reading', () => {
  it('buffers no more than the socket holds: the text waits, merged per choice, and arrives whole', async () => {
    const r = stalledResponse();
    const stream = new ChoiceStream(new SseWriter(r.response), format, 2);
    stream.start();
    let peak = 0;
    const sent = ['', ''];
    for (let t = 0; t < 100_000; t++) {
      for (const i of [0, 1]) {
        const piece = ` w${t}`;
        sent[i] += piece;
        stream.text(i, piece);
      }
      peak = Math.max(peak, r.sink.writableLength);
    }
    stream.finish(0, 'length');
    stream.finish(1, 'stop');
    stream.event({ usage: 1 });
    // 200 000 tokens of text (~1.5 MB) came; the socket's buffer never held much past its mark,
    // instead of one event per token (~20 MB of SSE).
    expect(peak).toBeLessThan(HIGH_WATER + 512);
    expect(stream.events).toBeLessThan(1000);
    const ended = stream.end();
    r.resume();
    await ended;
    const { events, done } = parse(r.chunks);
    expect(done).toBe(true);
    expect(events.slice(0, 2)).toEqual([{ index: 0, role: 'assistant' }, { index: 1, role: 'assistant' }]);
    for (const i of [0, 1]) {
      const mine = events.filter((e) => e.index === i && 'text' in e);
      expect(mine.map((e) => e.text ?? '').join('')).toBe(sent[i]);
      // Text first, then one finish, as OpenAI streams it.
      expect(mine.at(-1)).toEqual({ index: i, text: null, finish: i === 0 ? 'length' : 'stop' });
    }
    // The text that waited came as one event per choice once the reader read again.
    expect(events.length).toBeLessThan(stream.events + 10);
    expect(events.at(-1)).toEqual({ usage: 1 });
  });

  it('writes every piece as its own event while the reader keeps up', async () => {
    const r = stalledResponse();
    r.resume();
    const stream = new ChoiceStream(new SseWriter(r.response), format, 1);
    stream.start();
    for (const piece of ['a', 'b', 'c']) stream.text(0, piece);
    stream.finish(0, 'stop');
    await stream.end();
    expect(parse(r.chunks).events.map((e) => ('text' in e ? e.text : e.role))).toEqual(['assistant', 'a', 'b', 'c', null]);
  });

  it('gives up on a reader that never reads again: end() rejects at the deadline, fail() drops the connection', async () => {
    const r = stalledResponse();
    const stream = new ChoiceStream(new SseWriter(r.response), format, 1);
    stream.start();
    for (let t = 0; t < 10_000; t++) stream.text(0, ` token${t}`);
    stream.finish(0, 'length');
    const deadline = new AbortController();
    const ended = stream.end(deadline.signal);
    const timeout = new ApiError(504, 'deadline', { code: 'generation_timeout' });
    deadline.abort(timeout);
    await expect(ended).rejects.toBe(timeout);
    stream.fail(timeout);
    expect(r.sink.destroyed).toBe(true);
  });
});
