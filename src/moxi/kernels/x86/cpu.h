// x86 CPU features the fast kernels need, read once from CPUID and XGETBV (the OS must also save the
// wide registers), with the Linux permission request that AMX tile data needs before first use.
#pragma once

namespace moxi::kernels::x86 {

struct cpu_features {
  bool avx512 = false;       // AVX512 F + BW + VL + DQ, and the OS saves zmm/opmask state
  bool avx512_vnni = false;  // VPDPBUSD / VPDPWSSD
  bool avx512_bf16 = false;  // VDPBF16PS, VCVTNE2PS2BF16
  bool avx512_vbmi = false;  // VPERMB
  bool amx_bf16 = false;     // AMX-TILE + AMX-BF16, OS state enabled and arch_prctl permission granted
  bool amx_int8 = false;     // AMX-TILE + AMX-INT8, same conditions
};

// Detected on first call (thread-safe), then cached. On non-x86 builds everything is false.
const cpu_features& cpu();

// "avx512 avx512_vnni avx512_bf16 ..." for logs and benchmark headers.
const char* cpu_features_string();

}  // namespace moxi::kernels::x86
