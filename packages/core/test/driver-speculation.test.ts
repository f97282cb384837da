import { describe, expect, it } from 'vitest';
import { InvalidArgumentError, PluginError, type DevicePtr, type GdnCarryBinding, type GpuBackend, type Sequence } from '../src/index.js';
import { expectThrow, Inputs, LIMITS, readI32, readU32, withRig, type LayerSpec, type Rig } from './support/driver-rig.js';

// Two write-on-accept layers with different stash sizes, a recording layer without
// write-on-accept, and a layer with no hooks at all.
const WOA: readonly LayerSpec[] = [
  { name: 'W0', salt: 0.125, woaStashFloats: 5 },
  { name: 'W1', salt: -0.25, woaStashFloats: 3 },
  { name: 'R', salt: 0.375 },
  { name: 'P', salt: 0.5, plain: true },
];

// Two carried-state layers (C0 folds the pending rows in its kernel), one that only supports
// write-on-accept, and a layer with no hooks.
const CARRIED: readonly LayerSpec[] = [
  { name: 'C0', salt: 0.125, carry: { stashSeqFloats: 6, convRowElems: 8, convStashRows: 2 * LIMITS.maxK + 1 }, foldsCarried: true },
  { name: 'C1', salt: -0.25, carry: { stashSeqFloats: 4, convRowElems: 10 } },
  { name: 'W', salt: 0.375, woaStashFloats: 3 },
  { name: 'P', salt: 0.5, plain: true },
];

const SPEC_HOOKS = ['gdnWoaStashSeqFloats', 'gdnWoaBind', 'gdnCarrySeqFloats', 'gdnCarryBind', 'gdnVerifyRunBatched', 'gdnFoldAccepted'] as const;

interface Region {
  readonly what: string;
  readonly ptr: DevicePtr;
  readonly bytes: number;
}

/** Each region lies inside one live allocation (the backend checks), and no two overlap. */
function expectDistinctRegions(gpu: GpuBackend, regions: readonly Region[]): void {
  for (const r of regions) expect(() => gpu.download(r.ptr, r.bytes), `${r.what} holds ${r.bytes} bytes`).not.toThrow();
  for (let i = 0; i < regions.length; i++) {
    for (let j = i + 1; j < regions.length; j++) {
      const a = regions[i]!;
      const b = regions[j]!;
      const overlap = a.ptr < b.ptr + BigInt(b.bytes) && b.ptr < a.ptr + BigInt(a.bytes);
      expect(overlap, `${a.what} overlaps ${b.what}`).toBe(false);
    }
  }
}

function prefilled(rig: Rig, inputs: Inputs, lengths: number[]): Sequence[] {
  const seqs = lengths.map(() => rig.open());
  const rows = lengths.reduce((a, b) => a + b, 0);
  rig.prefill(seqs, lengths, inputs.rows(rows), inputs.tokens(rows));
  rig.log.clear();
  return seqs;
}

/** A step through the rig whose output must equal the host model's. */
function step(rig: Rig, inputs: Inputs, seqs: Sequence[], k?: number) {
  const rows = seqs.length * (k ?? 1);
  const r = rig.step(seqs, k, inputs.rows(rows), inputs.tokens(rows));
  expect(r.output).toEqual(r.expected);
  return r.result;
}

describe('step driver: write-on-accept', () => {
  it('sizes and binds every supporting layer once, before the first prestage and capture', () => {
    withRig({ layers: WOA }, (rig) => {
      const inputs = new Inputs(41);
      const [a, b, c] = prefilled(rig, inputs, [3, 2, 4]);
      expect(step(rig, inputs, [a!, b!, c!], 3).path).toBe('capture');
      expect(rig.log.lines(...SPEC_HOOKS)).toEqual([
        'gdnWoaStashSeqFloats W0', 'gdnWoaStashSeqFloats W1', 'gdnWoaStashSeqFloats R', 'gdnWoaBind W0', 'gdnWoaBind W1',
        'gdnVerifyRunBatched W0', 'gdnVerifyRunBatched W1', 'gdnVerifyRunBatched R',
      ]);
      const calls = rig.log.entries.map((e) => e.call);
      expect(calls.lastIndexOf('gdnWoaBind')).toBeLessThan(calls.indexOf('decodePrestage'));
      expect(calls.lastIndexOf('gdnWoaBind')).toBeLessThan(calls.indexOf('forward'));

      const [w0, w1] = rig.log.of('gdnWoaBind').map((e) => e.args as [DevicePtr, DevicePtr, number]);
      expect(w0![2]).toBe(LIMITS.maxSeqs);
      expect(w1![2]).toBe(LIMITS.maxSeqs);
      expect(w0![0]).toBe(w1![0]);
      expect(readU32(rig.gpu, w0![0], 1)).toEqual([1]);
      expectDistinctRegions(rig.gpu, [
        { what: 'flag', ptr: w0![0], bytes: 4 },
        { what: 'W0 stash', ptr: w0![1], bytes: 4 * LIMITS.maxSeqs * 5 },
        { what: 'W1 stash', ptr: w1![1], bytes: 4 * LIMITS.maxSeqs * 3 },
      ]);

      // Never bound again, whatever runs next.
      rig.driver.accept([1, 2, 3]);
      step(rig, inputs, [a!, b!]);
      step(rig, inputs, [c!, a!], 2);
      rig.driver.accept([2, 2]);
      expect(rig.log.of('gdnWoaBind', 'gdnWoaStashSeqFloats')).toHaveLength(5);
    });
  });

  it('binds on the first decode too, and never asks anything with speculation off', () => {
    withRig({ layers: WOA }, (rig) => {
      const inputs = new Inputs(42);
      const [a] = prefilled(rig, inputs, [2]);
      step(rig, inputs, [a!]);
      expect(rig.log.lines('gdnWoaBind')).toEqual(['gdnWoaBind W0', 'gdnWoaBind W1']);
    });
    withRig({ layers: WOA, speculation: 'none' }, (rig) => {
      const inputs = new Inputs(43);
      const [a, b] = prefilled(rig, inputs, [2, 3]);
      step(rig, inputs, [a!, b!], 2);
      rig.driver.accept([1, 2]);
      step(rig, inputs, [a!, b!], 2);
      rig.driver.accept([0, 2]);
      expect(rig.log.of(...SPEC_HOOKS)).toEqual([]);
      expect([a!.length, b!.length]).toEqual([3, 7]);
    });
  });

  it('after accept, folds with the slot table and the accepted counts in batch order (padding 0)', () => {
    withRig({ layers: WOA }, (rig) => {
      const inputs = new Inputs(44);
      const [a, b, c, d] = prefilled(rig, inputs, [3, 2, 4, 1]);
      // A full bucket first, so the staging of the counts holds a non-zero count at position 3.
      step(rig, inputs, [d!, c!, b!, a!], 1);
      rig.driver.accept([1, 1, 1, 1]);
      for (const l of [0, 1]) expect(rig.recording(l).readFoldSnapshot()).toEqual({ n: 4, slots: [d!.slot, c!.slot, b!.slot, a!.slot], accepted: [1, 1, 1, 1] });
      rig.log.clear();
      step(rig, inputs, [a!, b!, c!], 3);
      const slots = rig.log.forwards()[0]!.tables.slots;
      rig.log.clear();
      rig.driver.accept([2, 0, 3]);
      expect(rig.log.lines()).toEqual(['gdnFoldAccepted W0', 'gdnFoldAccepted W1']);
      const folds = rig.log.of('gdnFoldAccepted');
      for (const f of folds) {
        const [slotTable, naTab, kRows, n] = f.args as [DevicePtr, DevicePtr, number, number];
        expect(slotTable).toBe(slots);
        expect([kRows, n]).toEqual([3, 4]);
        expect(f.capturing).toBe(false);
        expect(readI32(rig.gpu, slotTable, 4)).toEqual([a!.slot, b!.slot, c!.slot, -1]);
        expect(readU32(rig.gpu, naTab, 4)).toEqual([2, 0, 3, 0]);
      }
      // What the fold's own kernel read, in stream order.
      for (const l of [0, 1]) {
        expect(rig.recording(l).readFoldSnapshot()).toEqual({ n: 4, slots: [a!.slot, b!.slot, c!.slot, -1], accepted: [2, 0, 3, 0] });
      }
      expect([a!.length, b!.length, c!.length]).toEqual([6, 3, 8]);
      expect([a!.awaitingAccept, b!.awaitingAccept, c!.awaitingAccept]).toEqual([false, false, false]);
      expectThrow(() => rig.driver.accept([2, 0, 3]), InvalidArgumentError, /no verify step is waiting/);
      expect([a!.length, b!.length, c!.length]).toEqual([6, 3, 8]);

      // A smaller bucket, another order, another k: the fold sees exactly that step.
      step(rig, inputs, [c!, a!], 2);
      rig.driver.accept([1, 2]);
      for (const l of [0, 1]) expect(rig.recording(l).readFoldSnapshot()).toEqual({ n: 2, slots: [c!.slot, a!.slot], accepted: [1, 2] });
      expect([a!.length, c!.length]).toEqual([8, 9]);
    });
  });

  it('refuses every step while a verify awaits accept, and bad counts without losing the verify', () => {
    withRig({ layers: WOA }, (rig) => {
      const inputs = new Inputs(45);
      const [a, b, c] = prefilled(rig, inputs, [3, 2, 4]);
      step(rig, inputs, [a!, b!], 2);
      expect([a!.awaitingAccept, b!.awaitingAccept, c!.awaitingAccept]).toEqual([true, true, false]);
      const d = rig.driver;
      expectThrow(() => d.decode({ seqs: [a!] }), InvalidArgumentError, /waiting for accept/);
      expectThrow(() => d.decode({ seqs: [c!] }), InvalidArgumentError, /waiting for accept/);
      expectThrow(() => d.verify({ seqs: [a!, b!], k: 2 }), InvalidArgumentError, /waiting for accept/);
      expectThrow(() => d.prefill({ seqs: [c!], lengths: [1] }), InvalidArgumentError, /waiting for accept/);
      expectThrow(() => d.accept([1]), InvalidArgumentError, /2 sequences, got 1 counts/);
      expectThrow(() => d.accept([3, 0]), InvalidArgumentError, /accepted\[0\] must be between 0 and k \(2\), got 3/);
      expectThrow(() => d.accept([1, -1]), InvalidArgumentError, /accepted\[1\].*got -1/);
      expectThrow(() => d.accept([0.5, 1]), InvalidArgumentError, /accepted\[0\].*got 0\.5/);
      expect(rig.log.of('gdnFoldAccepted')).toEqual([]);
      expect([a!.length, b!.length]).toEqual([3, 2]);
      d.accept([2, 1]);
      expect([a!.length, b!.length]).toEqual([5, 3]);
      expect(step(rig, inputs, [a!, b!, c!]).path).toBe('capture');
    });
  });

  it('closing a sequence of a pending verify abandons that verify for the others too', () => {
    withRig({ layers: WOA }, (rig) => {
      const inputs = new Inputs(46);
      const [a, b] = prefilled(rig, inputs, [3, 2]);
      step(rig, inputs, [a!, b!], 2);
      rig.driver.close(a!);
      // Nothing is waiting any more: b keeps its length and can step again.
      expectThrow(() => rig.driver.accept([1]), InvalidArgumentError, /no verify step is waiting/);
      expect(b!.awaitingAccept).toBe(false);
      expect(b!.length).toBe(2);
      expect(step(rig, inputs, [b!]).path).toBe('capture');
      expect(b!.length).toBe(3);
      expect(rig.log.of('gdnFoldAccepted')).toEqual([]);
    });
  });
});

describe('step driver: the batched verify of a run of sequences', () => {
  it('asks every answering layer before each verify, with the run in batch order, k, the batch positions and the slot table', () => {
    withRig({ layers: WOA }, (rig) => {
      const inputs = new Inputs(47);
      const [a, b, c] = prefilled(rig, inputs, [3, 2, 4]);
      rig.recording(0).runBatched = true;
      rig.recording(1).runBatched = true;
      step(rig, inputs, [c!, a!, b!], 2);
      const asked = rig.log.of('gdnVerifyRunBatched');
      expect(asked.map((e) => e.layer)).toEqual(['W0', 'W1', 'R']);
      const slotTable = rig.log.forwards()[0]!.tables.slots;
      for (const e of asked) expect(e.args).toEqual([[c!.slot, a!.slot, b!.slot], 2, 4, slotTable]);
      // Host-side, before the step's first prestage and forward.
      const calls = rig.log.entries.map((e) => e.call);
      expect(calls.lastIndexOf('gdnVerifyRunBatched')).toBeLessThan(calls.indexOf('decodePrestage'));
      expect(calls.lastIndexOf('gdnVerifyRunBatched')).toBeLessThan(calls.indexOf('forward'));
      rig.driver.accept([1, 2, 0]);
      rig.log.clear();
      // Decode steps and replays: asked on every verify, never on a decode.
      step(rig, inputs, [a!]);
      step(rig, inputs, [b!, c!], 2);
      rig.driver.accept([2, 2]);
      step(rig, inputs, [b!, c!], 2);
      expect(rig.log.lines('gdnVerifyRunBatched')).toEqual([
        'gdnVerifyRunBatched W0', 'gdnVerifyRunBatched W1', 'gdnVerifyRunBatched R',
        'gdnVerifyRunBatched W0', 'gdnVerifyRunBatched W1', 'gdnVerifyRunBatched R',
      ]);
      expect(rig.log.of('gdnVerifyRunBatched').at(-1)!.args.slice(0, 3)).toEqual([[b!.slot, c!.slot], 2, 2]);
    });
  });

  it('refuses a verify that a layer will not run batched before anything of the step is written', () => {
    withRig({ layers: WOA }, (rig) => {
      const inputs = new Inputs(48);
      const [a, b] = prefilled(rig, inputs, [3, 2]);
      // A graph for the key first, so a refusal on the replay path is covered too.
      step(rig, inputs, [a!, b!], 2);
      rig.driver.accept([1, 1]);
      const before = [0, 1].map((l) => [a!.slot, b!.slot].map((s) => Array.from(rig.recording(l).readState(s))));
      rig.recording(1).runBatched = false;
      rig.log.clear();
      const e = expectThrow(() => rig.driver.verify({ seqs: [a!, b!], k: 2, input: inputs.rows(4), tokens: inputs.tokens(4) }), PluginError,
        /layer 1 cannot verify sequences \d+, \d+ \(k = 2, 2 batch positions\)/, /gdnVerifyRunBatched answered false/);
      expect(e.plugin).toBe('test-recording');
      expect(rig.log.lines().filter((l) => !l.startsWith('gdnVerifyRunBatched'))).toEqual([]);
      expect([0, 1].map((l) => [a!.slot, b!.slot].map((s) => Array.from(rig.recording(l).readState(s))))).toEqual(before);
      expect([a!.length, b!.length, a!.awaitingAccept, b!.awaitingAccept]).toEqual([4, 3, false, false]);
      // An answer of true (or none) lets the same step run.
      rig.recording(1).runBatched = true;
      expect(step(rig, inputs, [a!, b!], 2).path).toBe('replay');
      rig.driver.accept([2, 0]);
      expect([a!.length, b!.length]).toEqual([6, 3]);
    });
  });
});

describe('step driver: carried state', () => {
  it('binds each carried layer once, before capture, with distinct buffers of the sizes GdnCarryBinding states', () => {
    withRig({ layers: CARRIED, speculation: 'carried' }, (rig) => {
      const inputs = new Inputs(51);
      const [a, b, c] = prefilled(rig, inputs, [3, 2, 4]);
      expect(step(rig, inputs, [a!, b!, c!], 2).path).toBe('capture');
      expect(rig.log.lines(...SPEC_HOOKS)).toEqual([
        'gdnCarrySeqFloats C0', 'gdnCarrySeqFloats C1', 'gdnCarrySeqFloats W', 'gdnWoaStashSeqFloats W', 'gdnWoaBind W', 'gdnCarryBind C0', 'gdnCarryBind C1',
        'gdnVerifyRunBatched C0', 'gdnVerifyRunBatched C1', 'gdnVerifyRunBatched W',
      ]);
      const calls = rig.log.entries.map((e) => e.call);
      expect(calls.lastIndexOf('gdnCarryBind')).toBeLessThan(calls.indexOf('decodePrestage'));
      expect(calls.lastIndexOf('gdnCarryBind')).toBeLessThan(calls.indexOf('forward'));

      const [b0, b1] = rig.log.of('gdnCarryBind').map((e) => e.args[0] as GdnCarryBinding);
      const seqs = LIMITS.maxSeqs;
      const batch = LIMITS.maxBatch;
      for (const [binding, own] of [[b0!, rig.recording(0).carry!], [b1!, rig.recording(1).carry!]] as const) {
        expect(binding.seqs).toBe(seqs);
        expect(binding.maxBatch).toBe(batch);
        expect(binding.stashSeqFloats).toBeGreaterThanOrEqual(own.stashSeqFloats);
        expect(binding.convRowElems).toBeGreaterThanOrEqual(own.convRowElems);
        // Conv stash rows per slot: the largest any carried layer asked for (C0: 2·maxK + 1), maxK by default.
        expect(binding.convStashRows).toBe(2 * LIMITS.maxK + 1);
        expect(binding.convStashRows).toBeGreaterThanOrEqual(own.convStashRows ?? binding.maxK);
        expect(Object.isFrozen(binding)).toBe(true);
        expect(readU32(rig.gpu, binding.flag, 1)).toEqual([1]);
        expect(readU32(rig.gpu, binding.pendingRows, seqs)).toEqual(new Array(seqs).fill(0));
      }
      // Shared: flag, pending rows and the driver's slot table.
      expect(b1!.flag).toBe(b0!.flag);
      expect(b1!.pendingRows).toBe(b0!.pendingRows);
      expect(b1!.slotTable).toBe(b0!.slotTable);
      expect(b0!.slotTable).toBe(rig.log.forwards()[0]!.tables.slots);

      const own = (name: string, x: GdnCarryBinding): Region[] => [
        { what: `${name} stash`, ptr: x.stash, bytes: 4 * seqs * x.stashSeqFloats },
        { what: `${name} convStash`, ptr: x.convStash, bytes: 4 * seqs * x.convStashRows * x.convRowElems },
      ];
      const woa = rig.log.of('gdnWoaBind')[0]!.args as [DevicePtr, DevicePtr, number];
      expectDistinctRegions(rig.gpu, [
        { what: 'flag', ptr: b0!.flag, bytes: 4 },
        { what: 'pendingRows', ptr: b0!.pendingRows, bytes: 4 * seqs },
        { what: 'slotTable', ptr: b0!.slotTable, bytes: 4 * batch },
        ...own('C0', b0!),
        ...own('C1', b1!),
        { what: 'W stash', ptr: woa[1], bytes: 4 * seqs * 3 },
      ]);

      rig.driver.accept([1, 2, 0]);
      step(rig, inputs, [a!, b!, c!]);
      step(rig, inputs, [b!], 3);
      rig.driver.accept([3]);
      expect(rig.log.of('gdnCarryBind', 'gdnCarrySeqFloats')).toHaveLength(5);
    });
  });

  it('writes the accepted counts to pendingRows[slot]; the next kernel folds them; close and open clear them', () => {
    withRig({ layers: CARRIED, speculation: 'carried' }, (rig) => {
      const inputs = new Inputs(52);
      const [a, b, c] = prefilled(rig, inputs, [3, 2, 4]);
      step(rig, inputs, [a!, b!, c!], 2);
      const pending = rig.recording(0).carryBinding!.pendingRows;
      const seqs = LIMITS.maxSeqs;
      const expectPending = (bySlot: Record<number, number>) => {
        const want = new Array(seqs).fill(0);
        for (const [slot, n] of Object.entries(bySlot)) want[Number(slot)] = n;
        expect(readU32(rig.gpu, pending, seqs)).toEqual(want);
      };
      rig.log.clear();
      rig.driver.accept([2, 1, 0]);
      // Carried layers fold in their next kernel, not at accept; the write-on-accept one folds now.
      expect(rig.log.lines('gdnFoldAccepted')).toEqual(['gdnFoldAccepted W']);
      expectPending({ [a!.slot]: 2, [b!.slot]: 1 });
      expect([a!.length, b!.length, c!.length]).toEqual([5, 3, 4]);

      rig.driver.close(b!);
      expectPending({ [a!.slot]: 2 });
      const d = rig.open();
      expect(d.slot).toBe(b!.slot);
      expectPending({ [a!.slot]: 2 });

      step(rig, inputs, [a!, c!]);
      expectPending({});
      const folded = rig.recording(0).readFolded();
      expect(folded[a!.slot]).toBe(2);
      expect(folded[b!.slot]).toBe(0); // b closed before any kernel folded its row
      expect(folded[c!.slot]).toBe(0);

      // Pending rows of a sequence closed after accept are cleared before its slot is reused.
      step(rig, inputs, [a!, c!], 3);
      rig.driver.accept([3, 2]);
      expectPending({ [a!.slot]: 3, [c!.slot]: 2 });
      rig.driver.close(c!);
      expectPending({ [a!.slot]: 3 });
      const e = rig.open();
      expect(e.slot).toBe(c!.slot);
      expectPending({ [a!.slot]: 3 });
    });
  });

  it('a prefill that folds carried rows leaves nothing pending for a later accept to bring back', () => {
    withRig({ layers: CARRIED, speculation: 'carried' }, (rig) => {
      const inputs = new Inputs(53);
      const [a, b] = prefilled(rig, inputs, [3, 2]);
      step(rig, inputs, [a!, b!], 2);
      rig.driver.accept([2, 1]);
      const pending = rig.recording(0).carryBinding!.pendingRows;
      // A prefill continuing a: its kernel folds a's two rows and clears the count.
      rig.prefill([a!], [2], inputs.rows(2), inputs.tokens(2));
      expect(rig.recording(0).readFolded()[a!.slot]).toBe(2);
      step(rig, inputs, [b!]);
      step(rig, inputs, [b!], 2);
      rig.driver.accept([1]);
      const now = readU32(rig.gpu, pending, LIMITS.maxSeqs);
      expect(now[b!.slot]).toBe(1);
      expect(now[a!.slot], "a's rows were folded by the prefill; an accept of b must not re-pend them").toBe(0);
      step(rig, inputs, [a!, b!]);
      expect(rig.recording(0).readFolded()[a!.slot]).toBe(2);
    });
  });
});
