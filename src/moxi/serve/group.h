// Serving across ranks (`mpirun -np N moxi serve --tp T --ep E --pp P`, docs/distributed.md "Serving").
//
// World rank 0, the leader, runs the HTTP API, the admission of requests and the sampling. Every rank runs
// the same engine step over its own slice of the model: a replica of the scheduler and of the hybrid
// memory (block tables, state slots, prefix cache) sized for the rank's layers and heads. The replicas stay
// identical because they see the same inputs in the same order, which the leader broadcasts:
//   before a step: the requests admitted and cancelled since the last one (prompt, limits, stop tokens,
//                  image rows), or nothing at all once a second while idle (a heartbeat every rank answers);
//   after the forward: the token sampled for each request (and the constrained outputs that ended), with
//                  a hash of the leader's schedule that every rank checks against its own.
// So a step's batch, its prefill chunks, prefix hits, preemptions and forks are decided on every rank by
// the same code from the same inputs, and the model's collectives line up. Caches (KDA state, latent
// blocks) live on the ranks that own the layers.
//
// Failure: a rank that stops answering leaves every other rank waiting in a collective; the hang detector
// of the launcher (dist::watch_calls) ends the job, and on the leader the server first fails its in-flight
// requests and turns /health to 503 (server::fail_group). A rank that dies makes mpirun end the others.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "moxi/memory/hybrid-memory.h"
#include "moxi/model/model.h"
#include "moxi/model/parallel.h"
#include "moxi/serve/executor.h"
#include "moxi/serve/model-runner.h"
#include "moxi/serve/scheduler.h"

namespace moxi::serve {

// A request as the leader admitted it; the other ranks add the same.
struct group_add {
  request_id id = 0;
  std::vector<request_id> forks;
  request_params params;
  std::shared_ptr<const std::vector<float>> media;  // image rows of the prompt's placeholders, or null
};

// What changed before one step.
struct group_events {
  std::vector<group_add> adds;
  std::vector<request_id> cancels;
  bool empty() const { return adds.empty() && cancels.empty(); }
};

// What the leader sampled in one step.
struct group_samples {
  uint64_t schedule_hash = 0;
  sampled_tokens sampled;
  std::set<request_id> ended;
};

// The engine settings every replica must share: the leader's are sent once at start.
struct group_engine {
  memory::memory_options memory;
  scheduler_config scheduler;
  executor_mode mode = executor_mode::batched;
};

// A hash of a step's batch (requests, sequences, positions, token counts, forks, preemptions, aborts).
uint64_t schedule_hash(const scheduler_output& out);

// The leader's and the followers' ends of the broadcasts above, over the world group. Not thread-safe: the
// engine thread is the only caller once serving runs.
class group_channel {
 public:
  // `fatal` runs when this rank cannot go on (a replica diverged, a step failed): it must end the job
  // (dist::abort_job), so that no rank waits forever; it should not return.
  group_channel(std::shared_ptr<const model::process_group> world, std::function<void(const std::string&)> fatal);

  bool leader() const { return world_->rank() == 0; }
  int rank() const { return world_->rank(); }
  [[noreturn]] void fail(const std::string& why) const;

  // Leader: the settings (once), each step's events (an empty one: a heartbeat), each step's samples, stop.
  void send_engine(const group_engine& e) const;
  void send_events(const group_events& ev) const;
  void send_samples(const group_samples& s) const;
  void send_stop() const;

  // Followers, in the same order.
  group_engine receive_engine() const;
  // False: the leader stopped serving.
  bool receive_events(group_events& ev) const;
  group_samples receive_samples() const;

 private:
  void send(int64_t kind, const std::vector<uint8_t>& payload) const;
  int64_t receive(std::vector<uint8_t>& payload) const;
  std::vector<uint8_t> receive_kind(int64_t kind, const char* what) const;  // fails on another kind
  std::shared_ptr<const model::process_group> world_;
  std::function<void(const std::string&)> fatal_;
};

// The leader's model runner: the executor's step (forward, then sampling), whose samples then go to the
// other ranks. A failure of the step is fatal for the group (the others may be inside a collective).
class group_leader_runner final : public model_runner {
 public:
  group_leader_runner(executor& exec, const group_channel& channel) : exec_(exec), channel_(channel) {}
  sampled_tokens execute(const scheduler_output& step) override;
  const std::set<request_id>& ended() const override { return exec_.ended(); }

 private:
  executor& exec_;
  const group_channel& channel_;
};

// A follower rank's whole serving life: receives the engine settings, then runs the leader's steps on its
// replica until the leader stops. `m` is this rank's slice of the model.
void run_follower(const model::model& m, const group_channel& channel);

}  // namespace moxi::serve
