// Running one model over several processes (docs/distributed.md): tensor parallelism (attention heads,
// dense and shared FFN split tp ways, one all-reduce after each), expert parallelism (routed experts split
// ep ways, routed tokens dispatched to their experts' ranks and combined with all-to-all) and pipeline
// parallelism (contiguous layer ranges per stage, the hidden state sent stage to stage). The model layer
// only sees the process_group interface; src/moxi/dist implements it over MPI, so the model library does
// not link a communication runtime.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "moxi/formats/model-config.h"

namespace moxi::model {

// A set of ranks that run collectives together. Every member calls each collective in the same order.
// Counts are in elements of the named type; ranks are this group's, 0 .. size() - 1.
class process_group {
 public:
  virtual ~process_group() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // data f32 [n] on every rank becomes the element-wise sum over the ranks, the same on all of them.
  virtual void all_reduce_sum(float* data, int64_t n) const = 0;
  // Rank r contributes counts[r] floats (send); every rank receives all contributions in rank order (recv,
  // sum of counts).
  virtual void all_gather_v(const float* send, std::span<const int64_t> counts, float* recv) const = 0;
  // send[r] (one int64 per rank) goes to rank r; recv[r] is what rank r sent here.
  virtual void all_to_all(const int64_t* send, int64_t* recv) const = 0;
  // Bytes: send_counts[r] bytes starting at send + sum of earlier send_counts go to rank r; recv_counts[r]
  // bytes from rank r land at recv + sum of earlier recv_counts.
  virtual void all_to_all_v(const void* send, std::span<const int64_t> send_counts, void* recv,
                            std::span<const int64_t> recv_counts) const = 0;
  virtual void broadcast(void* data, int64_t bytes, int root) const = 0;
  // Point to point (pipeline stages), blocking.
  virtual void send(const void* data, int64_t bytes, int peer) const = 0;
  virtual void recv(void* data, int64_t bytes, int peer) const = 0;
};

// The parallel sizes. World = pp stages x (world / pp) ranks per stage; tp and ep each divide the ranks
// of a stage. Within a stage, consecutive blocks of tp ranks split the attention heads and the dense and
// shared FFNs (ranks per stage / tp such blocks compute the same thing), and consecutive blocks of ep ranks
// split the routed experts. Same rule as `moxi plan` (model/plan.h: a stage has tp x dp devices, ep
// divides them).
struct parallel_sizes {
  int tp = 1, ep = 1, pp = 1;
  // Tokens per micro-batch of one sequence's forward across pipeline stages: stage s runs micro-batch i
  // while stage s+1 runs i-1 (each stage feeds them through its caches in order, as chunked prefill does).
  // 0: the whole forward as one.
  int64_t pp_microbatch = 256;
  std::string to_string() const;
};

// This rank's place in a layout and its groups. Built by dist::make_layout (MPI) or by a test's own
// process_group implementation.
struct parallel_layout {
  parallel_sizes sizes;
  int world_rank = 0, world_size = 1;
  int stage = 0;             // pipeline stage of this rank
  int stage_rank = 0;        // rank within the stage
  int tp_rank = 0, ep_rank = 0;
  std::shared_ptr<const process_group> world;  // all ranks (pipeline sends, logits broadcast)
  std::shared_ptr<const process_group> tp;     // this rank's tp block (size sizes.tp)
  std::shared_ptr<const process_group> ep;     // this rank's ep block (size sizes.ep)

  // The place of world rank `rank` of `world` ranks under `sizes` (the groups left null): stages of
  // world / pp consecutive ranks, tp and ep blocks of consecutive ranks within a stage.
  static parallel_layout place(const parallel_sizes& sizes, int world, int rank);

  int ranks_per_stage() const { return world_size / sizes.pp; }
  bool first_stage() const { return stage == 0; }
  bool last_stage() const { return stage == sizes.pp - 1; }
  // World rank of the rank at `stage_rank` of stage s.
  int world_rank_of(int s, int at_stage_rank) const { return s * ranks_per_stage() + at_stage_rank; }
  // The decoder layers [first, last] of stage s (num_layers split as evenly as `moxi plan` splits them).
  static std::pair<int64_t, int64_t> stage_layers(int64_t num_layers, int pp, int s);
  // The routed experts [first, first + count) of ep rank e.
  static std::pair<int64_t, int64_t> expert_range(int64_t num_experts, int ep, int e);
};

// Throws moxi::error when the sizes cannot run this config on world_size ranks: world not a multiple of
// pp, tp or ep not dividing a stage's ranks, heads (KDA, MLA, SWA query and key-value), the dense FFN or the
// shared experts' width not divisible by tp, experts not divisible by ep, more stages than layers.
void check_layout(const formats::model_config& config, const parallel_sizes& sizes, int world_size);

// The config a tensor-parallel rank's layers run under: head counts and FFN widths divided by tp. The DSA
// indexer (its weights; its scan over the cached keys is split by key position, layers/mla.h), the MLA
// latents, the routed experts and everything outside the decoder layers stay whole.
formats::model_config local_config(const formats::model_config& config, int tp);

// Which axis of a decoder-layer tensor tensor parallelism splits (tp > 1), by its name: the head / FFN rows
// of q, k, v, gates, conv, f_b, b, dt_bias, q_b, kv_b, gate_proj, up_proj (axis 0), A_log's head axis (2),
// and the columns of o_proj and down_proj (1). nullopt: every rank reads the tensor whole (norms, the
// MLA latent down-projections, the DSA indexer, routers, routed experts, embeddings, vision).
std::optional<int> tp_split_axis(const std::string& tensor_name);

}  // namespace moxi::model
