import {
  InvalidArgumentError, isGreedy, sampledRow, type DevicePtr, type DeviceTokenPicker, type GpuBackend, type GpuEvent, type HostBuffer, type PickedTokens, type SampledRow,
  type SampledTokens, type SamplingParams, type SeededRandom, type Stream,
} from '@metrale/core';
import { LOGPROBS_ROW_WORDS, LOGPROBS_TOP, SAMPLE_PARAMS, readLogprobsRow } from './sample-layout.js';
import { requireKernels } from './require-kernels.js';
import { argmaxKernel, argmaxLaunch, argmaxPartialsBytes, logprobsKernel, sampleKernel, sampleLaunch, samplePhases, sampleScratchBytes, sampleScratchZeroBytes, sampleSlices } from './sample-kernels.js';

/**
 * Picks each logit row's token on the device, so only `rows` token ids (and the logprobs asked
 * for) come back instead of `rows × vocab` logits. Sampling draws its uniforms
 * from the sequence's `SeededRandom` on the host, in the order the host sampler would, so both give
 * the same tokens for the same seed (but for a draw within ~1e-16 of a boundary: the kernel's sums
 * are fixed-point; the draw and the parameters are the host's f64s). The engine loop takes it as
 * its `DeviceTokenPicker`: `argmax` / `argmaxAsync` for plain greedy steps, `sample` for decode and
 * verify steps with sampled sequences or logprobs, each row by its own parameters.
 */
export class DeviceSampler implements DeviceTokenPicker {
  readonly maxRows: number;
  readonly #gpu: GpuBackend;
  readonly #tokens: DevicePtr;
  /** A call's rows: `std.sample`'s parameters and draws (f64 [rows][SAMPLE_PARAMS]), then `std.logprobs`' counts (i32 [rows]). */
  readonly #params: DevicePtr;
  /** `std.logprobs`' rows (u32 [maxRows][LOGPROBS_ROW_WORDS]). */
  readonly #logprobs: DevicePtr;
  /** `std.argmax`'s scratch: a counter per row (zero between launches), then, 16-byte aligned, the slices' pairs. */
  readonly #argmaxScratch: DevicePtr;
  readonly #partialsOffset: number;
  /** `std.sample`'s and `std.logprobs`' scratch, for rows of up to `slices` slices (allocated by the first call, grown for a longer vocabulary). */
  #sampleScratch: { ptr: DevicePtr; slices: number } | undefined;
  readonly #host: HostBuffer;
  /** `argmaxAsync`'s host copies, used in turn: a call's ids stay readable until the call after next. */
  readonly #async: { readonly host: HostBuffer; readonly done: GpuEvent; call: number }[] = [];
  #asyncCalls = 0;

  /**
   * Buffers for calls of up to `maxRows` rows. With `vocab`, `std.sample`'s scratch for rows of that
   * vocabulary is allocated here, at startup (tens of MB at a few hundred rows), not by the first
   * sampled call; a call of a longer vocabulary grows it.
   */
  constructor(gpu: GpuBackend, maxRows: number, options: { readonly vocab?: number } = {}) {
    requireKernels(gpu, 'sampler', [argmaxKernel, sampleKernel, logprobsKernel]);
    this.#gpu = gpu;
    this.maxRows = maxRows;
    this.#tokens = gpu.alloc(4 * maxRows);
    this.#params = gpu.alloc((8 * SAMPLE_PARAMS + 4) * maxRows);
    this.#logprobs = gpu.alloc(4 * LOGPROBS_ROW_WORDS * maxRows);
    this.#partialsOffset = 16 * Math.ceil(maxRows / 4);
    this.#argmaxScratch = gpu.alloc(this.#partialsOffset + argmaxPartialsBytes(maxRows, gpu.device.multiprocessors));
    gpu.upload(this.#argmaxScratch, new Uint32Array(maxRows));
    // Host staging (IDS_AT, LOGPROBS_AT): a call's rows as they go up, the ids, the logprobs rows.
    this.#host = gpu.allocHost(LOGPROBS_AT * maxRows + 4 * LOGPROBS_ROW_WORDS * maxRows);
    for (let i = 0; i < 2; i++) this.#async.push({ host: gpu.allocHost(4 * maxRows), done: gpu.createEvent(), call: -1 });
    if (options.vocab !== undefined) this.#scratchFor(options.vocab);
  }

  /**
   * Tokens of `rows` logit rows of `vocab` at `logits`; `randoms[r]` draws row r's uniform (absent
   * for greedy). Synchronous: waits for the stream and returns host ids.
   */
  pick(logits: DevicePtr, rows: number, vocab: number, params: SamplingParams | undefined, stream: Stream, randoms?: readonly SeededRandom[]): Int32Array {
    this.#checkRows(rows);
    if (isGreedy(params)) {
      this.#launchArgmax(logits, rows, vocab, stream);
      return this.#readIds(rows, stream);
    }
    if (!randoms || randoms.length !== rows) throw new InvalidArgumentError(`sampler: sampling ${rows} rows needs ${rows} random streams`);
    return this.sample(logits, randoms.map((r) => sampledRow(params, () => r.float())), vocab, stream).tokens;
  }

  /**
   * The token of each row of `logits` picked by its own `SampledRow` (temperature 0: its argmax, the
   * token `argmax` gives) by `std.sample`'s phases (2 to 8 launches over CTAs of a slice of a row
   * each), and the logprobs of the rows that ask in one `std.logprobs` launch; the rows' parameters,
   * draws and logprobs counts go up in one copy. Synchronous: waits for the stream and returns host
   * ids and logprobs.
   */
  sample(logits: DevicePtr, rows: readonly SampledRow[], vocab: number, stream: Stream): SampledTokens {
    const n = rows.length;
    this.#checkRows(n);
    const bytes = this.#host.bytes;
    const max = this.maxRows;
    // This call's rows: parameters and draw (f64 [n][SAMPLE_PARAMS]), then the logprobs counts (i32 [n]).
    const params = new Float64Array(bytes.buffer, bytes.byteOffset, SAMPLE_PARAMS * n);
    const counts = new Int32Array(bytes.buffer, bytes.byteOffset + 8 * SAMPLE_PARAMS * n, n);
    rows.forEach((row, i) => {
      checkRow(row, i);
      params.set([row.temperature, row.topK, row.topP, row.minP, row.uniform], SAMPLE_PARAMS * i);
      counts[i] = row.logprobs ?? -1;
    });
    const gpu = this.#gpu;
    const asks = rows.some((row) => row.logprobs !== undefined);
    gpu.copyToDeviceAsync(this.#params, this.#host, 0, (8 * SAMPLE_PARAMS + (asks ? 4 : 0)) * n, stream);
    const scratch = this.#scratchFor(vocab);
    const launch = sampleLaunch(n, vocab, stream);
    for (const phase of samplePhases(rows)) {
      gpu.launch(sampleKernel, launch, { logits, params: this.#params, out: this.#tokens, scratch, capacity: max, rows: n, vocab, phase });
    }
    if (asks) {
      const countsOnDevice = this.#params + BigInt(8 * SAMPLE_PARAMS * n);
      gpu.launch(logprobsKernel, launch, { logits, tokens: this.#tokens, counts: countsOnDevice, out: this.#logprobs, scratch, capacity: max, rows: n, vocab });
      gpu.copyToHostAsync(this.#host, LOGPROBS_AT * max, this.#logprobs, 4 * LOGPROBS_ROW_WORDS * n, stream);
    }
    const tokens = this.#readIds(n, stream);
    const staged = bytes.subarray(LOGPROBS_AT * max);
    return { tokens, logprobs: rows.map((row, i) => (row.logprobs === undefined ? undefined : readLogprobsRow(staged, i, tokens[i]!))) };
  }

  /** The kernels' scratch for rows of `vocab`, its histograms and counters zero. */
  #scratchFor(vocab: number): DevicePtr {
    const slices = sampleSlices(vocab);
    if (this.#sampleScratch && this.#sampleScratch.slices >= slices) return this.#sampleScratch.ptr;
    const gpu = this.#gpu;
    if (this.#sampleScratch) gpu.free(this.#sampleScratch.ptr);
    this.#sampleScratch = undefined;
    const ptr = gpu.alloc(sampleScratchBytes(this.maxRows, vocab));
    gpu.upload(ptr, new Uint8Array(sampleScratchZeroBytes(this.maxRows)));
    this.#sampleScratch = { ptr, slices };
    return ptr;
  }

  #checkRows(rows: number): void {
    if (!Number.isInteger(rows) || rows < 1 || rows > this.maxRows) throw new InvalidArgumentError(`sampler: rows must be between 1 and ${this.maxRows}, got ${rows}`);
  }

  /** The ids of the last launch, copied to the host once the stream is done. */
  #readIds(rows: number, stream: Stream): Int32Array {
    const bytes = this.#host.bytes;
    const at = IDS_AT * this.maxRows;
    this.#gpu.copyToHostAsync(this.#host, at, this.#tokens, 4 * rows, stream);
    this.#gpu.synchronize(stream);
    return new Int32Array(bytes.buffer, bytes.byteOffset + at, rows).slice();
  }

  /** Greedy tokens of `rows` logit rows (the engine loop's `DeviceTokenPicker`). */
  argmax(logits: DevicePtr, rows: number, vocab: number, stream: Stream): Int32Array {
    return this.pick(logits, rows, vocab, undefined, stream);
  }

  /**
   * Greedy tokens of `rows` logit rows, enqueued on `stream` with their copy to the host; `read`
   * waits for them. The ids on the device are overwritten by the sampler's next call.
   */
  argmaxAsync(logits: DevicePtr, rows: number, vocab: number, stream: Stream): PickedTokens {
    this.#checkRows(rows);
    const gpu = this.#gpu;
    const call = this.#asyncCalls++;
    const set = this.#async[call % 2]!;
    set.call = call;
    this.#launchArgmax(logits, rows, vocab, stream);
    gpu.copyToHostAsync(set.host, 0, this.#tokens, 4 * rows, stream);
    gpu.recordEvent(set.done, stream);
    let read = false;
    return {
      device: this.#tokens,
      read: () => {
        if (read) throw new InvalidArgumentError('sampler: these picked ids were read already');
        if (set.call !== call) throw new InvalidArgumentError(`sampler: the ids of call ${call} were overwritten by call ${set.call}; read a call's ids before the call after next`);
        read = true;
        gpu.synchronizeEvent(set.done);
        const bytes = set.host.bytes;
        return new Int32Array(bytes.buffer, bytes.byteOffset, rows).slice();
      },
    };
  }

  #launchArgmax(logits: DevicePtr, rows: number, vocab: number, stream: Stream): void {
    const counters = this.#argmaxScratch;
    const partials = counters + BigInt(this.#partialsOffset);
    this.#gpu.launch(argmaxKernel, argmaxLaunch(rows, vocab, this.#gpu.device.multiprocessors, stream), { logits, out: this.#tokens, counters, partials, rows, vocab });
  }

  dispose(): void {
    this.#gpu.free(this.#tokens);
    this.#gpu.free(this.#params);
    this.#gpu.free(this.#logprobs);
    this.#gpu.free(this.#argmaxScratch);
    if (this.#sampleScratch) this.#gpu.free(this.#sampleScratch.ptr);
    this.#gpu.freeHost(this.#host);
    for (const set of this.#async) {
      this.#gpu.destroyEvent(set.done);
      this.#gpu.freeHost(set.host);
    }
  }
}

/** Where the host staging's parts start, in bytes per row: a call's parameters and draws (f64 [SAMPLE_PARAMS]) with its logprobs counts (i32), the ids, the logprobs rows. */
const IDS_AT = 8 * SAMPLE_PARAMS + 4;
const LOGPROBS_AT = IDS_AT + 4;

/** Refuses a row the kernel would misread, naming it. */
function checkRow(row: SampledRow, i: number): void {
  const bad = (what: string, v: number, range: string): never => {
    throw new InvalidArgumentError(`sampler: row ${i}'s ${what} must be ${range}, got ${v}`);
  };
  if (!(Number.isFinite(row.temperature) && row.temperature >= 0)) bad('temperature', row.temperature, 'a number ≥ 0');
  if (!(Number.isInteger(row.topK) && row.topK >= 0 && row.topK < 2 ** 31)) bad('topK', row.topK, 'a whole number in [0, 2^31)');
  if (!(row.topP > 0 && row.topP <= 1)) bad('topP', row.topP, 'in (0, 1]');
  if (!(row.minP >= 0 && row.minP <= 1)) bad('minP', row.minP, 'in [0, 1]');
  if (!(row.uniform >= 0 && row.uniform < 1)) bad('uniform', row.uniform, 'in [0, 1)');
  if (row.logprobs !== undefined && !(Number.isInteger(row.logprobs) && row.logprobs >= 0 && row.logprobs <= LOGPROBS_TOP)) bad('logprobs', row.logprobs, `a whole number in [0, ${LOGPROBS_TOP}]`);
}
