import type { CheckResult } from './conformance.js';
import { describeSnapshot, relativeError, sameSnapshot, withinTolerance } from './compare.js';
import type { StepRecord } from './harness.js';
import type { Script } from './script.js';

/**
 * Compares two recorded runs step by step (outputs within tolerance, host state equal); returns a
 * failure naming the first differing step, or undefined when they agree.
 */
export function compareRuns(
  a: readonly StepRecord[],
  b: readonly StepRecord[],
  tolerance: number,
  options: { skipVerifyRowsPastAccepted?: Script } = {},
): Omit<CheckResult, 'check'> | undefined {
  if (a.length !== b.length) return { status: 'fail', detail: `runs have ${a.length} and ${b.length} steps` };
  for (let i = 0; i < a.length; i++) {
    const x = a[i]!;
    const y = b[i]!;
    if (x.output && y.output) {
      let out = x.output;
      let ref = y.output;
      const op = options.skipVerifyRowsPastAccepted?.[i];
      if (op?.op === 'verify') {
        // Rejected rows' own outputs may differ; only accepted rows must agree.
        const width = out.length / (op.seqs.length * op.k);
        const keep = (arr: Float32Array) => {
          const parts: number[] = [];
          op.seqs.forEach((_, s) => {
            for (let r = 0; r < op.accepted[s]!; r++) parts.push(...arr.subarray((s * op.k + r) * width, (s * op.k + r + 1) * width));
          });
          return Float32Array.from(parts);
        };
        out = keep(out);
        ref = keep(ref);
      }
      const rel = relativeError(out, ref);
      if (!withinTolerance(rel, tolerance)) {
        return { status: 'fail', detail: `step ${i} (${x.op}, paths ${x.path}/${y.path}): outputs differ, rel ${rel.toExponential(2)} > ${tolerance}` };
      }
    }
    if (!sameSnapshot(x.snapshot, y.snapshot)) {
      return { status: 'fail', detail: `step ${i} (${x.op}, paths ${x.path}/${y.path}): host state ${describeSnapshot(x.snapshot)} vs ${describeSnapshot(y.snapshot)}` };
    }
  }
  return undefined;
}
