// Scalar reference kernels for Multi-head Latent Attention (docs/model-spec.md §3.2, docs/deepseek.md
// §B): RoPE (interleaved for MLA, half-split for the DSA indexer) with DeepSeek-V3 YaRN, the expanded
// (MHA) mode, the absorbed (MQA over the latent cache) mode, and its sparse (DSA top-k) variant.
//
// Names: H heads, Dn = qk_nope_head_dim, Dr = qk_rope_head_dim, Dv = v_head_dim, L = kv_lora_rank.
// Layouts:
//   q            f32 [T, H, Dn+Dr]   per head [q_nope | q_pe] (MLA puts rope LAST)
//   latent cache f32 [S, L+Dr]       per token [c_kv (after kv_a_layernorm) | k_pe (after RoPE)]
//   kv_b weight  f32 [H*(Dn+Dv), L]  HF kv_b_proj.weight; rows h*(Dn+Dv)+[0,Dn) are W_UK_h, the next Dv
//                                    rows are W_UV_h
// Causality: T queries are the LAST T of the S keys, so query t (0-based) sees keys s <= S-T+t.
// Softmax scale: the caller passes (Dn+Dr)^-0.5 * yarn_softmax_mscale()^2 in BOTH modes; it is never
// (L+Dr)^-0.5 in the absorbed mode (trap 5 of the reference note).
#pragma once

#include <cstdint>

namespace moxi::kernels::ref {

// rope_theta and rope_scaling of an HF config (DeepSeek-V3 YaRN). factor <= 1 means plain RoPE.
struct YarnConfig {
  double theta = 10000.0;                 // rope_theta
  double factor = 1.0;                    // rope_scaling.factor
  double original_max_position = 4096.0;  // rope_scaling.original_max_position_embeddings
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 1.0;          // rope_scaling.mscale
  double mscale_all_dim = 0.0;  // rope_scaling.mscale_all_dim; 0 = absent
};

// yarn_get_mscale of DeepSeek-V3 / vLLM: 1 for scale <= 1, else 0.1 * mscale * ln(scale) + 1.
double yarn_get_mscale(double scale, double mscale);
// Multiplier of cos/sin: yarn_get_mscale(f, mscale) / yarn_get_mscale(f, mscale_all_dim) (vLLM
// DeepseekScalingRotaryEmbedding; 1.0 for DeepSeek-V3). 1 without YaRN.
double yarn_attention_factor(const YarnConfig& cfg);
// m such that the softmax scale is multiplied by m^2: yarn_get_mscale(f, mscale_all_dim) (HF / vLLM
// DeepseekV2Attention; 1.36889 for DeepSeek-V3). 1 without YaRN.
double yarn_softmax_mscale(const YarnConfig& cfg);

// Inverse frequencies theta^(-2i/R), i < R/2, with YaRN interpolation when factor > 1 (DeepSeek-V3
// inference/model.py precompute_freqs_cis): correction range low = floor(d(beta_fast)), high =
// ceil(d(beta_slow)), d(r) = R ln(orig / (2 pi r)) / (2 ln theta), clamped to [0, R-1]; pairs below low
// keep their frequency, pairs above high are divided by factor, a linear ramp in between. Kept in fp64:
// a float frequency is off by up to 6e-8 relative, which at position 1M turns into 0.06 rad.
void rope_inv_freq(const YarnConfig& cfg, int64_t rope_dim,
                   double* inv_freq);  // f64 [rope_dim/2]

// cos/sin tables: angle = position * inv_freq (in fp64), times attention_factor.
void rope_cos_sin(const int64_t* positions,  // i64 [T]
                  const double* inv_freq,    // f64 [rope_dim/2]
                  double attention_factor,   // yarn_attention_factor(cfg), 1 without YaRN
                  float* cos,                // f32 [T, rope_dim/2]
                  float* sin,                // f32 [T, rope_dim/2]
                  int64_t T, int64_t rope_dim);

enum class RopeLayout {
  kInterleaved,  // pairs (x[2i], x[2i+1]) rotated by angle i: MLA (GPT-J style, DeepSeek view_as_complex)
  kHalfSplit,    // pairs (x[i], x[i+R/2]): the DSA indexer (NeoX / rotate-half style)
};

// Rotates, in place, the rope slice of n vectors per token. Element i of the slice of (token t, vector j)
// is x[t*token_stride + j*vec_stride + i], i < rope_dim, so a slice inside a wider row is addressed by
// offsetting x (q: x = q + Dn, token_stride H*(Dn+Dr), vec_stride Dn+Dr; latent k_pe: x = latent + L,
// token_stride L+Dr, n 1; indexer q: x = q_I, vec_stride D_I, rope dims first).
void rope_apply(float* x,          // f32 [T, n, ...] as described
                const float* cos,  // f32 [T, rope_dim/2]
                const float* sin,  // f32 [T, rope_dim/2]
                int64_t T, int64_t n, int64_t token_stride, int64_t vec_stride, int64_t rope_dim,
                RopeLayout layout);

// Causal multi-head softmax attention with separate qk and v widths (the expanded MLA mode, DeepSeek-V3
// model.py attn_impl "naive"). o must not alias the inputs.
void attention_causal(const float* q,  // f32 [T, H, Dk]
                      const float* k,  // f32 [S, H, Dk]
                      const float* v,  // f32 [S, H, Dv]
                      float* o,        // f32 [T, H, Dv]
                      int64_t T, int64_t S, int64_t H, int64_t Dk, int64_t Dv, float scale);

// Expanded-mode keys and values from the latent cache: kv = c_kv W_kv_b^T per head, k = [k_nope | k_pe]
// (k_pe shared by all heads), v as is.
void mla_expand_kv(const float* latent,  // f32 [S, L+Dr]
                   const float* wkv_b,   // f32 [H*(Dn+Dv), L]
                   float* k,             // f32 [S, H, Dn+Dr]
                   float* v,             // f32 [S, H, Dv]
                   int64_t S, int64_t H, int64_t Dn, int64_t Dr, int64_t Dv, int64_t L);

// Absorbed query: q_lat_h = [W_UK_h^T q_nope_h | q_pe_h] (DeepSeek-V3 model.py attn_impl "absorb").
void mla_absorb_q(const float* q,      // f32 [T, H, Dn+Dr]
                  const float* wkv_b,  // f32 [H*(Dn+Dv), L]
                  float* q_lat,        // f32 [T, H, L+Dr]
                  int64_t T, int64_t H, int64_t Dn, int64_t Dr, int64_t Dv, int64_t L);

// Dense causal MQA over the latent cache: score = scale * q_lat_h . latent_s (576-wide key), value =
// c_kv_s (first L of the row), o_lat_h = sum_s softmax(score) c_kv_s.
void mla_attention_absorbed(const float* q_lat,   // f32 [T, H, L+Dr]
                            const float* latent,  // f32 [S, L+Dr]
                            float* o_lat,         // f32 [T, H, L]
                            int64_t T, int64_t S, int64_t H, int64_t L, int64_t Dr, float scale);

// Sparse (DSA) variant: query t attends only to latent rows indices[t, :], entries -1 skipped (padding);
// the softmax runs over the selected set only. No causal mask is applied: indices from indexer_topk are
// causal by construction. Duplicate indices count twice (indexer_topk never emits them). A row with no
// valid index yields zeros. Every index must be -1 or in [0, S).
void mla_attention_absorbed_sparse(const float* q_lat,      // f32 [T, H, L+Dr]
                                   const float* latent,     // f32 [S, L+Dr]
                                   const int32_t* indices,  // i32 [T, topk], -1 padded
                                   float* o_lat,            // f32 [T, H, L]
                                   int64_t T, int64_t S, int64_t H, int64_t L, int64_t Dr, int64_t topk,
                                   float scale);

// W_UV after attention: o_h = W_UV_h o_lat_h.
void mla_unabsorb_o(const float* o_lat,  // f32 [T, H, L]
                    const float* wkv_b,  // f32 [H*(Dn+Dv), L]
                    float* o,            // f32 [T, H, Dv]
                    int64_t T, int64_t H, int64_t Dn, int64_t Dv, int64_t L);

}  // namespace moxi::kernels::ref
