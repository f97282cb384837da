/**
 * Every error metrale throws is one of these classes, so callers can branch on the type and users
 * get a message that says what went wrong and what to do.
 */
const BRAND = Symbol.for('metrale.error.classes');

export class MetraleError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    // The class names along the chain, so `instanceof` holds across two copies of this module
    // (a plugin bundling its own @metrale/core, or sources and dist loaded side by side).
    const names: string[] = [];
    for (let c: unknown = new.target; typeof c === 'function' && c !== Error; c = Object.getPrototypeOf(c)) names.push((c as { name: string }).name);
    Object.defineProperty(this, BRAND, { value: names, enumerable: false });
  }

  static override [Symbol.hasInstance](value: unknown): boolean {
    const names = (value as Record<symbol, unknown> | null)?.[BRAND];
    if (Array.isArray(names)) return names.includes(this.name);
    return Function.prototype[Symbol.hasInstance].call(this, value);
  }
}

/** A backend call failed. `call` names the operation, `code` the driver's result name when there is one. */
export class DeviceError extends MetraleError {
  readonly call: string;
  readonly code: string | undefined;
  constructor(call: string, message: string, code?: string, options?: { cause?: unknown }) {
    super(code ? `${call} failed: ${code}: ${message}` : `${call}: ${message}`, options);
    this.call = call;
    this.code = code;
  }
}

/** A stream capture could not be turned into a graph (a forbidden call during capture, or the driver refused it). */
export class CaptureError extends MetraleError {
  readonly reason: string;
  constructor(reason: string, options?: { cause?: unknown }) {
    super(`graph capture failed: ${reason}`, options);
    this.reason = reason;
  }
}

/** A replayed step would write past the end of a host-tracked cache; thrown before anything is launched. */
export class ReplayRoomError extends MetraleError {
  readonly layer: string;
  readonly seqLen: number;
  readonly k: number;
  readonly capacity: number;
  constructor(layer: string, seqLen: number, k: number, capacity: number) {
    super(
      `${layer}: a step of ${k} row(s) at length ${seqLen} ends at ${seqLen + k}, past the cache capacity ${capacity}; ` +
        `finish or shorten the sequence, or create the layer with a larger maxSeqLen`,
    );
    this.layer = layer;
    this.seqLen = seqLen;
    this.k = k;
    this.capacity = capacity;
  }
}

/** A replayed step found host bookkeeping behind the driver's length: the layer lost track of its cache. */
export class ReplaySyncError extends MetraleError {}

/** A plugin is malformed, targets another contract version, or cannot be loaded. */
export class PluginError extends MetraleError {
  readonly plugin: string;
  constructor(plugin: string, message: string, options?: { cause?: unknown }) {
    super(`plugin ${plugin}: ${message}`, options);
    this.plugin = plugin;
  }
}

/** A plugin was built for another major version of the layer contract. */
export class SpecificationVersionError extends PluginError {
  readonly pluginVersion: string;
  readonly coreVersion: string;
  constructor(plugin: string, pluginVersion: string, coreVersion: string) {
    super(
      plugin,
      `implements layer contract ${pluginVersion}, but @metrale/core implements ${coreVersion}; ` +
        `install a version of ${plugin} built for contract ${coreVersion.split('.')[0]}.x`,
    );
    this.pluginVersion = pluginVersion;
    this.coreVersion = coreVersion;
  }
}

/** A call received an argument it cannot use; the message names the argument and the value. */
export class InvalidArgumentError extends MetraleError {}

/** A weights file, config or tensor is missing, misshapen or unreadable; the message names the file and the tensor or field. */
export class WeightsError extends MetraleError {
  readonly file: string | undefined;
  constructor(message: string, file?: string, options?: { cause?: unknown }) {
    super(file ? `${file}: ${message}` : message, options);
    this.file = file;
  }
}

/** A checkpoint's `model_type` has no registered adapter; the message names the supported ones. */
export class UnsupportedArchitectureError extends MetraleError {
  readonly modelType: string;
  readonly supported: readonly string[];
  constructor(modelType: string, supported: readonly string[], where?: string) {
    super(
      `${where ? `${where}: ` : ''}model_type ${JSON.stringify(modelType)} is not supported; ` +
        (supported.length ? `supported: ${supported.join(', ')}` : 'no architecture is registered') +
        '; a plugin may bring it: install or load the plugin whose architectures include it',
    );
    this.modelType = modelType;
    this.supported = supported;
  }
}

/** A layer fixture cannot be read or does not fit the plugin; the message names the file and field. */
export class FixtureError extends MetraleError {
  readonly file: string;
  constructor(file: string, message: string, options?: { cause?: unknown }) {
    super(`${file}: ${message}`, options);
    this.file = file;
  }
}

/** The conformance kit found a layer breaking the contract; `failures` lists each broken check. */
export class ConformanceError extends MetraleError {
  readonly failures: readonly { check: string; detail: string }[];
  constructor(layer: string, failures: readonly { check: string; detail: string }[]) {
    super(
      `${layer} fails ${failures.length} conformance check(s):\n` +
        failures.map((f) => `  - ${f.check}: ${f.detail}`).join('\n'),
    );
    this.failures = failures;
  }
}

/**
 * A model cannot fit the device: its weights, refused before any upload, or the weights with what
 * its layers keep beside them (the build ran out of memory; the cause is the driver's error).
 * `needBytes`: the weights' bytes (0 where not known); `deviceBytes`: what the device had for them.
 */
export class ModelFitError extends MetraleError {
  readonly needBytes: number;
  readonly deviceBytes: number;
  constructor(message: string, needBytes: number, deviceBytes: number, options?: { cause?: unknown }) {
    super(message, options);
    this.needBytes = needBytes;
    this.deviceBytes = deviceBytes;
  }
}

/**
 * The KV page pool has fewer free pages than a step needs; thrown before anything of the step is
 * written. The engine loop preempts sequences so that it never sees this; a caller driving the
 * step driver itself closes a sequence (or sizes the pool larger) and retries.
 */
export class KvCacheFullError extends MetraleError {
  constructor(
    readonly needPages: number,
    readonly availablePages: number,
    pages: number,
    pageSize: number,
  ) {
    super(
      `kv cache: the step needs ${needPages} more page(s) of ${pageSize} rows, but ${availablePages} of ${pages} are available; ` +
        'close (or preempt) a sequence first, or give the cache more memory',
    );
  }
}

/** The memory given to the KV cache cannot hold a single page; the message names the sizes. */
export class KvCacheSizeError extends MetraleError {}

/**
 * A tensor- or expert-parallel size that the model cannot be split by (a head count, an
 * intermediate size or the vocabulary that does not divide), or a parallel setup that cannot run;
 * the message names the config field, its value and the size.
 */
export class ParallelConfigError extends MetraleError {}
