// server: the OpenAI-compatible HTTP server. One engine thread owns the scheduler, the hybrid memory and
// the executor and runs engine_core steps while there is work (continuous batching); the HTTP transport
// (http-transport.h, an event loop) reads requests, and one handler thread per completion tokenizes,
// enqueues it and streams tokens back (SSE or one JSON body). A client that goes away cancels its request,
// freed at the next step. Endpoints, limits and metrics: docs/serving.md "HTTP API"; the threat model and
// every limit's default: docs/security.md "Server".
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "moxi/memory/hybrid-memory.h"
#include "moxi/serve/executor.h"
#include "moxi/serve/group.h"
#include "moxi/serve/metrics.h"
#include "moxi/serve/scheduler.h"

namespace moxi::serve {

struct server_config {
  std::string model_dir;    // config.json, safetensors, tokenizer.json
  std::string served_name;  // the model id of the API; default: the directory's name
  std::string host = "127.0.0.1";
  int port = 8000;                    // 0: an ephemeral port (see server::port())
  std::vector<std::string> api_keys;  // empty: no authentication

  // Engine.
  int64_t max_batch_tokens = 2048;  // token budget per step
  int32_t max_running = 64;         // running requests at most
  int64_t max_model_len = 0;        // prompt + max_tokens; 0: the model's max_position_embeddings, at most
                                    // kDefaultServingLen (plan_serving)
  int32_t block_size = 16;
  int32_t num_blocks = 0;           // 0: enough for one max_model_len sequence, at least 2048
  int32_t num_snapshot_slots = -1;  // KDA prefix snapshots; -1: 2 * max_running
  bool prefix_caching = true;
  executor_mode executor = executor_mode::batched;  // how a step with several requests runs the model
  int64_t draft_tokens = 0;  // speculative decoding: MTP drafts verified per decode step (0: off)

  // Limits.
  size_t max_body_bytes = 1 << 20;        // Content-Length or chunked; 413 beyond
  size_t max_header_bytes = 64 << 10;     // request line + header fields; 431 beyond
  size_t max_header_count = 100;          // header fields; 431 beyond
  size_t max_connections = 4096;          // open connections; 503 and close beyond
  double header_timeout_s = 10;           // a new connection's whole request header (at most io_timeout_s)
  double keep_alive_timeout_s = 5;        // an idle keep-alive connection's next request header
  int64_t max_prompt_tokens = 0;          // 0: max_model_len - 1
  int64_t max_tokens_limit = 0;           // largest max_tokens accepted; 0: max_model_len - 1
  int64_t default_max_tokens = 16;        // when the request gives none (OpenAI's default for completions)
  int64_t max_images_per_request = 8;     // image_url parts per request (a model with a vision encoder)
  std::vector<std::string> allowed_media_domains;  // hosts of http(s) image URLs to fetch; empty: none
  int32_t max_concurrent_requests = 256;  // completions in flight; 429 beyond
  double request_timeout_s = 600;         // a request still generating after this is cancelled
  int io_timeout_s = 30;                  // a whole body, and each write, to a slow client
  double drain_timeout_s = 30;            // graceful shutdown: in-flight requests get this long to finish,
                                          // then 1 s to send their "abort", then every connection is closed
  int io_threads = 2;                     // the HTTP event loop's threads
  bool log_requests = false;

  // Serving across ranks (docs/distributed.md "Serving"): this process is rank 0 of the group, `load`
  // carries its parallel layout and `group` the channel to the other ranks (serve/group.h). Empty: one
  // process.
  model::load_options load;
  std::shared_ptr<const group_channel> group;
};

// What the engine thread published after its last step (for tests and /metrics).
struct engine_snapshot {
  engine_gauges gauges;
  memory::memory_stats memory;
  int64_t live_requests = 0;    // requests the engine still tracks
  int64_t computed_tokens = 0;  // tokens the model computed, all steps together
  int64_t aborted = 0;          // requests cancelled in the engine (disconnects, stop strings, timeouts)
  int64_t active_http = 0;      // completion requests inside handlers
  int64_t connections = 0;      // open HTTP connections
};

// The serving length and block pool a config gets for a model (plan_serving).
inline constexpr int64_t kDefaultServingLen = 32768;         // max_model_len when none is given
inline constexpr int64_t kMaxServingLen = int64_t(1) << 24;  // the largest --max-model-len accepted
inline constexpr int64_t kMaxBlocks = int64_t(1) << 22;      // KV-cache blocks at most
struct serving_plan {
  int64_t max_model_len = 0;
  int32_t num_blocks = 0;
  std::string note;  // what was clamped, for the log; empty when nothing was
};
// Validates the engine sizes of `cfg` against the model's max_position_embeddings and sizes the caches
// from the serving limit (never from the model maximum, which may be 2^62). Throws moxi::error with a
// message naming the option.
serving_plan plan_serving(const server_config& cfg, int64_t max_position_embeddings);

class server {
 public:
  // Loads the model and tokenizer; throws moxi::error on a bad directory or config.
  explicit server(server_config config);
  ~server();
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  // Binds and starts the engine and HTTP threads; returns once requests can be served. In a serving group,
  // first sends the engine settings to the other ranks (they must be in run_follower).
  void start();
  // The serving group lost a rank (or is being stopped): from now on /health and new completions get 503
  // with `why`, and in-flight requests end with that error (a 503 body, or an error event in a stream).
  // Waits up to `grace_s` for their handlers to answer. Callable from any thread, also while the engine
  // thread is stuck in a collective; the caller then ends the process.
  void fail_group(const std::string& why, double grace_s = 0.8);
  // Graceful shutdown: new completions get 503, in-flight ones get drain_timeout_s to finish and are then
  // cancelled, then the listener stops. Idempotent; also run by the destructor.
  void shutdown();
  int port() const;
  const server_config& config() const;
  const model::model& model() const;  // this rank's slice of it in a serving group
  engine_snapshot snapshot() const;
  std::string metrics_text() const;

  struct impl;

 private:
  std::unique_ptr<impl> impl_;
};

}  // namespace moxi::serve
