#!/usr/bin/env node
// Whether a change to a kernel file leaves its machine code as it was. Compiles FILE (a .cu of a
// package's kernels/ directory) as the working tree has it and as REV has it (default HEAD; the
// kernels/ directory and packages/core/include of each side) to cubins with the flags of
// metrale-build-kernels, one architecture at a time, and compares every ELF section of the two:
// each kernel's instructions are its `.text.<symbol>` section. For refactoring a measured kernel
// with no GPU at hand: equal sections are the same instructions, so its figures stand; a differing
// one has to be timed again. Needs nvcc (not on CI). Exits 0 when every section is equal, 1 when
// one differs, 2 on bad input.
//
//   node scripts/same-sass.mjs packages/layer-std/kernels/std-moe.cu [--base REV] [--arch sm_90a,sm_80]
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
/** metrale-build-kernels' flags, less the targets (one architecture a cubin here). */
const NVCC_FLAGS = ['-O3', '-std=c++17', '--expt-relaxed-constexpr'];

/** An ELF64 little-endian file's sections by name (a cubin is one). Throws on anything else. */
export function elfSections(buf) {
  if (buf.length < 64 || buf.readUInt32BE(0) !== 0x7f454c46 || buf[4] !== 2 || buf[5] !== 1) throw new Error('not a 64-bit little-endian ELF file');
  const shoff = Number(buf.readBigUInt64LE(0x28));
  const shentsize = buf.readUInt16LE(0x3a), shnum = buf.readUInt16LE(0x3c), shstrndx = buf.readUInt16LE(0x3e);
  if (shstrndx >= shnum || shoff + shnum * shentsize > buf.length) throw new Error('ELF section table out of the file');
  const header = (i) => {
    const at = shoff + i * shentsize;
    return { name: buf.readUInt32LE(at), type: buf.readUInt32LE(at + 4), offset: Number(buf.readBigUInt64LE(at + 0x18)), size: Number(buf.readBigUInt64LE(at + 0x20)) };
  };
  const names = header(shstrndx);
  const nameAt = (o) => {
    const start = names.offset + o;
    return buf.toString('latin1', start, buf.indexOf(0, start));
  };
  const sections = new Map();
  for (let i = 1; i < shnum; i++) {
    const h = header(i);
    // SHT_NOBITS (8) occupies no bytes of the file: its size is all there is to compare.
    sections.set(nameAt(h.name), h.type === 8 ? Buffer.from(`nobits ${h.size}`) : buf.subarray(h.offset, h.offset + h.size));
  }
  return sections;
}

/** The sections of `a` and `b` that differ or are in one only, by name. */
export function differingSections(a, b) {
  const out = [];
  for (const name of [...new Set([...a.keys(), ...b.keys()])].sort()) {
    const x = a.get(name), y = b.get(name);
    if (!x || !y) out.push({ name, why: x ? 'only in the base' : 'only in the change' });
    else if (!x.equals(y)) out.push({ name, why: `differs (${x.length} → ${y.length} bytes)` });
  }
  return out;
}

/** Bad input or a tool that failed: the run stops (exit 2) after its temporary files are gone. */
class SameSassError extends Error {}

function fail(message) {
  throw new SameSassError(message);
}

function run(command, args, options = {}) {
  const r = spawnSync(command, args, { encoding: 'buffer', maxBuffer: 1 << 30, ...options });
  if (r.error) fail(`could not run ${command}: ${r.error.message}`);
  if (r.status !== 0) fail(`${command} ${args.join(' ')} failed (exit ${r.status}):\n${r.stderr.toString()}`);
  return r.stdout;
}

function main(argv) {
  const file = argv.find((a, i) => !a.startsWith('--') && !['--base', '--arch'].includes(argv[i - 1]));
  const option = (name, fallback) => (argv.includes(name) ? argv[argv.indexOf(name) + 1] ?? fail(`${name} needs a value`) : fallback);
  const base = option('--base', 'HEAD');
  const archs = option('--arch', 'sm_90a,sm_80').split(',');
  if (!file) fail('usage: node scripts/same-sass.mjs packages/<pkg>/kernels/<file>.cu [--base REV] [--arch sm_90a,sm_80]');
  const path = relative(root, resolve(file));
  if (!/^(packages|apps|examples)\/[^/]+\/kernels\/[^/]+\.cu$/.test(path) || !existsSync(join(root, path))) fail(`${file}: not a .cu file in a package's kernels/ directory`);
  const kernelsDir = dirname(path);
  const nvcc = process.env.NVCC ?? 'nvcc';
  const tmp = mkdtempSync(join(tmpdir(), 'metrale-same-sass-'));
  // Both sides compile at the same path: nvcc names internal symbols after the file's path.
  const tree = join(tmp, 'tree');
  const sources = [kernelsDir, 'packages/core/include'];
  try {
    const cubins = (side) => {
      const sections = {};
      for (const arch of archs) {
        const out = join(tmp, `${side}-${arch}.cubin`);
        run(nvcc, [...NVCC_FLAGS, `-arch=${arch}`, '-cubin', `-I${join(tree, kernelsDir)}`, `-I${join(tree, 'packages/core/include')}`, '-o', out, join(tree, path)]);
        sections[arch] = elfSections(readFileSync(out));
      }
      return sections;
    };
    // The base's kernels/ and the shared headers, as REV has them; then the working tree's.
    mkdirSync(tree);
    run('tar', ['-x', '-C', tree], { input: run('git', ['-C', root, 'archive', base, ...sources]) });
    const before = cubins('base');
    rmSync(tree, { recursive: true });
    for (const dir of sources) cpSync(join(root, dir), join(tree, dir), { recursive: true });
    const after = cubins('change');
    let differs = false;
    for (const arch of archs) {
      const diff = differingSections(before[arch], after[arch]);
      console.log(`${arch}: ${diff.length === 0 ? 'every section equal' : `${diff.length} section(s) differ`}`);
      for (const d of diff) console.log(`  ${d.name}: ${d.why}`);
      differs ||= diff.length > 0;
    }
    return differs ? 1 : 0;
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  try {
    process.exit(main(process.argv.slice(2)));
  } catch (error) {
    if (!(error instanceof SameSassError)) throw error;
    console.error(`same-sass: ${error.message}`);
    process.exit(2);
  }
}
