// A stand-in GPU backend for a package's GPU test lane on a machine without a GPU (development
// only): the backend the package gives (its CPU backend), except that each kernel whose CUDA module
// the package lists runs as that module's .cu source, compiled for the host with g++ against
// cuda-emu.h and run by cuda-emu-main.h, instead of its TypeScript twin. So the lane's tests —
// kernel parity, layer parity, conformance — exercise the CUDA sources' indexing, fragment
// layouts and synchronisation here. Launches run in stream order inside the backend, so graph
// capture and replay work as they do on the CPU backend. README.md says how a package uses it.
//
// The device says it is CUDA (kind 'cuda', compute capability 9.0, or 8.0 with
// METRALE_CUDA_EMU_ARCH=80, which builds the kernels' no-cluster paths), so layers pick their
// CUDA paths. Each module's binary is built on first use and kept in the temporary directory,
// named by a hash of everything it is built from.
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const toolDir = dirname(fileURLToPath(import.meta.url));
// Core's kernel headers: <metrale/…> on g++'s include path as on nvcc's (elements.cuh itself is
// the emulator's own; the others are shared as they are).
const coreInclude = join(toolDir, '..', '..', 'packages', 'core', 'include');
// The emulator's sources, and core's headers it shares with the kernels (their binaries' hash).
const TOOL_FILES = [...['cuda-emu.h', 'cuda-emu-main.h'].map((f) => join(toolDir, f)), ...['by-row-type.h', 'mma.cuh'].map((f) => join(coreInclude, 'metrale', f))];
const CXX_FLAGS = ['-std=c++20', '-O2', '-ffp-contract=off', '-Wno-unknown-pragmas'];

/**
 * @typedef {object} EmulatedModule
 * @property {string} source absolute path of the module's .cu file
 * @property {Record<string, number>} kernels its entry points, each with its CTAs per cluster along x (1: none)
 * @property {readonly string[]} [defines] extra -D flags
 */

/**
 * @param {object} options
 * @param {string} options.label the package, in messages and the device name
 * @param {Record<string, EmulatedModule>} options.modules by module name (the name in the kernel declarations' defineKernelModule)
 * @param {readonly string[]} options.dependsOn directories whose files a module's build depends on (its kernels/ and what they include)
 * @param {() => object} options.createBackend the backend everything but the listed kernels runs on
 * @param {number} [options.multiprocessors] what the device reports (default 8)
 * @returns {{ reason: string, createDevice: () => object }}
 */
export function emulatedDevice(options) {
  const arch = process.env.METRALE_CUDA_EMU_ARCH ?? '90';
  if (arch !== '90' && arch !== '80') throw new Error(`cuda-emu: METRALE_CUDA_EMU_ARCH must be 90 or 80, got ${arch}`);
  const clusters = arch === '90' ? 1 : 0;
  const reason = `cuda-emu: ${options.label}'s kernels/*.cu run on the CPU (sm_${arch} paths${clusters ? ', clusters' : ''})`;
  const binaries = new Map();

  /** The module's runner binary: built now unless a build of the same inputs exists. */
  function binaryOf(moduleName) {
    let bin = binaries.get(moduleName);
    if (bin) return bin;
    const mod = options.modules[moduleName];
    const table = Object.entries(mod.kernels).map(([symbol, cluster]) => `CUDA_EMU_KERNEL(${symbol}, ${cluster})`);
    const unit = [
      `#include "${join(toolDir, 'cuda-emu.h')}"`,
      `#include "${mod.source}"`,
      `#include "${join(toolDir, 'cuda-emu-main.h')}"`,
      `CUDA_EMU_KERNELS(${table.join(', ')})`,
      '',
    ].join('\n');
    const flags = [...CXX_FLAGS, `-I${coreInclude}`, `-DCUDA_EMU_CLUSTERS=${clusters}`, ...(mod.defines ?? []).map((d) => `-D${d}`)];
    const h = createHash('sha256');
    h.update(unit);
    h.update(flags.join(' '));
    for (const f of [...TOOL_FILES, ...options.dependsOn.flatMap(filesOf)]) h.update(f).update(readFileSync(f));
    const dir = join(tmpdir(), 'metrale-cuda-emu');
    mkdirSync(dir, { recursive: true });
    bin = join(dir, `${options.label}-${moduleName}-${h.digest('hex').slice(0, 16)}`);
    if (!existsSync(bin)) {
      process.stderr.write(`cuda-emu: building ${moduleName} (${Object.keys(mod.kernels).length} kernels) with g++, once\n`);
      const src = `${bin}.cpp`;
      const partial = `${bin}.partial-${process.pid}`;
      writeFileSync(src, unit);
      const r = spawnSync('g++', [...flags, '-o', partial, src], { encoding: 'utf8' });
      if (r.error || r.status !== 0) {
        rmSync(partial, { force: true });
        throw new Error(`cuda-emu: g++ failed on ${mod.source} (${r.error?.message ?? `exit ${r.status}`}):\n${(r.stderr ?? '').slice(-8000)}`);
      }
      renameSync(partial, bin);
    }
    binaries.set(moduleName, bin);
    return bin;
  }

  function createDevice() {
    const inner = options.createBackend();
    const work = join(tmpdir(), `metrale-cuda-emu-run-${process.pid}-${Math.random().toString(36).slice(2)}`);
    mkdirSync(work, { recursive: true });
    let launches = 0;
    let disposed = false;

    /** One launch of `kernel` in the emulator, over the buffers its pointers lie in (the CPU twin's context). */
    function runEmulated(kernel, args, ctx) {
      const { mem } = ctx;
      const dims = (d) => (Array.isArray(d) ? [d[0] ?? 1, d[1] ?? 1, d[2] ?? 1] : [d, 1, 1]);
      // Each pointer's view runs to the end of its allocation; pointers into one allocation share a buffer.
      const pointers = kernel.paramList.filter((p) => p.type === 'ptr' && args[p.name] !== 0n).map((p) => args[p.name]);
      const ranges = [...new Set(pointers)].map((p) => ({ start: p, end: p + BigInt(extent(mem, p)) })).sort((a, b) => (a.start < b.start ? -1 : 1));
      const merged = [];
      for (const r of ranges) {
        const last = merged.at(-1);
        if (last && r.start < last.end) last.end = r.end > last.end ? r.end : last.end;
        else merged.push({ ...r });
      }
      const tag = launches++;
      const views = merged.map((r) => mem.u8(r.start, Number(r.end - r.start)));
      const lines = [`kernel ${kernel.cuda.symbol}`, `grid ${dims(ctx.grid).join(' ')}`, `block ${dims(ctx.block).join(' ')}`, `shared ${ctx.sharedBytes ?? 0}`];
      views.forEach((view, id) => {
        const path = join(work, `b${tag}-${id}.bin`);
        writeFileSync(path, view);
        lines.push(`buffer ${id} ${view.length} ${path}`);
      });
      for (const { name, type } of kernel.paramList) {
        const v = args[name];
        if (type === 'ptr') {
          if (v === 0n) lines.push('param p -1 0');
          else {
            const id = merged.findIndex((r) => v >= r.start && (v < r.end || v === r.start));
            lines.push(`param p ${id} ${v - merged[id].start}`);
          }
        } else if (type === 'i32' || type === 'u32') lines.push(`param i ${v | 0}`);
        else if (type === 'f32') lines.push(`param f ${new Uint32Array(new Float32Array([v]).buffer)[0].toString(16)}`);
        else throw new Error(`cuda-emu: ${kernel.name}: parameter '${name}' of type ${type} (the emulator passes pointers, 32-bit integers and f32)`);
      }
      const manifest = join(work, `m${tag}.txt`);
      writeFileSync(manifest, `${lines.join('\n')}\n`);
      const r = spawnSync(binaryOf(kernel.cuda.module.name), [manifest], { encoding: 'utf8', maxBuffer: 64 * 2 ** 20 });
      if (r.error || r.status !== 0) {
        throw new Error(`cuda-emu: ${kernel.cuda.symbol} failed (${r.error?.message ?? `exit ${r.status}`}): ${(r.stderr ?? '').slice(-4000)}`);
      }
      // Back into device memory: the bytes the kernel changed.
      views.forEach((view, id) => {
        const path = join(work, `b${tag}-${id}.bin`);
        const after = readFileSync(path);
        for (let i = 0; i < view.length; i++) if (after[i] !== view[i]) view[i] = after[i];
        rmSync(path);
      });
      rmSync(manifest);
    }

    const wrapped = new Map();
    const emulated = (k) => {
      let w = wrapped.get(k);
      if (!w) {
        const mod = options.modules[k.cuda.module.name];
        if (!(k.cuda.symbol in mod.kernels)) {
          throw new Error(`cuda-emu: ${k.name}'s entry point ${k.cuda.symbol} is not in the ${k.cuda.module.name} module's kernel table (${options.label}'s emulator configuration)`);
        }
        w = Object.freeze({ ...k, cpu: (a, ctx) => runEmulated(k, a, ctx) });
        wrapped.set(k, w);
      }
      return w;
    };
    const device = Object.freeze({
      ...inner.device,
      name: `cuda-emu (${options.label})`,
      computeCapability: Object.freeze(clusters ? [9, 0] : [8, 0]),
      multiprocessors: options.multiprocessors ?? 8,
    });
    return new Proxy(inner, {
      get(target, prop) {
        if (prop === 'kind') return 'cuda';
        if (prop === 'device') return device;
        if (prop === 'launch') {
          return (k, config, a) => target.launch(k?.cuda && options.modules[k.cuda.module.name] ? emulated(k) : k, config, a);
        }
        if (prop === 'dispose') {
          return () => {
            if (disposed) return;
            disposed = true;
            rmSync(work, { recursive: true, force: true });
            target.dispose();
          };
        }
        const v = Reflect.get(target, prop, target);
        return typeof v === 'function' ? v.bind(target) : v;
      },
    });
  }

  return { reason, createDevice };
}

/** The files of a directory (not its subdirectories), sorted. */
function filesOf(dir) {
  return readdirSync(dir)
    .sort()
    .map((f) => join(dir, f))
    .filter((f) => statSync(f).isFile());
}

/** Bytes addressable from `ptr` to the end of its allocation (the backend's checked view throws past it). */
function extent(mem, ptr) {
  const ok = (n) => {
    try {
      mem.u8(ptr, n);
      return true;
    } catch {
      return false;
    }
  };
  let lo = 0;
  let hi = 1;
  while (ok(hi)) {
    lo = hi;
    hi *= 2;
    if (hi > 2 ** 40) throw new Error('cuda-emu: an allocation past 1 TiB');
  }
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if (ok(mid)) lo = mid;
    else hi = mid;
  }
  return lo;
}

// `node device.mjs` checks that g++ is there.
if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) console.log(execFileSync('g++', ['--version'], { encoding: 'utf8' }).split('\n')[0]);
