import { DeviceError, type Dims } from '@metrale/core';
import { checkCount, INVALID_VALUE } from './memory-arena.js';

/** Dynamic shared memory a block may opt into on sm_90 (227 KiB), the largest of the targets. */
export const MAX_SHARED_BYTES = 227 * 1024;

/**
 * The launch limits every CUDA device of our targets enforces. A CPU implementation would run
 * with any grid, so without this check a launch that fails on the GPU would pass here.
 */
export function checkLaunchShape(call: string, grid: Dims, block: Dims, sharedBytes: number): void {
  const bad = (why: string): never => {
    throw new DeviceError(call, `${why} (grid [${grid.join(', ')}], block [${block.join(', ')}], ${sharedBytes} shared bytes)`, INVALID_VALUE);
  };
  if (block[0] > 1024 || block[1] > 1024 || block[2] > 64) bad('a block dimension exceeds 1024 × 1024 × 64');
  if (block[0] * block[1] * block[2] > 1024) bad('a block has more than 1024 threads');
  if (grid[0] > 2 ** 31 - 1 || grid[1] > 65535 || grid[2] > 65535) bad('a grid dimension exceeds 2³¹−1 × 65535 × 65535');
  checkCount(call, 'sharedBytes', sharedBytes);
  if (sharedBytes > MAX_SHARED_BYTES) bad(`dynamic shared memory exceeds ${MAX_SHARED_BYTES} bytes`);
}
