import type { DevicePtr } from '../device/device-ptr.js';
import type { GpuBackend } from '../device/gpu-backend.js';
import { InvalidArgumentError } from '../errors.js';

/**
 * The transient buffers of a decoder block: the residual stream between branches and two buffers
 * a branch's chain ping-pongs through. Blocks run one after another on one stream, so one set
 * serves every block of a model; it is allocated before any capture and never moves.
 */
export class BlockScratch {
  readonly residual: DevicePtr;
  readonly a: DevicePtr;
  readonly b: DevicePtr;
  readonly rowBytes: number;
  readonly maxRows: number;
  #disposed = false;

  constructor(
    private readonly gpu: GpuBackend,
    rowBytes: number,
    maxRows: number,
  ) {
    if (!Number.isSafeInteger(rowBytes) || rowBytes < 4) throw new InvalidArgumentError(`BlockScratch: rowBytes must be a positive integer ≥ 4, got ${rowBytes}`);
    if (!Number.isSafeInteger(maxRows) || maxRows < 1) throw new InvalidArgumentError(`BlockScratch: maxRows must be a positive integer, got ${maxRows}`);
    this.rowBytes = rowBytes;
    this.maxRows = maxRows;
    this.residual = gpu.alloc(rowBytes * maxRows);
    this.a = gpu.alloc(rowBytes * maxRows);
    this.b = gpu.alloc(rowBytes * maxRows);
  }

  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    for (const p of [this.residual, this.a, this.b]) this.gpu.free(p);
  }
}
