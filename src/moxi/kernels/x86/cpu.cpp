// CPUID/XGETBV feature detection. Compiled without -m flags: it must run on any x86-64 CPU, so it only
// uses cpuid.h and inline xgetbv, never a wide-vector instruction.
#include "moxi/kernels/x86/cpu.h"

#include <cstdint>
#include <string>

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace moxi::kernels::x86 {
namespace {

#if defined(__x86_64__)
uint64_t xgetbv0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

// Linux >= 5.16 keeps AMX tile data (XTILEDATA, xfeature 18) off until a process asks for it; without
// the grant the first tile instruction faults.
bool request_amx_permission() {
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}
#endif

cpu_features detect() {
  cpu_features f;
#if defined(__x86_64__)
  uint32_t a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = (c >> 27) & 1;
  if (!osxsave) return f;
  const uint64_t xcr0 = xgetbv0();
  const bool os_avx = (xcr0 & 0x6) == 0x6;                 // SSE + AVX state
  const bool os_avx512 = os_avx && (xcr0 & 0xE0) == 0xE0;  // opmask, ZMM_Hi256, Hi16_ZMM
  const bool os_amx = (xcr0 & 0x60000) == 0x60000;         // XTILECFG + XTILEDATA
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  const bool f512 = (b >> 16) & 1, dq = (b >> 17) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1;
  f.avx512 = os_avx512 && f512 && dq && bw && vl;
  f.avx512_vbmi = f.avx512 && ((c >> 1) & 1);
  f.avx512_vnni = f.avx512 && ((c >> 11) & 1);
  const bool amx_bf16 = (d >> 22) & 1, amx_tile = (d >> 24) & 1, amx_int8 = (d >> 25) & 1;
  uint32_t a1 = 0, b1 = 0, c1 = 0, d1 = 0;
  __cpuid_count(7, 1, a1, b1, c1, d1);
  f.avx512_bf16 = f.avx512 && ((a1 >> 5) & 1);
  if (amx_tile && os_amx && (amx_bf16 || amx_int8) && request_amx_permission()) {
    f.amx_bf16 = amx_bf16;
    f.amx_int8 = amx_int8;
  }
#endif
  return f;
}

}  // namespace

const cpu_features& cpu() {
  static const cpu_features f = detect();
  return f;
}

const char* cpu_features_string() {
  static const std::string s = [] {
    const cpu_features& f = cpu();
    std::string r;
    auto add = [&r](bool on, const char* name) {
      if (!on) return;
      if (!r.empty()) r += ' ';
      r += name;
    };
    add(f.avx512, "avx512");
    add(f.avx512_vnni, "avx512_vnni");
    add(f.avx512_bf16, "avx512_bf16");
    add(f.avx512_vbmi, "avx512_vbmi");
    add(f.amx_bf16, "amx_bf16");
    add(f.amx_int8, "amx_int8");
    return r.empty() ? std::string("scalar") : r;
  }();
  return s.c_str();
}

}  // namespace moxi::kernels::x86
