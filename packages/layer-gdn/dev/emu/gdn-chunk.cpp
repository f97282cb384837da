// Dev-only: kernels/gdn-chunk.cu in the CPU thread emulator (build.sh).
#include <functional>
#include "cuda_emu2.h"
#define GDN_EMU 1
#include "../../kernels/gdn-chunk.cu"
#include <map>
#include <string>
struct Entry;
static std::map<std::string, struct Entry> kernel_table();
#include "emu2_main.inc"
static std::map<std::string, Entry> kernel_table() {
  return {{"gdn_prefill_wy", entry(gdn_prefill_wy)}, {"gdn_prefill_wy_x3", entry(gdn_prefill_wy_x3)},
          {"gdn_prefill_scan", entry(gdn_prefill_scan)}, {"gdn_prefill_scan_x3", entry(gdn_prefill_scan_x3)},
          {"gdn_prefill_scan_c4", entry(gdn_prefill_scan_c4)}, {"gdn_prefill_scan_c4_x3", entry(gdn_prefill_scan_c4_x3)},
          {"gdn_prefill_norm", entry(gdn_prefill_norm)}};
}
