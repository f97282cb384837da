import { execFileSync, spawn } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { PACKAGE_DIRS, ROOT, pack, workspaceDependencies } from './support/pack-workspace.js';

// The README's "From an empty package to a served model", followed literally in an empty
// directory: each shell command as written, each file with its content. Two stand-ins only:
// `npm` installs @metrale/* packages from tarballs packed from this checkout (they are not
// published from here), and `metrale serve` gets `--port 0` so the test never meets a busy port
// (the curl command is sent to the port it took).
const README = join(ROOT, 'examples', 'layer-example', 'README.md');
const SECTION = 'From an empty package to a served model';
const work = mkdtempSync(join(tmpdir(), 'metrale-readme-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

type Step = { readonly command: string } | { readonly file: string; readonly content: string };

/** The section's code blocks in order: `sh` blocks as one step per command, `title="…"` blocks as files. */
function walkthrough(markdown: string): Step[] {
  const section = markdown.split(/^## /m).find((s) => s.startsWith(SECTION));
  if (!section) throw new Error(`README.md has no '## ${SECTION}' section`);
  const steps: Step[] = [];
  for (const [, lang, title, body] of section.matchAll(/^```(\w+)(?: title="([^"]+)")?\n([\s\S]*?)^```$/gm)) {
    if (title) steps.push({ file: title, content: body! });
    else if (lang === 'sh') for (const command of body!.replace(/\\\n\s*/g, '').split('\n').filter((l) => l.trim())) steps.push({ command });
    else throw new Error(`a \`\`\`${lang} block without title="file" in '${SECTION}'`);
  }
  return steps;
}

/** A directory holding an `npm` that installs @metrale/* specs from the tarballs, the rest from the registry. */
function npmStandIn(steps: readonly Step[]): string {
  const realNpm = execFileSync('bash', ['-c', 'command -v npm'], { encoding: 'utf8' }).trim();
  const named = new Set(steps.flatMap((s) => ('command' in s ? s.command.match(/@metrale\/[\w-]+/g) ?? [] : [])));
  const tarballs = Object.fromEntries(Object.keys(PACKAGE_DIRS).map((n) => [n, pack(n, join(work, 'tarballs'))]));
  // What a named package needs from the registry and the README does not name comes with it.
  const arms = [...named].map((n) => {
    const withDeps = [n, ...workspaceDependencies(n).filter((d) => !named.has(d))];
    return `    '${n}') args+=(${withDeps.map((d) => `'${tarballs[d]}'`).join(' ')}) ;;`;
  });
  const bin = join(work, 'bin');
  mkdirSync(bin, { recursive: true });
  writeFileSync(join(bin, 'npm'), ['#!/usr/bin/env bash', 'args=()', 'for a in "$@"; do', '  case "$a" in', ...arms, '    *) args+=("$a") ;;', '  esac', 'done', `exec '${realNpm}' "\${args[@]}"`, ''].join('\n'));
  chmodSync(join(bin, 'npm'), 0o755);
  return bin;
}

describe("the README's walkthrough, followed literally", () => {
  it('writes a plugin with a layer type and an architecture that metrale serves', async () => {
    const steps = walkthrough(readFileSync(README, 'utf8'));
    const env = { ...process.env, PATH: `${npmStandIn(steps)}:${process.env.PATH}`, npm_config_workspaces: 'false', npm_config_audit: 'false', npm_config_fund: 'false', npm_config_update_notifier: 'false' };
    const cwdFile = join(work, 'cwd');
    writeFileSync(cwdFile, join(work, 'project'));
    mkdirSync(join(work, 'project'));
    const cwd = () => readFileSync(cwdFile, 'utf8').trim();
    const outputs: Record<string, string> = {};
    let served: { url: string; stop: () => Promise<void> } | undefined;
    try {
      for (const step of steps) {
        if ('file' in step) {
          writeFileSync(join(cwd(), step.file), step.content);
        } else if (/\bmetrale serve\b/.test(step.command)) {
          served = await serveInBackground(`${step.command} --port 0`, cwd(), env);
        } else {
          const command = served ? step.command.replaceAll('http://127.0.0.1:8000', served.url) : step.command;
          // One shell per command; a `cd` carries over to the next through cwdFile.
          outputs[step.command] = execFileSync('bash', ['-c', `set -euo pipefail\n${command}\npwd > '${cwdFile}'`], { cwd: cwd(), env, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
        }
      }
      const output = (prefix: string) => Object.entries(outputs).find(([c]) => c.startsWith(prefix))?.[1] ?? '';
      expect(output('node check.js')).toMatch(/^my-mixer token-shift: \d+ checks passed$/m);
      expect(output('npx metrale doctor')).toMatch(/^ {2}my-mixer 1\.0\.0 +contract 1\.0\.0, layer types: token-shift, architectures: token_shift_decoder +\[--plugin\]$/m);
      expect(output('npx metrale doctor')).toMatch(/^ {2}token_shift_decoder +my-mixer$/m);
      expect(output('npx metrale doctor')).toMatch(/^ {2}token-shift +my-mixer$/m);
      expect(output('npx metrale generate').trim().split(' ')).toHaveLength(8);
      expect(served, 'the walkthrough serves the model').toBeDefined();
      const answer = JSON.parse(output('curl')) as { model: string; choices: { text: string }[]; usage: { prompt_tokens: number; completion_tokens: number } };
      expect(answer).toMatchObject({ model: 'my-mixer-tiny', usage: { prompt_tokens: 3, completion_tokens: 8 } });
      // As the README says: without a tokenizer, the text spells the token ids.
      expect(answer.choices).toEqual([expect.objectContaining({ text: expect.stringMatching(/^(<\d+>){8}$/) })]);
    } finally {
      await served?.stop();
    }
  }, 600_000);
});

/** Starts a long-running command (the server) and resolves with the URL it logs once it answers /health. */
async function serveInBackground(command: string, cwd: string, env: NodeJS.ProcessEnv): Promise<{ url: string; stop: () => Promise<void> }> {
  // `exec`: the shell becomes the server, so SIGTERM reaches it.
  const child = spawn('bash', ['-c', `exec ${command}`], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
  const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
  let log = '';
  child.stdout.on('data', (chunk: Buffer) => (log += chunk.toString('utf8')));
  child.stderr.on('data', (chunk: Buffer) => (log += chunk.toString('utf8')));
  const stop = async () => {
    if (child.exitCode === null) child.kill('SIGTERM');
    await exited;
  };
  const until = Date.now() + 60_000;
  while (Date.now() < until && child.exitCode === null) {
    const url = /"url":"(http:[^"]+)"/.exec(log)?.[1];
    if (url && (await fetch(`${url}/health`).catch(() => undefined))?.status === 200) return { url, stop };
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  await stop();
  throw new Error(`\`${command}\` did not become ready: ${log}`);
}
