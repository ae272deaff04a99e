// metrics: the server's Prometheus metrics (text exposition format 0.0.4), named after vLLM's (`vllm:` ->
// `moxi:`, every series labelled model_name): latency histograms (TTFT, inter-token, e2e, queue),
// running/waiting gauges, KV-cache usage, prefix-cache query/hit token counters (counters rather than a
// ratio so PromQL can window them, as vLLM argues) and token/request counters. Thread-safe: HTTP threads
// and the engine thread record, /metrics renders.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "moxi/serve/spec-stats.h"

namespace moxi::serve {

class histogram {
 public:
  explicit histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1) {}
  void observe(double v);
  // Appends `name_bucket{...,le=...}`, `name_sum`, `name_count` lines; labels is `k="v"` text.
  void render(std::string& out, const std::string& name, const std::string& labels) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative); the last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// Gauge values the engine thread publishes after every step.
struct engine_gauges {
  int64_t running = 0, waiting = 0;
  double kv_cache_usage = 0;  // fraction of blocks held by sequences
  int64_t prefix_query_tokens = 0, prefix_hit_tokens = 0, preemptions = 0;
  int64_t prefill_tokens_pending = 0;  // prompt tokens admitted and not yet computed
  int64_t prefill_tokens = 0;          // prompt tokens computed so far (a counter)
  int64_t draft_tokens = 0;            // speculative decoding: drafts per step (0: off, no series shown)
  draft_stats drafts;
};

class metrics {
 public:
  explicit metrics(std::string model_name);

  void request_started() {
    std::lock_guard<std::mutex> l(m_);
    ++requests_received_;
  }
  void first_token(double ttft_s, double queue_s);
  void inter_token(double seconds, int64_t n = 1);
  // finished_reason: "stop", "length", "abort" or "error".
  void request_finished(const std::string& finished_reason, double e2e_s, int64_t prompt_tokens,
                        int64_t generation_tokens);
  void http_error(int status);
  void set_connections(int64_t open);  // open HTTP connections, set before render()
  void set_engine(const engine_gauges& g);
  engine_gauges engine() const;

  std::string render() const;

 private:
  mutable std::mutex m_;
  std::string model_;
  histogram ttft_, itl_, e2e_, queue_;
  engine_gauges engine_;
  int64_t prompt_tokens_ = 0, generation_tokens_ = 0, requests_received_ = 0, connections_ = 0;
  std::map<std::string, int64_t> success_;  // by finished_reason
  std::map<int, int64_t> http_errors_;      // by status code
};

}  // namespace moxi::serve
