// Dev-only: the dynamic shared memory of the fast / pipe / decode kernels (gdn-fast-layout.cuh
// dyn_smem) in the thread emulator (cuda_emu2.h): the CTA's shared memory, less the emulator's
// 64-byte guard.
#pragma once
inline float* gdn_emu_dyn_smem() { return reinterpret_cast<float*>(emu::cta().smem.data()); }
inline unsigned gdn_emu_dyn_smem_bytes() { return (unsigned)(emu::cta().smem.size() - 64); }
#define GDN_EMU 1
