// The whole model on the CPU kernels (docs/model-spec.md §3; the AVX-512 ones, or the scalar references under
// MOXI_KERNELS=ref): load a checkpoint once (weights converted to f32, or kept BF16 for the fast kernels;
// MXFP4 experts kept packed), then run forward(tokens, cache) -> logits for T new tokens after the cached
// ones, and mtp_forward for the MTP head. The same code serves every config from tiny to full.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "moxi/formats/checkpoint.h"
#include "moxi/formats/model-config.h"
#include "moxi/formats/tokenizer.h"
#include "moxi/model/cache.h"
#include "moxi/model/layers/decoder.h"
#include "moxi/model/layers/weights.h"
#include "moxi/model/vision.h"

namespace moxi::model {

struct forward_options {
  // Named intermediates: "embed", "layers.{i}.{attn_norm,attn_out,ffn_norm,ffn_out,out}",
  // "layers.{i}.kda.{q,k,v,g,beta,core,gated}", "layers.{i}.mla.{q,latent,topk,o,gated}",
  // "layers.{i}.swa.{q,o}",
  // "layers.{i}.moe.{experts,weights,routed,shared}", "final_norm", "logits"; MTP ones under "mtp.{k}".
  const dump_sink* dump = nullptr;
  // Receives the hidden state after the final norm, f32 [T, hidden] (what the MTP head reads).
  std::vector<float>* hidden = nullptr;
  // Compute the logits of the last token only (generation): the result is f32 [1, vocab].
  bool last_only = false;
  // Image features (vision_encoder::encode), f32 [n, hidden]: row r replaces the embedding of the r-th image
  // placeholder token (config media_placeholder_token_id) among the new tokens. Placeholders past the n-th
  // keep their embedding (the model wrote them); more rows than placeholders is an error.
  std::span<const float> media;
};

// One sequence of model::forward_batch.
struct batch_item {
  std::span<const token_id> tokens;  // its new tokens, after the cached ones
  sequence_cache* cache = nullptr;   // its own cache; each cache at most once per call
  bool last_only = true;             // logits of the last token only ([1, vocab]) or of every token
  std::span<const float> media;      // rows for its image placeholder tokens, as forward_options::media
  // Receives the post-norm hidden states of all its tokens, f32 [T, hidden] (forward_options::hidden).
  std::vector<float>* hidden = nullptr;
};

// One sequence of model::mtp_forward_batch: its positions from cache.mtp_length() on.
struct mtp_batch_item {
  std::span<const float> hidden;          // the main model's post-norm h_i, f32 [T, hidden]
  std::span<const token_id> next_tokens;  // t_{i+1}, i32 [T]
  sequence_cache* cache = nullptr;        // its own cache; each cache at most once per call
  bool last_only = true;                  // logits of the last position only, or of every position
  // Receives the MTP layer's hidden states after its head norm, f32 [T, hidden] (for chained drafts).
  std::vector<float>* out_hidden = nullptr;
};

class model {
 public:
  // dir holds config.json and the safetensors checkpoint (sharded through its index, or one file).
  static model load(const std::string& dir, const load_options& opts = {});
  // The checkpoint at `checkpoint_path` read under `config` (tests load one checkpoint under two configs).
  static model load(formats::model_config config, const std::string& checkpoint_path,
                    const load_options& opts = {});

  model(model&&) noexcept;
  model& operator=(model&&) noexcept;
  ~model();

  const formats::model_config& config() const { return config_; }
  // The config this process's layers run under: config() itself, or with tensor parallelism the rank's
  // local_config (fewer heads, narrower FFNs). Caches of this process are sized by it.
  const formats::model_config& layer_config() const { return layer_config_; }
  // This rank's layout (model/parallel.h), or null when the whole model runs in this process.
  const parallel_layout* parallel() const { return opts_parallel_.get(); }
  // A contiguous cache with the slots of this process's layers.
  std::unique_ptr<contiguous_cache> new_cache() const;
  // Per cache slot (decoder layers, then MTP layers): whether this rank holds that layer, a pipeline stage
  // holding its own; empty in one process (every slot).
  std::vector<bool> held_cache_slots() const;

  // Runs T = tokens.size() new tokens after the cache.length() cached ones and advances the cache.
  // Returns logits f32 [T, vocab] (or [1, vocab] with last_only). Token ids outside [0, vocab) are an error.
  // Across processes (load_options::parallel) every rank calls forward, forward_batch and mtp_forward with
  // the same arguments in the same order (SPMD); each rank runs its share and every rank gets the logits
  // (and opts.hidden) of the last pipeline stage's first rank.
  std::vector<float> forward(std::span<const token_id> tokens, sequence_cache& cache,
                             const forward_options& opts = {}) const;

  // Several sequences in one pass (continuous batching): every projection, expert GEMM, norm and the
  // lm_head run once over all items' rows concatenated in order, so weights stream once per step instead
  // of once per sequence; attention / KDA runs per sequence on its own cache, and each cache advances by
  // its tokens. Prefill chunks and single decode tokens may be mixed in one call. Returns one logits vector
  // per item (f32 [T_i, vocab], or [1, vocab] with last_only; empty for an item without tokens). Equal to
  // forward() on each item: bit for bit on the reference kernels, within fp32 summation order on the fast
  // ones (their GEMM shapes change with the row count). Token ids of every item are checked before
  // anything runs; a null or repeated cache is an error.
  std::vector<std::vector<float>> forward_batch(std::span<const batch_item> items) const;

  // MTP depth k (0-based): for positions i = cache.mtp_length() ..., reads the main model's post-norm hidden
  // h_i (f32 [T, hidden]) and the next tokens t_{i+1} (i32 [T]); returns logits f32 [T, vocab] predicting
  // t_{i+2} and advances the MTP positions. Throws when the model has no MTP layer.
  std::vector<float> mtp_forward(std::span<const float> hidden, std::span<const token_id> next_tokens,
                                 sequence_cache& cache, int64_t depth = 0,
                                 const forward_options& opts = {}) const;
  // mtp_forward over several sequences in one pass (speculative decoding in serving): eh_proj, the MTP
  // block's projections and experts and the lm_head run once over all items' rows, attention per sequence.
  // Equal to mtp_forward on each item (bit for bit on the reference kernels). One process only.
  std::vector<std::vector<float>> mtp_forward_batch(std::span<const mtp_batch_item> items,
                                                    int64_t depth = 0) const;

  // The vision encoder when the config has a vision_config, else null.
  const vision_encoder* vision() const { return vision_.get(); }

  // Every checkpoint tensor the loader read (the manifest must declare exactly these).
  const std::set<std::string>& tensors_read() const { return tensors_read_; }
  // Checkpoint bytes this process read at load: whole tensors, or with a parallel layout only its layers,
  // slices and experts (what `moxi plan --tp --ep --pp` predicts per rank).
  uint64_t checkpoint_bytes_read() const { return bytes_read_; }

 private:
  model() = default;
  void check_tokens(std::span<const token_id> tokens) const;
  // Embeddings of tokens into h f32 [T, hidden], image placeholders taking the rows of media in order.
  void embed(std::span<const token_id> tokens, std::span<const float> media, float* h) const;
  // The MTP layer's input rows: eh_proj([enorm(emb(t_{i+1})) ; hnorm(h_i)]) -> h f32 [T, hidden].
  void mtp_input(const mtp_layer& m, const float* hidden, std::span<const token_id> next_tokens,
                 float* h) const;
  // h f32 [T, hidden] after the final norm -> logits (all rows or the last only).
  std::vector<float> head(const float* h, int64_t T, bool last_only) const;

  // The last stage's first rank sends data (floats) to every rank; a no-op in one process.
  void share_from_last_stage(std::vector<float>& data, int64_t n) const;
  bool holds_head() const { return !opts_parallel_ || opts_parallel_->last_stage(); }

  formats::model_config config_;
  formats::model_config layer_config_;
  std::shared_ptr<const parallel_layout> opts_parallel_;
  int64_t first_layer_ = 0;  // global index of layers_[0] (pipeline stages hold a range)
  std::unique_ptr<formats::checkpoint> ckpt_;  // kept open: packed MXFP4 experts point into its mapping
  linear embed_;  // [vocab, hidden]: BF16 where the backend keeps BF16 weights (rows widened on use), else f32
  std::vector<float> final_norm_;              // f32 [hidden]
  // [vocab, hidden]: lm_head, or the embedding when tied. BF16 when the checkpoint stores BF16 and fast
  // kernels are on (half the bytes a decode step streams, widened exactly in registers), else f32.
  linear head_;
  std::vector<decoder_layer> layers_;  // this stage's layers
  std::vector<mtp_layer> mtp_;         // on the last stage
  std::unique_ptr<vision_encoder> vision_;
  std::set<std::string> tensors_read_;
  uint64_t bytes_read_ = 0;
};

}  // namespace moxi::model
