import { MemoryWeightSource, SeededRandom, tensorOf } from '@metrale/core';

/** A small config and random weights for the sliding-window layer. */
export function exampleSetup(seed = 1, hidden = 16, window = 4) {
  const random = new SeededRandom(seed);
  const gain = Float32Array.from({ length: hidden }, () => 0.5 + random.float());
  return {
    config: { hidden_size: hidden, sliding_window: window },
    weights: new MemoryWeightSource('example weights', [tensorOf('gain', gain, [hidden])]),
    gain,
  };
}
