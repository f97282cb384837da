// Dev-only: kernels/gdn-verify.cu (the two-kernel verify) in the CPU thread emulator (build.sh).
#include <functional>
#include "cuda_emu2.h"
#include "gdn-emu-smem.h"
#include "../../kernels/gdn-verify.cu"
#include <map>
#include <string>
struct Entry;
static std::map<std::string, struct Entry> kernel_table();
#include "emu2_main.inc"
static std::map<std::string, Entry> kernel_table() {
  return {{"gdn_verify_prep", entry(gdn_verify_prep)}, {"gdn_verify_state", entry(gdn_verify_state)}};
}
