// Per-sequence caches (docs/model-spec.md §3.1, §3.2), by the two ways an attention kind caches (vLLM v1's split of
// KV-cache specs): a constant-size state per layer (KDA: three conv states and the fp32 recurrent state;
// sliding-window attention: a ring buffer of its last `window` keys and values) and growing per-token rows
// (MLA / Gated DSA: the latent and the indexer keys). What a state holds is the layer's business
// (model/layers/attention.h); the cache only knows its size. One interface (sequence_cache) so a paged
// implementation (serve/executor.cpp over memory/) can replace the contiguous one here without touching
// the layers.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "moxi/formats/model-config.h"

namespace moxi::model {

// The decode state of one KDA layer, in the layouts of kernels/ref/kda.h.
struct kda_state_ref {
  float* conv_q = nullptr;     // f32 [W-1, P], oldest input first
  float* conv_k = nullptr;     // f32 [W-1, P]
  float* conv_v = nullptr;     // f32 [W-1, P]
  float* recurrent = nullptr;  // f32 [H, K, V], K-major
};

// The ring buffer of one sliding-window layer: the keys (after RoPE) and values of the last `window`
// positions; position p lives in row p % window.
struct swa_ring_ref {
  float* k = nullptr;  // f32 [window, KVH*D]
  float* v = nullptr;  // f32 [window, KVH*D]
};

// Rows just reserved at the end of an MLA layer's cache, to be filled by the layer.
struct mla_append_ref {
  float* latent = nullptr;        // f32 [T, L+Dr]: [c_kv after kv_a_layernorm | k_pe after RoPE]
  uint8_t* index_keys = nullptr;  // u8 [T, index_key_bytes(D_I)] FP8 keys (kernels/ref/dsa.h), or nullptr
};

// Everything an MLA layer has cached, including rows appended in the current call.
struct mla_view {
  const float* latent = nullptr;        // f32 [S, L+Dr]
  const uint8_t* index_keys = nullptr;  // u8 [S, index_key_bytes(D_I)], or nullptr
  int64_t length = 0;                   // S
};

class sequence_cache;

// One sequence's rows in a batched forward: rows [begin, begin + T) of the concatenated activations are
// its T new tokens, after the cache's cached ones.
struct seq_rows {
  int64_t begin = 0, T = 0;
  sequence_cache* cache = nullptr;
};

class sequence_cache {
 public:
  virtual ~sequence_cache() = default;

  // Tokens the main model has processed: the position of the next token.
  virtual int64_t length() const = 0;
  // Tokens the MTP layers have processed (their own positions; docs/model-spec.md §3.4).
  virtual int64_t mtp_length() const = 0;
  // Called by the model once all layers have consumed n new tokens.
  virtual void advance(int64_t n) = 0;
  virtual void advance_mtp(int64_t n) = 0;

  // Layer slots are decoder layer indices; MTP layer k is slot num_layers + k.
  // The constant-size state of a KDA or sliding-window slot (attention_state_floats() floats, zero for a
  // fresh sequence), read and updated in place.
  virtual float* state(int64_t layer) = 0;
  // Reserves T rows of an MLA slot; they are part of mla(layer) from now on.
  virtual mla_append_ref mla_append(int64_t layer, int64_t T) = 0;
  // Contiguous view of the whole cache of the layer (a paged implementation gathers here).
  virtual mla_view mla(int64_t layer) = 0;

  // Speculative decoding: while a trace is on, a constant-size-state layer asks for room to record its
  // state after each of its T new tokens (T * state floats, token-major) before it runs them; nullptr
  // when no trace is on (the default), and the layer runs as usual.
  virtual float* state_trace(int64_t layer, int64_t T) {
    (void)layer;
    (void)T;
    return nullptr;
  }
};

// Contiguous, growing per-layer buffers: what the engine's single-sequence paths and the tests use.
class contiguous_cache final : public sequence_cache {
 public:
  // owned (one flag per slot, main layers then MTP; empty: all): a pipeline stage allocates only the slots
  // of its own layers; the others are never touched.
  explicit contiguous_cache(const formats::model_config& config, const std::vector<bool>& owned = {});

  int64_t length() const override { return length_; }
  int64_t mtp_length() const override { return mtp_length_; }
  void advance(int64_t n) override { length_ += n; }
  void advance_mtp(int64_t n) override { mtp_length_ += n; }
  float* state(int64_t layer) override;
  mla_append_ref mla_append(int64_t layer, int64_t T) override;
  mla_view mla(int64_t layer) override;
  // state(layer) of a KDA slot split into its parts.
  kda_state_ref kda(int64_t layer);
  // Room for `tokens` rows in every MLA slot without reallocation: a long prompt then takes exactly its
  // rows, where growth by doubling would hold up to 3x of them at once while it copies.
  void reserve(int64_t tokens);

  // Speculative decoding (docs/speculative.md). begin_trace() marks the cache as it is and records, from
  // then on, every state after every token; rewind(length, mtp_length) then leaves the cache exactly as if
  // only the first tokens since the mark had been run (states from the record, MLA rows dropped). Lengths
  // outside [mark, now] are an error. A trace lasts until the next begin_trace() or end_trace(). O(state
  // bytes) per token traced, never O(context).
  void begin_trace();
  void end_trace();
  bool tracing() const { return tracing_; }
  void rewind(int64_t length, int64_t mtp_length);
  float* state_trace(int64_t layer, int64_t T) override;

 private:
  struct slot {
    formats::attn_kind kind = formats::attn_kind::KDA;
    bool mtp = false;                 // an MTP layer's slot: its rows follow mtp_length
    bool owned = true;                // false: another pipeline stage's layer, nothing kept here
    std::vector<float> state;         // KDA, SWA
    std::vector<float> latent;        // MLA, grown by mla_append
    std::vector<uint8_t> index_keys;  // Gated DSA: the FP8 index key rows
    int64_t rows = 0;
    // While tracing: the state at the mark, then the state after each traced token, token-major.
    std::vector<float> marked, trace;
  };
  slot& at(int64_t layer);

  int64_t kda_conv_floats_ = 0;  // (W-1) * P of the KDA layers
  int64_t latent_width_ = 0, index_width_ = 0;  // floats, bytes per token
  std::vector<slot> slots_;
  int64_t length_ = 0, mtp_length_ = 0;
  bool tracing_ = false;
  int64_t mark_length_ = 0, mark_mtp_length_ = 0;
};

}  // namespace moxi::model
