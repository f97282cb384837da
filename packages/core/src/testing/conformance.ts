import { resolveHooks } from '../contract/default-hooks.js';
import type { LayerLimits } from '../contract/layer.js';
import type { GpuBackend } from '../device/gpu-backend.js';
import { ConformanceError, InvalidArgumentError, ReplayRoomError } from '../errors.js';
import { pluginLabel, type MetralePlugin } from '../plugin/define-plugin.js';
import { SeededRandom } from '../random/seeded-random.js';
import type { WeightSource } from '../weights/weight-source.js';
import { checkDefaultHooks } from './check-default-hooks.js';
import { prefixResumeCheck } from './prefix-resume-check.js';
import { compareRuns } from './compare-runs.js';
import { Harness, withHarness, type LayerSetup, type RunMode } from './harness.js';
import { acceptedFor, mainScript, RowSource, type Script, type ScriptOp } from './script.js';
import { relativeError, sameSnapshot, describeSnapshot, withinTolerance } from './compare.js';

export interface ConformanceOptions {
  /** Makes a fresh backend; called once per run (e.g. `() => new CpuBackend()`). */
  readonly backend: () => GpuBackend;
  /** The layer type to test (default: the plugin's first). */
  readonly layerType?: string;
  /** The model config the layer is created with. */
  readonly config: Readonly<Record<string, unknown>>;
  readonly layerIndex?: number;
  readonly weights: WeightSource;
  /** Element type of the layer's input and output rows (default f32). */
  readonly rowDtype?: 'f32' | 'bf16';
  /** Largest relative L2 error between paths that must agree (default 1e-4). */
  readonly tolerance?: number;
  /** Verify width (default 3). */
  readonly k?: number;
  /** Longest sequence the layer is created for (default 40). */
  readonly maxSeqLen?: number;
  /** Rows per page of the driver's KV page pool (default 16). */
  readonly kvPageSize?: number;
  /** Token ids are drawn from [0, vocabSize) (default: config.vocab_size, else 512). */
  readonly vocabSize?: number;
  /** Scale of the random input rows (default 1). */
  readonly inputScale?: number;
  readonly seed?: number;
  /** Check names to leave out; each is reported as skipped. */
  readonly skip?: readonly string[];
}

export type CheckStatus = 'pass' | 'fail' | 'n/a' | 'skipped';

export interface CheckResult {
  readonly check: string;
  readonly status: CheckStatus;
  readonly detail: string;
}

export interface ConformanceReport {
  readonly plugin: string;
  readonly layerType: string;
  readonly backend: string;
  readonly checks: readonly CheckResult[];
  readonly passed: boolean;
}

export const CONFORMANCE_CHECKS = [
  'default-hooks',
  'replay-equals-eager',
  'failed-capture-rearm',
  'verify-accept-equals-decode',
  'rejected-rows-leave-no-trace',
  'carried-equals-write-on-accept',
  'slot-reuse-starts-clean',
  'room-check-before-write',
  'prefix-resume-equals-prefill',
] as const;

/**
 * Runs the layer contract's checks on random inputs and throws `ConformanceError` listing every
 * failed check; returns the report when all pass. Each check builds fresh backends and layers, so
 * checks never see each other's state.
 */
export function runLayerConformance(plugin: MetralePlugin, options: ConformanceOptions): ConformanceReport {
  const layerType = options.layerType ?? plugin.layerTypes[0];
  if (layerType === undefined) throw new InvalidArgumentError(`runLayerConformance: ${plugin.name} has no layer types (only architectures); the kit checks layers`);
  const k = options.k ?? 3;
  const maxSeqLen = options.maxSeqLen ?? 40;
  const limits: LayerLimits = { maxSeqs: 4, maxSeqLen, maxBatch: 4, maxK: k, maxRows: Math.max(maxSeqLen, 4 * k) };
  const setup: LayerSetup = {
    plugin, layerType, config: options.config, layerIndex: options.layerIndex ?? 0, weights: options.weights,
    backend: options.backend, limits, rowDtype: options.rowDtype ?? 'f32', kvPageSize: options.kvPageSize ?? 16,
  };
  const tolerance = options.tolerance ?? 1e-4;
  const vocab = options.vocabSize ?? (typeof options.config.vocab_size === 'number' ? options.config.vocab_size : 512);
  const random = new SeededRandom(options.seed ?? 20261130);
  const skip = new Set(options.skip ?? []);

  // Learn the row width and hooks from one layer.
  const probe = new Harness(setup, { graphs: false, speculation: 'none', failCaptures: false });
  const bytesPer = setup.rowDtype === 'bf16' ? 2 : 4;
  const width = probe.layer.inputRowBytes / bytesPer;
  const backendKind = probe.gpu.kind;
  const { implemented } = resolveHooks(probe.layer);
  const supportsCarry = probe.layer.gdnCarrySeqFloats?.() !== undefined;
  const defaultHooksResult = checkDefaultHooks(probe.layer);
  probe.dispose();
  if (!Number.isInteger(width) || width < 1) {
    throw new ConformanceError(layerType, [{ check: 'setup', detail: `inputRowBytes ${probe.layer.inputRowBytes} is not a whole number of ${setup.rowDtype} values` }]);
  }
  const src = new RowSource(random, width, vocab, options.inputScale ?? 1);

  const GRAPHS: RunMode = { graphs: true, speculation: 'write-on-accept', failCaptures: false };
  const EAGER: RunMode = { graphs: false, speculation: 'write-on-accept', failCaptures: false };
  const results: CheckResult[] = [];
  const check = (name: string, fn: () => CheckResult | Omit<CheckResult, 'check'>): void => {
    if (skip.has(name)) {
      results.push({ check: name, status: 'skipped', detail: 'left out by options.skip' });
      return;
    }
    try {
      results.push({ check: name, ...fn() });
    } catch (error) {
      results.push({ check: name, status: 'fail', detail: `threw ${(error as Error).name}: ${(error as Error).message}` });
    }
  };

  check('default-hooks', () => defaultHooksResult);

  const main = mainScript(src, k);
  check('replay-equals-eager', () => {
    const replayed = withHarness(setup, GRAPHS, (h) => h.run(main));
    const eager = withHarness(setup, EAGER, (h) => h.run(main));
    const replays = replayed.filter((r) => r.path === 'replay').length;
    if (replays === 0) return { status: 'fail', detail: 'the graph run never replayed a step (every capture failed?)' };
    const diff = compareRuns(replayed, eager, tolerance);
    return diff ?? { status: 'pass', detail: `${replays} replayed steps match eager outputs and host state` };
  });

  check('failed-capture-rearm', () => {
    let failedCounts = { hostToDeviceBytes: 0, hostToDeviceCopies: 0 };
    let eagerCounts = failedCounts;
    const failed = withHarness(setup, { ...GRAPHS, failCaptures: true }, (h) => {
      const r = h.run(main);
      failedCounts = { ...h.counts };
      return r;
    });
    const eager = withHarness(setup, EAGER, (h) => {
      const r = h.run(main);
      eagerCounts = { ...h.counts };
      return r;
    });
    const failures = failed.filter((r) => r.path === 'capture-failed').length;
    if (failures === 0) return { status: 'fail', detail: 'no capture failed although every capture was made to fail' };
    if (failed.some((r) => r.path === 'replay' || r.path === 'capture')) return { status: 'fail', detail: 'a key whose capture failed was captured or replayed later' };
    const diff = compareRuns(failed, eager, tolerance);
    if (diff) return diff;
    if (failedCounts.hostToDeviceBytes !== eagerCounts.hostToDeviceBytes) {
      return {
        status: 'fail',
        detail: `after failed captures the layer moved ${failedCounts.hostToDeviceBytes} bytes host→device, never-captured moved ${eagerCounts.hostToDeviceBytes}: re-arm must not redo prestage uploads`,
      };
    }
    return { status: 'pass', detail: `${failures} failed captures re-armed and ran eagerly, identical to never capturing` };
  });

  check('verify-accept-equals-decode', () => verifyVersusDecode(setup, src, k, tolerance, 'write-on-accept'));

  check('rejected-rows-leave-no-trace', () => {
    for (let n = 0; n < k; n++) {
      const { withVerify } = verifyScripts(src, k, n);
      // Same script, but every rejected row gets other inputs and tokens.
      const garbled = withVerify.map((op): ScriptOp => {
        if (op.op !== 'verify') return op;
        const input = op.input.slice();
        const tokens = op.tokens.slice();
        const other = src.rows(op.seqs.length * k);
        op.seqs.forEach((_, i) => {
          for (let r = op.accepted[i]!; r < k; r++) {
            const row = i * k + r;
            input.set(other.input.subarray(row * src.width, (row + 1) * src.width), row * src.width);
            tokens[row] = other.tokens[row]!;
          }
        });
        return { ...op, input, tokens };
      });
      const a = withHarness(setup, GRAPHS, (h) => h.run(withVerify));
      const b = withHarness(setup, GRAPHS, (h) => h.run(garbled));
      const diff = compareRuns(a, b, tolerance, { skipVerifyRowsPastAccepted: withVerify });
      if (diff) return { status: 'fail', detail: `n = ${n}: ${diff.detail}` };
    }
    return { status: 'pass', detail: `for every accepted count below k = ${k}, other rejected rows left every later output and all host state unchanged` };
  });

  check('carried-equals-write-on-accept', () => {
    if (!supportsCarry) return { status: 'n/a', detail: 'the layer answers gdnCarrySeqFloats() with undefined (no carried-state verify)' };
    const r = verifyVersusDecode(setup, src, k, tolerance, 'carried');
    if (r.status !== 'pass') return r;
    const carried = withHarness(setup, { ...GRAPHS, speculation: 'carried' }, (h) => h.run(main));
    const woa = withHarness(setup, GRAPHS, (h) => h.run(main));
    return compareRuns(carried, woa, tolerance) ?? { status: 'pass', detail: 'carried mode matches write-on-accept and plain decode' };
  });

  check('slot-reuse-starts-clean', () => {
    const [first, reused] = [src.prefill([0], [4]), src.prefill([1], [3])];
    const decodes = [src.decode([1]), src.decode([1])];
    const a = withHarness(setup, GRAPHS, (h) => {
      h.run([{ op: 'open', seq: 0 }, first, src.decode([0]), { op: 'close', seq: 0 }, { op: 'open', seq: 1 }]);
      return [reused, ...decodes].map((op, i) => h.step(op, i));
    });
    const b = withHarness(setup, GRAPHS, (h) => {
      h.run([{ op: 'open', seq: 1 }]);
      return [reused, ...decodes].map((op, i) => h.step(op, i));
    });
    return compareRuns(a, b, tolerance) ?? { status: 'pass', detail: 'a sequence in a reused slot computes as in a fresh layer' };
  });

  check('room-check-before-write', () => roomCheck(setup, src, k, implemented.has('checkReplayRoom')));

  check('prefix-resume-equals-prefill', () => prefixResumeCheck(setup, src, tolerance, implemented.has('resumeAt')));

  const passed = results.every((r) => r.status !== 'fail');
  const report: ConformanceReport = { plugin: pluginLabel(plugin), layerType, backend: backendKind, checks: results, passed };
  if (!passed) throw new ConformanceError(`${plugin.name} (${layerType}, ${backendKind})`, results.filter((r) => r.status === 'fail'));
  return report;
}

/** Prefix, then either a verify with acceptance or the accepted rows decoded one by one; then more decodes. */
function verifyScripts(src: RowSource, k: number, n: number): { withVerify: Script; withDecode: Script; verifyIndex: number } {
  const seqs = [0, 1, 2];
  const prefix: ScriptOp[] = [...seqs.map((seq): ScriptOp => ({ op: 'open', seq })), src.prefill(seqs, [2, 4, 1]), src.decode(seqs), src.decode(seqs)];
  const accepted = seqs.map((_, i) => acceptedFor(n, i, k));
  const verify = src.verify(seqs, k, accepted) as Extract<ScriptOp, { op: 'verify' }>;
  const after = [src.decode(seqs), src.decode([2, 0]), src.verify(seqs, k, [k, 1, 0]), src.decode(seqs)];
  const catchUp: ScriptOp[] = [];
  for (let r = 0; r < k; r++) {
    const live = seqs.filter((_, i) => accepted[i]! > r);
    if (live.length === 0) break;
    const rows = live.map((s) => s * k + r);
    const input = new Float32Array(rows.length * src.width);
    rows.forEach((row, j) => input.set(verify.input.subarray(row * src.width, (row + 1) * src.width), j * src.width));
    catchUp.push({ op: 'decode', seqs: live, input, tokens: Int32Array.from(rows, (row) => verify.tokens[row]!) });
  }
  return { withVerify: [...prefix, verify, ...after], withDecode: [...prefix, ...catchUp, ...after], verifyIndex: prefix.length };
}

function verifyVersusDecode(setup: LayerSetup, src: RowSource, k: number, tolerance: number, speculation: 'write-on-accept' | 'carried'): Omit<CheckResult, 'check'> {
  let worst = 0;
  for (let n = 0; n <= k; n++) {
    const { withVerify, withDecode, verifyIndex } = verifyScripts(src, k, n);
    const mode: RunMode = { graphs: true, speculation, failCaptures: false };
    const a = withHarness(setup, mode, (h) => h.run(withVerify));
    const b = withHarness(setup, mode, (h) => h.run(withDecode));
    const verify = withVerify[verifyIndex] as Extract<ScriptOp, { op: 'verify' }>;
    const outWidth = a[verifyIndex]!.output!.length / (verify.seqs.length * k);
    // Each accepted verify row against the decode of the same row.
    const catchUp = b.slice(verifyIndex, verifyIndex + (withDecode.length - withVerify.length) + 1);
    const seen = new Map<number, number>();
    for (const [j, rec] of catchUp.entries()) {
      const op = withDecode[verifyIndex + j] as Extract<ScriptOp, { op: 'decode' }>;
      op.seqs.forEach((s, p) => {
        const r = seen.get(s) ?? 0;
        seen.set(s, r + 1);
        const vrow = a[verifyIndex]!.output!.subarray((s * k + r) * outWidth, (s * k + r + 1) * outWidth);
        const drow = rec.output!.subarray(p * outWidth, (p + 1) * outWidth);
        const rel = relativeError(vrow, drow);
        worst = Math.max(worst, rel);
        if (!withinTolerance(rel, tolerance)) {
          throw new Error(`${speculation}, n = ${n}: verify row ${r} of sequence ${s} differs from decoding it (rel ${rel.toExponential(2)} > ${tolerance})`);
        }
      });
    }
    const tailA = a.slice(verifyIndex + 1);
    const tailB = b.slice(b.length - tailA.length);
    const diff = compareRuns(tailA, tailB, tolerance);
    if (diff) return { status: 'fail', detail: `${speculation}, n = ${n}, steps after the verify: ${diff.detail}` };
    const lastA = a[a.length - 1]!.snapshot;
    const lastB = b[b.length - 1]!.snapshot;
    if (!sameSnapshot(lastA, lastB)) {
      return { status: 'fail', detail: `${speculation}, n = ${n}: host state ${describeSnapshot(lastA)} after verify+accept, ${describeSnapshot(lastB)} after decoding` };
    }
  }
  return { status: 'pass', detail: `${speculation}: for n = 0..${k}, verify then accept n matches decoding n rows (worst rel ${worst.toExponential(2)}), and so do later steps` };
}

function roomCheck(setup: LayerSetup, src: RowSource, k: number, hasRoomCheck: boolean): Omit<CheckResult, 'check'> {
  const L = setup.limits.maxSeqLen;
  if (L < 2 * k + 3) return { status: 'n/a', detail: `maxSeqLen ${L} is too short to reach the end of the cache by replays (needs ≥ ${2 * k + 3})` };
  return withHarness(setup, { graphs: true, speculation: 'write-on-accept', failCaptures: false }, (h) => {
    // Decode: reach length L with replays, then one decode more must be refused.
    h.run([{ op: 'open', seq: 0 }, src.prefill([0], [L - 3]), src.decode([0]), src.decode([0]), src.decode([0])]);
    // Verify: reach L − 1 with a replayed verify, then one more verify must be refused.
    h.run([{ op: 'open', seq: 1 }, src.prefill([1], [L - 2 * k - 1]), src.verify([1], k, [k]), src.verify([1], k, [k])]);
    for (const [name, op] of [['decode', src.decode([0])], ['verify', src.verify([1], k, [k])]] as const) {
      const before = { digest: h.digest(), snapshot: h.snapshot() };
      let error: unknown;
      try {
        h.step(op, 0);
      } catch (e) {
        error = e;
      }
      if (error === undefined) {
        if (hasRoomCheck) return { status: 'fail', detail: `a replayed ${name} past maxSeqLen (${L}) was not refused by checkReplayRoom` };
        return { status: 'n/a', detail: 'the layer has no room check and accepts rows past maxSeqLen (no length-bounded host-tracked cache)' };
      }
      if (!(error instanceof ReplayRoomError)) {
        return { status: 'fail', detail: `a replayed ${name} past maxSeqLen threw ${(error as Error).name} (${(error as Error).message}), not ReplayRoomError` };
      }
      if (h.digest() !== before.digest) return { status: 'fail', detail: `the refused ${name} changed device memory` };
      const after = h.snapshot();
      if (!sameSnapshot(after, before.snapshot)) return { status: 'fail', detail: `the refused ${name} changed host state: ${describeSnapshot(before.snapshot)} → ${describeSnapshot(after)}` };
    }
    return { status: 'pass', detail: 'replayed decode and verify past the cache end were refused before any write' };
  });
}
