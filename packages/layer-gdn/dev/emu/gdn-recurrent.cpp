// Dev-only: kernels/gdn-recurrent.cu and gdn-fold.cu (the fast and pipe decode / verify / fold
// kernels, smem source in its plain-load mode) in the CPU thread emulator (build.sh).
#include <functional>
#include "cuda_emu2.h"
#include "gdn-emu-smem.h"
#include "../../kernels/gdn-recurrent.cu"
#include "../../kernels/gdn-fold.cu"
#include <map>
#include <string>
struct Entry;
static std::map<std::string, struct Entry> kernel_table();
#include "emu2_main.inc"
static std::map<std::string, Entry> kernel_table() {
  return {{"gdn_recurrent", entry(gdn_recurrent)},           {"gdn_recurrent_smem", entry(gdn_recurrent_smem)},
          {"gdn_recurrent_stream", entry(gdn_recurrent_stream)}, {"gdn_recurrent_legacy", entry(gdn_recurrent_legacy)},
          {"gdn_recurrent_pipe", entry(gdn_recurrent_pipe)},   {"gdn_recurrent_split", entry(gdn_recurrent_split)},
          {"gdn_fold_split", entry(gdn_fold_split)},           {"gdn_recurrent_persist", entry(gdn_recurrent_persist)},
          {"gdn_fold_persist", entry(gdn_fold_persist)},           {"gdn_fold", entry(gdn_fold)},
          {"gdn_fold_smem", entry(gdn_fold_smem)},             {"gdn_fold_stream", entry(gdn_fold_stream)},
          {"gdn_fold_legacy", entry(gdn_fold_legacy)},         {"gdn_fold_pipe", entry(gdn_fold_pipe)}};
}
