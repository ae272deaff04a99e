// Dense matmul dispatch: variant choice (once), the per-thread ref switch, and static partitioning of the
// weight rows over the global thread pool (each thread writes disjoint columns of y).
#include "moxi/kernels/matmul-dispatch.h"

#include <cstdlib>
#include <string>

#include "moxi/base/error.h"
#include "moxi/base/thread-pool.h"
#include "moxi/kernels/ref/basic.h"
#include "moxi/kernels/x86/cpu.h"

namespace moxi::kernels {

#if defined(__x86_64__)
namespace x86 {
// kernels/x86/matmul-f32-avx512.cpp: output columns [n0, n1) for all T tokens.
void matmul_f32_avx512(const float* x, const float* w, const float* bias, float* y, int64_t T, int64_t N,
                       int64_t K, int64_t n0, int64_t n1);
void matmul_bf16w_avx512(const float* x, const uint16_t* w, const float* bias, float* y, int64_t T, int64_t N,
                         int64_t K, int64_t n0, int64_t n1);
}  // namespace x86
#endif

namespace {

thread_local int ref_scopes = 0;

matmul_variant choose_variant() {
  if (const char* env = std::getenv("MOXI_KERNELS"); env && std::string(env) == "ref")
    return matmul_variant::REF;
  return matmul_supported(matmul_variant::AVX512) ? matmul_variant::AVX512 : matmul_variant::REF;
}

void check(matmul_variant v) {
  if (!matmul_supported(v))
    throw error(std::string("dense matmul variant ") + to_string(v) + " is not supported on this CPU (" +
                x86::cpu_features_string() + ")");
}

// Multiply-adds per thread below which a pool hand-off costs more than the split saves (a few us against
// ~15k MACs/us of a cached AVX-512 row, docs/kernels-mxfp4.md "Thread-pool thresholds"): router, small KDA
// projections, every matmul of the tiny models.
constexpr int64_t kMinMacsPerThread = int64_t(1) << 16;

template <class Wt, class Kernel>
void run_fast(const float* x, const Wt* w, const float* bias, float* y, int64_t T, int64_t N, int64_t K,
              Kernel kernel) {
  if (T == 0 || N == 0) return;
  thread_pool::global().run_if(T * N * K, kMinMacsPerThread, [&](int tid, int nt) {
    const range r = split_range(N, tid, nt, 4);
    if (r.begin < r.end) kernel(x, w, bias, y, T, N, K, r.begin, r.end);
  });
}

}  // namespace

const char* to_string(matmul_variant v) {
  return v == matmul_variant::REF ? "ref" : "avx512";
}

bool matmul_supported(matmul_variant v) {
  return v == matmul_variant::REF || (v == matmul_variant::AVX512 && x86::cpu().avx512);
}

matmul_variant matmul_best_variant() {
  static const matmul_variant v = choose_variant();
  return v;
}

bool fast_kernels() {
  return ref_scopes == 0 && matmul_best_variant() != matmul_variant::REF;
}

ref_kernels_scope::ref_kernels_scope() {
  ++ref_scopes;
}
ref_kernels_scope::~ref_kernels_scope() {
  --ref_scopes;
}

void matmul(const float* x, const float* w, const float* bias, float* y, int64_t T, int64_t N, int64_t K,
            matmul_variant v) {
  check(v);
#if defined(__x86_64__)
  if (v == matmul_variant::AVX512) return run_fast(x, w, bias, y, T, N, K, x86::matmul_f32_avx512);
#endif
  ref::matmul(x, w, bias, y, T, N, K);
}

void matmul_bf16(const float* x, const uint16_t* w, const float* bias, float* y, int64_t T, int64_t N,
                 int64_t K, matmul_variant v) {
  check(v);
#if defined(__x86_64__)
  if (v == matmul_variant::AVX512) return run_fast(x, w, bias, y, T, N, K, x86::matmul_bf16w_avx512);
#endif
  ref::matmul_bf16(x, w, bias, y, T, N, K);
}

void matmul(const float* x, const float* w, const float* bias, float* y, int64_t T, int64_t N, int64_t K) {
  matmul(x, w, bias, y, T, N, K, fast_kernels() ? matmul_best_variant() : matmul_variant::REF);
}

void matmul_bf16(const float* x, const uint16_t* w, const float* bias, float* y, int64_t T, int64_t N,
                 int64_t K) {
  matmul_bf16(x, w, bias, y, T, N, K, fast_kernels() ? matmul_best_variant() : matmul_variant::REF);
}

}  // namespace moxi::kernels
