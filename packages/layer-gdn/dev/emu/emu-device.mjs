// Dev-only stand-in for CudaBackend (METRALE_GDN_DEVICE_MODULE=dev/emu/emu-device.mjs in the GPU tests):
// memory and everything else on CpuBackend; launches run the real .cu code in the CPU thread
// emulator (dev/emu/build/*.emu, from build.sh): one std::thread per CUDA thread, the CTAs of a
// cluster together. Shared memory starts as 0xFF (NaN); a cp.async lands at the wait_group that
// covers it (not before); mma / ldmatrix / shuffles are exchanged through per-warp buffers.
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { CpuBackend } from '@metrale/cpu-backend';
import { toDims } from '@metrale/core';
import { dirname, join } from 'node:path';
import { tmpdir } from 'node:os';
import { fileURLToPath } from 'node:url';

const BUILD = join(dirname(fileURLToPath(import.meta.url)), 'build');

export const reason = 'CUDA thread emulator on the CPU (dev/emu)';
const EXE = { gdn_chunk_rowwise: 'gdn-rowwise.emu', gdn_fold_state: 'gdn-decode.emu' };
const exeOf = (sym) =>
  EXE[sym] ?? (sym.startsWith('gdn_recurrent') || sym.startsWith('gdn_fold') ? 'gdn-recurrent.emu' : sym.startsWith('gdn_decode') ? 'gdn-decode.emu' : sym.startsWith('gdn_verify') ? 'gdn-verify.emu' : 'gdn-chunk.emu');
export function createDevice() {
  const cpu = new CpuBackend({ memoryLimit: 4 * 2 ** 30 });
  const allocs = new Map();
  const dev = {
    kind: 'cuda',
    device: { ...cpu.device, name: 'cuda-emu', computeCapability: [9, 0] },
    alloc(n) { const p = cpu.alloc(n); allocs.set(p, n); return p; },
    free(p) { allocs.delete(p); cpu.free(p); },
    launch(kernel, cfg, args) {
      if (!kernel.cuda) throw new Error('no cuda entry');
      const sym = kernel.cuda.symbol;
      const exe = join(BUILD, exeOf(sym));
      const clusterX = sym.startsWith('gdn_prefill_scan_c4') || sym === 'gdn_recurrent_split' ? 4 : sym.startsWith('gdn_prefill_scan') ? 2 : 1;
      const bufs = [];
      const index = new Map();
      const argRecs = [];
      for (const { name, type } of kernel.paramList) {
        const v = args[name];
        const rec = Buffer.alloc(25);
        if (type === 'ptr') {
          rec.write('p', 0);
          if (v === 0n) rec.writeBigInt64LE(-1n, 1);
          else {
            let found;
            for (const [base, size] of allocs) if (v >= base && v < base + BigInt(size)) found = [base, size];
            if (!found) throw new Error(`emu: pointer ${name} not in an allocation`);
            if (!index.has(found[0])) { index.set(found[0], bufs.length); bufs.push(found); }
            rec.writeBigInt64LE(BigInt(index.get(found[0])), 1);
            rec.writeBigInt64LE(v - found[0], 9);
          }
        } else if (type === 'i32') { rec.write('i', 0); rec.writeInt32LE(v, 17); }
        else if (type === 'f32') { rec.write('f', 0); rec.writeFloatLE(v, 21); }
        else throw new Error('emu: type ' + type);
        argRecs.push(rec);
      }
      const g = toDims(cfg.grid, 'grid'), b = toDims(cfg.block, 'block');
      const nameBuf = Buffer.from(sym);
      const head = Buffer.alloc(36);
      g.forEach((x, i) => head.writeInt32LE(x, 4 * i));
      b.forEach((x, i) => head.writeInt32LE(x, 12 + 4 * i));
      head.writeInt32LE(cfg.sharedBytes ?? 0, 24);
      head.writeInt32LE(clusterX, 28);
      head.writeInt32LE(nameBuf.length, 32);
      const nb = Buffer.alloc(4); nb.writeInt32LE(bufs.length);
      const parts = [head, nameBuf, nb];
      for (const [base, size] of bufs) {
        const sz = Buffer.alloc(8); sz.writeBigInt64LE(BigInt(size)); parts.push(sz, Buffer.from(cpu.download(base, size)));
      }
      const na = Buffer.alloc(4); na.writeInt32LE(argRecs.length); parts.push(na, ...argRecs);
      const inF = join(tmpdir(), `gdn-emu-launch-${process.pid}.bin`), outF = join(tmpdir(), `gdn-emu-out-${process.pid}.bin`);
      writeFileSync(inF, Buffer.concat(parts));
      execFileSync(exe, [inF, outF], { stdio: ['ignore', 'inherit', 'inherit'] });
      const out = readFileSync(outF);
      let off = 0;
      for (const [base, size] of bufs) { cpu.upload(base, out.subarray(off, off + size)); off += size; }
    },
  };
  return new Proxy(dev, { get(t, k) { if (k in t) return t[k]; const v = cpu[k]; return typeof v === 'function' ? v.bind(cpu) : v; } });
}
