// paged_latent_cache: row addressing, gather/scatter through block tables, block copies.
#include "moxi/memory/latent-cache.h"

#include <algorithm>
#include <cstring>

#include "moxi/base/error.h"

namespace moxi::memory {

paged_latent_cache::paged_latent_cache(int64_t num_mla_layers, int32_t num_blocks, int32_t block_size,
                                       int64_t latent_width, int64_t index_width)
    : num_layers_(num_mla_layers),
      num_blocks_(num_blocks),
      block_size_(block_size),
      latent_width_(latent_width),
      index_width_(index_width),
      latent_(size_t(num_mla_layers * num_blocks * block_size * latent_width), 0.0f),
      index_(size_t(num_mla_layers * num_blocks * block_size * index_width), 0.0f) {}

size_t paged_latent_cache::offset(int64_t layer, block_id b, int32_t row, int64_t width) const {
  MOXI_ASSERT(layer >= 0 && layer < num_layers_ && b >= 0 && b < num_blocks_ && row >= 0 &&
              row < block_size_);
  return size_t(((layer * num_blocks_ + b) * block_size_ + row) * width);
}

float* paged_latent_cache::latent_row(int64_t layer, block_id b, int32_t row) {
  return latent_.data() + offset(layer, b, row, latent_width_);
}

float* paged_latent_cache::index_row(int64_t layer, block_id b, int32_t row) {
  return index_width_ ? index_.data() + offset(layer, b, row, index_width_) : nullptr;
}

void paged_latent_cache::gather(int64_t layer, std::span<const block_id> table, int64_t begin, int64_t end,
                                float* latent, float* index) const {
  MOXI_ASSERT(begin >= 0 && begin <= end && end <= int64_t(table.size()) * block_size_);
  // Copy run by run: each run is the part of [begin, end) inside one block, contiguous in storage.
  for (int64_t pos = begin; pos < end;) {
    const block_id b = table[size_t(pos / block_size_)];
    const int32_t row = int32_t(pos % block_size_);
    const int64_t run = std::min<int64_t>(end - pos, block_size_ - row);
    std::memcpy(latent + (pos - begin) * latent_width_, latent_.data() + offset(layer, b, row, latent_width_),
                size_t(run * latent_width_) * sizeof(float));
    if (index && index_width_)
      std::memcpy(index + (pos - begin) * index_width_, index_.data() + offset(layer, b, row, index_width_),
                  size_t(run * index_width_) * sizeof(float));
    pos += run;
  }
}

void paged_latent_cache::scatter(int64_t layer, std::span<const block_id> table, int64_t pos, int64_t n,
                                 const float* latent, const float* index) {
  MOXI_ASSERT(pos >= 0 && n >= 0 && pos + n <= int64_t(table.size()) * block_size_);
  for (int64_t i = 0; i < n;) {
    const int64_t p = pos + i;
    const block_id b = table[size_t(p / block_size_)];
    const int32_t row = int32_t(p % block_size_);
    const int64_t run = std::min<int64_t>(n - i, block_size_ - row);
    std::memcpy(latent_.data() + offset(layer, b, row, latent_width_), latent + i * latent_width_,
                size_t(run * latent_width_) * sizeof(float));
    if (index && index_width_)
      std::memcpy(index_.data() + offset(layer, b, row, index_width_), index + i * index_width_,
                  size_t(run * index_width_) * sizeof(float));
    i += run;
  }
}

void paged_latent_cache::copy_block(block_id src, block_id dst) {
  for (int64_t l = 0; l < num_layers_; ++l) {
    std::memcpy(latent_.data() + offset(l, dst, 0, latent_width_),
                latent_.data() + offset(l, src, 0, latent_width_),
                size_t(block_size_ * latent_width_) * sizeof(float));
    if (index_width_)
      std::memcpy(index_.data() + offset(l, dst, 0, index_width_),
                  index_.data() + offset(l, src, 0, index_width_),
                  size_t(block_size_ * index_width_) * sizeof(float));
  }
}

}  // namespace moxi::memory
