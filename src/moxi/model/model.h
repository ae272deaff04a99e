// The whole model on the reference kernels (MODEL.md §3): load a checkpoint once (weights converted to f32,
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

namespace moxi::model {

struct forward_options {
  // Named intermediates: "embed", "layers.{i}.{attn_norm,attn_out,ffn_norm,ffn_out,out}",
  // "layers.{i}.kda.{q,k,v,g,beta,core,gated}", "layers.{i}.mla.{q,latent,topk,o,gated}",
  // "layers.{i}.moe.{experts,weights,routed,shared}", "final_norm", "logits"; MTP ones under "mtp.{k}".
  const dump_sink* dump = nullptr;
  // Receives the hidden state after the final norm, f32 [T, hidden] (what the MTP head reads).
  std::vector<float>* hidden = nullptr;
  // Compute the logits of the last token only (generation): the result is f32 [1, vocab].
  bool last_only = false;
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
  std::unique_ptr<sequence_cache> new_cache() const;

  // Runs T = tokens.size() new tokens after the cache.length() cached ones and advances the cache.
  // Returns logits f32 [T, vocab] (or [1, vocab] with last_only). Token ids outside [0, vocab) are an error.
  std::vector<float> forward(std::span<const token_id> tokens, sequence_cache& cache,
                             const forward_options& opts = {}) const;

  // MTP depth k (0-based): for positions i = cache.mtp_length() ..., reads the main model's post-norm hidden
  // h_i (f32 [T, hidden]) and the next tokens t_{i+1} (i32 [T]); returns logits f32 [T, vocab] predicting
  // t_{i+2} and advances the MTP positions. Throws when the model has no MTP layer.
  std::vector<float> mtp_forward(std::span<const float> hidden, std::span<const token_id> next_tokens,
                                 sequence_cache& cache, int64_t depth = 0,
                                 const forward_options& opts = {}) const;

  // Every checkpoint tensor the loader read (the manifest must declare exactly these).
  const std::set<std::string>& tensors_read() const { return tensors_read_; }

 private:
  model() = default;
  void check_tokens(std::span<const token_id> tokens) const;
  // h f32 [T, hidden] after the final norm -> logits (all rows or the last only).
  std::vector<float> head(const float* h, int64_t T, bool last_only) const;

  formats::model_config config_;
  std::unique_ptr<formats::checkpoint> ckpt_;  // kept open: packed MXFP4 experts point into its mapping
  std::vector<float> embed_;                   // f32 [vocab, hidden]
  std::vector<float> final_norm_;              // f32 [hidden]
  std::vector<float> lm_head_;                 // f32 [vocab, hidden]; empty when tied to embed_
  std::vector<decoder_layer> layers_;
  std::vector<mtp_layer> mtp_;
  std::set<std::string> tensors_read_;
};

}  // namespace moxi::model
