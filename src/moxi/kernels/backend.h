// The kernel backend contract (docs/kernels.md "Backends"): every op the model needs, as virtual functions
// of one object. The base class implements each op with the scalar reference (kernels/ref/), so it is the
// reference backend; a fast backend overrides the ops it has its own code for, says which with supports(),
// owns the weight layouts it packs at load and its scratch, and splits its ops over the thread pool itself.
// The model calls kernels::active() and nothing else: which backend runs is chosen once per process
// (MOXI_KERNELS, CPUID; backend.cpp is the only place that reads them) and can be overridden per thread with
// a backend_scope (tests, benchmarks timing the reference next to the fast path on one loaded model).
//
// Layouts and shapes of every op are those of the reference function of the same name (kernels/ref/*.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "moxi/base/mx.h"
#include "moxi/kernels/ref/mla.h"
#include "moxi/kernels/ref/moe.h"
#include "moxi/kernels/ref/mxfp4.h"

namespace moxi::kernels {

using ref::act_quant;

// The ops of the contract, for supports() and the op tests.
enum class op : uint8_t {
  matmul,          // dense y = x W^T, W f32 or bf16 (wformat)
  matmul_mxfp4,    // y = q(x) W^T, W MXFP4 (wformat::MXFP4)
  fake_quantize,   // MX activation fake-quant
  norms,           // rms_norm, layer_norm, l2norm, gated_rms_norm
  elementwise,     // sigmoid, swiglu, mul_sigmoid
  rope,            // rope_cos_sin, rope_apply
  kda_conv,        // causal_conv1d_silu and the decay gates
  kda_recurrent,   // one step per token (decode)
  kda_chunked,     // chunked prefill
  mla_absorb,      // mla_absorb_q, mla_unabsorb_o
  mla_attention,   // dense causal absorbed attention
  mla_sparse,      // DSA sparse absorbed attention
  indexer_scores,  // DSA lightning indexer scores
  indexer_topk,    // DSA top-k selection
  swa_attention,   // sliding-window (GQA) attention
  moe_route,       // router
  moe_experts,     // routed expert execution
};
const char* to_string(op o);

// Weight storage formats of the matmul ops.
enum class wformat : uint8_t { F32, BF16, MXFP4 };

// A weight layout a backend made at load (opaque to everyone else; a backend recognizes its own).
class packed_weights {
 public:
  virtual ~packed_weights() = default;
  virtual size_t bytes() const = 0;
};

// One routed-expert matrix W [N, K] (y = x W^T): f32, or MXFP4 blocks/scales viewed in the checkpoint
// mapping (valid while the checkpoint lives), optionally with the loading backend's packed layout.
struct expert_matrix {
  int64_t N = 0, K = 0;
  std::vector<float> f32;           // f32 [N, K] when not MXFP4
  const uint8_t* blocks = nullptr;  // u8 [N, K/32, 16] when MXFP4
  const uint8_t* scales = nullptr;  // u8 [N, K/32]
  // The loading backend's layout of the same weights (null for the reference); shared so the struct stays
  // copyable. A backend that does not recognize it runs the reference on blocks/scales.
  std::shared_ptr<const packed_weights> packed;
  bool mxfp4() const { return blocks != nullptr; }
};

// One expert's three matrices (SwiGLU: down(silu(gate x) * up x)).
struct expert_weights {
  expert_matrix gate, up, down;
};

// The routed experts of one MoE layer for T tokens: out[t] = sum over (e, w) in the token's routes of
// w * expert_e(x[t]), summed in expert order, then token order within an expert, the same for every split.
struct moe_batch {
  const float* x;  // f32 [T, W] expert inputs
  int64_t T, W, F;
  std::span<const expert_weights> experts;                            // [E]
  const std::vector<std::vector<std::pair<int64_t, float>>>* routed;  // [E]: (token, weight) in token order
  act_quant act;  // activation fake-quant of the MXFP4 GEMMs
  float* out;     // f32 [T, W], overwritten
};

// The KDA cores of several sequences in one call (rows of all sequences stacked, D = K = V): sequence i
// owns rows [begin, begin + T) of q, k, v, g, beta, o and its recurrent state f32 [H, D, D]; T == 1 runs
// the recurrent step, T > 1 the chunked prefill.
struct kda_seq {
  int64_t begin, T;
  float* state;
};
struct kda_batch {
  const float *q, *k, *v, *g, *beta;  // f32 [R, H, D] (beta [R, H])
  float scale;
  float* o;  // f32 [R, H, D]
  int64_t H, D;
  std::span<const kda_seq> seqs;
};

class backend {
 public:
  virtual ~backend() = default;

  // The name MOXI_KERNELS and MOXI_TEST_BACKEND select it by ("ref", "avx512", ...).
  virtual const char* name() const { return "ref"; }
  // Whether this machine can run it (CPU features); the reference always can.
  virtual bool available() const { return true; }
  // Whether it runs `o` (on weights stored as `f`, for the matmuls) with its own code; ops it does not
  // support run the base class's reference code.
  virtual bool supports(op o, wformat f = wformat::F32) const;

  // ---- weight storage, made once at load ----
  // Whether dense BF16 checkpoint weights stay BF16 (matmul_bf16) instead of being widened to f32.
  virtual bool keeps_bf16_weights() const { return false; }
  // Whether those BF16 weights are kept in 16-row panels (pack_bf16_panels, for matmul_bf16_panels) rather
  // than as the checkpoint's rows.
  virtual bool packs_bf16_panels() const { return false; }
  // Its layout of an MXFP4 matrix (blocks u8 [N, K/32, 16], scales u8 [N, K/32]), or null (reference).
  virtual std::shared_ptr<const packed_weights> pack_mxfp4(const uint8_t* blocks, const uint8_t* scales,
                                                           int64_t N, int64_t K) const;
  // Its layout of W_UV for mla_unabsorb_o (from kv_b f32 [H*(Dn+Dv), L]), or empty (reference).
  virtual std::vector<float> pack_mla_uv(const float* wkv_b, int64_t H, int64_t Dn, int64_t Dv,
                                         int64_t L) const;

  // ---- matmuls: y f32 [T, N] = x f32 [T, K] . W^T (+ bias f32 [N] or null); y must not alias x ----
  virtual void matmul(const float* x, const float* w, const float* bias, float* y, int64_t T, int64_t N,
                      int64_t K) const;
  virtual void matmul_bf16(const float* x, const uint16_t* w, const float* bias, float* y, int64_t T,
                           int64_t N, int64_t K) const;
  // W bf16 in 16-row panels (ref::bf16_panel_index); any backend runs it.
  virtual void matmul_bf16_panels(const float* x, const uint16_t* w, const float* bias, float* y, int64_t T,
                                  int64_t N, int64_t K) const;
  // W MXFP4 (w.mxfp4()), x fake-quantized per act as ref::matmul_mxfp4 does.
  virtual void matmul_mxfp4(const float* x, const expert_matrix& w, float* y, int64_t T, act_quant act) const;
  // Any expert matrix: matmul_mxfp4, or the f32 matmul on x fake-quantized the same way (so both storages
  // compute the same function of the weights' values).
  void matmul_expert(const float* x, const expert_matrix& w, float* y, int64_t T, act_quant act) const;
  // mx::fake_quantize(f, x, n, out): n % 32 == 0, out may alias x.
  virtual void fake_quantize(mx::elem_format f, const float* x, size_t n, float* out) const;

  // ---- norms and elementwise ----
  virtual void rms_norm(const float* x, const float* w, float* y, int64_t rows, int64_t D, float eps) const;
  virtual void layer_norm(const float* x, const float* w, const float* b, float* y, int64_t rows, int64_t D,
                          float eps) const;
  virtual void l2norm(const float* x, float* y, int64_t rows, int64_t D) const;
  virtual void gated_rms_norm(const float* x, const float* gate, const float* w, float* y, int64_t rows,
                              int64_t D, float eps) const;
  virtual void sigmoid(const float* x, float* y, int64_t n) const;
  virtual void swiglu(const float* gate, const float* up, float* y, int64_t n) const;
  virtual void mul_sigmoid(const float* x, const float* gate, float* y, int64_t n) const;

  // ---- RoPE ----
  virtual void rope_cos_sin(const int64_t* pos, const double* inv_freq, double attention_factor, float* cos,
                            float* sin, int64_t T, int64_t R) const;
  virtual void rope_apply(float* x, const float* cos, const float* sin, int64_t T, int64_t n,
                          int64_t token_stride, int64_t vec_stride, int64_t R, ref::RopeLayout layout) const;

  // ---- KDA ----
  virtual void causal_conv1d_silu(const float* x, const float* w, float* state, float* y, int64_t T,
                                  int64_t C, int64_t W) const;
  virtual void kda_gate_softplus(const float* graw, const float* A_log, const float* dt_bias, float* g,
                                 int64_t T, int64_t H, int64_t K) const;
  virtual void kda_gate_lower_bound(const float* graw, const float* A_log, const float* dt_bias, float lb,
                                    float* g, int64_t T, int64_t H, int64_t K) const;
  virtual void kda_recurrent(const float* q, const float* k, const float* v, const float* g,
                             const float* beta, float scale, float* state, float* o, int64_t T, int64_t H,
                             int64_t K, int64_t V) const;
  virtual void kda_chunked(const float* q, const float* k, const float* v, const float* g, const float* beta,
                           float scale, float* state, float* o, int64_t T, int64_t H, int64_t K,
                           int64_t V) const;
  // Every sequence's core; the reference runs them one after the other, a fast backend may split the
  // (sequence, head) pairs over threads (heads are independent: bit-identical to the serial order).
  virtual void kda_cores(const kda_batch& b) const;

  // ---- MLA / DSA ----
  virtual void mla_absorb_q(const float* q, const float* wkv_b, float* q_lat, int64_t T, int64_t H,
                            int64_t Dn, int64_t Dr, int64_t Dv, int64_t L) const;
  // uv: pack_mla_uv of the backend that loaded the weights (may be empty); the reference reads wkv_b.
  virtual void mla_unabsorb_o(const float* o_lat, const float* wkv_b, std::span<const float> uv, float* o,
                              int64_t T, int64_t H, int64_t Dn, int64_t Dv, int64_t L) const;
  virtual void mla_attention_absorbed(const float* q_lat, const float* latent, float* o_lat, int64_t T,
                                      int64_t S, int64_t H, int64_t L, int64_t Dr, float scale) const;
  virtual void mla_attention_absorbed_sparse(const float* q_lat, const float* latent, const int32_t* indices,
                                             float* o_lat, int64_t T, int64_t S, int64_t H, int64_t L,
                                             int64_t Dr, int64_t topk, float scale) const;
  virtual void indexer_scores(const float* q, const uint8_t* k, const float* w, float* scores, int64_t T,
                              int64_t S, int64_t HI, int64_t D) const;
  virtual void indexer_topk(const float* scores, int32_t* indices, int64_t T, int64_t S, int64_t k) const;

  // ---- sliding-window attention (ref::sliding_window_attention) ----
  virtual void sliding_window_attention(const float* q, const float* k, const float* v, float* o, int64_t T,
                                        int64_t S, int64_t H, int64_t KVH, int64_t D, int64_t window,
                                        float scale) const;

  // ---- MoE ----
  virtual void moe_route(const float* logits, const float* bias, const ref::RouterConfig& cfg,
                         int32_t* experts, float* weights, int64_t T) const;
  // The reference runs the experts one after the other on the calling thread; a fast backend may split
  // them over threads (each expert's output is the same whichever thread computes it).
  virtual void moe_experts(const moe_batch& b) const;

 protected:
  // Shared bodies of kda_cores / moe_experts: serial, or split over the global thread pool by cost.
  void run_kda_cores(const kda_batch& b, bool parallel) const;
  void run_moe_experts(const moe_batch& b, bool parallel) const;
};

// Every registered backend, the reference first, then in order of preference (the last available one is
// the default).
std::span<const backend* const> backends();
// The registered backend of that name, or null.
const backend* find_backend(std::string_view name);
// The scalar reference.
const backend& reference();

// The process default, chosen once: the last available backend, or with MOXI_KERNELS=name the last
// available one at or before `name` in the registry (so an unsupported request falls back to the best
// below it); MOXI_KERNELS=ref gives the reference everywhere.
const backend& default_backend();

// The backend the calling thread's kernels run on: the innermost backend_scope's, else the default.
const backend& active();

// While alive, active() is `b` on the constructing thread (one loaded model can run either path).
class backend_scope {
 public:
  explicit backend_scope(const backend& b);
  ~backend_scope();
  backend_scope(const backend_scope&) = delete;
  backend_scope& operator=(const backend_scope&) = delete;

 private:
  const backend* prev_;
};

}  // namespace moxi::kernels
