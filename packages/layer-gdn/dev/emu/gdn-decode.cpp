// Dev-only: kernels/gdn-decode.cu (the two-kernel decode) in the CPU thread emulator (build.sh).
#include <functional>
#include "cuda_emu2.h"
#include "gdn-emu-smem.h"
#include "../../kernels/gdn-decode.cu"
#include <map>
#include <string>
struct Entry;
static std::map<std::string, struct Entry> kernel_table();
#include "emu2_main.inc"
static std::map<std::string, Entry> kernel_table() {
  return {{"gdn_decode_prep", entry(gdn_decode_prep)}, {"gdn_decode_state", entry(gdn_decode_state)}, {"gdn_decode_state_plain", entry(gdn_decode_state_plain)}, {"gdn_fold_state", entry(gdn_fold_state)}};
}
