import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeTinyCheckpoint } from '@metrale/layer-example';
import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BROKEN_PLUGINS, LAYER_EXAMPLE_DIR, writePluginProject } from '../support/plugin-projects.js';
import { metrale } from '../support/run-cli.js';
import { startServer, type ServeProcess } from '../support/serve-process.js';

// A third-party architecture served end to end: examples/layer-example's qwen3_next_sliding (its
// own sliding-window layer between layer-std's blocks), its tiny checkpoint, `metrale serve
// --plugin <dir>`, and the OpenAI client.
const MODEL = 'qwen3-next-sliding-tiny';
const tmp = mkdtempSync(join(tmpdir(), 'metrale-plugin-serve-'));
const checkpoint = join(tmp, 'checkpoint');
writeTinyCheckpoint(checkpoint);
// A working directory with plugins that fail: the server skips them and starts.
const project = writePluginProject(join(tmp, 'project'), BROKEN_PLUGINS);
let server: ServeProcess;

beforeAll(async () => {
  server = await startServer(['--plugin', LAYER_EXAMPLE_DIR, '--model', checkpoint, '--served-model-name', MODEL], { cwd: project });
  await server.ready();
}, 60_000);

afterAll(async () => {
  expect(await server?.stop()).toBe(0);
  rmSync(tmp, { recursive: true, force: true });
});

describe("metrale serve --plugin: a plugin's architecture through the OpenAI client", () => {
  it('says which plugin serves the model, and which discovered plugins it skipped', () => {
    const loaded = server.logs.find((l) => l.msg === 'plugins loaded') as { architectures: Record<string, string>; layer_types: Record<string, string> };
    expect(loaded.architectures).toMatchObject({ qwen3_next_sliding: '@metrale/layer-example', qwen3_next: '@metrale/serve' });
    expect(loaded.layer_types).toMatchObject({ 'sliding-window': '@metrale/layer-example', attention: '@metrale/layer-std' });
    expect(server.logs.find((l) => l.msg === 'model opened')).toMatchObject({ model_type: 'qwen3_next_sliding', architecture_provider: '@metrale/layer-example' });
    const skipped = server.logs.filter((l) => l.level === 40).map((l) => l.plugin);
    expect(skipped.sort()).toEqual(['acme-future', 'acme-throws', 'acme-twice']);
    expect(server.logs.find((l) => l.plugin === 'acme-throws')!.msg).toMatch(/^skipped: plugin acme-throws: failed to import .*missing ACME_LICENSE$/);
  });

  it('lists the model', async () => {
    const models = await server.client.models.list();
    expect(models.data.map((m) => m.id)).toEqual([MODEL]);
    expect(models.data[0]).toMatchObject({ model_type: 'qwen3_next_sliding' });
  });

  it('chats greedily through the chat template, the same answer twice, streamed or not', async () => {
    const body = { model: MODEL, messages: [{ role: 'user' as const, content: 'Tell me about sliding windows.' }], max_tokens: 24, temperature: 0 };
    const a = await server.client.chat.completions.create(body);
    const b = await server.client.chat.completions.create(body);
    const text = a.choices[0]!.message.content!;
    expect(text.length).toBeGreaterThan(0);
    expect(text).toMatch(/^[\x20-\x7e]*$/);
    expect(b.choices[0]!.message.content).toBe(text);
    // The template's ChatML, one token per byte and per special token: the tokenizer came from the checkpoint.
    const rendered = '<|im_start|>user\nTell me about sliding windows.<|im_end|>\n<|im_start|>assistant\n';
    expect(a.usage!.prompt_tokens).toBe(rendered.replace(/<\|im_(start|end)\|>/g, '#').length);
    const stream = (await server.client.chat.completions.create({ ...body, stream: true })) as AsyncIterable<OpenAI.Chat.Completions.ChatCompletionChunk>;
    let streamed = '';
    for await (const chunk of stream) streamed += chunk.choices[0]?.delta.content ?? '';
    expect(streamed).toBe(text);
  });

  it('completes token ids exactly as `metrale generate --greedy` does', async () => {
    const prompt = [...'the cat sat on the mat; the cat sat on the'].map((ch) => ch.charCodeAt(0));
    const served = await server.client.completions.create({ model: MODEL, prompt, max_tokens: 20, temperature: 0, ignore_eos: true } as OpenAI.Completions.CompletionCreateParamsNonStreaming);
    const r = metrale(['generate', '--plugin', LAYER_EXAMPLE_DIR, '--model', checkpoint, '--prompt-ids', prompt.join(','), '--max-tokens', '20', '--greedy', '--ignore-eos', '--backend', 'cpu', '--json']);
    expect(r.code).toBe(0);
    const generated = JSON.parse(r.lines.at(-1)!) as { text: string };
    expect(served.choices[0]!.text).toBe(generated.text);
    expect(served.usage!.completion_tokens).toBe(20);
  });
});

describe('metrale serve --plugin with a plugin that fails', () => {
  it('exits 1 with an error naming the package', () => {
    const r = metrale(['serve', '--port', '0', '--backend', 'cpu', '--plugin', 'acme-future', '--model', checkpoint], { cwd: project });
    expect(r.code).toBe(1);
    const failed = r.lines.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l.level === 50);
    expect(failed?.err).toBe('plugin acme-future: implements layer contract 2.0.0, but @metrale/core implements 1.0.0; install a version of acme-future built for contract 1.x');
  });
});
