import { fileURLToPath } from 'node:url';
import { InvalidArgumentError } from '../errors.js';
import type { DeviceMemoryView } from './memory-view.js';

/** Scalar types a kernel parameter can have. Pointers and 64-bit integers travel as bigint. */
export type KernelParamType = 'ptr' | 'i32' | 'u32' | 'i64' | 'u64' | 'f32' | 'f64';

/** A kernel's parameters in declaration order (the order of the CUDA signature). */
export type KernelParams = Readonly<Record<string, KernelParamType>>;

type ArgValue<T extends KernelParamType> = T extends 'ptr' | 'i64' | 'u64' ? bigint : number;

/** The argument object of a launch, typed from the kernel's parameters. */
export type KernelArgs<P extends KernelParams> = { readonly [K in keyof P]: ArgValue<P[K]> };

export type Dims = readonly [number, number, number];

/** What a CPU implementation sees of its launch. */
export interface CpuKernelContext {
  readonly mem: DeviceMemoryView;
  readonly grid: Dims;
  readonly block: Dims;
  readonly sharedBytes: number;
}

/** A fatbin a package ships; `fatbin` is an absolute path inside that package. */
export interface KernelModule {
  readonly name: string;
  readonly fatbin: string;
}

export interface KernelDefinition<P extends KernelParams> {
  /** Unique, readable name used in errors and traces (`gdn.decode`). */
  readonly name: string;
  readonly params: P;
  /** The CUDA entry: symbol (extern "C") in the package's fatbin. */
  readonly cuda?: { readonly module: KernelModule; readonly symbol: string };
  /** The reference implementation, run by the CPU backend for the whole launch at once. */
  readonly cpu?: (args: KernelArgs<P>, ctx: CpuKernelContext) => void;
  /**
   * Whether the kernel may start before the kernel ahead of it on its stream ends (CUDA's
   * programmatic dependent launch; `LaunchConfig.earlyStart`), declared once next to its symbol:
   * - 'wait-first': it waits for that kernel (`griddepcontrol.wait`) before it touches anything any
   *   kernel ahead may write, so it is safe after any kernel: every launch starts early unless it
   *   says `earlyStart: false`.
   * - 'per-launch': it is safe only after particular kernels (it reads some memory before its wait,
   *   or runs beside a kernel it does not read), so only a launch that says `earlyStart: true`
   *   starts early.
   * Absent: never; backends refuse `earlyStart: true` for it.
   */
  readonly earlyStart?: EarlyStart;
}

/** How a kernel may start early (`KernelDefinition.earlyStart`). */
export type EarlyStart = 'wait-first' | 'per-launch';

const EARLY_STARTS = new Set<unknown>(['wait-first', 'per-launch']);

export interface KernelParam {
  readonly name: string;
  readonly type: KernelParamType;
}

export interface Kernel<P extends KernelParams = KernelParams> extends KernelDefinition<P> {
  readonly paramList: readonly KernelParam[];
}

const PARAM_TYPES = new Set<KernelParamType>(['ptr', 'i32', 'u32', 'i64', 'u64', 'f32', 'f64']);

/**
 * Declares a kernel once: its typed parameters, its CUDA symbol and its CPU implementation.
 * Each backend runs the part it can; a backend asked to run a kernel without its part throws.
 */
export function defineKernel<const P extends KernelParams>(definition: KernelDefinition<P>): Kernel<P> {
  if (!definition.name) throw new InvalidArgumentError('defineKernel: name is required');
  const paramList: KernelParam[] = [];
  for (const [name, type] of Object.entries(definition.params)) {
    if (/^\d+$/.test(name)) {
      throw new InvalidArgumentError(`defineKernel(${definition.name}): parameter name '${name}' is numeric; numeric keys lose their declaration order`);
    }
    if (!PARAM_TYPES.has(type)) {
      throw new InvalidArgumentError(`defineKernel(${definition.name}): parameter '${name}' has unknown type '${String(type)}' (use ${[...PARAM_TYPES].join(', ')})`);
    }
    paramList.push({ name, type });
  }
  if (definition.earlyStart !== undefined && !EARLY_STARTS.has(definition.earlyStart)) {
    throw new InvalidArgumentError(`defineKernel(${definition.name}): earlyStart must be 'wait-first' or 'per-launch', got ${String(definition.earlyStart)}`);
  }
  if (!definition.cuda && !definition.cpu) {
    throw new InvalidArgumentError(`defineKernel(${definition.name}): give a cuda entry, a cpu implementation, or both`);
  }
  return Object.freeze({ ...definition, paramList: Object.freeze(paramList) });
}

/** Names a fatbin shipped by a package: `defineKernelModule('gdn', new URL('./kernels/gdn.fatbin', import.meta.url))`. */
export function defineKernelModule(name: string, fatbin: string | URL): KernelModule {
  const path = fatbin instanceof URL ? fileURLToPath(fatbin) : fatbin;
  return Object.freeze({ name, fatbin: path });
}

const I32_MIN = -(2 ** 31);
const I32_MAX = 2 ** 31 - 1;
const U32_MAX = 2 ** 32 - 1;
const I64_MIN = -(2n ** 63n);
const I64_MAX = 2n ** 63n - 1n;
const U64_MAX = 2n ** 64n - 1n;

/** Checks a launch's arguments against the kernel's parameters; throws naming the parameter. */
export function validateKernelArgs<P extends KernelParams>(kernel: Kernel<P>, args: Readonly<Record<string, unknown>>): void {
  for (const { name, type } of kernel.paramList) {
    const v = args[name];
    const bad = (why: string): never => {
      throw new InvalidArgumentError(`launch ${kernel.name}: argument '${name}' (${type}) ${why}, got ${typeof v === 'bigint' ? `${v}n` : String(v)}`);
    };
    switch (type) {
      case 'ptr':
      case 'u64':
        if (typeof v !== 'bigint') bad('must be a bigint');
        if ((v as bigint) < 0n || (v as bigint) > U64_MAX) bad('is out of range');
        break;
      case 'i64':
        if (typeof v !== 'bigint') bad('must be a bigint');
        if ((v as bigint) < I64_MIN || (v as bigint) > I64_MAX) bad('is out of range');
        break;
      case 'i32':
        if (!Number.isInteger(v) || (v as number) < I32_MIN || (v as number) > I32_MAX) bad('must be a 32-bit signed integer');
        break;
      case 'u32':
        if (!Number.isInteger(v) || (v as number) < 0 || (v as number) > U32_MAX) bad('must be a 32-bit unsigned integer');
        break;
      case 'f32':
      case 'f64':
        if (typeof v !== 'number') bad('must be a number');
        break;
    }
  }
  if (Object.keys(args).length !== kernel.paramList.length) {
    const known = new Set(kernel.paramList.map((p) => p.name));
    const extra = Object.keys(args).filter((k) => !known.has(k));
    if (extra.length) throw new InvalidArgumentError(`launch ${kernel.name}: unknown argument(s) ${extra.join(', ')}`);
  }
}

/**
 * Whether a launch starts early: its `earlyStart` (LaunchConfig), or where it says nothing its
 * kernel's declaration ('wait-first' kernels do). Anything but a boolean is refused, and true for a
 * kernel that does not declare `earlyStart` (it does not wait for the kernel before it).
 */
export function toEarlyStart(kernel: Kernel<any>, earlyStart: unknown, call: string): boolean {
  if (earlyStart === undefined) return kernel.earlyStart === 'wait-first';
  if (typeof earlyStart !== 'boolean') throw new InvalidArgumentError(`${call}: earlyStart must be a boolean, got ${String(earlyStart)}`);
  if (earlyStart && kernel.earlyStart === undefined) {
    throw new InvalidArgumentError(
      `${call}: ${kernel.name} is launched with earlyStart but does not declare earlyStart: it would read the previous kernel's output before that kernel ends. ` +
        "Begin the kernel with the wait (griddepcontrol.wait) and declare earlyStart: 'wait-first' in its defineKernel, or launch it without earlyStart",
    );
  }
  return earlyStart;
}

/** Normalises a grid or block size to three positive integers. */
export function toDims(d: number | readonly number[], what: string): Dims {
  if (typeof d !== 'number' && (d.length < 1 || d.length > 3)) throw new InvalidArgumentError(`${what} must have 1 to 3 dimensions, got [${d.join(', ')}]`);
  const a = typeof d === 'number' ? [d, 1, 1] : [d[0] ?? 1, d[1] ?? 1, d[2] ?? 1];
  for (const x of a) {
    if (!Number.isInteger(x) || x < 1) throw new InvalidArgumentError(`${what} must be positive integers, got [${a.join(', ')}]`);
  }
  return [a[0]!, a[1]!, a[2]!];
}
