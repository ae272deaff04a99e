// Sampler tests against references computed here: distributions from the formulas (softmax with
// temperature, then min-p, top-k, top-p as vLLM applies them) checked by chi-square over seeded draws, set
// membership worked out by hand, penalties against their formulas, greedy against a plain argmax loop, and
// stop strings over every split of the text into tokens.
#include "moxi/runtime/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "moxi/base/error.h"

namespace {

using moxi::token_id;
using moxi::runtime::sampler;
using moxi::runtime::sampling_params;

std::vector<float> log_probs(const std::vector<double>& p) {
  std::vector<float> out;
  for (double v : p) out.push_back(float(std::log(v)));
  return out;
}

// Upper-tail chi-square quantile (Wilson-Hilferty), z = 4.753 for a 1e-6 tail: with fixed seeds the test
// is deterministic, the small tail only guards against a wrong distribution passing by chance.
double chi2_critical(int df) {
  const double z = 4.753, a = 2.0 / (9.0 * df);
  return df * std::pow(1 - a + z * std::sqrt(a), 3);
}

// Draws n tokens and checks them against `expected` (zero entries must never be drawn).
void expect_distribution(const std::vector<float>& logits, sampling_params params,
                         const std::vector<double>& expected, int n = 200000) {
  sampler s(params, {});
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < n; ++i) ++counts[s.sample(logits)];
  double chi2 = 0;
  int df = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (expected[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " is outside the allowed set";
      continue;
    }
    const double e = expected[i] * n;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
    ++df;
  }
  if (df > 0) {
    EXPECT_LT(chi2, chi2_critical(df)) << "df " << df;
  }
}

std::vector<double> softmax(const std::vector<float>& logits, double t) {
  std::vector<double> p;
  double mx = -INFINITY;
  for (float l : logits) mx = std::max(mx, l / t);
  for (float l : logits) p.push_back(std::exp(l / t - mx));
  const double sum = std::accumulate(p.begin(), p.end(), 0.0);
  for (double& v : p) v /= sum;
  return p;
}

void expect_near_vec(const std::vector<double>& a, const std::vector<double>& b, double tol = 1e-12) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], tol) << "index " << i;
}

TEST(sampler, GreedyIsArgmax) {
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0, 3);
  sampling_params p;
  p.temperature = 0;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> logits(1000);
    for (float& l : logits) l = normal(rng);
    size_t best = 0;
    for (size_t i = 1; i < logits.size(); ++i) {
      if (logits[i] > logits[best]) best = i;
    }
    sampler s(p, {});
    EXPECT_EQ(s.sample(logits), token_id(best));
  }
  // Ties go to the lowest id; NaN is never chosen.
  EXPECT_EQ(moxi::runtime::argmax(std::vector<float>{1, 3, 3, 2}), 1);
  EXPECT_EQ(moxi::runtime::argmax(std::vector<float>{NAN, -INFINITY, NAN}), 1);
  // Greedy ignores top-k/top-p/min-p (they never remove the argmax).
  p.top_k = 1;
  p.top_p = 0.1f;
  sampler s(p, {});
  EXPECT_EQ(s.sample(std::vector<float>{0, 5, 1}), 1);
}

TEST(sampler, TemperatureDistributionMatchesSoftmax) {
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f, 3.0f, 0.0f, 2.5f, -0.5f};
  for (float t : {0.5f, 1.0f, 1.7f}) {
    sampling_params p;
    p.temperature = t;
    p.seed = 42;
    const auto expected = softmax(logits, t);
    expect_near_vec(moxi::runtime::sampling_distribution(logits, p), expected);
    expect_distribution(logits, p, expected);
  }
}

TEST(sampler, TopKKeepsTheKLargest) {
  const std::vector<double> probs = {0.05, 0.30, 0.10, 0.25, 0.20, 0.10};
  sampling_params p;
  p.top_k = 3;
  p.seed = 7;
  // Kept: ids 1, 3, 4 (0.30, 0.25, 0.20), renormalized over 0.75.
  const std::vector<double> expected = {0, 0.30 / 0.75, 0, 0.25 / 0.75, 0.20 / 0.75, 0};
  expect_near_vec(moxi::runtime::sampling_distribution(log_probs(probs), p), expected, 1e-6);
  expect_distribution(log_probs(probs), p, expected);
  // Ties at the k-th value stay (vLLM masks values below the k-th largest only).
  p.top_k = 2;
  const std::vector<double> tied = {0.1, 0.3, 0.3, 0.3};
  auto d = moxi::runtime::sampling_distribution(log_probs(tied), p);
  EXPECT_EQ(d[0], 0);
  EXPECT_GT(d[3], 0);
}

TEST(sampler, TopPKeepsTheSmallestSetReachingP) {
  const std::vector<double> probs = {0.15, 0.5, 0.05, 0.3};
  auto kept = [&](float top_p) {
    sampling_params p;
    p.top_p = top_p;
    std::set<int> out;
    auto d = moxi::runtime::sampling_distribution(log_probs(probs), p);
    for (size_t i = 0; i < d.size(); ++i) {
      if (d[i] > 0) out.insert(int(i));
    }
    return out;
  };
  EXPECT_EQ(kept(0.4f), (std::set<int>{1}));         // 0.5 alone reaches 0.4
  EXPECT_EQ(kept(0.75f), (std::set<int>{1, 3}));     // 0.5 + 0.3 = 0.8
  EXPECT_EQ(kept(0.85f), (std::set<int>{0, 1, 3}));  // + 0.15 = 0.95
  EXPECT_EQ(kept(0.99f), (std::set<int>{0, 1, 2, 3}));
  sampling_params p;
  p.top_p = 0.75f;
  p.seed = 3;
  expect_distribution(log_probs(probs), p, {0, 0.5 / 0.8, 0, 0.3 / 0.8});
}

TEST(sampler, MinPDropsTokensBelowAFractionOfTheMax) {
  const std::vector<double> probs = {0.5, 0.3, 0.15, 0.05};
  sampling_params p;
  p.min_p = 0.2f;  // threshold 0.1: drops 0.05
  p.seed = 5;
  expect_distribution(log_probs(probs), p, {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0});
  p.min_p = 0.5f;  // threshold 0.25
  expect_near_vec(moxi::runtime::sampling_distribution(log_probs(probs), p), {0.5 / 0.8, 0.3 / 0.8, 0, 0},
                  1e-6);
}

TEST(sampler, FiltersComposeInVllmOrder) {
  // temperature 2 flattens {4, 3, 2, 1, 0, -1} logits; min-p, then top-k, then top-p, each renormalized.
  const std::vector<float> logits = {4, 3, 2, 1, 0, -1};
  sampling_params p;
  p.temperature = 2;
  p.min_p = 0.15f;
  p.top_k = 4;
  p.top_p = 0.75f;
  p.seed = 11;
  std::vector<double> q = softmax(logits, 2);
  // min-p: threshold 0.15 * q[0]; e^{-k/2} >= 0.15 for k <= 3 (e^-1.5 = 0.223, e^-2 = 0.135).
  for (size_t i = 0; i < q.size(); ++i) {
    if (q[i] < 0.15 * q[0]) q[i] = 0;
  }
  // top-k 4 keeps ids 0..3 (already so); top-p over the renormalized 4: mass of ids 0, 1 is
  // (1 + e^-.5) / (1 + e^-.5 + e^-1 + e^-1.5) = 0.731 < 0.75, so id 2 joins (0.899); id 3 goes.
  const double w0 = 1, w1 = std::exp(-0.5), w2 = std::exp(-1.0);
  const double z = w0 + w1 + w2;
  const std::vector<double> expected = {w0 / z, w1 / z, w2 / z, 0, 0, 0};
  expect_near_vec(moxi::runtime::sampling_distribution(logits, p), expected, 1e-6);
  expect_distribution(logits, p, expected);
}

TEST(sampler, PenaltiesFollowTheFormulas) {
  const std::vector<float> base = {2.0f, -1.0f, 0.5f, -0.5f, 1.0f, 0.0f};
  const std::vector<token_id> prompt = {0, 1};
  const std::unordered_map<token_id, int> output = {{2, 3}, {3, 1}, {1, 2}};
  sampling_params p;
  p.repetition_penalty = 1.5f;
  p.presence_penalty = 0.25f;
  p.frequency_penalty = 0.1f;
  std::vector<float> got = base;
  moxi::runtime::apply_penalties(got, p, prompt, output);
  // Token by token: seen = prompt or output; count = output count.
  const int counts[6] = {0, 2, 3, 1, 0, 0};
  const bool seen[6] = {true, true, true, true, false, false};
  for (int i = 0; i < 6; ++i) {
    double l = base[i];
    if (seen[i]) l = l > 0 ? l / 1.5 : l * 1.5;
    l -= 0.1 * counts[i];
    l -= counts[i] > 0 ? 0.25 : 0.0;
    EXPECT_NEAR(got[i], l, 1e-6) << "token " << i;
  }
  // Through a sampler: the repeated token loses the greedy pick.
  sampling_params g;
  g.temperature = 0;
  g.frequency_penalty = 2;
  sampler s(g, {});
  const std::vector<float> logits = {1.0f, 0.5f};
  EXPECT_EQ(s.sample(logits), 0);
  s.accept(0);
  EXPECT_EQ(s.sample(logits), 1);  // 1 - 2 < 0.5
  // Repetition penalty counts the prompt.
  sampling_params r;
  r.temperature = 0;
  r.repetition_penalty = 3;
  sampler s2(r, std::vector<token_id>{0});
  EXPECT_EQ(s2.sample(logits), 1);  // 1 / 3 < 0.5
}

TEST(sampler, SeedIsDeterministicPerRequest) {
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = float(std::sin(double(i)));
  sampling_params p;
  p.temperature = 1.3f;
  p.top_p = 0.95f;
  p.seed = 1234;
  auto run = [&](sampling_params q) {
    sampler s(q, {});
    std::vector<token_id> out;
    for (int i = 0; i < 64; ++i) {
      out.push_back(s.sample(logits));
      s.accept(out.back());
    }
    return out;
  };
  EXPECT_EQ(run(p), run(p));
  auto other = p;
  other.seed = 1235;
  EXPECT_NE(run(p), run(other));
  // The draw is the top 53 bits of mt19937_64's output (documented, portable).
  std::mt19937_64 rng(1234);
  std::mt19937_64 raw(1234);
  EXPECT_EQ(sampler::uniform(rng), double(raw() >> 11) / 9007199254740992.0);
  // Unseeded requests still sample.
  auto unseeded = p;
  unseeded.seed.reset();
  EXPECT_EQ(run(unseeded).size(), 64u);
}

TEST(sampler, InvalidParametersAreNamed) {
  auto expect_bad = [](sampling_params p, const std::string& name) {
    try {
      moxi::runtime::validate(p);
      ADD_FAILURE() << "accepted bad " << name;
    } catch (const moxi::error& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  };
  sampling_params p;
  p.temperature = -1;
  expect_bad(p, "temperature");
  p = {};
  p.temperature = NAN;
  expect_bad(p, "temperature");
  p = {};
  p.top_p = 0;
  expect_bad(p, "top_p");
  p = {};
  p.top_p = 1.5f;
  expect_bad(p, "top_p");
  p = {};
  p.min_p = -0.1f;
  expect_bad(p, "min_p");
  p = {};
  p.top_k = -2;
  expect_bad(p, "top_k");
  p = {};
  p.repetition_penalty = 0;
  expect_bad(p, "repetition_penalty");
  p = {};
  p.presence_penalty = 3;
  expect_bad(p, "presence_penalty");
  p = {};
  p.frequency_penalty = -2.5f;
  expect_bad(p, "frequency_penalty");
  EXPECT_THROW(moxi::runtime::sampling_distribution(std::vector<float>{-INFINITY, NAN}, sampling_params{}),
               moxi::error);
  EXPECT_THROW(moxi::runtime::argmax(std::vector<float>{}), moxi::error);
}

// ---------------------------------------------------------------------------------------------------------
// Stop handling

// Runs text split into chunks at the given cut points through a stop_checker.
std::pair<std::string, bool> run_stops(const std::string& text, const std::vector<size_t>& cuts,
                                       const std::vector<std::string>& stops) {
  moxi::runtime::stop_checker sc(stops, {});
  std::string out;
  size_t prev = 0;
  std::vector<size_t> all = cuts;
  all.push_back(text.size());
  for (size_t c : all) {
    auto st = sc.push(7, text.substr(prev, c - prev));
    out += st.text;
    prev = c;
    if (st.stopped) return {out, true};
  }
  return {out + sc.flush(), false};
}

TEST(samplerStop, StopStringAcrossEverySplit) {
  const std::string text = "Hello world. STOP here, more text";
  const std::string before = "Hello world. ";
  for (size_t a = 0; a <= text.size(); ++a) {
    for (size_t b = a; b <= text.size(); ++b) {
      auto [out, stopped] = run_stops(text, {a, b}, {"STOP"});
      EXPECT_TRUE(stopped);
      EXPECT_EQ(out, before) << "cuts " << a << ", " << b;
    }
  }
}

TEST(samplerStop, HeldBackTextIsReleasedWhenItDiverges) {
  moxi::runtime::stop_checker sc({"<end>"}, {});
  EXPECT_EQ(sc.push(1, "a <e").text, "a ");
  EXPECT_EQ(sc.push(1, "n").text, "");
  auto st = sc.push(1, "x!");
  EXPECT_EQ(st.text, "<enx!");
  EXPECT_FALSE(st.stopped);
  EXPECT_EQ(sc.push(1, "<").text, "");
  EXPECT_EQ(sc.flush(), "<");
}

TEST(samplerStop, EarliestStopWinsAndMultibyteStops) {
  for (size_t cut = 0; cut <= 20; ++cut) {
    const std::string text = "你好。世界!!结束";
    auto [out, stopped] = run_stops(text, {std::min(cut, text.size())}, {"!!", "。"});
    EXPECT_TRUE(stopped);
    EXPECT_EQ(out, "你好");
  }
  auto [out, stopped] = run_stops("abc", {1}, {"zz"});
  EXPECT_FALSE(stopped);
  EXPECT_EQ(out, "abc");
}

TEST(samplerStop, StopTokensEndWithoutTheirText) {
  moxi::runtime::stop_checker sc({"xyz"}, {99});
  EXPECT_EQ(sc.push(1, "ab x").text, "ab ");
  auto st = sc.push(99, "<eos>");
  EXPECT_TRUE(st.stopped);
  EXPECT_EQ(st.text, "x");  // held-back text that is not a stop string is still output
  EXPECT_TRUE(sc.push(1, "more").stopped);
  EXPECT_THROW(moxi::runtime::stop_checker({""}, {}), moxi::error);
  EXPECT_THROW(moxi::runtime::stop_checker({"\xFF"}, {}), moxi::error);
}

// End to end with the streaming detokenizer: byte tokens, so characters arrive split across tokens.
TEST(samplerStop, WithStreamDecoder) {
  std::string file;
  const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (unsigned b = 0; b < 256; ++b) {
    file += std::string{k[b >> 2], k[(b & 3) << 4], '=', '='} + " " + std::to_string(b) + "\n";
  }
  auto tok = moxi::formats::tokenizer::from_tiktoken(file, "bytes.tiktoken", {});
  const std::string text = "答案是：四十二。然后";
  moxi::formats::stream_decoder sd(tok);
  moxi::runtime::stop_checker sc({"。然"}, {});
  std::string out;
  bool stopped = false;
  for (unsigned char c : text) {
    auto chunk = sd.push(c);
    EXPECT_TRUE(moxi::formats::utf8_valid(chunk));
    auto st = sc.push(c, chunk);
    EXPECT_TRUE(moxi::formats::utf8_valid(st.text));
    out += st.text;
    if (st.stopped) {
      stopped = true;
      break;
    }
  }
  EXPECT_TRUE(stopped);
  EXPECT_EQ(out, "答案是：四十二");
}

}  // namespace
