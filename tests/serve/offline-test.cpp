// Offline batched generation (serve/offline.h) against the single-sequence forward pass: greedy samples
// equal a plain argmax loop over model::forward, every reported log-probability equals the log-softmax of a
// recomputed forward over prompt + sample, forked samples equal independent runs with their seeds, and bad
// requests are refused before anything runs.
#include "moxi/serve/offline.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "common/model-fixture.h"
#include "common/temp-dir.h"
#include "moxi/base/error.h"
#include "moxi/model/config.h"

namespace {

using namespace moxi;

struct fixture {
  moxi::testing::temp_dir dir{"moxi-offline"};
  model::model m;
  fixture()
      : m(model::model::load(
            model::load_model_config(std::string(MOXI_SOURCE_DIR) + "/configs/tiny-seed.json"),
            moxi::testing::init_test_checkpoint(dir.path(), "tiny-seed.json", 5))) {}
};

fixture& fx() {
  static fixture f;
  return f;
}

// Log-softmax over prompt + tokens with one forward pass: [tokens.size()] log-probs of each token.
std::vector<double> recomputed_logprobs(const model::model& m, const std::vector<token_id>& prompt,
                                        const std::vector<token_id>& tokens) {
  std::vector<token_id> all = prompt;
  all.insert(all.end(), tokens.begin(), tokens.end());
  auto cache = m.new_cache();
  const auto logits = m.forward(all, *cache);
  const int64_t V = m.config().vocab_size;
  std::vector<double> out;
  for (size_t j = 0; j < tokens.size(); ++j) {
    const float* row = logits.data() + (prompt.size() - 1 + j) * size_t(V);
    double mx = -INFINITY, sum = 0;
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, double(row[v]));
    for (int64_t v = 0; v < V; ++v) sum += std::exp(double(row[v]) - mx);
    out.push_back(double(row[tokens[j]]) - mx - std::log(sum));
  }
  return out;
}

std::vector<token_id> greedy(const model::model& m, const std::vector<token_id>& prompt, int64_t n) {
  auto cache = m.new_cache();
  std::vector<token_id> out;
  auto logits = m.forward(prompt, *cache, {.last_only = true});
  for (int64_t i = 0; i < n; ++i) {
    const auto t = token_id(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(t);
    logits = m.forward(std::vector<token_id>{t}, *cache, {.last_only = true});
  }
  return out;
}

TEST(Offline, GreedyEqualsAnArgmaxLoopAndLogprobsEqualARecomputation) {
  const auto& m = fx().m;
  const int64_t V = m.config().vocab_size;
  std::vector<serve::offline_request> reqs;
  for (int i = 0; i < 5; ++i) {
    serve::offline_request r;
    r.prompt =
        moxi::testing::random_token_ids(3 + 17 * i, V, 100 + uint64_t(i));  // up to 71: several KDA chunks
    r.max_tokens = 12;
    r.sampling.temperature = 0;
    reqs.push_back(r);
  }
  serve::offline_stats st;
  serve::offline_options o;
  o.max_batch_tokens = 40;  // prompts are cut into chunks mixed with other sequences' decode steps
  const auto out = serve::generate_offline(m, reqs, o, &st);
  ASSERT_EQ(out.size(), reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_EQ(out[i].size(), 1u);
    const auto& s = out[i][0];
    EXPECT_EQ(s.finish, serve::finish_reason::LENGTH);
    EXPECT_EQ(s.tokens, greedy(m, reqs[i].prompt, 12)) << i;
    const auto want = recomputed_logprobs(m, reqs[i].prompt, s.tokens);
    ASSERT_EQ(s.logprobs.size(), want.size());
    for (size_t j = 0; j < want.size(); ++j) EXPECT_NEAR(s.logprobs[j], want[j], 2e-3) << i << "," << j;
  }
  EXPECT_EQ(st.generated_tokens, 5 * 12);
  EXPECT_GT(st.steps, 12);
}

TEST(Offline, ForkedSamplesEqualIndependentRunsWithTheirSeeds) {
  const auto& m = fx().m;
  serve::offline_request r;
  r.prompt = moxi::testing::random_token_ids(20, m.config().vocab_size, 7);
  r.max_tokens = 10;
  r.n = 4;
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 1234;
  const auto together = serve::generate_offline(m, {r});
  ASSERT_EQ(together[0].size(), 4u);
  std::set<std::vector<token_id>> distinct;
  for (int k = 0; k < 4; ++k) {
    auto one = r;
    one.n = 1;
    one.sampling.seed = 1234 + uint64_t(k);
    const auto alone = serve::generate_offline(m, {one});
    EXPECT_EQ(together[0][size_t(k)].tokens, alone[0][0].tokens) << k;
    const auto want = recomputed_logprobs(m, r.prompt, alone[0][0].tokens);
    for (size_t j = 0; j < want.size(); ++j) EXPECT_NEAR(together[0][size_t(k)].logprobs[j], want[j], 2e-3);
    distinct.insert(together[0][size_t(k)].tokens);
  }
  EXPECT_GT(distinct.size(), 1u);  // a random model at temperature 1 does not repeat itself
}

TEST(Offline, StopTokensEndASampleAndBadRequestsAreRefused) {
  const auto& m = fx().m;
  serve::offline_request r;
  r.prompt = moxi::testing::random_token_ids(9, m.config().vocab_size, 3);
  r.sampling.temperature = 0;
  r.max_tokens = 8;
  const auto g = greedy(m, r.prompt, 8);
  r.stop_tokens = {g[3]};
  const auto out = serve::generate_offline(m, {r});
  const auto& s = out[0][0];
  EXPECT_EQ(s.finish, serve::finish_reason::STOP);
  const auto first = size_t(std::find(g.begin(), g.end(), g[3]) - g.begin());
  EXPECT_EQ(s.tokens, std::vector<token_id>(g.begin(), g.begin() + std::ptrdiff_t(first) + 1));

  auto bad = r;
  bad.prompt.clear();
  EXPECT_THROW(serve::generate_offline(m, {r, bad}), error);
  bad = r;
  bad.n = 0;
  EXPECT_THROW(serve::generate_offline(m, {bad}), error);
  bad = r;
  bad.prompt.push_back(token_id(m.config().vocab_size));
  EXPECT_THROW(serve::generate_offline(m, {bad}), error);
  EXPECT_TRUE(serve::generate_offline(m, {}).empty());
}

}  // namespace
