// Bounded load on loopback: 128 concurrent streaming clients (chat and completions mixed, some sharing a
// prompt prefix) against one in-process server with continuous batching: zero failed requests, every SSE
// stream well-formed and ending in [DONE], greedy streams of the same prompt identical, memory back to
// baseline afterwards. Also prints output-token throughput at concurrency 1 and 16 (same run, a ratio).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <mutex>

#include "serve/http-test-util.h"

namespace moxi::serve {
namespace {

using namespace moxi::serve::testing;

struct client_result {
  bool ok = false;
  std::string error, text;
  int64_t completion_tokens = 0;
};

client_result run_stream(const server& s, int i, int max_tokens) {
  client_result r;
  auto c = client_for(s);
  const bool chat = i % 2 == 0;
  json body = {{"max_tokens", max_tokens},
               {"temperature", 0},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  // Four prompt families: requests of one family share their prefix (prefix-cache hits under load).
  const std::string prefix = "Shared system preamble number " + std::to_string(i % 4) +
                             " that is long enough to fill "
                             "more than one block of sixteen tokens in the paged cache. ";
  if (chat)
    body["messages"] = {{{"role", "system"}, {"content", prefix}}, {{"role", "user"}, {"content", "q"}}};
  else
    body["prompt"] = prefix + "Continue:";
  auto res = c->Post(chat ? "/v1/chat/completions" : "/v1/completions", body.dump(), "application/json");
  if (!res) {
    r.error = "no response: " + httplib::to_string(res.error());
    return r;
  }
  if (res->status != 200) {
    r.error = "status " + std::to_string(res->status) + ": " + res->body;
    return r;
  }
  const auto sse = parse_sse(res->body, chat);
  if (!sse.ok) {
    r.error = sse.error;
    return r;
  }
  r.text = sse.text;
  r.completion_tokens = sse.usage.value("completion_tokens", int64_t(0));
  if (r.completion_tokens < 1) {
    r.error = "no usage chunk";
    return r;
  }
  r.ok = true;
  return r;
}

// Runs `total` requests with `concurrency` client threads; returns generated tokens per second.
double throughput(const server& s, int concurrency, int total, int max_tokens,
                  std::vector<client_result>* out) {
  std::vector<client_result> results(static_cast<size_t>(total));
  std::atomic<int> next{0};
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < concurrency; ++t)
    threads.emplace_back([&] {
      for (int i; (i = next.fetch_add(1)) < total;) results[size_t(i)] = run_stream(s, i, max_tokens);
    });
  for (auto& t : threads) t.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int64_t tokens = 0;
  for (const auto& r : results) tokens += r.completion_tokens;
  if (out) *out = std::move(results);
  return double(tokens) / secs;
}

TEST(http_load, ManyConcurrentStreamsAllSucceedAndMemoryReturnsToBaseline) {
  auto cfg = tiny_config();
  cfg.max_running = 32;
  cfg.num_blocks = 2048;
  cfg.max_concurrent_requests = 256;
  auto s = start_server(cfg);
  const int kClients = 128;
  std::vector<client_result> results;
  throughput(*s, kClients, kClients, 24, &results);
  int failed = 0;
  for (size_t i = 0; i < results.size(); ++i)
    if (!results[i].ok) {
      ++failed;
      ADD_FAILURE() << "client " << i << ": " << results[i].error;
    }
  EXPECT_EQ(failed, 0);
  // Greedy requests of the same prompt agree whatever they were batched with.
  for (size_t i = 4; i < results.size(); ++i) EXPECT_EQ(results[i].text, results[i - 4].text) << i;
  EXPECT_TRUE(eventually([&] { return at_baseline(*s); }, 30));
  const auto snap = s->snapshot();
  EXPECT_GT(snap.gauges.prefix_hit_tokens, 0);
  EXPECT_EQ(snap.memory.used_snapshot_slots <= snap.memory.num_snapshot_slots, true);
}

TEST(http_load, ThroughputAtConcurrency16VersusOne) {
  auto cfg = tiny_config();
  auto s = start_server(cfg);
  throughput(*s, 2, 4, 8, nullptr);  // warm up
  const double one = throughput(*s, 1, 8, 32, nullptr);
  const double sixteen = throughput(*s, 16, 64, 32, nullptr);
  std::printf("output tokens/s: concurrency 1 = %.1f, concurrency 16 = %.1f (%.2fx)\n", one, sixteen,
              sixteen / one);
  EXPECT_GT(one, 0);
  EXPECT_GT(sixteen, 0);
  EXPECT_TRUE(eventually([&] { return at_baseline(*s); }, 30));
}

}  // namespace
}  // namespace moxi::serve
