// paged_latent_cache: the per-token cache of the MLA / Gated DSA layers in pages of block_size tokens. One
// block id addresses the same positions in every MLA layer (one block table per sequence for all of them,
// like a vLLM KV-cache group), so a block holds, per MLA layer, block_size rows of the compressed latent
// [c_kv | k_pe] (f32) and of the DSA indexer key (its FP8 row as index_width opaque 4-byte words, held in
// the same f32 storage and only ever copied: model/cache.h, kernels/ref/dsa.h).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "moxi/memory/block-pool.h"

namespace moxi::memory {

class paged_latent_cache {
 public:
  // latent_width = kv_lora_rank + qk_rope_head_dim; index_width = DSA index_head_dim or 0.
  paged_latent_cache(int64_t num_mla_layers, int32_t num_blocks, int32_t block_size, int64_t latent_width,
                     int64_t index_width);

  int64_t latent_width() const { return latent_width_; }
  int64_t index_width() const { return index_width_; }

  // Row `offset` of block b in MLA layer `layer` (0-based among the MLA layers).
  float* latent_row(int64_t layer, block_id b, int32_t offset);
  float* index_row(int64_t layer, block_id b, int32_t offset);  // nullptr without the indexer

  // Copies positions [begin, end) of a sequence, addressed through its block table, into contiguous
  // buffers: latent f32 [end-begin, latent_width], index f32 [end-begin, index_width] (may be nullptr).
  // This is what the attention kernels read until they learn to walk block tables themselves.
  void gather(int64_t layer, std::span<const block_id> table, int64_t begin, int64_t end, float* latent,
              float* index) const;
  // Writes n contiguous rows at positions [pos, pos+n) through the block table (the table must cover them).
  void scatter(int64_t layer, std::span<const block_id> table, int64_t pos, int64_t n, const float* latent,
               const float* index);
  // Copies every MLA layer's rows of block src into dst (copy-on-write of a partial block on fork).
  void copy_block(block_id src, block_id dst);

 private:
  size_t offset(int64_t layer, block_id b, int32_t row, int64_t width) const;

  int64_t num_layers_;
  int32_t num_blocks_, block_size_;
  int64_t latent_width_, index_width_;
  std::vector<float> latent_;  // f32 [num_mla_layers, num_blocks, block_size, latent_width]
  std::vector<float> index_;   // f32 [num_mla_layers, num_blocks, block_size, index_width]
};

}  // namespace moxi::memory
