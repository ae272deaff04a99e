// `moxi serve [MODEL_DIR | -m DIR] [--host --port --api-key KEY | --api-key-file F --max-batch-tokens N
// --max-running N ...]`: the OpenAI-compatible HTTP server (default model: cli::default_model_dir())
// (serve/server.h, docs/serving.md) until SIGTERM or SIGINT, then a graceful shutdown (stop taking requests,
// finish or cancel in-flight ones) and exit 0.
// Under `mpirun -np N ... --tp T --ep E --pp P`: rank 0 serves HTTP and the other ranks follow its steps
// (serve/group.h, docs/distributed.md "Serving"). A group cannot drain (mpirun stops every rank at once): a
// signal, a lost rank or a hung one fails the in-flight requests with 503 and exits 75.
#include <atomic>
#include <chrono>
#include <thread>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "moxi/base/error.h"
#include "moxi/cli/command.h"
#include "moxi/cli/model-dir.h"
#include "moxi/cli/options.h"
#include "moxi/dist/flags.h"
#include "moxi/dist/mpi.h"
#include "moxi/serve/http-auth.h"
#include "moxi/serve/server.h"

namespace moxi::cli {
namespace {

// The server whose in-flight requests a lost rank fails (rank 0 of a serving group).
std::atomic<serve::server*> g_leader{nullptr};

[[noreturn]] void end_group(const std::string& why) {
  if (serve::server* s = g_leader.load()) s->fail_group(why);
  dist::abort_job(75);
  std::_Exit(75);
}

template <class Args>
void serve_group(Args& a) {
  auto& cfg = a.cfg;
  // Rank 0 takes SIGTERM and SIGINT by sigwait below: blocked before any thread starts (MPI's own threads
  // included), so that no other thread receives them. The other ranks keep the default action, so mpirun's
  // SIGTERM ends them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  cfg.load = a.parallel.load_options();
  const auto& layout = *cfg.load.parallel;
  auto channel = std::make_shared<serve::group_channel>(layout.world, end_group);
  if (!channel->leader()) {
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    const auto m = model::model::load(cfg.model_dir, cfg.load);
    dist::report_rank(m, "serve");
    a.parallel.loaded();
    serve::run_follower(m, *channel);
    return;
  }
  cfg.group = channel;
  serve::server srv(cfg);
  g_leader = &srv;
  // A hung rank: rank 0's own collective waits past --rank-timeout. Its clients get the error, and /health
  // says 503 for a moment (probes, load balancers) before the process ends.
  dist::on_hang([&srv](const std::string& why) {
    const auto t0 = std::chrono::steady_clock::now();
    srv.fail_group("the serving group lost a rank: " + why, 2.0);
    std::this_thread::sleep_until(t0 + std::chrono::milliseconds(1500));
  });
  dist::report_rank(srv.model(), "serve");
  a.parallel.loaded();
  srv.start();
  std::fprintf(stderr, "moxi serve: %s on http://%s:%d (OpenAI API under /v1), %d ranks %s\n",
               srv.config().served_name.c_str(), cfg.host.c_str(), srv.port(), layout.world_size,
               layout.sizes.to_string().c_str());
  int sig = 0;
  sigwait(&set, &sig);
  // mpirun sends SIGTERM to every rank when one dies, and SIGKILL a moment later (odls_base_sigkill_timeout,
  // 1 s by default): the in-flight requests are failed at once, not drained.
  std::fprintf(stderr, "moxi serve: signal %d, the serving group is stopping\n", sig);
  srv.fail_group("the serving group is stopping (signal " + std::to_string(sig) +
                 ": a rank ended or the job was stopped)");
  std::fflush(stderr);
  std::_Exit(75);
}

void setup_serve(CLI::App& root) {
  auto* cmd = root.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");
  struct args {
    serve::server_config cfg;
    std::string key, key_file;
    bool no_prefix_cache = false;
    dist::parallel_flags parallel;
  };
  auto a = std::make_shared<args>();
  auto& c = a->cfg;
  // The model as `vllm serve MODEL` takes it, or as -m/--model like every other command.
  auto* positional = cmd->add_option("MODEL_DIR", c.model_dir, "model directory (the same as --model)");
  add_model_option(cmd, c.model_dir, /*required=*/false)->excludes(positional);
  cmd->add_option("--served-model-name", c.served_name, "model id in the API (default: the directory name)");
  cmd->add_option("--host", c.host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", c.port, "port to listen on (0: any free port)")
      ->check(tcp_port())
      ->capture_default_str();
  auto* key = cmd->add_option("--api-key", a->key, "require 'Authorization: Bearer KEY' on /v1/*");
  cmd->add_option("--api-key-file", a->key_file, "file with accepted API keys, one per line")
      ->excludes(key)
      ->check(CLI::ExistingFile);
  cmd->add_option("--max-batch-tokens", c.max_batch_tokens, "token budget per engine step")
      ->check(integer_in(1, int64_t(1) << 30))
      ->capture_default_str();
  cmd->add_option("--max-running", c.max_running, "requests in the running batch at most")
      ->check(integer_in(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--max-model-len", c.max_model_len, "prompt + max_tokens limit (0: the model's)")
      ->check(integer_in(0, serve::kMaxServingLen))
      ->capture_default_str();
  cmd->add_option("--block-size", c.block_size, "tokens per KV-cache block")
      ->check(integer_in(1, 4096))
      ->capture_default_str();
  cmd->add_option("--num-blocks", c.num_blocks, "KV-cache blocks (0: automatic)")
      ->check(integer_in(0, serve::kMaxBlocks))
      ->capture_default_str();
  cmd->add_option("--num-snapshot-slots", c.num_snapshot_slots,
                  "KDA prefix-cache snapshots (-1: 2 x max-running)")
      ->check(integer_in(-1, 1 << 20))
      ->capture_default_str();
  cmd->add_flag("--no-prefix-cache", a->no_prefix_cache, "disable prefix caching");
  cmd->add_option("--draft-tokens", c.draft_tokens,
                  "speculative decoding: tokens the MTP head drafts per request and step, verified in the "
                  "next batched forward (0: off)")
      ->check(integer_in(0, 16))
      ->capture_default_str();
  cmd->add_option(
         "--executor", c.executor,
         "how a step runs several requests: batched (one batched forward), parallel (one forward per "
         "request over the thread pool) or sequential")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, serve::executor_mode>{{"batched", serve::executor_mode::batched},
                                                      {"parallel", serve::executor_mode::parallel},
                                                      {"sequential", serve::executor_mode::sequential}}))
      ->default_str("batched");
  cmd->add_option("--max-body-bytes", c.max_body_bytes, "request body limit")
      ->check(integer_in(1, int64_t(1) << 40))
      ->capture_default_str();
  cmd->add_option("--max-prompt-tokens", c.max_prompt_tokens, "prompt length limit (0: max-model-len - 1)")
      ->check(integer_in(0, serve::kMaxServingLen))
      ->capture_default_str();
  cmd->add_option("--allowed-media-domains", c.allowed_media_domains,
                  "hosts whose http(s) image URLs the server fetches (default: none, data: URLs only)")
      ->delimiter(',');
  cmd->add_option("--max-images-per-request", c.max_images_per_request,
                  "image_url parts per request (a model with a vision encoder)")
      ->check(integer_in(0, 256))
      ->capture_default_str();
  cmd->add_option("--max-tokens-limit", c.max_tokens_limit,
                  "largest max_tokens accepted (0: max-model-len - 1)")
      ->check(integer_in(0, serve::kMaxServingLen))
      ->capture_default_str();
  cmd->add_option("--max-concurrent-requests", c.max_concurrent_requests, "completions in flight; 429 beyond")
      ->check(integer_in(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--request-timeout", c.request_timeout_s, "seconds a request may run")
      ->check(number_in(0, 1e7, /*lo_open=*/true))
      ->capture_default_str();
  cmd->add_option("--io-timeout", c.io_timeout_s, "seconds to read a body or make one write to a slow client")
      ->check(integer_in(1, 86400))
      ->capture_default_str();
  cmd->add_option("--header-timeout", c.header_timeout_s,
                  "seconds a new connection has to send its request header")
      ->check(number_in(0, 86400, /*lo_open=*/true))
      ->capture_default_str();
  cmd->add_option("--keep-alive-timeout", c.keep_alive_timeout_s,
                  "seconds an idle keep-alive connection has to send its next request header")
      ->check(number_in(0, 86400))
      ->capture_default_str();
  cmd->add_option("--max-header-bytes", c.max_header_bytes, "request header limit (431 beyond)")
      ->check(integer_in(1024, 1 << 30))
      ->capture_default_str();
  cmd->add_option("--max-header-count", c.max_header_count, "request header fields at most (431 beyond)")
      ->check(integer_in(8, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--max-connections", c.max_connections, "open connections at most (503 beyond)")
      ->check(integer_in(1, 1 << 24))
      ->capture_default_str();
  cmd->add_option("--io-threads", c.io_threads, "HTTP event-loop threads")
      ->check(integer_in(1, 1024))
      ->capture_default_str();
  cmd->add_option("--drain-timeout", c.drain_timeout_s,
                  "seconds in-flight requests get at shutdown; 1 s later every connection is closed")
      ->check(number_in(0, 86400))
      ->capture_default_str();
  cmd->add_flag("--log-requests", c.log_requests, "log every request to stderr");
  a->parallel.add(cmd);
  set_examples(cmd,
               {"moxi serve models/moxi-small --port 8000",
                "moxi serve -m /tmp/tiny --host 0.0.0.0 --port 8000 --api-key-file keys.txt --max-running 16",
                "curl http://127.0.0.1:8000/v1/chat/completions -H 'Content-Type: application/json' "
                "-d '{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}'"},
               "docs/serving.md");
  cmd->callback([a, key] {
    auto& cfg = a->cfg;
    cfg.model_dir = resolve_model_dir(cfg.model_dir);
    // `--api-key ""` (an unset variable in a script) must not quietly serve without authentication.
    if (key->count() > 0 && a->key.empty())
      throw usage_error(
          "serve: --api-key is empty; give a key (or leave --api-key out to serve without one)");
    if (key->count() > 0) cfg.api_keys = {a->key};
    if (!a->key_file.empty()) cfg.api_keys = serve::read_api_key_file(a->key_file);
    cfg.prefix_caching = !a->no_prefix_cache;
    if (a->parallel.distributed()) return serve_group(*a);
    // Signals are taken by sigwait below: blocked before any thread starts, so every thread inherits it.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    serve::server srv(cfg);
    srv.start();
    std::fprintf(stderr, "moxi serve: %s on http://%s:%d (OpenAI API under /v1)\n",
                 srv.config().served_name.c_str(), cfg.host.c_str(), srv.port());
    int sig = 0;
    sigwait(&set, &sig);
    std::fprintf(stderr, "moxi serve: signal %d, shutting down\n", sig);
    srv.shutdown();
    std::fprintf(stderr, "moxi serve: stopped\n");
  });
}

MOXI_COMMAND("serve", setup_serve);

}  // namespace
}  // namespace moxi::cli
