// model::forward_batch against the independent per-sequence path: several sequences with their own caches
// run through forward_batch over three steps that mix prefill chunks (across the 64-token KDA chunk) and
// single decode tokens must give the logits of model::forward run on each sequence alone with the same
// token splits. On the reference kernels every kernel is row-independent, so the two must agree bit for
// bit; on the fast kernels the GEMM shapes change with the row count (GEMV below 5 rows, BF16 GEMM above,
// different dense tiles), so only the fp32 summation order may differ: rel 1e-5 of max|logit|.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>

#include "common/model-fixture.h"
#include "common/temp-dir.h"
#include "moxi/base/error.h"
#include "moxi/formats/model-config.h"
#include "moxi/kernels/backend.h"
#include "moxi/model/config.h"
#include "moxi/model/model.h"

namespace fs = std::filesystem;
using namespace moxi;

namespace {

using scratch_dir = moxi::testing::temp_dir;

std::string make_checkpoint(const scratch_dir& s, const std::string& name) {
  return moxi::testing::init_test_checkpoint(s.path(), name, 11);
}

std::vector<token_id> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  return moxi::testing::random_token_ids(n, vocab, seed);
}

// Tokens per step for each of three sequences: prefill chunks next to decode tokens, a chunk crossing the
// 64-token KDA chunk, a sequence that starts with a single token, and one that sits out a step (0).
constexpr int64_t kSteps[3][3] = {{20, 7, 1}, {1, 5, 1}, {1, 0, 70}};

struct logits_by_step {
  std::vector<std::vector<float>> per[3];  // per sequence, one logits vector per step it ran in
};

logits_by_step run_batched(const model::model& m, const std::vector<std::vector<token_id>>& toks) {
  logits_by_step out;
  std::vector<std::unique_ptr<model::sequence_cache>> caches;
  for (int s = 0; s < 3; ++s) caches.push_back(m.new_cache());
  int64_t pos[3] = {0, 0, 0};
  for (const auto& step : kSteps) {
    std::vector<model::batch_item> items;
    for (int s = 0; s < 3; ++s) {
      model::batch_item it;
      it.tokens = std::span(toks[size_t(s)]).subspan(size_t(pos[s]), size_t(step[s]));
      it.cache = caches[size_t(s)].get();
      it.last_only = s != 0;  // sequence 0 asks for every row's logits
      items.push_back(it);
      pos[s] += step[s];
    }
    const auto got = m.forward_batch(items);
    EXPECT_EQ(got.size(), items.size());
    for (int s = 0; s < 3; ++s) {
      if (step[s] > 0)
        out.per[s].push_back(got[size_t(s)]);
      else
        EXPECT_TRUE(got[size_t(s)].empty());
    }
  }
  for (int s = 0; s < 3; ++s) EXPECT_EQ(caches[size_t(s)]->length(), pos[s]);
  return out;
}

logits_by_step run_alone(const model::model& m, const std::vector<std::vector<token_id>>& toks) {
  logits_by_step out;
  for (int s = 0; s < 3; ++s) {
    auto cache = m.new_cache();
    int64_t pos = 0;
    for (const auto& step : kSteps) {
      if (step[s] == 0) continue;
      model::forward_options o;
      o.last_only = s != 0;
      out.per[s].push_back(
          m.forward(std::span(toks[size_t(s)]).subspan(size_t(pos), size_t(step[s])), *cache, o));
      pos += step[s];
    }
  }
  return out;
}

// max |got - want| / max |want| over all sequences and steps (shapes must match).
double rel_error(const logits_by_step& got, const logits_by_step& want) {
  double max_ref = 0, max_err = 0;
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(got.per[s].size(), want.per[s].size());
    for (size_t i = 0; i < std::min(got.per[s].size(), want.per[s].size()); ++i) {
      const auto &g = got.per[s][i], &w = want.per[s][i];
      EXPECT_EQ(g.size(), w.size()) << "sequence " << s << " step " << i;
      for (size_t j = 0; j < std::min(g.size(), w.size()); ++j) {
        max_ref = std::max(max_ref, double(std::fabs(w[j])));
        max_err = std::max(max_err, std::fabs(double(g[j]) - double(w[j])));
      }
    }
  }
  return max_ref > 0 ? max_err / max_ref : max_err;
}

bool bit_equal(const logits_by_step& a, const logits_by_step& b) {
  for (int s = 0; s < 3; ++s) {
    if (a.per[s].size() != b.per[s].size()) return false;
    for (size_t i = 0; i < a.per[s].size(); ++i)
      if (a.per[s][i].size() != b.per[s][i].size() ||
          std::memcmp(a.per[s][i].data(), b.per[s][i].data(), a.per[s][i].size() * sizeof(float)) != 0)
        return false;
  }
  return true;
}

const char* const kConfigs[] = {"tiny-seed.json", "tiny-kimi-linear.json", "tiny-deepseek-v3.2.json",
                                "tiny-hybrid-swa.json"};

TEST(ForwardBatch, EqualsPerSequenceForwardOnEveryArchitecture) {
  scratch_dir dir;
  for (const char* cfg : kConfigs) {
    SCOPED_TRACE(cfg);
    const std::string ck = make_checkpoint(dir, cfg);
    std::vector<std::vector<token_id>> toks;
    const auto vocab = model::load_model_config(ck).vocab_size;
    for (int s = 0; s < 3; ++s) toks.push_back(random_tokens(80, vocab, uint64_t(100 + s)));

    {  // reference kernels: bit for bit
      kernels::backend_scope ref(kernels::reference());
      const auto m = model::model::load(ck);
      const auto want = run_alone(m, toks), got = run_batched(m, toks);
      EXPECT_TRUE(bit_equal(got, want)) << "rel " << rel_error(got, want);
    }
    const auto m = model::model::load(ck);  // fast kernels where the CPU has them
    const auto want = run_alone(m, toks), got = run_batched(m, toks);
    const double rel = rel_error(got, want);
    std::printf("%s: forward_batch vs per-sequence forward, rel %.3g (kernels %s)\n", cfg, rel,
                kernels::active().name());
    EXPECT_LE(rel, 1e-5);
  }
}

TEST(ForwardBatch, RejectsSharedOrMissingCachesAndBadTokensBeforeRunning) {
  scratch_dir dir;
  const std::string ck = make_checkpoint(dir, "tiny-seed.json");
  const auto m = model::model::load(ck);
  auto a = m.new_cache(), b = m.new_cache();
  const std::vector<token_id> ok = {1, 2, 3}, bad = {4, 512};
  {
    const model::batch_item items[] = {{ok, a.get()}, {ok, a.get()}};
    EXPECT_THROW(m.forward_batch(items), error);
  }
  {
    const model::batch_item items[] = {{ok, a.get()}, {ok, nullptr}};
    EXPECT_THROW(m.forward_batch(items), error);
  }
  {
    const model::batch_item items[] = {{ok, a.get()}, {bad, b.get()}};
    try {
      m.forward_batch(items);
      ADD_FAILURE() << "no error for token 512";
    } catch (const error& e) {
      EXPECT_NE(std::string(e.what()).find("token id 512"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(a->length(), 0);  // nothing ran
  EXPECT_EQ(b->length(), 0);
}

}  // namespace
