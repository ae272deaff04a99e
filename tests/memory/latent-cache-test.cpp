// Paged latent cache: rows written through random, scattered block tables in random chunk sizes read back
// with gather exactly as a contiguous reference holds them.
#include "moxi/memory/latent-cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

namespace moxi::memory {
namespace {

TEST(PagedLatentCache, GatherEqualsAContiguousReference) {
  constexpr int64_t kLayers = 3, kLatent = 5, kIndex = 3;
  constexpr int32_t kBlocks = 40, kBlockSize = 4;
  for (uint32_t seed : {1u, 2u, 3u}) {
    std::mt19937 rng(seed);
    paged_latent_cache cache(kLayers, kBlocks, kBlockSize, kLatent, kIndex);
    // Three sequences share the pool; blocks handed out in a shuffled order so tables are not contiguous.
    std::vector<block_id> order(kBlocks);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<std::vector<block_id>> tables(3);
    std::vector<std::vector<std::vector<float>>> ref_latent(3, std::vector<std::vector<float>>(kLayers));
    std::vector<std::vector<std::vector<float>>> ref_index(3, std::vector<std::vector<float>>(kLayers));
    std::vector<int64_t> len(3, 0);
    size_t next = 0;
    std::uniform_real_distribution<float> val(-1, 1);
    for (int step = 0; step < 30; ++step) {
      const size_t s = rng() % 3;
      const int64_t n = 1 + rng() % 9;
      while (int64_t(tables[s].size()) * kBlockSize < len[s] + n) {
        if (next == order.size()) break;
        tables[s].push_back(order[next++]);
      }
      if (int64_t(tables[s].size()) * kBlockSize < len[s] + n) break;
      for (int64_t l = 0; l < kLayers; ++l) {
        std::vector<float> lat(size_t(n * kLatent)), idx(size_t(n * kIndex));
        for (auto& x : lat) x = val(rng);
        for (auto& x : idx) x = val(rng);
        cache.scatter(l, tables[s], len[s], n, lat.data(), idx.data());
        ref_latent[s][size_t(l)].insert(ref_latent[s][size_t(l)].end(), lat.begin(), lat.end());
        ref_index[s][size_t(l)].insert(ref_index[s][size_t(l)].end(), idx.begin(), idx.end());
      }
      len[s] += n;
    }
    for (size_t s = 0; s < 3; ++s) {
      for (int64_t l = 0; l < kLayers; ++l) {
        // Whole sequence and a window that starts and ends inside blocks.
        for (auto [b, e] :
             {std::pair<int64_t, int64_t>{0, len[s]}, {std::min<int64_t>(3, len[s]), len[s] / 2 + 3}}) {
          e = std::min(e, len[s]);
          if (b > e) continue;
          std::vector<float> lat(size_t((e - b) * kLatent)), idx(size_t((e - b) * kIndex));
          cache.gather(l, tables[s], b, e, lat.data(), idx.data());
          EXPECT_EQ(lat, std::vector<float>(ref_latent[s][size_t(l)].begin() + b * kLatent,
                                            ref_latent[s][size_t(l)].begin() + e * kLatent));
          EXPECT_EQ(idx, std::vector<float>(ref_index[s][size_t(l)].begin() + b * kIndex,
                                            ref_index[s][size_t(l)].begin() + e * kIndex));
        }
      }
    }
  }
}

TEST(PagedLatentCache, CopyBlockCopiesEveryLayerAndNothingElse) {
  paged_latent_cache cache(2, 3, 2, 2, 0);
  EXPECT_EQ(cache.index_row(0, 0, 0), nullptr);
  for (int64_t l = 0; l < 2; ++l)
    for (block_id b = 0; b < 3; ++b)
      for (int32_t r = 0; r < 2; ++r)
        for (int i = 0; i < 2; ++i) cache.latent_row(l, b, r)[i] = float(100 * l + 10 * b + 2 * r + i);
  cache.copy_block(0, 2);
  for (int64_t l = 0; l < 2; ++l)
    for (int32_t r = 0; r < 2; ++r)
      for (int i = 0; i < 2; ++i) {
        EXPECT_EQ(cache.latent_row(l, 2, r)[i], float(100 * l + 2 * r + i));
        EXPECT_EQ(cache.latent_row(l, 1, r)[i], float(100 * l + 10 + 2 * r + i));
      }
}

}  // namespace
}  // namespace moxi::memory
