import {
  FP8_BLOCK, floatBytes, runLinear, stackLinears, uploadLinear,
  type DevicePtr, type FloatDtype, type GpuBackend, type HostLinear, type LinearWeight, type Stream,
} from '@metrale/core';

// One projection of x whose output columns are several checkpoint weights side by side (xa: q_a,
// kv_a, the indexer's wk, weights_proj, the pool gate; qb: q_b, the indexer's wq_b). Parts are
// stacked into one weight, one GEMM, wherever core's stackLinears allows it; a part that cannot
// join the one before it starts a segment of its own, a separate GEMM writing its columns of the
// same output rows (ldy). In GLM-5-FP8 weights_proj stays bf16 among FP8 parts, and
// kv_a_proj_with_mqa (kv_lora + rope rows) is not a whole number of 128-row blocks.

/** A run of consecutive parts stacked into one weight, and the output column of its first row. */
export interface HostLinearSegment {
  readonly column: number;
  readonly weight: HostLinear;
}

/** The same on the device. */
export interface LinearSegment {
  readonly column: number;
  readonly weight: LinearWeight;
}

/** Whether `next` can be stacked under `prev` (same type; an FP8 `prev` must end on a block boundary). */
function stacksUnder(prev: HostLinear, next: HostLinear): boolean {
  return prev.dtype === next.dtype && prev.cols === next.cols && (prev.dtype !== 'f8e4m3' || prev.rows % FP8_BLOCK === 0);
}

/**
 * `parts` (in output-column order) as few segments as stacking allows: one when every part has the
 * rows' float type, as on the f32 path, where the result is the single stacked weight of before.
 */
export function segmentLinears(parts: readonly HostLinear[], name: string): HostLinearSegment[] {
  const segments: HostLinearSegment[] = [];
  let run: HostLinear[] = [];
  let column = 0;
  let start = 0;
  const close = (): void => {
    if (run.length === 0) return;
    const label = `${name} (${run.map((p) => p.name).join(' + ')})`;
    segments.push({ column: start, weight: run.length === 1 ? run[0]! : stackLinears(run, label) });
    run = [];
  };
  for (const part of parts) {
    if (run.length > 0 && !stacksUnder(run[run.length - 1]!, part)) close();
    if (run.length === 0) start = column;
    run.push(part);
    column += part.rows;
  }
  close();
  return segments;
}

export function uploadSegments(gpu: GpuBackend, alloc: (bytes: number) => DevicePtr, segments: readonly HostLinearSegment[]): LinearSegment[] {
  return segments.map((s) => ({ column: s.column, weight: uploadLinear(gpu, alloc, s.weight) }));
}

export interface SegmentsCall {
  readonly m: number;
  /** x [m][cols] in `xDtype`, packed. */
  readonly x: DevicePtr;
  readonly segments: readonly LinearSegment[];
  /** y [m][width] in `yDtype`: each segment writes its columns. */
  readonly y: DevicePtr;
  readonly width: number;
  readonly xDtype: FloatDtype;
  readonly yDtype: FloatDtype;
  readonly stream: Stream;
}

/** y[:, column … column + rows) = x · Wᵀ for each segment: one GEMM per segment, ldy = width. */
export function runSegments(gpu: GpuBackend, c: SegmentsCall): void {
  const bytes = floatBytes(c.yDtype);
  for (const s of c.segments) {
    runLinear(gpu, {
      m: c.m, x: c.x, w: s.weight, y: c.y + BigInt(s.column * bytes), ldy: c.width, xDtype: c.xDtype, yDtype: c.yDtype, stream: c.stream,
    });
  }
}
