import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { metrale } from '../support/run-cli.js';
import { post, startServer } from '../support/serve-process.js';

const MODEL = 'metrale/embedded-qwen3-next';

describe('metrale serve lifecycle', () => {
  it('answers 503 while the model loads, then 200', async () => {
    const server = await startServer(['--load-delay-ms', '1500']);
    try {
      const health = await fetch(`${server.url}/health`);
      expect(health.status).toBe(503);
      expect(((await health.json()) as any).status).toMatch(/loading|starting/);
      const chat = await server.client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] }).catch((e: any) => e);
      expect(chat).toBeInstanceOf(OpenAI.APIError);
      expect(chat.status).toBe(503);
      expect(chat.message).toMatch(/loading/);
      await server.ready();
      const ok = await server.client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
      expect(ok.choices).toHaveLength(1);
    } finally {
      expect(await server.stop()).toBe(0);
    }
  }, 60_000);

  it('answers 429 when the queue is full, and serves again once it drains', async () => {
    const server = await startServer(['--max-batch', '1', '--max-queue', '1']);
    try {
      await server.ready();
      const long = () => post(server.url, '/v1/completions', { prompt: 'a long one', max_tokens: 200, temperature: 0, ignore_eos: true });
      const first = long();
      const second = long();
      // Let both reach the server before the third.
      await new Promise((r) => setTimeout(r, 200));
      const third = await server.client.completions.create({ model: MODEL, prompt: 'one too many', max_tokens: 2 }).catch((e: any) => e);
      expect(third).toBeInstanceOf(OpenAI.RateLimitError);
      expect(third.code).toBe('queue_full');
      expect((await first).status).toBe(200);
      expect((await second).status).toBe(200);
      const after = await server.client.completions.create({ model: MODEL, prompt: 'now there is room', max_tokens: 2 });
      expect(after.choices).toHaveLength(1);
    } finally {
      expect(await server.stop()).toBe(0);
    }
  }, 120_000);

  it('on SIGTERM stops accepting, cancels what outlives the deadline, and exits 0', async () => {
    const server = await startServer(['--shutdown-timeout', '0.5']);
    await server.ready();
    const r = await fetch(`${server.url}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'forever', max_tokens: 1800, stream: true, ignore_eos: true }),
    });
    const reader = r.body!.getReader();
    await reader.read();
    const t0 = Date.now();
    server.child.kill('SIGTERM');
    let text = '';
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    // The stream ended with an error event (the server is shutting down), then [DONE].
    expect(text).toMatch(/shutting down/);
    expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true);
    expect(await server.exited).toBe(0);
    expect(Date.now() - t0).toBeLessThan(10_000);
    expect(server.logs.some((l) => l.msg === 'stopped')).toBe(true);
    await expect(fetch(`${server.url}/health`)).rejects.toThrow();
  }, 60_000);

  it('exits 1 with the reason when the model cannot load', async () => {
    const run = metrale(['serve', '--port', '0', '--backend', 'cpu', '--model', '/nonexistent/model-dir']);
    expect(run.code).toBe(1);
    expect(run.stdout + run.stderr).toMatch(/nonexistent\/model-dir/);
  }, 60_000);

  it('draws a progress bar while the weights load when asked (--progress always)', async () => {
    const server = await startServer(['--progress', 'always']);
    try {
      await server.ready();
      expect(server.stderr()).toMatch(/loading weights \[.*\] \d+% \| \d+\/\d+ MiB/);
      expect(server.stderr()).toMatch(/100%/);
    } finally {
      expect(await server.stop()).toBe(0);
    }
  }, 60_000);

  it('refuses bad options as usage errors (exit 2), naming the option', () => {
    for (const [args, option] of [[['--spec', 'bogus'], '--spec'], [['--port', 'abc'], '--port'], [['--max-batch', '0'], '--max-batch'], [['--backend', 'tpu'], '--backend']] as const) {
      const run = metrale(['serve', ...args]);
      expect(run.code, args.join(' ')).toBe(2);
      expect(run.stderr).toContain(option);
    }
  });

  it('--help lists the options', () => {
    const run = metrale(['serve', '--help']);
    expect(run.code).toBe(0);
    for (const option of ['--model', '--port', '--host', '--backend', '--spec', '--max-batch', '--max-queue']) expect(run.stdout).toContain(option);
  });
});
