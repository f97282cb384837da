// A one-layer model for tensor-parallel driver tests, written once for the leader (core's sources)
// and the follower threads (core's dist): `core` is whichever copy the caller has. Each rank
// writes token × (rank + 1) per row and the ranks all-reduce, so a row's logit is
// token × n(n + 1)/2. On `failRank`, a row whose token is `failToken` throws part-way (before the
// collective): the failure one rank has and the others do not.

export function makeRankSumLayer(core, gpu, comm, { failRank = -1, failToken = -1 } = {}) {
  const scaled = core.defineKernel({
    name: 'test.rank-sum.scaled',
    params: { tokens: 'ptr', out: 'ptr', rows: 'i32', factor: 'f32' },
    cpu: (a, { mem }) => {
      const t = mem.i32(a.tokens, a.rows);
      const o = mem.f32(a.out, a.rows);
      for (let i = 0; i < a.rows; i++) o[i] = t[i] * a.factor;
    },
  });
  const maxRows = 64;
  const partial = gpu.alloc(4 * maxRows);
  return {
    type: 'rank-sum',
    inputRowBytes: 0,
    outputRowBytes: 4,
    openState: (slot) => ({ slot }),
    closeState() {},
    forward(step) {
      if (comm.rank === failRank && step.host.tokens.subarray(0, step.rows).includes(failToken)) throw new Error(`rank ${comm.rank} cannot take token ${failToken}`);
      step.gpu.launch(scaled, { grid: 1, block: 1, stream: step.stream }, { tokens: step.tables.tokens, out: partial, rows: step.rows, factor: comm.rank + 1 });
      comm.allReduce({ send: partial, recv: step.output, count: step.rows, dtype: 'f32', stream: step.stream });
    },
    dispose() {
      gpu.free(partial);
    },
  };
}

export const RANK_SUM_LIMITS = { maxSeqs: 4, maxSeqLen: 64, maxBatch: 4, maxK: 4, maxRows: 64 };
