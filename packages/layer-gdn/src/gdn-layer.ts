import {
  F32_PRECISION,
  FLOAT_DTYPE_CODE,
  InvalidArgumentError,
  describePrecision,
  floatBytes,
  runLinear,
  uploadLinear,
  type CreateLayerContext,
  type DevicePtr,
  type GdnCarryBinding,
  type GdnCarrySize,
  type GpuBackend,
  type LayerLimits,
  type LayerState,
  type HostLinear,
  type LayerStep,
  type LinearWeight,
  type Precision,
  type Stream,
  type TransformerLayer,
} from '@metrale/core';
import { projectionRow, readGdnConfig, type GdnConfig } from './gdn-config.js';
import { foldKernels, recurrentVariantKernels, twoKernelDecodeKernels, twoKernelVerifyKernels } from './gdn-kernels.js';
import { NO_GATE_ROWS, PIPE_DECODE_FROM, decodePath, decodePrepBytes, launchTwoKernelDecode } from './gdn-decode-launch.js';
import { launchTwoKernelVerify, verifyPath, verifyPrepBytes } from './gdn-verify-launch.js';
import { launchFold } from './gdn-fold-launch.js';
import { recurrentLaunch, recurrentVariant, runsClusters } from './gdn-launch.js';
import { prefillKernels } from './gdn-prefill-kernels.js';
import { launchPrefill, prefillPlan, prefillScratchBytes } from './gdn-prefill-launch.js';
import { inputProjections, loadGdnWeights } from './gdn-weights.js';

/** A sequence's GDN state lives entirely on the device (state and conv ring of its slot). */
export interface GdnState extends LayerState {
  readonly slot: number;
}

/** The layer's device buffers (KERNELS.md). */
interface Buffers {
  /** The input projections' GEMMs (gdn-weights.ts inputProjections): one, or two where they cannot stack. */
  readonly wIn: readonly { readonly w: LinearWeight; readonly col: number }[];
  /**
   * in_proj_ba where it runs apart from in_proj_qkvz in the row type (block-FP8 checkpoints): a
   * two-kernel decode step of fewer than PIPE_DECODE_FROM positions makes the gates in its prep
   * with it, and its GEMM is not launched (gdn.decode-prep-gates).
   */
  readonly baApart: LinearWeight | undefined;
  readonly wOut: LinearWeight;
  readonly convWeight: DevicePtr;
  readonly aLog: DevicePtr;
  readonly dtBias: DevicePtr;
  readonly normWeight: DevicePtr;
  readonly state: DevicePtr;
  readonly convRing: DevicePtr;
  /** The input projections' output, f32 (the recurrence reads f32): rows of in_proj_qkvz's then in_proj_ba's columns. */
  readonly qkvz: DevicePtr;
  /** The gated-norm output in the row type: out_proj's input. */
  readonly y: DevicePtr;
  /** An unfused prefill norm's input, the scan's raw O rows (f32): `y` itself when the rows are f32. */
  readonly o: DevicePtr;
  /**
   * Scratch of the chunked prefill (gdn-prefill-launch.ts prefillScratchLayout) and of the
   * two-kernel decode and verify (their prep records, for limits.maxBatch positions); a step uses one of them.
   */
  readonly scratch: DevicePtr;
}

/**
 * A Gated DeltaNet layer (Qwen3-Next `linear_attention`): rows of [hidden] in and out, in the
 * precision's row type (f32 without one). The projections run in that type (block-FP8 weights
 * stay FP8), the input projections writing f32, so the recurrence reads f32 and keeps its state,
 * conv ring and stash in f32; the gated norm stores y in the row type for out_proj.
 * Prefill runs the chunked WY form (`gdn.prefill-wy`, `gdn.prefill-scan`); decode runs `gdn.decode-prep` then
 * `gdn.decode-state` (gdn-decode-launch.ts runsTwoKernelDecode; else `gdn.recurrent` in mode 0); verify of k ≤ 4 rows
 * runs `gdn.verify-prep` then `gdn.verify-state` (else `gdn.recurrent` in mode 1),
 * which reads the state and writes only the stash, so a rejected row leaves no trace. After
 * acceptance, write-on-accept folds the accepted prefix (`gdnFoldAccepted` → `gdn.fold-state` or `gdn.fold`); carried
 * mode folds it inside the slot's next kernel instead.
 */
export class GdnLayer implements TransformerLayer<GdnState> {
  readonly type = 'gdn';
  readonly inputRowBytes: number;
  readonly outputRowBytes: number;
  readonly config: GdnConfig;
  readonly limits: LayerLimits;
  /** How the checkpoint stored the input projections (both run the same kernels). */
  readonly weightLayout: 'qwen3_next' | 'qwen3_5';
  /** The data path: the rows' type and whether block-FP8 weights stay FP8. */
  readonly precision: Precision;
  readonly #gpu: GpuBackend;
  readonly #allocations: DevicePtr[] = [];
  readonly #b: Buffers;
  #woa: { readonly stash: DevicePtr } | undefined;
  /** Saved states (state then conv ring, f32), one per snapshot entry. */
  #snapshots: { readonly base: DevicePtr; readonly count: number } | undefined;
  #carry: GdnCarryBinding | undefined;
  /** seqLens table of each verify layout (batch, k) this layer ran or captured: gdn.fold reads it. */
  readonly #verifySeqLens = new Map<string, DevicePtr>();
  /** 1 for each slot with an open state. */
  readonly #open: Uint8Array;
  /** Scratch of gdnVerifyRunBatched: the slots a run holds. */
  readonly #runSlots: Uint8Array;
  #disposed = false;

  constructor(context: CreateLayerContext) {
    // Config and every tensor are checked before anything touches the device.
    const cfg = readGdnConfig(context.config, context.layerIndex);
    const precision = context.precision ?? F32_PRECISION;
    if (precision.fp8Weights && precision.rows === 'f32') {
      throw new InvalidArgumentError(
        `gdn: precision '${describePrecision(precision)}': FP8 weights multiply bf16 or f16 rows; run the model with bf16 rows, or with FP8 weights dequantized (fp8Weights false)`,
      );
    }
    const w = loadGdnWeights(context.weights, cfg, precision);
    const limits = context.limits;
    for (const key of ['maxSeqs', 'maxBatch', 'maxK', 'maxRows'] as const) {
      if (!Number.isSafeInteger(limits[key]) || limits[key] < 1) throw new InvalidArgumentError(`gdn: limits.${key} must be a positive integer, got ${limits[key]}`);
    }
    this.config = cfg;
    this.limits = limits;
    this.#open = new Uint8Array(limits.maxSeqs);
    this.#runSlots = new Uint8Array(limits.maxSeqs);
    this.weightLayout = w.layout;
    this.precision = precision;
    this.#gpu = context.gpu;
    this.inputRowBytes = this.outputRowBytes = cfg.hidden * floatBytes(precision.rows);
    const { hv, dk, dv, convK, convDim, projDim, valueDim } = cfg;
    const gpu = this.#gpu;
    try {
      const upload = (data: Float32Array): DevicePtr => {
        const p = this.#alloc(data.byteLength);
        gpu.upload(p, data);
        return p;
      };
      const zeroed = (bytes: number): DevicePtr => {
        const p = this.#alloc(bytes);
        gpu.memsetAsync(p, 0, bytes, gpu.defaultStream);
        return p;
      };
      const linear = (host: HostLinear): LinearWeight => uploadLinear(gpu, (bytes) => this.#alloc(bytes), host);
      const y = zeroed(floatBytes(precision.rows) * limits.maxRows * valueDim);
      const wIn = inputProjections(w).map(({ weight, col }) => ({ w: linear(weight), col }));
      this.#b = {
        wIn,
        // The GEMM that writes from in_proj_ba's column, where the two run apart.
        baApart: wIn.find(({ col, w }) => col === projectionRow(cfg).baCol && w.dtype === precision.rows)?.w,
        wOut: linear(w.outProj), convWeight: upload(w.convWeight),
        aLog: upload(w.aLog), dtBias: upload(w.dtBias), normWeight: upload(w.normWeight),
        state: zeroed(4 * limits.maxSeqs * hv * dk * dv),
        convRing: zeroed(4 * limits.maxSeqs * convK * convDim),
        qkvz: zeroed(4 * limits.maxRows * projDim),
        y,
        // A 16-bit y cannot take the unfused norm in place: the raw O rows need their own f32 rows.
        o: precision.rows === 'f32' ? y : zeroed(4 * limits.maxRows * valueDim),
        scratch: zeroed(Math.max(prefillScratchBytes({ hk: cfg.hk, hv, dk, dv, convK, maxK: limits.maxK }, limits.maxRows), decodePrepBytes(cfg, limits.maxBatch), verifyPrepBytes(cfg, limits.maxBatch))),
      };
      gpu.synchronize(gpu.defaultStream);
    } catch (error) {
      this.dispose();
      throw error;
    }
  }

  #alloc(bytes: number): DevicePtr {
    const p = this.#gpu.alloc(bytes);
    this.#allocations.push(p);
    return p;
  }

  #release(p: DevicePtr): void {
    const i = this.#allocations.indexOf(p);
    if (p === 0n || i < 0) return;
    this.#allocations.splice(i, 1);
    this.#gpu.free(p);
  }

  /** f32 words of one slot's state and of one slot's conv ring. */
  get stateSeqFloats(): number {
    return this.config.hv * this.config.dk * this.config.dv;
  }

  get ringSeqFloats(): number {
    return this.config.convK * this.config.convDim;
  }

  openState(slot: number): GdnState {
    this.#alive('openState');
    if (!Number.isInteger(slot) || slot < 0 || slot >= this.limits.maxSeqs) {
      throw new InvalidArgumentError(`gdn: slot must be in 0..${this.limits.maxSeqs - 1}, got ${slot}`);
    }
    // Zero the slot's state and conv ring. Outside capture; wait for any earlier work that may
    // still touch the slot, and for the clearing itself, so every stream sees a clean slot.
    const gpu = this.#gpu;
    gpu.synchronize();
    const { state, ring } = this.#slotState(slot);
    gpu.memsetAsync(state, 0, 4 * this.stateSeqFloats, gpu.defaultStream);
    gpu.memsetAsync(ring, 0, 4 * this.ringSeqFloats, gpu.defaultStream);
    gpu.synchronize(gpu.defaultStream);
    this.#open[slot] = 1;
    return { slot };
  }

  closeState(state: GdnState): void {
    this.#open[state.slot] = 0;
  }

  // ---- snapshots at block boundaries (prefix caching) ----

  /** The slot's recurrent state and conv ring, f32. */
  stateSnapshotBytes(): number {
    return 4 * (this.stateSeqFloats + this.ringSeqFloats);
  }

  /** Entries of an earlier binding go first; 0 only frees them (the driver's unbind: a no-op once disposed, dispose freed them). */
  stateSnapshotBind(count: number): void {
    if (count === 0 && this.#disposed) return;
    this.#alive('stateSnapshotBind');
    if (!Number.isSafeInteger(count) || count < 0) throw new InvalidArgumentError(`gdn: stateSnapshotBind needs a non-negative count, got ${count}`);
    const earlier = this.#snapshots;
    this.#snapshots = undefined;
    if (earlier) this.#release(earlier.base);
    this.#snapshots = { base: count > 0 ? this.#alloc(count * this.stateSnapshotBytes()) : 0n, count };
  }

  /** Two device copies: a slot's state and conv ring are committed after every step (folded, in carried mode, by the prefill). */
  saveStateSnapshot(state: GdnState, index: number, stream: Stream): void {
    const entry = this.#snapshotEntry(index, 'saveStateSnapshot');
    const { state: s, ring } = this.#slotState(state.slot);
    this.#gpu.copyDeviceAsync(entry, s, 4 * this.stateSeqFloats, stream);
    this.#gpu.copyDeviceAsync(entry + BigInt(4 * this.stateSeqFloats), ring, 4 * this.ringSeqFloats, stream);
  }

  /** A sequence starting at a cached prefix takes the state saved at its end. */
  resumeAt(state: GdnState, length: number, snapshot: number | undefined, stream: Stream): void {
    if (snapshot === undefined) throw new InvalidArgumentError(`gdn: a sequence resumed at length ${length} needs the state snapshot saved there`);
    const entry = this.#snapshotEntry(snapshot, 'resumeAt');
    const { state: s, ring } = this.#slotState(state.slot);
    this.#gpu.copyDeviceAsync(s, entry, 4 * this.stateSeqFloats, stream);
    this.#gpu.copyDeviceAsync(ring, entry + BigInt(4 * this.stateSeqFloats), 4 * this.ringSeqFloats, stream);
  }

  #snapshotEntry(index: number, where: string): DevicePtr {
    this.#alive(where);
    const snaps = this.#snapshots;
    if (!snaps || !Number.isInteger(index) || index < 0 || index >= snaps.count) {
      throw new InvalidArgumentError(`gdn: ${where}: snapshot entry ${index} does not exist (${snaps ? `${snaps.count} entries bound` : 'stateSnapshotBind was not called'})`);
    }
    return snaps.base + BigInt(index * this.stateSnapshotBytes());
  }

  #slotState(slot: number): { state: DevicePtr; ring: DevicePtr } {
    return { state: this.#b.state + BigInt(4 * slot * this.stateSeqFloats), ring: this.#b.convRing + BigInt(4 * slot * this.ringSeqFloats) };
  }

  forward(step: LayerStep<GdnState>): void {
    this.#alive('forward');
    const { phase, batch, k, rows, tables, stream } = step;
    const cfg = this.config;
    if (rows > this.limits.maxRows) throw new InvalidArgumentError(`gdn: a step of ${rows} rows exceeds limits.maxRows (${this.limits.maxRows})`);
    if (batch > this.limits.maxBatch) {
      throw new InvalidArgumentError(`gdn: a ${phase} step of ${batch} batch positions exceeds limits.maxBatch (${this.limits.maxBatch})`);
    }
    // Every check comes before the first launch. Carried mode: the driver bound the carry
    // buffers and runs in that mode; then every kernel folds the slot's pending rows first.
    const carry = step.speculation === 'carried' ? this.#carry : undefined;
    if (phase === 'verify') {
      if (!carry && !this.#woa) {
        throw new InvalidArgumentError(
          "gdn: verify needs write-on-accept or carried state; create the StepDriver with speculation 'write-on-accept' or 'carried' (it binds the stash before the first verify)",
        );
      }
      if (k > this.limits.maxK) {
        throw new InvalidArgumentError(`gdn: a verify of k = ${k} rows does not fit the bound stash, sized for maxK = ${this.limits.maxK} rows per sequence`);
      }
      this.#verifySeqLens.set(verifyKey(batch, k), tables.seqLens);
    }
    const b = this.#b;
    const gpu = step.gpu;
    const shape = this.#shape();
    const rowType = this.precision.rows;
    const clusters = runsClusters(gpu);
    const twoKernelDecode = phase === 'decode' && decodePath(shape, batch, clusters) === 'two-kernel';
    // Below PIPE_DECODE_FROM positions only: from 32 the GEMM reads in_proj_ba once for all the
    // rows, where each of the prep's batch × H_k CTAs would read its key head's rows of it.
    const gatesInPrep = twoKernelDecode && batch < PIPE_DECODE_FROM ? b.baApart : undefined;
    // The input projections write f32 (the kernels' conv, gates and recurrence read f32), each GEMM its columns of the rows.
    for (const { w, col } of b.wIn) {
      if (w === gatesInPrep) continue;
      runLinear(gpu, { m: rows, x: step.input, w, y: b.qkvz + BigInt(4 * col), ldy: cfg.projDim, xDtype: rowType, yDtype: 'f32', stream });
    }
    const yDtype = FLOAT_DTYPE_CODE[rowType];
    const common = {
      qkvz: b.qkvz, y: b.y,
      slots: tables.slots, rowStarts: tables.rowStarts, seqLens: tables.seqLens,
      state: b.state, convRing: b.convRing,
      convWeight: b.convWeight, aLog: b.aLog, dtBias: b.dtBias, normWeight: b.normWeight,
      stash: carry ? carry.stash : phase === 'verify' ? this.#woa!.stash : 0n,
      convStash: carry ? carry.convStash : 0n,
      pending: carry ? carry.pendingRows : 0n,
    };
    if (phase === 'prefill') {
      // The chunked WY form (kernels/gdn-chunk.cu): the exact build for short steps, bf16 operands
      // for long ones (gdn-prefill-launch.ts); the exact build's scan fuses the norm where clusters run.
      const plan = prefillPlan(shape, batch, rows, stream, { clusters, sms: gpu.device.multiprocessors });
      launchPrefill(gpu, prefillKernels, shape, { ...common, scratch: b.scratch, o: b.o, yDtype }, batch, rows, cfg.eps, plan);
    } else if (twoKernelDecode) {
      // The row's conv, gates and norms first, then the state pass (kernels/gdn-decode.cu;
      // gdn-decode-launch.ts says at which batches and why).
      launchTwoKernelDecode(gpu, twoKernelDecodeKernels, cfg, stream, {
        ...common, prep: b.scratch, batch, ...shape, eps: cfg.eps, yDtype,
        ...(gatesInPrep ? { baInput: step.input, baWeight: gatesInPrep.data, hidden: cfg.hidden } : NO_GATE_ROWS),
      });
    } else if (phase === 'verify' && verifyPath(shape, batch, k, clusters) === 'two-kernel') {
      // Large verify steps of k ≤ 4 rows: the same split (kernels/gdn-verify.cu; gdn-verify-launch.ts).
      launchTwoKernelVerify(gpu, twoKernelVerifyKernels, cfg, stream, { ...common, prep: b.scratch, batch, k, ...shape, eps: cfg.eps, yDtype });
    } else {
      // Which entry point: gdn-launch.ts recurrentVariant (pipe or split for decode steps, where they fit).
      const mode = phase === 'verify' ? 1 : 0;
      const variant = recurrentVariant(shape, mode, k, batch, clusters);
      gpu.launch(recurrentVariantKernels[variant], recurrentLaunch(cfg, batch, stream, shape.maxK, variant), {
        ...common, mode, batch, k, ...shape, eps: cfg.eps, yDtype,
      });
    }
    runLinear(gpu, { m: rows, x: b.y, w: b.wOut, y: step.output, xDtype: rowType, yDtype: rowType, stream });
  }

  #shape() {
    const { hk, hv, dk, dv, convK } = this.config;
    return { hk, hv, dk, dv, convK, maxK: this.limits.maxK };
  }

  // ---- write-on-accept and carried state ----

  /** H_v · maxK · (d_k + d_v + 1): k_t, u_t and γ_t of each verify row, per value head. */
  gdnWoaStashSeqFloats(): number {
    const { hv, dk, dv } = this.config;
    return hv * this.limits.maxK * (dk + dv + 1);
  }

  gdnWoaBind(_flag: DevicePtr, stash: DevicePtr, seqs: number): void {
    this.#alive('gdnWoaBind');
    if (!Number.isInteger(seqs) || seqs < this.limits.maxSeqs) {
      throw new InvalidArgumentError(`gdn: gdnWoaBind got a stash for ${seqs} sequences, but the layer serves ${this.limits.maxSeqs} slots`);
    }
    if (stash === 0n) throw new InvalidArgumentError('gdn: gdnWoaBind got a null stash');
    this.#woa = { stash };
  }

  /**
   * The stash, and a conv stash of 2·maxK rows of conv_dim per slot: a ring by position, so that a
   * verify records its new rows (positions L..L+k−1) while other CTAs still read the pending ones
   * (L−n..L−1), n + k ≤ 2·maxK (KERNELS.md).
   */
  gdnCarrySeqFloats(): GdnCarrySize {
    return { stashSeqFloats: this.gdnWoaStashSeqFloats(), convRowElems: this.config.convDim, convStashRows: 2 * this.limits.maxK };
  }

  gdnCarryBind(binding: GdnCarryBinding): void {
    this.#alive('gdnCarryBind');
    const need = this.gdnCarrySeqFloats();
    const bad = (what: string): never => {
      throw new InvalidArgumentError(`gdn: gdnCarryBind: ${what}`);
    };
    if (binding.maxK < this.limits.maxK) bad(`the binding holds maxK = ${binding.maxK} rows per slot, but the layer verifies up to ${this.limits.maxK}`);
    if (binding.stashSeqFloats < need.stashSeqFloats) bad(`stash of ${binding.stashSeqFloats} f32 per sequence, needs ${need.stashSeqFloats}`);
    if (binding.convRowElems < need.convRowElems) bad(`conv stash rows of ${binding.convRowElems} elements, needs ${need.convRowElems}`);
    const rows = binding.convStashRows ?? binding.maxK;
    if (rows < need.convStashRows!) bad(`a conv stash of ${rows} rows per slot, needs ${need.convStashRows} (a ring of 2·maxK)`);
    if (binding.seqs < this.limits.maxSeqs) bad(`buffers for ${binding.seqs} sequences, but the layer serves ${this.limits.maxSeqs} slots`);
    if (binding.stash === 0n || binding.convStash === 0n || binding.pendingRows === 0n) bad('a null stash, conv stash or pending-rows pointer');
    this.#carry = binding;
  }

  /**
   * Whether the layer's verify takes this run in one batched step: kernels over the `wyn` batch
   * positions, each finding its sequence through the slot table at `wyTables`. It does when a
   * verify binding is there (write-on-accept or carried), `kk` is 1..maxK, the positions fit
   * maxBatch and their rows maxRows, and the run is open states of this layer on distinct slots
   * (the kernels run every position side by side: two positions on one slot would race).
   */
  gdnVerifyRunBatched(states: readonly GdnState[], kk: number, wyn: number, wyTables: DevicePtr): boolean {
    this.#alive('gdnVerifyRunBatched');
    const { maxK, maxBatch, maxRows, maxSeqs } = this.limits;
    if (!this.#woa && !this.#carry) return false;
    if (!Number.isInteger(kk) || kk < 1 || kk > maxK) return false;
    if (states.length === 0 || !Number.isInteger(wyn) || wyn < states.length || wyn > maxBatch || wyn * kk > maxRows) return false;
    if (wyTables === 0n) return false;
    const seen = this.#runSlots;
    seen.fill(0);
    for (const state of states) {
      const slot = state?.slot;
      if (!Number.isInteger(slot) || slot < 0 || slot >= maxSeqs || this.#open[slot] !== 1 || seen[slot] === 1) return false;
      seen[slot] = 1;
    }
    return true;
  }

  /** Folds the accepted prefix of the last verify (`naTab[p]` rows of batch position p). */
  gdnFoldAccepted(gpu: GpuBackend, slotTable: DevicePtr, naTab: DevicePtr, kRows: number, n: number, stream: Stream): boolean {
    this.#alive('gdnFoldAccepted');
    const woa = this.#woa;
    if (!woa) return false;
    const seqLens = this.#verifySeqLens.get(verifyKey(n, kRows));
    if (seqLens === undefined) {
      throw new InvalidArgumentError(`gdn: gdnFoldAccepted for a verify of ${n} × ${kRows} rows, but no such verify ran through this layer`);
    }
    const b = this.#b;
    launchFold(gpu, foldKernels, this.config, stream, {
      qkvz: b.qkvz, slots: slotTable, seqLens, naTab, state: b.state, convRing: b.convRing, stash: woa.stash,
      batch: n, k: kRows, ...this.#shape(),
    });
    return true;
  }

  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    for (const p of this.#allocations.splice(0)) this.#gpu.free(p);
  }

  #alive(where: string): void {
    if (this.#disposed) throw new InvalidArgumentError(`gdn: ${where} on a disposed layer`);
  }
}

function verifyKey(batch: number, k: number): string {
  return `${batch}:${k}`;
}
