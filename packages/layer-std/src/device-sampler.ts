import { InvalidArgumentError, isGreedy, type DevicePtr, type DeviceTokenPicker, type GpuBackend, type GpuEvent, type HostBuffer, type PickedTokens, type SamplingParams, type SeededRandom, type Stream } from '@metrale/core';
import { requireKernels } from './require-kernels.js';
import { argmaxKernel, argmaxLaunch, argmaxPartialsBytes, sampleKernel } from './sample-kernels.js';

/**
 * Picks each logit row's token on the device, so only `rows` token ids come back instead of
 * `rows × vocab` logits. Sampling draws its uniforms from the sequence's `SeededRandom` on the host,
 * in the order the host sampler would, so both give the same tokens for the same seed. The engine
 * loop takes it as its `DeviceTokenPicker` for plain greedy decode steps.
 */
export class DeviceSampler implements DeviceTokenPicker {
  readonly maxRows: number;
  readonly #gpu: GpuBackend;
  readonly #tokens: DevicePtr;
  readonly #uniforms: DevicePtr;
  /** `std.argmax`'s scratch: a counter per row (zero between launches), then, 16-byte aligned, the slices' pairs. */
  readonly #argmaxScratch: DevicePtr;
  readonly #partialsOffset: number;
  readonly #host: HostBuffer;
  /** `argmaxAsync`'s host copies, used in turn: a call's ids stay readable until the call after next. */
  readonly #async: { readonly host: HostBuffer; readonly done: GpuEvent; call: number }[] = [];
  #asyncCalls = 0;

  constructor(gpu: GpuBackend, maxRows: number) {
    requireKernels(gpu, 'sampler', [argmaxKernel, sampleKernel]);
    this.#gpu = gpu;
    this.maxRows = maxRows;
    this.#tokens = gpu.alloc(4 * maxRows);
    this.#uniforms = gpu.alloc(4 * maxRows);
    this.#partialsOffset = 16 * Math.ceil(maxRows / 4);
    this.#argmaxScratch = gpu.alloc(this.#partialsOffset + argmaxPartialsBytes(maxRows, gpu.device.multiprocessors));
    gpu.upload(this.#argmaxScratch, new Uint32Array(maxRows));
    this.#host = gpu.allocHost(8 * maxRows);
    for (let i = 0; i < 2; i++) this.#async.push({ host: gpu.allocHost(4 * maxRows), done: gpu.createEvent(), call: -1 });
  }

  /**
   * Tokens of `rows` logit rows of `vocab` at `logits`; `randoms[r]` draws row r's uniform (absent
   * for greedy). Synchronous: waits for the stream and returns host ids.
   */
  pick(logits: DevicePtr, rows: number, vocab: number, params: SamplingParams | undefined, stream: Stream, randoms?: readonly SeededRandom[]): Int32Array {
    if (!Number.isInteger(rows) || rows < 1 || rows > this.maxRows) throw new InvalidArgumentError(`sampler: rows must be between 1 and ${this.maxRows}, got ${rows}`);
    const gpu = this.#gpu;
    const bytes = this.#host.bytes;
    const ids = new Int32Array(bytes.buffer, bytes.byteOffset, rows);
    if (isGreedy(params)) {
      this.#launchArgmax(logits, rows, vocab, stream);
    } else {
      if (!randoms || randoms.length !== rows) throw new InvalidArgumentError(`sampler: sampling ${rows} rows needs ${rows} random streams`);
      const u = new Float32Array(bytes.buffer, bytes.byteOffset + 4 * this.maxRows, rows);
      randoms.forEach((r, i) => (u[i] = r.float()));
      gpu.copyToDeviceAsync(this.#uniforms, this.#host, 4 * this.maxRows, 4 * rows, stream);
      const p = params!;
      gpu.launch(sampleKernel, { grid: rows, block: 1024, stream }, {
        logits, uniforms: this.#uniforms, out: this.#tokens, rows, vocab,
        temperature: p.temperature!, topK: p.topK ?? 0, topP: p.topP ?? 1, minP: p.minP ?? 0,
      });
    }
    gpu.copyToHostAsync(this.#host, 0, this.#tokens, 4 * rows, stream);
    gpu.synchronize(stream);
    return ids.slice();
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
    if (!Number.isInteger(rows) || rows < 1 || rows > this.maxRows) throw new InvalidArgumentError(`sampler: rows must be between 1 and ${this.maxRows}, got ${rows}`);
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
    this.#gpu.free(this.#uniforms);
    this.#gpu.free(this.#argmaxScratch);
    this.#gpu.freeHost(this.#host);
    for (const set of this.#async) {
      this.#gpu.destroyEvent(set.done);
      this.#gpu.freeHost(set.host);
    }
  }
}
