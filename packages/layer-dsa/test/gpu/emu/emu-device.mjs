// A stand-in device for the DSA GPU tests without a GPU (development only): the CPU backend,
// except that every `dsa.*` kernel runs as kernels/*.cu compiled for the host with g++
// (dsa-emu-cuda.h, emu-main.cpp) instead of its TypeScript twin. So the GPU lane's tests —
// kernel parity, layer parity, conformance — exercise the CUDA sources' indexing, fragment
// layouts and synchronisation here. Use:
//   METRALE_DSA_DEVICE_MODULE=test/gpu/emu/emu-device.mjs node ../../node_modules/vitest/vitest.mjs run --config vitest.gpu.config.ts
// METRALE_DSA_EMU_CLUSTER=0 builds the kernels' no-cluster (sm_80) paths instead.
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CpuBackend } from '@metrale/cpu-backend';

const here = dirname(fileURLToPath(import.meta.url));
const kernelsDir = join(here, '..', '..', '..', 'kernels');
const cluster = process.env.METRALE_DSA_EMU_CLUSTER === '0' ? 0 : 1;

export function buildEmu() {
  const sources = [join(here, 'emu-main.cpp'), join(here, 'dsa-emu-cuda.h'), ...readdirSync(kernelsDir).sort().map((f) => join(kernelsDir, f))];
  const h = createHash('sha1');
  for (const s of sources) h.update(readFileSync(s));
  h.update(String(cluster));
  const dir = join(tmpdir(), 'metrale-dsa-emu');
  mkdirSync(dir, { recursive: true });
  const bin = join(dir, `dsa-emu-${h.digest('hex').slice(0, 12)}`);
  if (!existsSync(bin)) {
    execFileSync('g++', ['-std=c++20', '-O2', '-DDSA_EMU', `-DDSA_EMU_CLUSTER=${cluster}`, `-I${here}`, '-Wno-unknown-pragmas',
      '-ffp-contract=off', '-o', `${bin}.tmp`, join(here, 'emu-main.cpp')], { stdio: 'inherit' });
    execFileSync('mv', [`${bin}.tmp`, bin]);
  }
  return bin;
}

export const reason = `dsa-emu: the CPU backend with kernels/*.cu run on the host (${cluster ? 'sm_90 cluster paths' : 'no-cluster paths'})`;

/** Bytes addressable from `ptr` to the end of its allocation (the CPU backend's checked view throws past it). */
function extent(mem, ptr) {
  let lo = 0;
  let hi = 1;
  const ok = (n) => {
    try {
      mem.u8(ptr, n);
      return true;
    } catch {
      return false;
    }
  };
  while (ok(hi)) {
    lo = hi;
    hi *= 2;
    if (hi > 2 ** 36) throw new Error('dsa-emu: allocation too large');
  }
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if (ok(mid)) lo = mid;
    else hi = mid;
  }
  return lo;
}

export function createDevice() {
  const bin = buildEmu();
  const inner = new CpuBackend({ memoryLimit: 2 ** 34 });
  const work = join(tmpdir(), `metrale-dsa-emu-run-${process.pid}`);
  mkdirSync(work, { recursive: true });
  let launches = 0;
  let disposed = false;

  function runEmu(kernel, args, ctx) {
    const { mem } = ctx;
    const dims = (d) => [d[0] ?? 1, d[1] ?? 1, d[2] ?? 1];
    const lines = [`kernel ${kernel.cuda.symbol}`, `grid ${dims(ctx.grid).join(' ')}`, `block ${dims(ctx.block).join(' ')}`, `shared ${ctx.sharedBytes}`];
    const views = [];
    const params = [];
    for (const { name, type } of kernel.paramList) {
      const v = args[name];
      if (type === 'ptr') {
        if (v === 0n) {
          params.push('param p -1 0');
          continue;
        }
        const view = mem.u8(v, extent(mem, v));
        const id = views.length;
        views.push(view);
        params.push(`param p ${id} 0`);
      } else if (type === 'i32') params.push(`param i ${v}`);
      else if (type === 'f32') params.push(`param f ${new Uint32Array(new Float32Array([v]).buffer)[0].toString(16)}`);
      else throw new Error(`dsa-emu: parameter type ${type}`);
    }
    const tag = launches++;
    views.forEach((view, id) => {
      const path = join(work, `b${tag}-${id}.bin`);
      writeFileSync(path, view);
      lines.push(`buffer ${id} ${view.length} ${path}`);
    });
    lines.push(...params);
    const manifest = join(work, `m${tag}.txt`);
    writeFileSync(manifest, `${lines.join('\n')}\n`);
    const r = spawnSync(bin, [manifest], { encoding: 'utf8', maxBuffer: 64 * 2 ** 20 });
    if (r.status !== 0) throw new Error(`dsa-emu: ${kernel.cuda.symbol} failed (exit ${r.status}): ${r.stderr}`);
    // Copy back only the bytes the kernel changed.
    views.forEach((view, id) => {
      const path = join(work, `b${tag}-${id}.bin`);
      const after = readFileSync(path);
      for (let i = 0; i < view.length; i++) if (after[i] !== view[i]) view[i] = after[i];
      rmSync(path);
    });
    rmSync(manifest);
  }

  const wrapped = new Map();
  const emuKernel = (k) => {
    let w = wrapped.get(k);
    if (!w) {
      w = Object.freeze({ ...k, cpu: (args, ctx) => runEmu(k, args, ctx) });
      wrapped.set(k, w);
    }
    return w;
  };
  const device = Object.freeze({ ...inner.device, name: 'dsa-emu', computeCapability: Object.freeze([9, 0]), multiprocessors: 8 });
  return new Proxy(inner, {
    get(target, prop) {
      if (prop === 'kind') return 'emu';
      if (prop === 'device') return device;
      if (prop === 'launch') {
        return (k, config, args) => target.launch(typeof k?.name === 'string' && k.name.startsWith('dsa.') && k.cuda ? emuKernel(k) : k, config, args);
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

// `node emu-device.mjs` builds the emulator and prints its path.
if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) console.log(buildEmu());
