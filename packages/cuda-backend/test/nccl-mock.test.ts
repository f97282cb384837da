// The NCCL path of the CUDA backend against host-side stand-ins for libcuda and libnccl
// (test/mock): loading NCCL at run time (and the error when it is absent), NCCL_NVLS_ENABLE=0,
// the unique id and ncclCommInitRank, every collective with the types and counts the addon passes
// (checked by the mock's log and by the results the mock computes), their recording into a
// stream capture, abort and destroy. Two ranks share the mock's one device here, one backend each,
// on one thread: the mock never blocks. The real NCCL on several GPUs is the GPU lane's
// (test/gpu/nccl.gpu.test.ts).
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { loadAddon } from '../src/addon.js';
import { buildMockDriver } from './support/mock-driver.js';

const packageDir = fileURLToPath(new URL('..', import.meta.url));
const dist = fileURLToPath(new URL('../dist/index.js', import.meta.url));
const addon = loadAddon();
const mock = addon.ok ? buildMockDriver() : 'the addon is not built';
const why = typeof mock === 'string' ? mock : !existsSync(dist) ? 'the package is not built (dist/index.js)' : '';
if (why) console.warn(`[cuda-backend] NCCL mock tests skipped: ${why}`);

function runScript(body: string, env: Record<string, string> = {}) {
  if (typeof mock === 'string') throw new Error(mock);
  const script = `import { CudaBackend } from ${JSON.stringify(dist)};\n${body}`;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
    cwd: packageDir, encoding: 'utf8', timeout: 120_000,
    env: { ...process.env, METRALE_LIBCUDA_PATH: mock.libcuda, METRALE_CUBLASLT_PATH: mock.cublasLtDir, METRALE_NCCL_PATH: mock.libnccl, ...env },
  });
  return { ...r, json: r.status === 0 ? JSON.parse(r.stdout.trim().split('\n').at(-1)!) : undefined };
}

// Two ranks, one backend each: inputs x_r[i] = (r + 1)·(i + 1) + 0.25.
const TWO_RANKS = `
const b = [CudaBackend.create(), CudaBackend.create()];
const id = b[0].createCommunicatorId(2);
const comm = b.map((g, r) => g.joinCommunicator(id, r));
const n = 8;
const input = (r) => Float32Array.from({ length: n }, (_, i) => (r + 1) * (i + 1) + 0.25);
const up = (g, v) => { const p = g.alloc(v.byteLength); g.upload(p, v); return p; };
const f32 = (g, p, count) => [...new Float32Array(g.download(p, 4 * count).buffer)];
const send = b.map((g, r) => up(g, input(r)));
`;

describe.skipIf(why !== '')('NCCL through the mock libnccl', () => {
  it('all-reduce, all-gather, reduce-scatter and all-to-all give every rank its part, with the addon passing NCCL’s types and counts', () => {
    const log = join(mkdtempSync(join(tmpdir(), 'metrale-nccl-')), 'calls.log');
    const r = runScript(`${TWO_RANKS}
const recv = b.map((g) => g.alloc(4 * 2 * n));
const out = {};
for (const [op, count, rc] of [['allReduce', n, n], ['allGather', n, 2 * n], ['reduceScatter', n / 2, n / 2], ['allToAll', n / 2, n]]) {
  b.forEach((g, r) => comm[r][op]({ send: send[r], recv: recv[r], count, dtype: 'f32', stream: g.defaultStream }));
  out[op] = b.map((g, r) => f32(g, recv[r], rc));
}
const half = b.map((g, r) => up(g, Uint16Array.from(input(r), (x) => new Uint32Array(new Float32Array([x]).buffer)[0] >>> 16)));
b.forEach((g, r) => comm[r].allReduce({ send: half[r], recv: half[r], count: n, dtype: 'bf16', stream: g.defaultStream }));
out.bf16 = b.map((g, r) => [...new Uint16Array(g.download(half[r], 2 * n).buffer)].map((h) => new Float32Array(new Uint32Array([h << 16]).buffer)[0]));
comm.forEach((c) => c.dispose());
b.forEach((g) => g.dispose());
console.log(JSON.stringify(out));`, { MOCK_NCCL_LOG: log });
    expect(r.status, r.stderr).toBe(0);
    const x = (rank: number) => Array.from({ length: 8 }, (_, i) => (rank + 1) * (i + 1) + 0.25);
    const sum = x(0).map((v, i) => v + x(1)[i]!);
    expect(r.json.allReduce).toEqual([sum, sum]);
    expect(r.json.allGather).toEqual([[...x(0), ...x(1)], [...x(0), ...x(1)]]);
    expect(r.json.reduceScatter).toEqual([sum.slice(0, 4), sum.slice(4)]);
    expect(r.json.allToAll).toEqual([[...x(0).slice(0, 4), ...x(1).slice(0, 4)], [...x(0).slice(4), ...x(1).slice(4)]]);
    expect(r.json.bf16[0]).toEqual(sum);
    const calls = readFileSync(log, 'utf8').trim().split('\n');
    expect(calls).toEqual(expect.arrayContaining([
      'init rank=0 nranks=2', 'init rank=1 nranks=2',
      'allReduce rank=0 count=8 type=7 op=0', 'allReduce rank=1 count=8 type=7 op=0',
      'allGather rank=1 count=8 type=7', 'reduceScatter rank=0 count=4 type=7 op=0',
      'groupStart', 'send rank=0 peer=1 count=4 type=7', 'recv rank=0 peer=1 count=4 type=7', 'groupEnd',
      'allReduce rank=1 count=8 type=9 op=0', 'destroy rank=0', 'destroy rank=1',
    ]));
  });

  it('a collective on a capturing stream is recorded, and runs again at each replay', () => {
    const r = runScript(`${TWO_RANKS}
const recv = b.map((g) => g.alloc(4 * n));
const streams = b.map((g) => g.createStream());
const execs = b.map((g, r) => {
  g.beginCapture(streams[r]);
  comm[r].allReduce({ send: send[r], recv: recv[r], count: n, dtype: 'f32', stream: streams[r] });
  const graph = g.endCapture(streams[r]);
  return { nodes: graph.nodes, exec: g.instantiate(graph) };
});
const results = [];
for (const scale of [1, 3]) {
  b.forEach((g, r) => g.upload(send[r], input(r).map((v) => v * scale)));
  b.forEach((g, r) => g.launchGraph(execs[r].exec, streams[r]));
  results.push(f32(b[1], recv[1], 2));
}
console.log(JSON.stringify({ nodes: execs.map((e) => e.nodes), results }));`);
    expect(r.status, r.stderr).toBe(0);
    expect(r.json.nodes).toEqual([1, 1]);
    expect(r.json.results).toEqual([[1.25 + 2.25, 2.25 + 4.25], [3 * (1.25 + 2.25), 3 * (2.25 + 4.25)]]);
  });

  it('turns NCCL_NVLS_ENABLE off whatever the environment says, and names NCCL’s error when init fails', () => {
    const envLog = join(mkdtempSync(join(tmpdir(), 'metrale-nccl-env-')), 'env.log');
    const ok = runScript(`const g = CudaBackend.create(); const c = g.joinCommunicator(g.createCommunicatorId(1), 0); c.abort('done'); g.dispose(); console.log('{}');`,
      { NCCL_NVLS_ENABLE: '1', MOCK_NCCL_ENV_LOG: envLog });
    expect(ok.status, ok.stderr).toBe(0);
    expect(readFileSync(envLog, 'utf8').trim()).toBe('NCCL_NVLS_ENABLE=0');
    const failed = runScript(`const g = CudaBackend.create(); let m = '';
try { g.joinCommunicator(g.createCommunicatorId(2), 0); } catch (e) { m = e.name + ': ' + e.message; }
g.dispose(); console.log(JSON.stringify(m));`, { MOCK_NCCL_FAIL_INIT: '1' });
    expect(failed.status, failed.stderr).toBe(0);
    expect(failed.json).toBe('DeviceError: ncclCommInitRank failed: ncclSystemError: unhandled system error (mock)');
  });

  it('says how to get NCCL when libnccl.so.2 cannot be opened, and the rest of the backend still works', () => {
    const r = runScript(`const g = CudaBackend.create(); let m = '';
try { g.createCommunicatorId(2); } catch (e) { m = e.name + ': ' + e.message; }
const p = g.alloc(16); g.free(p); g.dispose(); console.log(JSON.stringify(m));`, { METRALE_NCCL_PATH: '/nonexistent/libnccl.so.2' });
    expect(r.status, r.stderr).toBe(0);
    expect(r.json).toMatch(/^DeviceError: dlopen: cannot open \/nonexistent\/libnccl\.so\.2: .*tensor parallelism needs NCCL 2\.10 or later: install it/);
  });

  it('refuses ids of another backend and ranks outside the group, by name', () => {
    const r = runScript(`const g = CudaBackend.create(); const out = [];
for (const f of [() => g.joinCommunicator({ backend: 'cpu', size: 2, payload: {} }, 0), () => g.joinCommunicator(g.createCommunicatorId(2), 2)]) {
  try { f(); } catch (e) { out.push(e.message); } }
g.dispose(); console.log(JSON.stringify(out));`);
    expect(r.status, r.stderr).toBe(0);
    expect(r.json[0]).toMatch(/made by the cpu backend/);
    expect(r.json[1]).toMatch(/rank must be an integer in 0\.\.1, got 2/);
  });
});
