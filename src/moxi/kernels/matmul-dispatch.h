// Dense matmul for the engine's f32 or BF16-stored weights: y = x W^T (+ bias), W [N, K] as HF stores it.
// The variant is chosen once by CPUID (MOXI_KERNELS=ref forces the scalar reference); the fast one runs on
// the global thread pool with weight rows split statically over threads, so results do not depend on the
// schedule. Also the per-thread switch that lets one process time the reference path next to the fast one.
//
// Numerics against ref::matmul / ref::matmul_bf16 (tests/kernels/matmul-fast-test.cpp):
//   REF     the reference itself (bit-identical).
//   AVX512  weights widened to f32 in registers (exact), exact fp32 products, FMA accumulation in 16 lanes
//           then a tree reduction: only the fp32 summation order differs, |err| <= 2 (K+2) 2^-24 sum|x w|.
#pragma once

#include <cstdint>

namespace moxi::kernels {

enum class matmul_variant : uint8_t { REF, AVX512 };

const char* to_string(matmul_variant v);
bool matmul_supported(matmul_variant v);

// The best supported variant, chosen once per process; MOXI_KERNELS=ref selects REF.
matmul_variant matmul_best_variant();

// Whether callers on this thread should take fast paths: the process default is not REF and no
// ref_kernels_scope is active on this thread. Layers check it so one loaded model can run either path.
bool fast_kernels();

// While alive, fast_kernels() is false on the constructing thread (benchmarks time ref and fast in one run).
class ref_kernels_scope {
 public:
  ref_kernels_scope();
  ~ref_kernels_scope();
  ref_kernels_scope(const ref_kernels_scope&) = delete;
  ref_kernels_scope& operator=(const ref_kernels_scope&) = delete;
};

// y f32 [T, N] = x f32 [T, K] . W^T (+ bias f32 [N] or nullptr). y must not alias x or w. With
// fast_kernels() false (or variant REF) this is exactly ref::matmul / ref::matmul_bf16.
void matmul(const float* x, const float* w, const float* bias, float* y, int64_t T, int64_t N, int64_t K);
void matmul_bf16(const float* x, const uint16_t* w, const float* bias, float* y, int64_t T, int64_t N,
                 int64_t K);

// The same with an explicit variant (tests); throws moxi::error if the CPU does not support it.
void matmul(const float* x, const float* w, const float* bias, float* y, int64_t T, int64_t N, int64_t K,
            matmul_variant v);
void matmul_bf16(const float* x, const uint16_t* w, const float* bias, float* y, int64_t T, int64_t N,
                 int64_t K, matmul_variant v);

}  // namespace moxi::kernels
