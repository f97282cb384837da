// Dev-only: kernels/gdn-chunk-rowwise.cu in the CPU thread emulator (build.sh).
#include <functional>
#include "cuda_emu2.h"
#include "../../kernels/gdn-chunk-rowwise.cu"
#include <map>
#include <string>
struct Entry;
static std::map<std::string, struct Entry> kernel_table();
#include "emu2_main.inc"
static std::map<std::string, Entry> kernel_table() { return {{"gdn_chunk_rowwise", entry(gdn_chunk_rowwise)}}; }
