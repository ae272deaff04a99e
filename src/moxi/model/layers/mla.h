// The MLA / Gated DSA attention layer (docs/model-spec.md §3.2, docs/deepseek.md §A-C): weights, loader
// and the absorbed-mode forward (dense MQA over the latent cache, or DSA top-k sparse attention when the
// config has the lightning indexer), with the elementwise sigmoid output gate after W_UV.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "moxi/formats/model-config.h"
#include "moxi/model/cache.h"
#include "moxi/model/layers/weights.h"
#include "moxi/model/parallel.h"

namespace moxi::model {

struct indexer_weights {
  linear wq_b;                  // [HI*DI, q_lora_rank], reads the query latent c_Q
  std::vector<float> k_norm_w;  // f32 [DI] LayerNorm weight
  std::vector<float> k_norm_b;  // f32 [DI] LayerNorm bias
  // wk [DI, hidden] and weights_proj [HI, hidden] read x: they are parts of mla_weights::in_proj.
  // Under tensor parallelism the indexer is held whole by every rank of the tp group, and its scan over the
  // cached keys is split between them (indexer_topk_split); null without a layout.
  std::shared_ptr<const parallel_layout> parallel;
};

// The DSA top-k of T queries over S cached keys (query t sees keys s <= S-T+t), with the scan split over the
// ranks of g by key position: rank r scores its share [n_t r/n, n_t (r+1)/n) of query t's n_t visible keys,
// keeps the k best of them in kernels::ref::indexer_ranks_before's order, and an all-gather of those
// (score, position) candidates gives every rank all n shares; the k best of the union are the k best of the
// whole row. A key's score does not depend on which rank computes it (the backend's indexer_scores is bit
// for bit the reference's per key), so the rows equal ref::indexer_topk on the whole scores, bit for bit.
// Every rank of g calls it with equal arguments (the tp ranks hold the same queries and replicated caches).
// q f32 [T, HI, D], keys u8 [S, index_key_bytes(D)] (kernels/ref/dsa.h), w f32 [T, HI]; indices i32 [T, k],
// padded with -1.
void indexer_topk_split(const process_group& g, const float* q, const uint8_t* keys, const float* w,
                        int32_t* indices, int64_t T, int64_t S, int64_t HI, int64_t D, int64_t k);

// Queries scored per indexer call, and the most scores one call holds (32 MiB of f32): a long prompt's scan
// never holds a [T, S] matrix (256 queries up to 32K keys, 8 at 1M).
constexpr int64_t kIndexerQueryBlock = 256;
constexpr int64_t kIndexerScoreFloats = int64_t(8) << 20;

// Whether a query that sees `visible` keys splits the scan over `tp` ranks: once each rank's share holds more
// than k keys (before that every rank would keep all it scored, and the replicated scan is as cheap). The
// layer and moxi plan's communication figures both follow it.
inline bool indexer_scan_splits(int64_t visible, int64_t k, int tp) { return tp > 1 && visible > k * tp; }

// The projections of x in mla_weights::in_proj: q_a_proj [q_lora_rank, hidden] (q-LoRA) or q_proj
// [H*(Dn+Dr), hidden]; kv_a_proj_with_mqa [L+Dr, hidden]; the output gate g_proj [H*Dv, hidden]; the
// indexer's wk [DI, hidden] and weights_proj [HI, hidden].
enum mla_in : size_t { MLA_Q, MLA_KV, MLA_GATE, MLA_INDEX_K, MLA_INDEX_W, MLA_IN_PARTS };

struct mla_weights {
  // Every projection of x, stacked at load into one GEMV; in_part[p] is the stack's part index of projection
  // p (an mla_in), or -1 when this layer has none.
  stacked_linear in_proj;
  std::array<int, MLA_IN_PARTS> in_part{-1, -1, -1, -1, -1};
  std::vector<float> q_a_norm;   // f32 [q_lora_rank] (q-LoRA)
  linear q_b;                    // [H*(Dn+Dr), q_lora_rank] (q-LoRA), or empty
  std::vector<float> kv_a_norm;  // f32 [L]
  linear kv_b;                   // [H*(Dn+Dv), L]: per head W_UK (Dn rows) then W_UV (Dv rows)
  std::vector<float> wuv_t;      // W_UV as the loading backend packs it (pack_mla_uv), or empty
  linear o_proj;                 // [hidden, H*Dv]
  std::optional<indexer_weights> indexer;
  // RoPE tables (interleaved for MLA, half-split for the indexer), unused with mla_use_nope.
  std::vector<double> inv_freq;  // f64 [Dr/2]
  double rope_attention_factor = 1.0;
  float softmax_scale = 0.0f;  // (Dn+Dr)^-0.5 * yarn mscale^2
};

// prefix: "model.layers.{i}.self_attn".
mla_weights load_mla(weight_loader& ld, const std::string& prefix);

// x f32 [T, hidden] (after input_layernorm) -> out f32 [T, hidden]; appends T rows to the layer's cache
// and attends over all cached rows (positions continue from the cache length).
void mla_forward(const mla_weights& w, const formats::model_config& c, const float* x, int64_t T,
                 sequence_cache& cache, int64_t layer, float* out, const dump_sink* dump,
                 const std::string& name);

// Batched: x f32 [R, hidden] holds several sequences' rows (segs, in order, covering [0, R), each with its
// own cache). The projections run once over all R rows; RoPE positions, the cache appends, the indexer's
// top-k and the attention run per sequence. Equal to mla_forward per sequence (bit for bit on the
// reference kernels).
void mla_forward_batch(const mla_weights& w, const formats::model_config& c, const float* x, int64_t R,
                       std::span<const seq_rows> segs, int64_t layer, float* out, const dump_sink* dump,
                       const std::string& name);

}  // namespace moxi::model
