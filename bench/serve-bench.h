// `moxi bench serve --url URL | --model DIR`: the client side of serving, measured like `vllm bench serve`
// (random token-id prompts, streaming /v1/completions, ignore_eos): request, output and total token
// throughput, TTFT / TPOT / ITL / end-to-end latency mean, p50 and p99 at each concurrency level, output
// throughput as a multiple of concurrency 1, and (--multi-turn) the TTFT of multi-turn conversations whose
// turns extend the previous prompt and answer, with the server's prefix cache on vs off; and /health latency
// alone vs under --idle-connections idle keep-alive connections. With --model the
// server runs in this process (once with the prefix cache, once without for the multi-turn comparison).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace moxi::bench {

struct serve_bench_options {
  std::string url;        // http://host:port of a running server; empty: start one in process on model_dir
  std::string model_dir;  // for the in-process server
  std::string api_key;
  std::vector<int> concurrency = {1, 4, 16, 64};
  int prompts = 64;         // requests per concurrency level
  double request_rate = 0;  // > 0: Poisson arrivals at this many requests/s (still at most `concurrency`
                            // in flight, as vLLM's --request-rate with --max-concurrency); 0: all at once
  int input_len = 128;      // prompt tokens
  int output_len = 64;      // generated tokens per request (max_tokens with ignore_eos)
  bool multi_turn = false;
  int conversations = 4;  // multi-turn: conversations, run one after another (TTFT without queueing)
  int turns = 4;          // multi-turn: turns per conversation
  int turn_len = 32;      // multi-turn: tokens of each follow-up user message
  uint64_t seed = 0;      // prompt contents (vary it against a warm server: vLLM's advice)
  std::string executor = "batched";  // the in-process server's executor_mode: batched, parallel, sequential
  // Goodput SLOs in ms (vLLM --goodput ttft:MS tpot:MS e2el:MS); 0 = no limit. With any set, a request
  // counts towards goodput only when it meets every one.
  double slo_ttft_ms = 0, slo_tpot_ms = 0, slo_e2el_ms = 0;
  // /health latency alone and with this many idle keep-alive connections open (each made one request and
  // then waits); 0: not measured.
  int idle_connections = 1000;
  int health_probes = 50;  // /health requests timed in each state
};

struct latency_stats {
  double mean = 0, p50 = 0, p99 = 0;  // milliseconds
  size_t count = 0;                   // samples
};

// One concurrency level: `prompts` requests with at most `concurrency` in flight.
struct level_result {
  int concurrency = 0;
  int completed = 0, failed = 0;
  std::string first_error;
  double duration_s = 0;
  int64_t input_tokens = 0, output_tokens = 0;  // from the responses' usage
  int64_t output_events = 0;                    // SSE chunks that carried tokens
  double request_throughput = 0, output_throughput = 0, total_token_throughput = 0;
  int good = 0;                // completed requests meeting every goodput SLO
  double request_goodput = 0;  // good / duration (req/s); only with an SLO set
  latency_stats ttft, tpot, itl, e2el;
};

// The multi-turn run against one server: per turn index, over the conversations.
struct turn_result {
  double ttft_mean_ms = 0;
  double prompt_tokens_mean = 0, cached_tokens_mean = 0;
};
struct multi_turn_result {
  std::string server;  // "prefix cache on", "prefix cache off" or the URL
  int completed = 0, failed = 0;
  std::string first_error;
  std::vector<turn_result> turns;
  double ttft_later_turns_ms = 0;  // mean TTFT of turns 2.. (the ones a prefix cache can serve)
};

// /health latency without and with idle keep-alive connections (a server that pins a thread per
// connection stalls here).
struct idle_result {
  int requested = 0, opened = 0;  // idle connections asked for and actually holding
  int failed = 0;                 // /health probes without a 200
  std::string first_error;
  latency_stats health_alone, health_idle;
};

struct serve_bench_report {
  serve_bench_options options;
  std::string model;  // the served model id
  std::vector<level_result> levels;
  std::vector<multi_turn_result> multi_turn;
  std::optional<idle_result> idle;
  nlohmann::json to_json() const;
  std::string table() const;
};

// Runs the benchmark; progress lines go to `progress` (nullptr: none). Throws moxi::error for bad options,
// a model directory that does not load, or a server that cannot be reached.
serve_bench_report run_serve_bench(const serve_bench_options& options, std::FILE* progress = stderr);

void add_serve_bench(CLI::App& bench);

}  // namespace moxi::bench
