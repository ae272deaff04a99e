// Data parallelism for `moxi train sft` over libtorch's own c10d: a Gloo process group (ProcessGroupGloo,
// Debian's libtorch) that the ranks join through a c10d store (FileStore or TCPStore). Every rank holds the
// whole model; each trains its slice of every global batch, and the gradients are summed across the ranks.
// docs/train.md "Data-parallel training" describes launching, the flags and what is all-reduced.
//
// The c10d headers stay inside dist.cpp: this header is plain C++ plus torch tensors.
#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace moxi::train {

// Where this process sits in a data-parallel run. world == 1 (the default): a single process, no group.
struct dist_layout {
  int rank = 0;
  int world = 1;
  // How the ranks meet: "file:PATH" (a c10d FileStore on a file every rank can reach; a fresh path per
  // launch) or "tcp:HOST:PORT" (a c10d TCPStore served by rank 0 on PORT; the others connect to HOST).
  std::string store;
  double timeout_s = 300;  // joining: the store reachable and every rank present within this many seconds
  std::string origin;      // where rank/world came from (for messages): "--dist-rank", "MOXI_DIST_RANK", ...
};

// The layout from the flags (a negative rank/world, an empty store, a negative timeout: not given), else the
// environment: MOXI_DIST_RANK / MOXI_DIST_WORLD / MOXI_DIST_STORE / MOXI_DIST_TIMEOUT, else mpirun's
// OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE (Open MPI sets them for every process it starts; moxi never
// links MPI). Throws moxi::error on a bad layout: a rank outside [0, world), a world without a store, a store
// that is neither file: nor tcp:HOST:PORT, a rank without a world, a value that is not a number.
dist_layout resolve_dist_layout(int flag_rank, int flag_world, const std::string& flag_store,
                                double flag_timeout_s);

// Whether the environment asks for more than one process (MOXI_DIST_WORLD or OMPI_COMM_WORLD_SIZE > 1):
// the commands that train single-process only (rl, loop) refuse to start then.
bool environment_asks_for_ranks();

// A joined process group. All calls are collective: every rank makes the same calls in the same order.
// A failure (a rank that stopped, a broken connection) throws moxi::error naming this rank and `what`.
class dist_group {
 public:
  // Connects to the store, waits until all `world` ranks have joined (at most timeout_s; a store that is
  // unreachable, or a FileStore file left over from an earlier launch, is an error saying so) and builds the
  // Gloo process group. Returns null for world == 1.
  static std::unique_ptr<dist_group> join(const dist_layout& l);
  ~dist_group();
  dist_group(const dist_group&) = delete;
  dist_group& operator=(const dist_group&) = delete;

  int rank() const { return rank_; }
  int world() const { return world_; }

  // In place, on every rank: the element-wise sum (or maximum) over the ranks.
  void all_reduce_sum(torch::Tensor& t, const char* what);
  void all_reduce_max(torch::Tensor& t, const char* what);
  // In place: rank 0's values on every rank.
  void broadcast(torch::Tensor& t, const char* what);
  // Returns when every rank has reached it.
  void barrier(const char* what);

 private:
  struct impl;
  dist_group(int rank, int world, std::unique_ptr<impl> p);
  int rank_, world_;
  std::unique_ptr<impl> p_;
};

// ---- what data-parallel training exchanges (null group: single process, nothing to do)
// ---------------------

// Sums the gradients of `params` over the ranks, in one flat buffer per ~64 MB. A parameter that has no
// gradient on a rank (an expert no token of its slice was routed to) counts as zero there; one that has none
// on any rank keeps none, exactly as in a single process (AdamW then skips it).
void all_reduce_gradients(dist_group* g, const std::vector<torch::Tensor>& params);

// Copies rank 0's values of every tensor into the others' (parameters at start and after a resume).
void broadcast_tensors(dist_group* g, const std::vector<torch::Tensor>& tensors, const char* what);

// Throws moxi::error on every rank when the tensors differ between this rank and rank 0 (compared through
// their float64 sum and sum of squares): ranks that drifted apart would train different models.
void check_same_on_all_ranks(dist_group* g, const std::vector<torch::Tensor>& tensors, const char* what);

// Throws moxi::error on every rank when `text` (a recipe, a step) differs between this rank and rank 0.
void check_same_text(dist_group* g, const std::string& text, const char* what);

// check_same_text over a run's recipe as JSON, less `threads` (which may differ per rank), with the
// command's --override and --force.
void check_same_recipe(dist_group* g, nlohmann::json recipe, bool override_recipe, bool force_export);

// The largest of the ranks' signal numbers (0: none): a signal to any rank stops them all after the same
// step (mpirun forwards Ctrl-C to every rank, but not necessarily within the same step). `sig` alone
// without a group.
int agree_on_interrupt(dist_group* g, int sig);

// This rank's rows [begin, end) of a global batch of `rows` rows: contiguous, equal slices when world
// divides rows (the recipe's batch size always; an epoch's last, shorter batch may leave a rank fewer or
// no rows).
std::pair<size_t, size_t> rank_slice(size_t rows, int rank, int world);

}  // namespace moxi::train
