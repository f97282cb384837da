// Kernels as the device sees them: each package's fatbin loaded once (cached by path), each
// kernel's function resolved once with its argument layout registered in C++ (cached per Kernel
// object), so that a launch only writes values.
import { existsSync, readFileSync } from 'node:fs';
import { DeviceError, type Kernel, type KernelModule } from '@metrale/core';
import { toDeviceError, withContext, type NativeDevice } from './addon.js';
import { layoutArgs, type ArgLayout } from './arg-packing.js';

export interface KernelPlan {
  readonly id: number;
  readonly layout: ArgLayout;
  readonly maxThreadsPerBlock: number;
}

export class KernelRegistry {
  readonly #native: NativeDevice;
  readonly #modules = new Map<string, number>();
  readonly #plans = new WeakMap<Kernel, KernelPlan>();

  constructor(native: NativeDevice) {
    this.#native = native;
  }

  plan(kernel: Kernel): KernelPlan {
    return this.#plans.get(kernel) ?? this.#register(kernel);
  }

  #register(kernel: Kernel): KernelPlan {
    if (!kernel.cuda) {
      throw new DeviceError(
        `launch ${kernel.name}`,
        `kernel '${kernel.name}' has no CUDA entry (defineKernel's cuda: { module, symbol }); it runs on the CPU backend only`,
      );
    }
    const { module, symbol } = kernel.cuda;
    const moduleId = this.#load(module, kernel.name);
    const layout = layoutArgs(kernel);
    let info;
    try {
      info = this.#native.registerKernel(moduleId, symbol, layout.offsets);
    } catch (error) {
      throw withContext(toDeviceError(error, `launch ${kernel.name}`), `in ${module.fatbin} (kernel ${kernel.name})`);
    }
    const plan = { id: info.id, layout, maxThreadsPerBlock: info.maxThreadsPerBlock };
    this.#plans.set(kernel, plan);
    return plan;
  }

  #load(module: KernelModule, kernelName: string): number {
    const cached = this.#modules.get(module.fatbin);
    if (cached !== undefined) return cached;
    if (!existsSync(module.fatbin)) {
      throw new DeviceError(
        `launch ${kernelName}`,
        `fatbin ${module.fatbin} (module '${module.name}') not found: its package was built without nvcc, so its CUDA kernels ` +
          'were not compiled; install the CUDA toolkit and rebuild that package (its build runs metrale-build-kernels), or use the CPU backend',
      );
    }
    let id: number;
    try {
      id = this.#native.loadModule(readFileSync(module.fatbin));
    } catch (error) {
      throw withContext(toDeviceError(error, `launch ${kernelName}`), `(loading ${module.fatbin} for kernel ${kernelName})`);
    }
    this.#modules.set(module.fatbin, id);
    return id;
  }
}
