// Speculative decoding (docs/speculative.md):
// - the accept / resample rule leaves every emitted token distributed as the target (chi-square against the
//   exact distribution, many draws from a fixed seed);
// - the generation loop with drafts, on a fake bigram model whose draft head disagrees with it, emits
//   3-token continuations with exactly the target's joint distribution, and greedy output equal to plain
//   decoding, whatever the drafts;
// - on real models (random tiny KDA + MLA and KDA + SWA + MLA configs with an MTP layer, and the trained
//   moxi-tiny and moxi-small), greedy generation with 1-3 drafted tokens per step gives the same tokens as
//   plain decoding (bit-exact on the reference kernels), prompts past a KDA chunk included, and leaves the
//   sequence where plain decoding leaves it;
// - the cache trace: rewinding to the first n traced tokens equals running only those tokens.
#include "moxi/runtime/speculative.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "common/model-fixture.h"
#include "common/temp-dir.h"
#include "moxi/base/error.h"
#include "moxi/formats/byte-tokenizer.h"
#include "moxi/kernels/backend.h"
#include "moxi/model/model.h"
#include "moxi/runtime/generate.h"
#include "moxi/runtime/local-model.h"
#include "moxi/runtime/sampler.h"

using namespace moxi;
using namespace moxi::runtime;

namespace {

// The chi-square value a statistic of k degrees of freedom exceeds with probability 1e-6
// (Wilson-Hilferty: k (1 - 2/(9k) + z sqrt(2/(9k)))^3, z = 4.753 for 1e-6).
double chi2_bound(int k) {
  const double a = 2.0 / (9.0 * k), z = 4.753;
  return k * std::pow(1 - a + z * std::sqrt(a), 3);
}

// Pearson's statistic of counts against probabilities (cells of expected count >= 5).
double chi2(const std::vector<double>& p, const std::vector<int64_t>& counts, int64_t n, int& dof) {
  double x = 0;
  dof = -1;
  for (size_t i = 0; i < p.size(); ++i) {
    const double e = p[i] * double(n);
    if (e < 5) {
      EXPECT_EQ(p[i] == 0 ? counts[i] : 0, 0) << "a token of probability 0 was emitted";
      continue;
    }
    x += (double(counts[i]) - e) * (double(counts[i]) - e) / e;
    ++dof;
  }
  return x;
}

std::vector<double> normalized(std::vector<double> v) {
  double s = 0;
  for (double x : v) s += x;
  for (double& x : v) x /= s;
  return v;
}

TEST(AcceptDraft, EmittedTokensHaveTheTargetDistribution) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> U(0, 1);
  // Drafts close to the target, far from it, and with mass where the target has none.
  const std::vector<std::pair<std::vector<double>, std::vector<double>>> cases = {
      {normalized({0.3, 0.2, 0.1, 0.25, 0.15}), normalized({0.25, 0.25, 0.1, 0.2, 0.2})},
      {normalized({0.05, 0.6, 0.05, 0.2, 0.1}), normalized({0.7, 0.02, 0.08, 0.1, 0.1})},
      {normalized({0.0, 0.5, 0.5, 0.0, 0.0}), normalized({0.4, 0.1, 0.1, 0.2, 0.2})},
  };
  for (const auto& [p, q] : cases) {
    const int64_t n = 200000;
    std::vector<int64_t> counts(p.size(), 0);
    int64_t accepted = 0;
    for (int64_t i = 0; i < n; ++i) {
      const token_id d = draw_from(q, U(rng));
      const auto v = accept_draft(p, q, d, U(rng), U(rng));
      ++counts[size_t(v.token)];
      accepted += v.accepted;
      if (v.accepted) {
        EXPECT_EQ(v.token, d);
      }
    }
    int dof = 0;
    const double x = chi2(p, counts, n, dof);
    EXPECT_LT(x, chi2_bound(dof)) << "dof " << dof;
    // The acceptance rate is sum_i min(p_i, q_i).
    double want = 0;
    for (size_t i = 0; i < p.size(); ++i) want += std::min(p[i], q[i]);
    EXPECT_NEAR(double(accepted) / double(n), want, 5 * std::sqrt(want * (1 - want) / double(n)));
  }
}

TEST(AcceptDraft, GreedyKeepsTheArgmaxOnly) {
  const std::vector<double> p = {0, 0, 1, 0}, same = {0, 0, 1, 0}, other = {0, 1, 0, 0};
  for (double u : {0.0, 0.5, 0.999}) {
    EXPECT_EQ(accept_draft(p, same, 2, u, u).token, 2);
    EXPECT_TRUE(accept_draft(p, same, 2, u, u).accepted);
    EXPECT_EQ(accept_draft(p, other, 1, u, u).token, 2);
    EXPECT_FALSE(accept_draft(p, other, 1, u, u).accepted);
  }
  EXPECT_THROW(accept_draft(p, other, 2, 0.5, 0.5), error);  // the draft has no mass in q
  const std::vector<double> two = {0.5, 0.5};
  EXPECT_THROW(accept_draft(p, two, 0, 0.5, 0.5), error);
}

// ---- the generation loop on a fake model ----

constexpr int64_t kV = 300;               // byte tokenizer ids; the bigram lives on ids 10..14
constexpr token_id kFirst = 10, kN = 5;

formats::tokenizer byte_tokenizer() {
  return formats::tokenizer::from_hf_json(
      formats::byte_level_tokenizer_json(kV, {{0, "<pad>"}, {1, "<bos>"}, {2, "<eos>"}}), "test");
}

// Target: a bigram over ids 10..14 (logits from a fixed table). Draft head: another bigram table, so drafts
// are often rejected. The held sequence and the verify protocol are checked on every call.
class bigram_lm final : public causal_lm {
 public:
  bigram_lm() {
    std::mt19937_64 rng(3);
    std::normal_distribution<float> N(0, 1.2f);
    for (auto* t : {&target_, &drafter_})
      for (auto& x : *t) x = N(rng);
  }
  int64_t vocab_size() const override { return kV; }
  std::vector<float> append(std::span<const token_id> tokens) override {
    EXPECT_FALSE(open_);
    held.insert(held.end(), tokens.begin(), tokens.end());
    return row(target_, held.back());
  }
  bool can_draft() const override { return true; }
  void prepare_drafts() override { prepared = true; }
  void draft(token_id next, int64_t k, const std::function<token_id(std::vector<float>&)>& pick) override {
    EXPECT_TRUE(prepared);
    EXPECT_FALSE(open_);
    token_id t = next;
    for (int64_t i = 0; i < k; ++i) {
      auto l = row(drafter_, t);
      t = pick(l);
    }
  }
  std::vector<float> append_verify(std::span<const token_id> tokens) override {
    EXPECT_FALSE(open_);
    open_ = true;
    from_ = held.size();
    std::vector<float> out;
    for (token_id t : tokens) {
      held.push_back(t);
      const auto r = row(target_, t);
      out.insert(out.end(), r.begin(), r.end());
    }
    return out;
  }
  void keep(int64_t n) override {
    EXPECT_TRUE(open_);
    open_ = false;
    held.resize(from_ + size_t(n));
  }
  // The target's probability of b after a, for the exact joint distribution.
  double target_prob(token_id a, token_id b) const {
    const auto l = row(target_, a);
    double z = 0;
    for (token_id i = kFirst; i < kFirst + kN; ++i) z += std::exp(double(l[size_t(i)]));
    return std::exp(double(l[size_t(b)])) / z;
  }
  std::vector<token_id> held;
  bool prepared = false;

 private:
  std::vector<float> row(const std::array<float, kN * kN>& table, token_id last) const {
    std::vector<float> l(kV, -INFINITY);
    const int64_t a = last >= kFirst && last < kFirst + kN ? last - kFirst : 0;
    for (int64_t b = 0; b < kN; ++b) l[size_t(kFirst + b)] = table[size_t(a * kN + b)];
    return l;
  }
  std::array<float, kN * kN> target_{}, drafter_{};
  bool open_ = false;
  size_t from_ = 0;
};

generate_result run_generate(causal_lm& lm, const std::vector<token_id>& prompt, generate_options o,
                             const formats::tokenizer* tok = nullptr) {
  static const auto bytes = byte_tokenizer();
  return generate(lm, tok ? *tok : bytes, prompt, o, [](std::string_view) {});
}

TEST(SpeculativeGenerate, SampledContinuationsHaveTheTargetsJointDistribution) {
  const std::vector<token_id> prompt = {1, kFirst + 2};
  bigram_lm probe;
  // Exact probability of each 3-token continuation: the product of the bigram's conditionals.
  std::vector<double> p(size_t(kN * kN * kN));
  for (token_id a = 0; a < kN; ++a)
    for (token_id b = 0; b < kN; ++b)
      for (token_id c = 0; c < kN; ++c)
        p[size_t((a * kN + b) * kN + c)] = probe.target_prob(prompt.back(), kFirst + a) *
                                           probe.target_prob(kFirst + a, kFirst + b) *
                                           probe.target_prob(kFirst + b, kFirst + c);
  for (int64_t k : {1, 2, 3}) {
    const int64_t n = 60000;
    std::vector<int64_t> counts(p.size(), 0);
    int64_t drafted = 0, accepted = 0;
    for (int64_t i = 0; i < n; ++i) {
      bigram_lm lm;
      generate_options o;
      o.sampling.temperature = 1;
      o.sampling.seed = uint64_t(i) + 1000 * uint64_t(k);
      o.max_tokens = 3;
      o.draft_tokens = k;
      const auto r = run_generate(lm, prompt, o);
      ASSERT_EQ(r.tokens.size(), 3u);
      drafted += r.drafted;
      accepted += r.accepted;
      const int64_t cell = ((r.tokens[0] - kFirst) * kN + (r.tokens[1] - kFirst)) * kN + (r.tokens[2] - kFirst);
      ++counts[size_t(cell)];
      // The sequence holds the prompt and every emitted token but the last, as plain decoding leaves it.
      std::vector<token_id> want = prompt;
      want.insert(want.end(), r.tokens.begin(), r.tokens.end() - 1);
      ASSERT_EQ(lm.held, want);
    }
    int dof = 0;
    const double x = chi2(p, counts, n, dof);
    EXPECT_LT(x, chi2_bound(dof)) << "k " << k << ", dof " << dof;
    EXPECT_GT(drafted, 0);
    EXPECT_GT(accepted, 0);
    EXPECT_LT(accepted, drafted);  // the draft head disagrees with the target sometimes
  }
}

TEST(SpeculativeGenerate, GreedyOutputIsPlainDecodingsWhateverTheDrafts) {
  const std::vector<token_id> prompt = {1, kFirst};
  bigram_lm plain;
  generate_options o;
  o.sampling.temperature = 0;
  o.max_tokens = 40;
  const auto want = run_generate(plain, prompt, o);
  for (int64_t k : {1, 2, 3, 5}) {
    for (int64_t max_tokens : {1, 2, 3, 7, 40}) {
      bigram_lm lm;
      generate_options s = o;
      s.draft_tokens = k;
      s.max_tokens = max_tokens;
      const auto got = run_generate(lm, prompt, s);
      const std::vector<token_id> head(want.tokens.begin(), want.tokens.begin() + max_tokens);
      EXPECT_EQ(got.tokens, head) << "k " << k << ", max " << max_tokens;
      std::vector<token_id> held = prompt;
      held.insert(held.end(), head.begin(), head.end() - 1);
      EXPECT_EQ(lm.held, held) << "k " << k << ", max " << max_tokens;
    }
  }
}

TEST(SpeculativeGenerate, StopsOnAStopTokenInsideTheAcceptedDrafts) {
  // The 6th greedy token made a stop token: when it comes as a kept draft, generation ends right there.
  const std::vector<token_id> prompt = {1, kFirst};
  bigram_lm plain;
  generate_options o;
  o.sampling.temperature = 0;
  o.max_tokens = 40;
  const auto all = run_generate(plain, prompt, o);
  const token_id stop = all.tokens[5];
  o.stop_tokens = {stop};
  bigram_lm p2;
  const auto want = run_generate(p2, prompt, o);
  ASSERT_EQ(want.finish_reason, "stop");
  for (int64_t k : {1, 2, 4}) {
    bigram_lm lm;
    generate_options s = o;
    s.draft_tokens = k;
    const auto got = run_generate(lm, prompt, s);
    EXPECT_EQ(got.tokens, want.tokens) << k;
    EXPECT_EQ(got.finish_reason, "stop");
    EXPECT_EQ(lm.held, p2.held) << k;
  }
}

// ---- real models ----

struct model_case {
  std::string dir, label;
};

std::vector<model_case> models(const std::string& tmp) {
  return {{moxi::testing::init_test_checkpoint(tmp, "tiny-seed.json", 5), "random tiny-seed (KDA + MLA/DSA)"},
          {moxi::testing::init_test_checkpoint(tmp, "tiny-hybrid-swa.json", 6),
           "random tiny-hybrid-swa (KDA + SWA + MLA)"},
          {std::string(MOXI_SOURCE_DIR) + "/models/moxi-tiny", "moxi-tiny"},
          {std::string(MOXI_SOURCE_DIR) + "/models/moxi-small", "moxi-small"}};
}

TEST(SpeculativeModel, GreedyTokensEqualPlainDecoding) {
  moxi::testing::temp_dir tmp;
  for (const auto& mc : models(tmp.path())) {
    const auto lm = local_model::load(mc.dir);
    const int64_t V = lm.model.config().vocab_size;
    // A short prompt and one past the KDA chunk (64 tokens), ids the tokenizer can decode.
    std::vector<std::vector<token_id>> prompts = {lm.tok.encode("how many lines are in notes.txt"),
                                                  moxi::testing::random_token_ids(80, 256, 9)};
    for (auto& t : prompts[1]) t = lm.tok.encode(std::string(1, char('a' + t % 26)))[0];
    for (bool reference : {true, false}) {
      std::optional<kernels::backend_scope> scope;
      if (reference) scope.emplace(kernels::reference());
      for (const auto& prompt : prompts) {
        generate_options o;
        o.sampling.temperature = 0;
        o.max_tokens = 24;
        model_lm plain(lm.model);
        const auto want = run_generate(plain, prompt, o, &lm.tok);
        const token_id last[] = {want.tokens.back()};
        const auto held = plain.tokens();
        const auto a = plain.append(last);  // how plain decoding's sequence continues
        ASSERT_EQ(a.size(), size_t(V));
        for (int64_t k : {1, 2, 3}) {
          SCOPED_TRACE(mc.label + (reference ? ", reference kernels" : ", fast kernels") + ", prompt " +
                       std::to_string(prompt.size()) + " tokens, k " + std::to_string(k));
          model_lm spec(lm.model);
          generate_options s = o;
          s.draft_tokens = k;
          const auto got = run_generate(spec, prompt, s, &lm.tok);
          EXPECT_EQ(got.tokens, want.tokens);
          EXPECT_GT(got.verify_steps, 0);
          EXPECT_EQ(spec.tokens(), held);
          // The sequence continues exactly as plain decoding's does.
          const auto b = spec.append(last);
          for (int64_t i = 0; i < V; ++i) {
            if (reference)
              ASSERT_EQ(a[size_t(i)], b[size_t(i)]) << i;
            else
              ASSERT_NEAR(a[size_t(i)], b[size_t(i)], 1e-3f * (1 + std::abs(a[size_t(i)]))) << i;
          }
        }
      }
    }
  }
}

TEST(SpeculativeModel, MtpAcceptanceOfTheTrainedModels) {
  // Not a pass/fail figure, a sanity bound: a trained MTP head agrees with its model far more often than
  // chance (1 / vocab), and the counters add up.
  for (const char* name : {"moxi-tiny", "moxi-small"}) {
    const auto lm = local_model::load(std::string(MOXI_SOURCE_DIR) + "/models/" + name);
    formats::render_options ro;
    ro.add_generation_prompt = true;
    const auto prompt = lm.tok.encode(lm.require_chat().render(
        nlohmann::ordered_json::parse(R"([{"role":"user","content":"How many lines are in notes.txt?"}])"),
        ro));
    model_lm seq(lm.model);
    generate_options o;
    o.sampling.temperature = 0;
    o.max_tokens = 64;
    o.draft_tokens = 1;
    o.stop_tokens = lm.stop_tokens;
    const auto r = run_generate(seq, prompt, o, &lm.tok);
    EXPECT_EQ(r.drafted, r.verify_steps) << name;
    EXPECT_LE(r.accepted, r.drafted);
    // The first token, one per verify step and one per kept draft (less one when a kept draft is the stop
    // token: its step ends there, without the bonus token), and at the end at most one plain step.
    EXPECT_GE(int64_t(r.tokens.size()), r.verify_steps + r.accepted) << name;
    EXPECT_LE(int64_t(r.tokens.size()), 2 + r.verify_steps + r.accepted) << name;
    std::printf("%s: %lld of %lld drafts accepted\n", name, (long long)r.accepted, (long long)r.drafted);
    EXPECT_GT(double(r.accepted), 0.2 * double(r.drafted)) << name;
  }
}

TEST(CacheTrace, RewindEqualsRunningOnlyTheKeptTokens) {
  moxi::testing::temp_dir tmp;
  kernels::backend_scope ref(kernels::reference());
  for (const char* cfg : {"tiny-seed.json", "tiny-hybrid-swa.json"}) {
    SCOPED_TRACE(cfg);
    const auto m = model::model::load(moxi::testing::init_test_checkpoint(tmp.path(), cfg, 11));
    const int64_t V = m.config().vocab_size;
    const auto prompt = moxi::testing::random_token_ids(20, V, 1);
    const auto more = moxi::testing::random_token_ids(5, V, 2);
    const auto next = moxi::testing::random_token_ids(3, V, 3);
    for (int64_t keep = 0; keep <= 5; ++keep) {
      model::contiguous_cache a(m.config()), b(m.config());
      m.forward(prompt, a);
      m.forward(prompt, b);
      a.begin_trace();
      m.forward(more, a);
      a.rewind(20 + keep, 0);
      a.end_trace();
      for (int64_t i = 0; i < keep; ++i) m.forward(std::span(more).subspan(size_t(i), 1), b);  // decode steps
      ASSERT_EQ(a.length(), b.length());
      const auto la = m.forward(next, a), lb = m.forward(next, b);
      ASSERT_EQ(la.size(), lb.size());
      for (size_t i = 0; i < la.size(); ++i) ASSERT_EQ(la[i], lb[i]) << "keep " << keep << ", logit " << i;
    }
    model::contiguous_cache c(m.config());
    EXPECT_THROW(c.rewind(0, 0), error);  // no trace
    c.begin_trace();
    m.forward(prompt, c);
    EXPECT_THROW(c.rewind(21, 0), error);  // past what ran
  }
}

}  // namespace
