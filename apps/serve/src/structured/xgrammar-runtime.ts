import { readFileSync } from 'node:fs';
import { Module, createRequire } from 'node:module';
import { dirname } from 'node:path';
import type * as Xgrammar from '@mlc-ai/web-xgrammar';

/**
 * One instance of xgrammar (the grammar engine vLLM and SGLang use), from `@mlc-ai/web-xgrammar`:
 * its C++ compiled to WebAssembly, run on this thread.
 *
 * The package cannot be imported in Node as published: its `package.json` says `"type": "module"`
 * but `lib/index.js` is a UMD bundle that reads `require` and `__filename`. So the bundle is
 * compiled here by Node's CommonJS loader, as the module it is, inside a function that makes a
 * fresh instance each time it is called. Two more things are given to it:
 * - its `console`, because a grammar error inside the WebAssembly is reported only as a `[FATAL]`
 *   line on stderr followed by an abort whose error says "Aborted()": the line is kept as the
 *   error's message;
 * - a handle on its binding, because the package's one way to read a token bitmask,
 *   `GrammarMatcher.getNextTokenBitmask()`, is async (it awaits the binding's lazy start) while
 *   the engine loop asks for masks synchronously, between two device steps. `readBitmask` does
 *   what that method does, without the await. The hook is one statement of the pinned bundle;
 *   a bundle without it is refused by name.
 *
 * An instance whose WebAssembly aborted is not used again (see grammar-engine.ts).
 */
export interface XgrammarRuntime {
  readonly api: typeof Xgrammar;
  /** The tokens `matcher` allows next, as xgrammar's bitmask (bit t & 31 of word t >> 5). */
  readBitmask(matcher: Xgrammar.GrammarMatcher, vocabSize: number): Int32Array;
  /** Runs `fn`; a failure inside the WebAssembly is rethrown as a `GrammarEngineError` with xgrammar's own message. */
  guard<T>(fn: () => Promise<T>): Promise<T>;
  /** True once the WebAssembly aborted: the instance may hold broken state. */
  readonly aborted: boolean;
}

/** xgrammar refused a grammar or schema; `message` is its reason. */
export class GrammarEngineError extends Error {
  override readonly name = 'GrammarEngineError';
}

const BINDING_HOOK = 'let binding = null;';

interface Binding {
  vecIntToView(vector: unknown): Int32Array;
}

interface EmbindVector {
  delete(): void;
}

/** xgrammar's `[FATAL] /path/file.cc:123: Check failed: (cond) is false: reason` → `reason`. */
function fatalReason(line: string): string {
  return line.replace(/^\[FATAL\]\s*\S+:\d+:\s*/, '').replace(/^Check failed: \(.*?\) is false:\s*/, '').trim();
}

export function loadXgrammarRuntime(): XgrammarRuntime {
  const require = createRequire(import.meta.url);
  const file = require.resolve('@mlc-ai/web-xgrammar');
  const source = readFileSync(file, 'utf8');
  if (source.split(BINDING_HOOK).length !== 2) {
    throw new Error(`${file}: this build of @mlc-ai/web-xgrammar does not declare its binding as '${BINDING_HOOK}'; metrale pins the version it was written for (see xgrammar-runtime.ts)`);
  }
  let fatal: string | undefined;
  const quiet = Object.create(console) as Console;
  // The bundle binds console.error once, at its start: this is what it reports errors through.
  quiet.error = (...args: unknown[]) => {
    const text = args.map(String).join(' ');
    if (text.startsWith('[FATAL]')) fatal = fatalReason(text);
    else if (!text.startsWith('Aborted(')) console.error(...args);
  };
  const hooked = source.replace(BINDING_HOOK, `${BINDING_HOOK} exports.__metraleBinding = () => binding;`);
  const loader = new Module(file) as Module & { _compile(code: string, filename: string): void; filename: string; paths: string[] };
  loader.filename = file;
  loader.paths = (Module as unknown as { _nodeModulePaths(dir: string): string[] })._nodeModulePaths(dirname(file));
  loader._compile(`module.exports = function (console) { var exports = {};\n${hooked}\nreturn exports; };`, file);
  const exports = (loader.exports as (console: Console) => Record<string, unknown>)(quiet);
  const api = exports as unknown as typeof Xgrammar;
  const binding = exports.__metraleBinding as () => Binding | null;
  let aborted = false;
  return {
    api,
    get aborted() {
      return aborted;
    },
    readBitmask(matcher, vocabSize) {
      const b = binding();
      if (!b) throw new Error('xgrammar is not started: compile a grammar before asking for a bitmask');
      const handle = (matcher as unknown as { handle: { GetNextTokenBitmask(vocab: number): EmbindVector } }).handle;
      const vector = handle.GetNextTokenBitmask(vocabSize);
      try {
        return b.vecIntToView(vector).slice();
      } finally {
        vector.delete();
      }
    },
    async guard(fn) {
      fatal = undefined;
      try {
        return await fn();
      } catch (error) {
        const reason = fatal ?? (error instanceof Error ? error.message : String(error));
        if (fatal !== undefined || /Aborted\(/.test(String((error as Error)?.message ?? error))) aborted = true;
        throw new GrammarEngineError(reason);
      }
    },
  };
}
