// `moxi bench serve` end to end at tiny sizes against an in-process server on the tiny random checkpoint:
// every request completes, and the counts add up to what the options ask for (requests, prompt and output
// tokens from the server's usage, one TTFT/E2E sample per request, ITL samples = token chunks - requests,
// multi-turn prompts growing by answer + follow-up, cached tokens only with the prefix cache on). No
// timing is asserted beyond orderings that hold by definition.
#include "bench/serve-bench.h"

#include <gtest/gtest.h>

#include "moxi/base/error.h"
#include "serve/http-test-util.h"

namespace moxi::serve {
namespace {

using namespace moxi::serve::testing;

void expect_ordered(const bench::latency_stats& l, const char* what) {
  EXPECT_LE(l.p50, l.p99) << what;
  EXPECT_GE(l.mean, 0) << what;
}

TEST(serve_bench, RunsEndToEndAndItsCountsAddUp) {
  bench::serve_bench_options o;
  o.model_dir = tiny_model_dir();
  o.concurrency = {1, 3};
  o.prompts = 5;
  o.request_rate = 500;  // Poisson arrivals (a few ms apart), capped by the concurrency
  o.input_len = 20;
  o.output_len = 4;
  o.multi_turn = true;
  o.conversations = 2;
  o.turns = 3;
  o.turn_len = 6;
  o.idle_connections = 200;
  o.health_probes = 7;
  const auto r = bench::run_serve_bench(o, nullptr);
  EXPECT_EQ(r.model, "moxi-tiny");
  // /health timed alone and under 200 idle keep-alive connections, all of which were held.
  ASSERT_TRUE(r.idle);
  EXPECT_EQ(r.idle->opened, 200);
  EXPECT_EQ(r.idle->failed, 0) << r.idle->first_error;
  EXPECT_EQ(r.idle->health_alone.count, 7u);
  EXPECT_EQ(r.idle->health_idle.count, 7u);
  expect_ordered(r.idle->health_idle, "health");
  ASSERT_EQ(r.levels.size(), 2u);
  for (const auto& l : r.levels) {
    EXPECT_EQ(l.completed, 5) << l.first_error;
    EXPECT_EQ(l.failed, 0);
    EXPECT_EQ(l.input_tokens, 5 * 20);
    EXPECT_EQ(l.output_tokens, 5 * 4);
    EXPECT_EQ(l.ttft.count, 5u);
    EXPECT_EQ(l.e2el.count, 5u);
    EXPECT_EQ(l.tpot.count, 5u);
    // Every request streams 1..4 chunks with tokens; ITL samples are the gaps between them.
    EXPECT_GE(l.output_events, 5);
    EXPECT_LE(l.output_events, 5 * 4);
    EXPECT_EQ(int64_t(l.itl.count), l.output_events - 5);
    EXPECT_LE(l.ttft.mean, l.e2el.mean);
    EXPECT_NEAR(l.request_throughput * l.duration_s, 5.0, 1e-9);
    EXPECT_NEAR(l.total_token_throughput * l.duration_s, 5 * 24.0, 1e-6);
    for (const auto* s : {&l.ttft, &l.tpot, &l.itl, &l.e2el}) expect_ordered(*s, "latency");
  }
  ASSERT_EQ(r.multi_turn.size(), 2u);
  EXPECT_EQ(r.multi_turn[0].server, "prefix cache on");
  EXPECT_EQ(r.multi_turn[1].server, "prefix cache off");
  for (const auto& m : r.multi_turn) {
    EXPECT_EQ(m.completed, 2 * 3) << m.first_error;
    EXPECT_EQ(m.failed, 0);
    ASSERT_EQ(m.turns.size(), 3u);
    for (size_t k = 0; k < 3; ++k)  // the previous prompt + its 4-token answer + a 6-token follow-up
      EXPECT_EQ(m.turns[k].prompt_tokens_mean, 20 + double(k) * (4 + 6)) << m.server << " turn " << k;
  }
  // Turn 1 shares nothing; later turns reuse at least the first block (16 tokens) only with the cache on.
  EXPECT_EQ(r.multi_turn[0].turns[0].cached_tokens_mean, 0);
  for (size_t k = 1; k < 3; ++k) EXPECT_GE(r.multi_turn[0].turns[k].cached_tokens_mean, 16) << k;
  for (const auto& t : r.multi_turn[1].turns) EXPECT_EQ(t.cached_tokens_mean, 0);

  const auto j = r.to_json();
  ASSERT_EQ(j["levels"].size(), 2u);
  EXPECT_EQ(j["levels"][1]["completed"], 5);
  EXPECT_TRUE(j["levels"][1]["output_throughput_vs_concurrency_1"].is_number());
  EXPECT_TRUE(j["multi_turn_ttft_off_over_on"].is_number());
  EXPECT_EQ(j["idle_connections"]["opened"], 200);
  EXPECT_NE(r.table().find("prefix cache off"), std::string::npos);
}

TEST(serve_bench, GoodputCountsRequestsWithinEverySlo) {
  bench::serve_bench_options o;
  o.model_dir = tiny_model_dir();
  o.concurrency = {2};
  o.prompts = 3;
  o.input_len = 8;
  o.output_len = 3;
  o.slo_e2el_ms = 1e9;  // met by every request
  o.idle_connections = 0;  // not measured
  auto r = bench::run_serve_bench(o, nullptr);
  EXPECT_FALSE(r.idle);
  ASSERT_EQ(r.levels.size(), 1u);
  EXPECT_EQ(r.levels[0].good, 3);
  EXPECT_NEAR(r.levels[0].request_goodput, r.levels[0].request_throughput, 1e-9);
  EXPECT_EQ(r.to_json()["levels"][0]["good_requests"], 3);
  o.slo_ttft_ms = 1e-6;  // and one no request can meet (a first token within a nanosecond)
  r = bench::run_serve_bench(o, nullptr);
  EXPECT_EQ(r.levels[0].completed, 3);
  EXPECT_EQ(r.levels[0].good, 0);
}

TEST(serve_bench, RejectsBadOptions) {
  bench::serve_bench_options o;
  EXPECT_THROW(bench::run_serve_bench(o, nullptr), error) << "neither --url nor --model";
  o.model_dir = tiny_model_dir();
  o.concurrency = {0};
  EXPECT_THROW(bench::run_serve_bench(o, nullptr), error);
  o.concurrency = {1};
  o.request_rate = -1;
  EXPECT_THROW(bench::run_serve_bench(o, nullptr), error);
  o.request_rate = 0;
  o.idle_connections = -1;
  EXPECT_THROW(bench::run_serve_bench(o, nullptr), error);
  o.idle_connections = 0;
  o.url = "http://127.0.0.1:1";
  EXPECT_THROW(bench::run_serve_bench(o, nullptr), error) << "both";
  o.model_dir.clear();
  EXPECT_THROW(bench::run_serve_bench(o, nullptr), error) << "nothing listens on port 1";
}

}  // namespace
}  // namespace moxi::serve
