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
#include "moxi/model/layers/attention.h"
#include "moxi/model/manifest.h"

namespace moxi::model {

// The cache element format (cache_format, model/layers/attention.h) by its name in `moxi plan
// --cache-format`, and back.
std::string cache_format_name(cache_format f);
cache_format parse_cache_format(const std::string& name);

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
  // Tokens of one forward whose activations a device holds at once (a prefill chunk: `moxi serve
  // --max-batch-tokens`, `moxi bench context --chunk`); 0: activations not counted (docs/plan.md
  // "Activations"). Counted in the cache's element width: f32 for moxi's engine, BF16 otherwise.
  int64_t prefill_chunk = 2048;
  // moxi's engine on an AMX host (kernels::x86::dense_tile_min_tokens of the active backend at most
  // prefill_chunk): its dense BF16 products of a chunk run on AMX tiles, each thread keeping the bf16 split
  // of a block of up to 256 input rows (3 x 2 bytes per element) between calls; counted with the activations.
  bool dense_tiles = false;
  // Communication costing (docs/plan.md "Communication"): bandwidth per device and direction.
  double link_gbps = 400;         // between nodes: one RDMA NIC per device (the seeds ask for >= 400 Gb/s)
  double intra_node_gbps = 3600;  // within a node: NVLink 4, 450 GB/s per direction ("900 GB/s" counts both)
  int activation_bytes = 2;       // BF16 hidden states, latents and logits-free activations on the wire
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
  uint64_t activation_bytes = 0;            // per device: one forward of prefill_chunk tokens at `context`
};

// Communication of one pipeline stage, per rank and per token of a model replica (docs/plan.md
// "Communication"). Bytes are those a rank sends (all-to-all: dispatch sent + combine received, the two
// directions of its link that are busy); times are bandwidth-only at plan_options' link speeds.
struct stage_comm {
  int64_t layers = 0, moe_layers = 0;
  double allreduce_bytes = 0;  // tp: 2 ring all-reduces of the hidden state per layer, 2(tp-1)/tp each
  double alltoall_bytes = 0;   // ep: dispatch + combine of routed tokens, averaged over the stage's ranks
  // tp, DSA layers: the all-gather of each rank's k best (score, position) index candidates once a query
  // sees more than k * tp keys (the indexer's scan is split by key position, layers/mla.h). Decode: at the
  // plan's context; prefill: averaged over a prompt of that length.
  double indexer_decode_bytes = 0, indexer_prefill_bytes = 0;
  double alltoall_bytes_inter = 0;  // the part of alltoall_bytes that leaves the node
  double pp_send_bytes = 0;         // the hidden state to the next stage (0 on the last stage)
  double logits_bytes = 0;          // decode only, last stage: the logits broadcast to every rank
  bool tp_inter_node = false;       // a tensor-parallel group of this stage spans nodes
  bool pp_inter_node = false;       // the send to the next stage leaves the node
  double prefill_seconds = 0;       // per token: all-reduces + all-to-all + pipeline send
  double decode_seconds = 0;        // prefill_seconds + the logits all-gather
  uint64_t load_bytes_min = 0, load_bytes_max = 0;  // checkpoint bytes one rank of this stage reads
};

// Where a global rank sits: rank = (stage * dp + replica) * tp + tp_index (tp fastest, then data
// parallel replicas, then pipeline stages); its expert-parallel group is `ep` consecutive ranks of its
// stage, and it holds the experts of position ep_index in that group (docs/plan.md "Placement").
struct rank_coords {
  int stage = 0, replica = 0, tp_index = 0, ep_group = 0, ep_index = 0;
};
rank_coords rank_position(int tp, int ep, int pp, int world_size, int rank);

// Bytes of the checkpoint that `rank` reads at load under the layout (docs/plan.md "Bytes read at load"):
// its pipeline stage's layers only; attention-head and dense/shared-FFN matrices sliced by tp;
// its contiguous block of the routed experts (E/ep, the first E % ep ranks one more); everything else
// (embedding, lm_head, norms, routers, DSA indexer, MLA latent projections, latent-MoE projections, vision)
// read whole. world_size 0: the smallest world the layout allows (tp * pp * dp with ep dividing tp * dp).
// Throws moxi::error for impossible layouts.
uint64_t rank_load_bytes(const formats::model_config& config, int tp, int ep, int pp, int rank,
                         int world_size = 0);

// Expected number of distinct ranks other than the token's own that hold at least one of its k experts,
// under uniform routing (a uniformly random k-subset of E experts), E split into ep contiguous blocks:
// ((ep - 1) / ep) * sum over ranks r of (1 - C(E - n_r, k) / C(E, k)), averaged over the token's rank.
double expected_remote_ranks(int64_t num_experts, int64_t k, int ep);

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
  // Communication per token of a model replica, per rank (docs/plan.md "Communication").
  std::vector<stage_comm> comm;            // one per pipeline stage
  double expected_remote_ranks = 0;        // distinct other ranks a token's top-k experts land on
  double expected_remote_ranks_inter = 0;  // ... of them on another node
  int64_t dispatch_bytes_per_token = 0;    // one routed token on the wire (expert width x activation)
  double decode_comm_bytes_per_rank = 0;   // heaviest stage: all-reduce + all-to-all + send + logits
  double prefill_comm_bytes_per_rank = 0;  // heaviest stage, without the logits
  double decode_comm_seconds = 0;          // sum over stages: one token passes every stage in turn
  double prefill_comm_seconds = 0;         // slowest stage: a long prompt keeps the stages busy at once
  // Bytes read at load (rank_load_bytes for every rank of the world).
  uint64_t load_bytes_min = 0, load_bytes_max = 0, load_bytes_total = 0;
  std::vector<uint64_t> load_bytes_per_rank;  // by global rank, for worlds of up to 4096 ranks
};

// Throws moxi::error for impossible layouts (tp*pp larger than the machine, ep not dividing, ...).
plan_result make_plan(const formats::model_config& config, const plan_options& options);
nlohmann::json plan_to_json(const plan_result& plan, const plan_options& options);
std::string plan_to_text(const formats::model_config& config, const plan_result& plan,
                         const plan_options& options);

}  // namespace moxi::model
