import { CpuBackend } from '@metrale/cpu-backend';
import { describe, expect, it } from 'vitest';
import {
  EngineLoop, InvalidArgumentError, SeededRandom, StepDriver, generateAll,
  type DevicePtr, type DeviceTokenPicker, type GenerateRequest, type LayerLimits, type PickedTokens, type StepInput,
} from '../src/index.js';
import { BigramLayer } from './support/bigram-layer.js';

const V = 16;
const follow = (t: number) => (t * 5 + 3) % V;

/** Logits that make token t → follow(t) the clear favourite, with random runners-up. */
function table(seed: number): Float32Array {
  const t = new SeededRandom(seed).normals(V * V);
  for (let i = 0; i < V; i++) t[i * V + follow(i)]! += 6;
  return t;
}

/**
 * A picker that behaves as layer-std's `DeviceSampler`: the ids of a call on the device until its
 * next call overwrites them, the host copies of two calls kept apart, each read once.
 */
class EnqueuingPicker implements DeviceTokenPicker {
  readonly ids: DevicePtr;
  calls = 0;
  reads = 0;
  readonly #latest = [-1, -1];
  constructor(private readonly gpu: CpuBackend, readonly maxRows: number) {
    this.ids = gpu.alloc(4 * maxRows);
  }
  argmax(logits: DevicePtr, rows: number, vocab: number): Int32Array {
    const l = new Float32Array(this.gpu.download(logits, 4 * rows * vocab).buffer);
    return Int32Array.from({ length: rows }, (_, r) => l.subarray(r * vocab, (r + 1) * vocab).reduce((b, v, i, a) => (v > a[b]! ? i : b), 0));
  }
  argmaxAsync(logits: DevicePtr, rows: number, vocab: number): PickedTokens {
    const ids = this.argmax(logits, rows, vocab);
    this.gpu.upload(this.ids, ids);
    const call = this.calls++;
    this.#latest[call % 2] = call;
    let read = false;
    return {
      device: this.ids,
      read: () => {
        if (read || this.#latest[call % 2] !== call) throw new Error(`call ${call}'s ids read twice or after the call after next`);
        read = true;
        this.reads++;
        return ids;
      },
    };
  }
  dispose(): void {
    this.gpu.free(this.ids);
  }
}

function setup(limits: LayerLimits, graphs = true) {
  const gpu = new CpuBackend();
  const layer = new BigramLayer(gpu, V, table(4));
  const driver = new StepDriver({ gpu, layers: [layer], limits, graphs });
  const picker = new EnqueuingPicker(gpu, limits.maxBatch);
  // Decode steps that took their ids on the device.
  const fromDevice: number[] = [];
  const decode = driver.decode.bind(driver);
  driver.decode = (input: StepInput) => {
    if (input.deviceTokens !== undefined) fromDevice.push(input.seqs.length);
    return decode(input);
  };
  const dispose = () => {
    picker.dispose();
    driver.dispose();
    layer.dispose();
    gpu.dispose();
  };
  return { gpu, driver, picker, fromDevice, dispose };
}

const limits: LayerLimits = { maxSeqs: 2, maxSeqLen: 40, maxBatch: 2, maxK: 1, maxRows: 16 };

describe('the engine loop with an enqueuing picker (ids read one step late)', () => {
  it('gives the tokens of the logits path, with more requests than slots, a stop token and budgets that end apart', () => {
    const { driver, picker, fromDevice, dispose } = setup(limits);
    try {
      const requests: GenerateRequest[] = [
        { prompt: [1, 2], maxTokens: 12 },
        { prompt: [7], maxTokens: 5, stopTokenIds: [follow(follow(follow(7)))] },
        { prompt: [4, 4, 4], maxTokens: 9 },
        { prompt: [9, 3], maxTokens: 1 },
      ];
      const want = generateAll(new EngineLoop({ driver, vocabSize: V, prefillChunk: 16 }), requests).outputs;
      const got = generateAll(new EngineLoop({ driver, vocabSize: V, prefillChunk: 16, picker }), requests).outputs;
      expect(got.map((o) => o.tokens)).toEqual(want.map((o) => o.tokens));
      expect(got.map((o) => o.finishReason)).toEqual(['length', 'stop', 'length', 'length']);
      expect(got[1]!.tokens).toHaveLength(3);
      // Most decode steps went to the device before the step ahead of them was read; every id was read once.
      expect(fromDevice.length).toBeGreaterThan(8);
      expect(picker.reads).toBe(picker.calls);
    } finally {
      dispose();
    }
  });

  it('a sequence cancelled in flight gets nothing more; the other answers as alone, and an idle loop has nothing in flight', () => {
    const { driver, picker, dispose } = setup(limits);
    try {
      const alone = generateAll(new EngineLoop({ driver, vocabSize: V, prefillChunk: 16, picker }), [{ prompt: [5, 6], maxTokens: 10 }]).outputs[0]!.tokens;
      const loop = new EngineLoop({ driver, vocabSize: V, prefillChunk: 16, picker });
      loop.add({ id: 1, prompt: [5, 6], maxTokens: 10 });
      loop.add({ id: 2, prompt: [8], maxTokens: 10 });
      const tokens = new Map<number, number[]>([[1, []], [2, []]]);
      const collect = (events: { id: number; tokens: number[] }[]) => events.forEach((e) => tokens.get(e.id)!.push(...e.tokens));
      for (let i = 0; i < 4; i++) collect(loop.step().events);
      expect(loop.cancel(2)).toBe(true);
      const atCancel = tokens.get(2)!.length;
      while (!loop.idle) collect(loop.step().events);
      expect(tokens.get(1)).toEqual(alone);
      expect(tokens.get(2)!.length).toBe(atCancel);
      expect(picker.reads).toBe(picker.calls);
      // Cancelling the last sequence drops its decode in flight.
      loop.add({ id: 3, prompt: [2], maxTokens: 10 });
      for (let i = 0; i < 3; i++) loop.step();
      loop.cancel(3);
      expect(loop.idle).toBe(true);
      expect(picker.reads).toBe(picker.calls);
    } finally {
      dispose();
    }
  });

  it('reads every step at once without a captured graph (graphs off), with the same tokens', () => {
    const { driver, picker, fromDevice, dispose } = setup(limits, false);
    try {
      const requests: GenerateRequest[] = [{ prompt: [1, 2], maxTokens: 7 }, { prompt: [7], maxTokens: 6 }];
      const want = generateAll(new EngineLoop({ driver, vocabSize: V, prefillChunk: 16 }), requests).outputs.map((o) => o.tokens);
      expect(generateAll(new EngineLoop({ driver, vocabSize: V, prefillChunk: 16, picker }), requests).outputs.map((o) => o.tokens)).toEqual(want);
      expect(fromDevice).toEqual([]);
      expect(picker.reads).toBe(picker.calls);
    } finally {
      dispose();
    }
  });

  it('with asyncScheduling off, every step waits for its ids (argmax), with the same tokens', () => {
    const { driver, picker, fromDevice, dispose } = setup(limits);
    try {
      const requests: GenerateRequest[] = [{ prompt: [1, 2], maxTokens: 7 }, { prompt: [7], maxTokens: 6 }];
      const want = generateAll(new EngineLoop({ driver, vocabSize: V, prefillChunk: 16, picker }), requests).outputs.map((o) => o.tokens);
      expect(fromDevice.length).toBeGreaterThan(0);
      fromDevice.length = 0;
      const calls = picker.calls;
      expect(generateAll(new EngineLoop({ driver, vocabSize: V, prefillChunk: 16, picker, asyncScheduling: false }), requests).outputs.map((o) => o.tokens)).toEqual(want);
      expect(fromDevice).toEqual([]);
      expect(picker.calls).toBe(calls);
    } finally {
      dispose();
    }
  });
});

describe('a speculating loop with an enqueuing picker', () => {
  it('decodes ahead where the gate decodes, and measures acceptance on decoded tokens instead of probing with verifies', () => {
    const { driver, picker, fromDevice, dispose } = setup({ maxSeqs: 2, maxSeqLen: 80, maxBatch: 2, maxK: 5, maxRows: 16 });
    try {
      // A verify made 20 ms slower than a decode, and drafts the model never follows: past the
      // gate's first measurements every step should decode.
      const verify = driver.verify.bind(driver);
      driver.verify = (input) => {
        const result = verify(input);
        for (const end = performance.now() + 20; performance.now() < end;);
        return result;
      };
      const wrong = { propose: (history: readonly number[], max: number) => Array.from({ length: max }, (_, i) => (history[history.length - 1]! + 1 + i) % V) };
      const requests: GenerateRequest[] = [{ prompt: [1, 2], maxTokens: 60 }];
      const want = generateAll(new EngineLoop({ driver, vocabSize: V, prefillChunk: 16 }), requests).outputs[0]!.tokens;
      const loop = new EngineLoop({ driver, vocabSize: V, prefillChunk: 16, picker, speculation: { proposer: wrong, k: 4 } });
      const { outputs, stats } = generateAll(loop, requests, 4);
      expect(outputs[0]!.tokens).toEqual(want);
      // The first verify captures its graph (untimed), the second is timed; then only decodes: the
      // drafts checked on each decoded token stand for the probes every 16 decodes would be.
      expect(stats.steps.verify).toBe(2);
      expect(fromDevice.length).toBeGreaterThan(40);
      expect(picker.reads).toBe(picker.calls);
    } finally {
      dispose();
    }
  });
});

describe("generateAll's decode figures", () => {
  it('count the tokens and steps of the time they divide, with and without async scheduling', () => {
    const { driver, picker, dispose } = setup(limits);
    try {
      const run = (asyncScheduling: boolean) => generateAll(new EngineLoop({ driver, vocabSize: V, prefillChunk: 16, picker, asyncScheduling }), [{ prompt: [1, 2], maxTokens: 8 }]).stats;
      // Without it the prefill step decodes the second token (its time is prefill time): tokens 3..8
      // in 6 steps. With it that decode is read in the next step: tokens 2..8 in 7.
      for (const [on, steps] of [[false, 6], [true, 7]] as const) {
        const stats = run(on);
        expect(stats.decodeMsSteps, `async ${on}`).toBe(steps);
        expect((stats.tokensPerSecond * stats.decodeMs) / 1000, `async ${on}`).toBeCloseTo(steps, 6);
      }
    } finally {
      dispose();
    }
  });
});

describe('a decode step with its token ids on the device', () => {
  it('runs only where the bucket replays its graph, and refuses any other step up front', () => {
    const { gpu, driver, picker, dispose } = setup(limits);
    try {
      const a = driver.open();
      driver.prefill({ seqs: [a], lengths: [2], tokens: Int32Array.from([1, 2]) });
      expect(driver.decodesFromDevice(1)).toBe(false);
      expect(() => driver.decode({ seqs: [a], deviceTokens: picker.ids })).toThrow(/this one has no captured graph\); ask decodesFromDevice first/);
      expect(a.length).toBe(2);
      driver.decode({ seqs: [a], tokens: Int32Array.from([follow(2)]) }); // captures bucket 1
      expect(driver.decodesFromDevice(1)).toBe(true);
      expect(driver.decodesFromDevice(2)).toBe(false);
      expect(driver.decodesFromDevice(3)).toBe(false);
      gpu.upload(picker.ids, Int32Array.from([follow(follow(2))]));
      const r = driver.decode({ seqs: [a], deviceTokens: picker.ids });
      expect(picker.argmax(r.output, 1, V)).toEqual(Int32Array.from([follow(follow(follow(2)))]));
      expect(() => driver.decode({ seqs: [a], tokens: Int32Array.from([1]), deviceTokens: picker.ids })).toThrow(InvalidArgumentError);
      expect(() => driver.prefill({ seqs: [a], lengths: [1], deviceTokens: picker.ids })).toThrow(/prefill: token ids on the device are taken only by a decode step/);
    } finally {
      dispose();
    }
  });
});
