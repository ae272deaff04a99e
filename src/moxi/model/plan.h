// The deployment planner behind `moxi plan`: parameter counts (total and active per token, by group),
// bytes on disk, the shard layout, weight and cache memory per device for a tensor/pipeline/expert
// parallel layout, and bytes read per decoded token. Pure arithmetic over the manifest, so it works for
// the full 2.8T config on a laptop.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "moxi/formats/model-config.h"
#include "moxi/model/manifest.h"

namespace moxi::model {

enum class cache_format : uint8_t {
  BF16,  // latent, rope part and indexer key all BF16
  FP8,   // FlashMLA-style FP8 latent (512 B + 4 fp32 scales + 64 BF16 rope = 656 B) and 132 B indexer keys
};

struct plan_options {
  int tp = 1;
  int pp = 1;
  int ep = 1;
  int nodes = 1;
  int gpus_per_node = 8;
  double device_memory_gib = 0;  // 0: do not check fit
  int64_t context = 0;           // 0: the config's max_position_embeddings
  int64_t batch = 1;             // concurrent sequences per model replica
  int num_shards = 96;
  cache_format cache = cache_format::BF16;
};

struct group_stats {
  int64_t params = 0;
  double active_params = 0;  // expected parameters used per token
  uint64_t disk_bytes = 0;
};

struct stage_memory {
  int64_t first_layer = 0, last_layer = 0;  // inclusive, decoder layers
  uint64_t weight_bytes = 0;                // per device of this stage
  uint64_t cache_bytes = 0;                 // per device, for `batch` sequences at `context`
};

struct plan_result {
  std::array<group_stats, size_t(param_group::COUNT)> groups{};
  // The text model without MTP and vision (how DeepSeek counts "671B" and docs/model-spec.md counts "2.78T").
  int64_t total_params = 0;
  double active_params = 0;
  uint64_t disk_bytes = 0;
  int64_t mtp_params = 0, vision_params = 0;
  // vision_params split: the MoonViT tower (the seed's "~401 M") and the projector into the text width.
  int64_t vision_tower_params = 0, vision_projector_params = 0;
  uint64_t checkpoint_bytes = 0;  // everything stored, incl. MTP and vision
  int64_t num_tensors = 0;
  // Shards.
  int num_shards = 0;
  uint64_t shard_bytes_min = 0, shard_bytes_max = 0, largest_tensor_bytes = 0;
  // Per sequence caches.
  int64_t context = 0;
  uint64_t kda_state_bytes_per_layer = 0;     // constant in context (fp32 state + BF16 conv state)
  uint64_t latent_bytes_per_token_layer = 0;  // DSA/MLA latent + indexer key
  uint64_t swa_bytes_per_layer = 0;           // sliding-window ring: min(window, context) keys + values
  uint64_t cache_bytes_per_sequence = 0;      // all layers at `context`
  // Parallel layout.
  int world_size = 0, dp = 0;
  std::vector<stage_memory> stages;
  uint64_t device_bytes_max = 0;  // heaviest device: weights + caches
  bool fits = true;
  std::vector<std::string> warnings;
  // Decode traffic.
  double bytes_per_token_batch1 = 0;        // weights + cache read for one decoded token, batch 1
  double weight_bytes_per_token_batch = 0;  // weights per token at `batch` (experts shared across the batch)
};

// Throws moxi::error for impossible layouts (tp*pp larger than the machine, ep not dividing, ...).
plan_result make_plan(const formats::model_config& config, const plan_options& options);
nlohmann::json plan_to_json(const plan_result& plan, const plan_options& options);
std::string plan_to_text(const formats::model_config& config, const plan_result& plan,
                         const plan_options& options);

}  // namespace moxi::model
