import type { CpuKernelContext, DevicePtr } from '@metrale/core';

/**
 * A paged cache as the kernels take it (KERNELS.md, paged caches): entry t of a slot (a token
 * position, or a pool index) lives in page blockTable[slot][⌊t / pageRows⌋], at row t mod pageRows.
 */
export interface PagedCacheArgs {
  /** i32 [maxSeqs][pagesPerSeq]: the model's shared block table. */
  readonly blockTable: DevicePtr;
  readonly pagesPerSeq: number;
  /** Cache rows per page: the page size for token caches, page size / kpool for pool caches. */
  readonly pageRows: number;
}

/** The cache-row index of each entry of `slot`; an entry past the slot's table is a RangeError naming `kernel`. */
export function slotRows(mem: CpuKernelContext['mem'], a: PagedCacheArgs, kernel: string, slot: number): (t: number) => number {
  const table = mem.i32(a.blockTable + BigInt(4 * slot * a.pagesPerSeq), a.pagesPerSeq);
  const entries = a.pagesPerSeq * a.pageRows;
  return (t) => {
    if (t < 0 || t >= entries) throw new RangeError(`${kernel}: entry ${t} of slot ${slot} is outside the cache (${a.pagesPerSeq} pages of ${a.pageRows} rows)`);
    return table[Math.floor(t / a.pageRows)]! * a.pageRows + (t % a.pageRows);
  };
}
