// The device a whole-model bench runs on: --backend cuda (with the copy and GEMM ceilings measured
// in the same run, logged to stderr) or cpu (no ceilings: the figures check the script only).
export async function benchDevice(backend) {
  if (backend !== 'cuda') return { gpu: new (await import('@metrale/cpu-backend')).CpuBackend(), ceilings: undefined };
  const { CudaBackend, measureCeilings } = await import('@metrale/cuda-backend');
  const gpu = CudaBackend.create();
  return { gpu, ceilings: measureCeilings(gpu, { log: (l) => console.error(l) }) };
}
