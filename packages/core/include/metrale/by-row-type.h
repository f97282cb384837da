// METRALE_BY_ROW_TYPE: a kernel's dispatch on its row type's dtype code. Preprocessor only (it names
// ::metrale::kF32 / kBF16 / kF16, bf16, f16 and __trap where it expands), so <metrale/elements.cuh>
// and the CPU emulator (tools/cuda-emu/cuda-emu.h) share this one definition.
#pragma once

/**
 * Calls fn<T>(args…) with T the row type of dtype code `code` (0 f32, 1 bf16, 2 f16; the arguments
 * may name T); traps on any other code, as the CPU twins throw. For kernels that pick their row
 * type per launch (one symbol serves every type).
 */
#define METRALE_BY_ROW_TYPE(code, fn, ...) \
  do {                                     \
    switch (code) {                        \
      case ::metrale::kF32: {              \
        using T = float;                   \
        fn<T>(__VA_ARGS__);                \
      } break;                             \
      case ::metrale::kBF16: {             \
        using T = ::metrale::bf16;         \
        fn<T>(__VA_ARGS__);                \
      } break;                             \
      case ::metrale::kF16: {              \
        using T = ::metrale::f16;          \
        fn<T>(__VA_ARGS__);                \
      } break;                             \
      default: __trap();                   \
    }                                      \
  } while (0)
