// metrics: Prometheus text exposition. Bucket bounds are vLLM's for the same histograms, so dashboards
// written for vLLM read these with the prefix changed.
#include "moxi/serve/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace moxi::serve {
namespace {

// The shortest decimal that reads back as v (bucket bounds print as 0.1, not 0.10000000000000001).
std::string num(double v) {
  char buf[64];
  if (v == std::floor(v) && std::abs(v) < 0x1p53) {  // counts print as integers (60, not 6e+01)
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

// Label values escape backslash, double quote and newline (exposition format rules).
std::string escape(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (c == '\\' || c == '"')
      r += '\\', r += c;
    else if (c == '\n')
      r += "\\n";
    else
      r += c;
  }
  return r;
}

void header(std::string& out, const std::string& name, const char* type, const char* help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

}  // namespace

void histogram::observe(double v) {
  const size_t b = size_t(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  ++counts_[b];
  sum_ += v;
  ++count_;
}

void histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  uint64_t cum = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    cum += counts_[i];
    const std::string le = i < bounds_.size() ? num(bounds_[i]) : "+Inf";
    out += name + "_bucket{" + labels + ",le=\"" + le + "\"} " + std::to_string(cum) + "\n";
  }
  out += name + "_sum{" + labels + "} " + num(sum_) + "\n";
  out += name + "_count{" + labels + "} " + std::to_string(count_) + "\n";
}

metrics::metrics(std::string model_name)
    : model_(std::move(model_name)),
      ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
             1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}),
      itl_({0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
            40.0, 80.0}),
      e2e_({0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
            30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}),
      queue_({0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
              30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}) {}

void metrics::first_token(double ttft_s, double queue_s) {
  std::lock_guard<std::mutex> l(m_);
  ttft_.observe(ttft_s);
  queue_.observe(queue_s);
}

void metrics::inter_token(double seconds, int64_t n) {
  std::lock_guard<std::mutex> l(m_);
  // A step that delivers n tokens at once counts as n gaps of seconds / n (vLLM does the same per token).
  for (int64_t i = 0; i < n; ++i) itl_.observe(seconds / double(n));
}

void metrics::request_finished(const std::string& reason, double e2e_s, int64_t prompt_tokens,
                               int64_t generation_tokens) {
  std::lock_guard<std::mutex> l(m_);
  e2e_.observe(e2e_s);
  ++success_[reason];
  prompt_tokens_ += prompt_tokens;
  generation_tokens_ += generation_tokens;
}

void metrics::set_connections(int64_t open) {
  std::lock_guard<std::mutex> l(m_);
  connections_ = open;
}

void metrics::http_error(int status) {
  std::lock_guard<std::mutex> l(m_);
  ++http_errors_[status];
}

void metrics::set_engine(const engine_gauges& g) {
  std::lock_guard<std::mutex> l(m_);
  engine_ = g;
}

engine_gauges metrics::engine() const {
  std::lock_guard<std::mutex> l(m_);
  return engine_;
}

std::string metrics::render() const {
  std::lock_guard<std::mutex> l(m_);
  const std::string lab = "model_name=\"" + escape(model_) + "\"";
  std::string o;
  auto gauge = [&](const std::string& name, const char* help, double v) {
    header(o, name, "gauge", help);
    o += name + "{" + lab + "} " + num(v) + "\n";
  };
  auto counter = [&](const std::string& name, const char* help, double v) {
    header(o, name, "counter", help);
    o += name + "{" + lab + "} " + num(v) + "\n";
  };
  gauge("moxi:num_requests_running", "Requests in the running batch.", double(engine_.running));
  gauge("moxi:num_requests_waiting", "Requests waiting for admission.", double(engine_.waiting));
  gauge("moxi:kv_cache_usage_perc", "Fraction of KV-cache blocks held by requests (1 = full).",
        engine_.kv_cache_usage);
  gauge("moxi:num_prefill_tokens_pending",
        "Prompt tokens of unfinished requests not computed yet (a long prompt's prefill progress).",
        double(engine_.prefill_tokens_pending));
  counter("moxi:prefill_tokens_total", "Prompt tokens computed by the engine, counted as each step ends.",
          double(engine_.prefill_tokens));
  if (engine_.draft_tokens > 0) {
    // vLLM: vllm:spec_decode_num_drafts, _num_draft_tokens, _num_accepted_tokens, _per_pos.
    const auto& d = engine_.drafts;
    counter("moxi:spec_decode_num_drafts_total", "Decode steps that verified drafts of the MTP head.",
            double(d.steps));
    counter("moxi:spec_decode_num_draft_tokens_total", "Draft tokens verified.", double(d.drafted));
    counter("moxi:spec_decode_num_accepted_tokens_total", "Draft tokens kept by the acceptance rule.",
            double(d.accepted));
    header(o, "moxi:spec_decode_num_accepted_tokens_per_pos_total", "counter",
           "Draft tokens kept, by their position among a step's drafts (0: the first).");
    for (int64_t j = 0; j < engine_.draft_tokens; ++j)
      o += "moxi:spec_decode_num_accepted_tokens_per_pos_total{" + lab + ",position=\"" + std::to_string(j) +
           "\"} " + std::to_string(size_t(j) < d.accepted_at.size() ? d.accepted_at[size_t(j)] : 0) + "\n";
  }
  counter("moxi:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
          double(engine_.prefix_query_tokens));
  counter("moxi:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.",
          double(engine_.prefix_hit_tokens));
  counter("moxi:num_preemptions_total", "Requests preempted (recomputed) for lack of memory.",
          double(engine_.preemptions));
  counter("moxi:prompt_tokens_total", "Prompt tokens of finished requests.", double(prompt_tokens_));
  counter("moxi:generation_tokens_total", "Generated tokens of finished requests.",
          double(generation_tokens_));
  counter("moxi:requests_received_total", "Completion requests accepted for generation.",
          double(requests_received_));
  header(o, "moxi:request_success_total", "counter", "Finished requests by finish reason.");
  for (const char* r : {"stop", "length", "abort", "error"}) {
    auto it = success_.find(r);
    o += "moxi:request_success_total{" + lab + ",finished_reason=\"" + r + "\"} " +
         std::to_string(it == success_.end() ? 0 : it->second) + "\n";
  }
  header(o, "moxi:http_connections", "gauge", "Open HTTP connections (idle keep-alive ones included).");
  o += "moxi:http_connections{" + lab + "} " + std::to_string(connections_) + "\n";
  header(o, "moxi:http_errors_total", "counter", "HTTP error responses by status code.");
  if (http_errors_.empty()) o += "moxi:http_errors_total{" + lab + ",status=\"500\"} 0\n";
  for (const auto& [status, n] : http_errors_)
    o += "moxi:http_errors_total{" + lab + ",status=\"" + std::to_string(status) + "\"} " +
         std::to_string(n) + "\n";
  header(o, "moxi:time_to_first_token_seconds", "histogram", "Time from arrival to the first token.");
  ttft_.render(o, "moxi:time_to_first_token_seconds", lab);
  header(o, "moxi:inter_token_latency_seconds", "histogram", "Time between consecutive output tokens.");
  itl_.render(o, "moxi:inter_token_latency_seconds", lab);
  header(o, "moxi:e2e_request_latency_seconds", "histogram", "Time from arrival to the last token.");
  e2e_.render(o, "moxi:e2e_request_latency_seconds", lab);
  header(o, "moxi:request_queue_time_seconds", "histogram", "Time from arrival to the first scheduled step.");
  queue_.render(o, "moxi:request_queue_time_seconds", lab);
  return o;
}

}  // namespace moxi::serve
