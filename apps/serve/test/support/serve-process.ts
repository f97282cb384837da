import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { CLI, PACKAGE_DIR } from './run-cli.js';

/** One cache for every test server: the embedded model is written once per test run. */
export const TEST_CACHE_DIR = join(tmpdir(), `metrale-serve-tests-${process.getuid?.() ?? 'u'}`);

export interface ServeProcess {
  readonly child: ChildProcess;
  readonly url: string;
  readonly client: OpenAI;
  /** Every JSON log line so far. */
  readonly logs: Record<string, unknown>[];
  /** stderr so far. */
  stderr(): string;
  /** Resolves with the exit code. */
  readonly exited: Promise<number | null>;
  /**
   * The first log line `match` accepts, waiting for it: /health can answer before the server's
   * stdout has reached this process, so a line logged at startup may not be in `logs` yet.
   */
  logLine(match: (line: Record<string, unknown>) => boolean, timeoutMs?: number): Promise<Record<string, unknown>>;
  /** Waits until /health answers 200. */
  ready(timeoutMs?: number): Promise<void>;
  /** SIGTERM, then waits for the exit (SIGKILL after `timeoutMs`). */
  stop(timeoutMs?: number): Promise<number | null>;
}

/** Starts `metrale serve --port 0 --backend cpu` with `args` (in `cwd`, default the package); resolves once it listens. */
export async function startServer(args: readonly string[] = [], options: { env?: NodeJS.ProcessEnv; cwd?: string } = {}): Promise<ServeProcess> {
  mkdirSync(TEST_CACHE_DIR, { recursive: true });
  const child = spawn(process.execPath, [CLI, 'serve', '--port', '0', '--backend', 'cpu', '--cache-dir', TEST_CACHE_DIR, ...args], {
    cwd: options.cwd ?? PACKAGE_DIR, env: { ...process.env, ...options.env }, stdio: ['ignore', 'pipe', 'pipe'],
  });
  const logs: Record<string, unknown>[] = [];
  let stderr = '';
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const url = await new Promise<string>((resolve, reject) => {
    let buffer = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      buffer += chunk.toString('utf8');
      let nl: number;
      while ((nl = buffer.indexOf('\n')) >= 0) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        try {
          const entry = JSON.parse(line) as Record<string, unknown>;
          logs.push(entry);
          if (entry.msg === 'listening') resolve(entry.url as string);
        } catch {
          logs.push({ raw: line });
        }
      }
    });
    child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
    void exited.then((code) => reject(new Error(`metrale serve exited (${code}) before listening: ${stderr}`)));
  });
  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });
  return {
    child, url, client, logs, exited,
    stderr: () => stderr,
    async logLine(match, timeoutMs = 10_000) {
      const until = Date.now() + timeoutMs;
      for (;;) {
        const line = logs.find(match);
        if (line) return line;
        if (Date.now() >= until) throw new Error(`no log line matched ${match} within ${timeoutMs} ms; stdout so far:\n${logs.map((l) => JSON.stringify(l)).join('\n')}`);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    },
    async ready(timeoutMs = 30_000) {
      const until = Date.now() + timeoutMs;
      while (Date.now() < until) {
        const r = await fetch(`${url}/health`).catch(() => undefined);
        if (r?.status === 200) return;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      throw new Error(`${url} not ready within ${timeoutMs} ms`);
    },
    async stop(timeoutMs = 15_000) {
      if (child.exitCode === null) child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}

/**
 * The sum of the samples of `name` in /metrics whose labels include `labels` (0 when none):
 * `metric(url, 'vllm:request_success_total', { finished_reason: 'abort' })`.
 */
export async function metric(url: string, name: string, labels: Record<string, string> = {}): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  let sum = 0;
  for (const line of text.split('\n')) {
    const m = /^([^\s{]+)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const has = Object.fromEntries([...(m[2] ?? '').matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
    if (Object.entries(labels).every(([k, v]) => has[k] === v)) sum += Number(m[3]);
  }
  return sum;
}

/** Posts JSON (or a raw body) and returns status and parsed body. */
export async function post(url: string, path: string, body: unknown, headers: Record<string, string> = { 'content-type': 'application/json' }): Promise<{ status: number; body: any }> {
  const r = await fetch(`${url}${path}`, { method: 'POST', headers, body: typeof body === 'string' ? body : JSON.stringify(body) });
  const text = await r.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // Not JSON: the raw text.
  }
  return { status: r.status, body: parsed };
}
