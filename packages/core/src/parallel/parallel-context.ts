import { ParallelConfigError } from '../errors.js';
import type { Communicator } from './communicator.js';

/** What a rank's layers need to know of the tensor-parallel group they are built for. */
export interface ParallelContext {
  /** This rank, 0 ≤ rank < size. */
  readonly rank: number;
  /** Ranks in the group (the tensor-parallel size); 1 means no parallelism. */
  readonly size: number;
  /** The group's collectives on this rank's device. */
  readonly comm: Communicator;
  /** Whole experts per rank (expert parallelism) instead of every expert's intermediate split. */
  readonly expertParallel: boolean;
}

/**
 * `value / size`, or a `ParallelConfigError` naming `field` (a config field such as
 * `config.num_key_value_heads`), its value and the sizes that would divide it.
 */
export function splitEvenly(value: number, size: number, field: string, flag = '--tensor-parallel-size'): number {
  if (value % size === 0) return value / size;
  const divisors: number[] = [];
  for (let d = 1; d <= Math.min(value, 64); d++) if (value % d === 0) divisors.push(d);
  throw new ParallelConfigError(
    `${flag} ${size} does not divide ${field} (${value}): every rank must hold the same share; use a size that divides it (${divisors.join(', ')})`,
  );
}
