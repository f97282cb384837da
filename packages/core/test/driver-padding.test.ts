import { describe, expect, it } from 'vitest';
import type { DevicePtr, Sequence } from '../src/index.js';
import { Inputs, readI32, WIDTH, withRig, type Rig } from './support/driver-rig.js';

/** Opens four sequences, prefills them, and runs two 4-sequence decodes so both staging sets hold real data at position 3. */
function dirtyFour(rig: Rig, inputs: Inputs): Sequence[] {
  const seqs = [rig.open(), rig.open(), rig.open(), rig.open()];
  rig.prefill(seqs, [3, 2, 4, 1], inputs.rows(10), inputs.tokens(10));
  for (let i = 0; i < 2; i++) {
    const r = rig.step(seqs, undefined, inputs.rows(4), inputs.tokens(4));
    expect(r.output).toEqual(r.expected);
  }
  rig.log.clear();
  return seqs;
}

describe('step driver: padding rows', () => {
  it('pads 3 sequences to bucket 4 with slot −1, length 1, position and token 0, and no state', () => {
    withRig({ graphs: false }, (rig) => {
      const inputs = new Inputs(61);
      const [a, b, c] = dirtyFour(rig, inputs);
      const seqs = [a!, b!, c!];
      const lengths = seqs.map((s) => s.length);
      const tokens = inputs.tokens(3);
      const r = rig.step(seqs, undefined, inputs.rows(3), tokens);
      expect(r.result.batch).toBe(4);
      expect(r.result.rows).toBe(3);
      expect(r.output).toEqual(r.expected);
      for (const f of rig.log.forwards()) {
        expect(f.batch).toBe(4);
        expect(f.rows).toBe(4);
        expect(f.stateSlots).toEqual([a!.slot, b!.slot, c!.slot, undefined]);
        expect(f.hostSeqLens).toEqual([...lengths, 1]);
        expect(f.device).toEqual({
          slots: [a!.slot, b!.slot, c!.slot, -1],
          seqLens: [...lengths, 1],
          rowStarts: [0, 1, 2, 3, 4],
          tokens: [...tokens, 0],
          positions: [...lengths, 0],
        });
      }

      // Verify: k rows per position, padding rows all zero.
      const vLengths = seqs.map((s) => s.length);
      const vTokens = inputs.tokens(6);
      rig.log.clear();
      const v = rig.step(seqs, 2, inputs.rows(6), vTokens);
      expect(v.output).toEqual(v.expected);
      const f = rig.log.forwards()[0]!;
      expect(f.stateSlots).toEqual([a!.slot, b!.slot, c!.slot, undefined]);
      expect(f.device).toEqual({
        slots: [a!.slot, b!.slot, c!.slot, -1],
        seqLens: [...vLengths, 1],
        rowStarts: [0, 2, 4, 6, 8],
        tokens: [...vTokens, 0, 0],
        positions: [...vLengths.flatMap((l) => [l, l + 1]), 0, 0],
      });
      rig.driver.accept([1, 2, 0]);
    });
  });

  it('never calls a hook for a padding position, in any path', () => {
    withRig({}, (rig) => {
      const inputs = new Inputs(62);
      const [a, b, c] = dirtyFour(rig, inputs);
      const real = new Set([a!.slot, b!.slot, c!.slot]);
      const seqs = [a!, b!, c!];
      for (const k of [undefined, undefined, 2, 2]) {
        rig.log.clear();
        const r = rig.step(seqs, k, inputs.rows(3 * (k ?? 1)), inputs.tokens(3 * (k ?? 1)));
        expect(r.output).toEqual(r.expected);
        if (k !== undefined) rig.driver.accept([2, 0, 1]);
        const hooks = rig.log.of('decodePrestage', 'decodePrestageRearm', 'checkReplayRoom', 'syncReplayedStep');
        expect(hooks.length).toBeGreaterThan(0);
        for (const h of hooks) expect(real.has(h.slot!), `${h.call} for slot ${String(h.slot)}`).toBe(true);
        // One call per real (sequence, layer) and hook.
        for (const call of ['decodePrestage', 'checkReplayRoom', 'syncReplayedStep'] as const) {
          const n = rig.log.of(call).length;
          expect(n === 0 || n === 3 * 2, `${call} called ${n} times`).toBe(true);
        }
      }
    });
  });

  it("keeps real rows' outputs and states the same whatever garbage the padding rows hold", () => {
    const run = (garbage: (n: number) => Float32Array) =>
      withRig({}, (rig) => {
        const inputs = new Inputs(63);
        const [a, b, c, d] = dirtyFour(rig, inputs);
        const first = rig.log;
        first.clear();
        rig.step([a!], undefined, inputs.rows(1), inputs.tokens(1));
        const f = first.forwards()[0]!;
        const acts: DevicePtr[] = [f.input, f.output];
        const rowBytes = WIDTH * 4;
        const outputs: Float32Array[] = [];
        const plan: [Sequence[], number | undefined, number[]?][] = [
          [[a!, b!, c!], undefined],
          [[b!, c!, a!], undefined],
          [[a!, b!, c!], 2, [2, 1, 0]],
          [[c!, a!, b!], 2, [1, 2, 2]],
          [[a!, b!, c!, d!], undefined],
          [[a!, c!, d!], 3, [3, 1, 2]],
          [[a!, b!, c!], undefined],
        ];
        for (const [seqs, k, accepted] of plan) {
          const kk = k ?? 1;
          // Garbage in every padding row of both activation buffers, before the step.
          const pad = (4 - seqs.length) * kk;
          if (pad > 0) for (const act of acts) rig.gpu.upload(act + BigInt(seqs.length * kk * rowBytes), garbage(pad * WIDTH));
          const r = rig.step(seqs, k, inputs.rows(seqs.length * kk), inputs.tokens(seqs.length * kk));
          expect(r.output).toEqual(r.expected);
          outputs.push(r.output);
          if (accepted) rig.driver.accept(accepted);
        }
        const states = [a!, b!, c!, d!].map((s) => rig.layers.map((l) => Array.from(l.readState(s.slot))));
        return { outputs, states, paths: Object.keys(rig.driver.graphs.describe()).sort() };
      });
    const huge = run((n) => new Inputs(7).random.normals(n, 1e6));
    const nan = run((n) => new Float32Array(n).fill(Number.NaN));
    const inf = run((n) => new Float32Array(n).fill(-Infinity));
    expect(huge.paths).toEqual(['decode:1:1', 'decode:4:1', 'verify:4:2', 'verify:4:3']);
    expect(nan).toEqual(huge);
    expect(inf).toEqual(huge);
  });

  it('fills the device tables of captured and replayed steps the same way', () => {
    withRig({}, (rig) => {
      const inputs = new Inputs(64);
      const seqs = [rig.open(), rig.open(), rig.open(), rig.open()];
      rig.prefill(seqs, [3, 2, 4, 1], inputs.rows(10), inputs.tokens(10));
      const [a, b, c, d] = seqs;
      rig.log.clear();
      for (const [three, path] of [[[a!, b!, c!], 'capture'], [[d!, b!, a!], 'replay']] as const) {
        const lengths = three.map((s) => s.length);
        const tokens = inputs.tokens(3);
        const r = rig.step(three, undefined, inputs.rows(3), tokens);
        expect(r.result.path).toBe(path);
        expect(r.output).toEqual(r.expected);
        const tables = rig.log.forwards()[0]!.tables;
        expect(readI32(rig.gpu, tables.slots, 4)).toEqual([...three.map((s) => s.slot), -1]);
        expect(readI32(rig.gpu, tables.seqLens, 4)).toEqual([...lengths, 1]);
        expect(readI32(rig.gpu, tables.rowStarts, 5)).toEqual([0, 1, 2, 3, 4]);
        expect(readI32(rig.gpu, tables.tokens, 4)).toEqual([...tokens, 0]);
        expect(readI32(rig.gpu, tables.positions, 4)).toEqual([...lengths, 0]);
      }
    });
  });
});
