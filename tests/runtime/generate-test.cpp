// The generation loop against a scripted fake model: one prefill call then one call per token, streaming
// whole UTF-8 characters, stopping at a stop token (not printed), a stop string or max_tokens, and
// reproducible sampling with a seed that never picks ids the tokenizer cannot decode.
#include "moxi/runtime/generate.h"

#include <gtest/gtest.h>

#include <cmath>

#include "moxi/base/error.h"
#include "moxi/formats/byte-tokenizer.h"

using namespace moxi;
using namespace moxi::runtime;
using moxi::formats::tokenizer;
using moxi::formats::utf8_valid;

namespace {

constexpr token_id kEos = 2;

tokenizer byte_tokenizer() {
  return tokenizer::from_hf_json(
      formats::byte_level_tokenizer_json(300, {{0, "<pad>"}, {1, "<bos>"}, {2, "<eos>"}}), "test");
}

// Emits `script` one token per position after the prompt (then EOS); records the calls it gets.
class scripted_lm final : public causal_lm {
 public:
  explicit scripted_lm(std::vector<token_id> script, bool flat = false)
      : script_(std::move(script)), flat_(flat) {}
  int64_t vocab_size() const override { return 300; }
  std::vector<float> append(std::span<const token_id> tokens) override {
    calls.push_back(tokens.size());
    seen.insert(seen.end(), tokens.begin(), tokens.end());
    std::vector<float> l(300, 0.0f);
    if (flat_) return l;  // uniform: every sample is a draw from the RNG
    const size_t i = calls.size() - 1;
    l[size_t(i < script_.size() ? script_[i] : kEos)] = 30.0f;
    return l;
  }
  std::vector<size_t> calls;
  std::vector<token_id> seen;

 private:
  std::vector<token_id> script_;
  bool flat_;
};

struct run {
  generate_result r;
  std::vector<std::string> chunks;
  std::string text() const {
    std::string s;
    for (const auto& c : chunks) s += c;
    return s;
  }
};

run go(causal_lm& lm, const tokenizer& tok, const std::vector<token_id>& prompt, const generate_options& o) {
  run out;
  out.r = generate(lm, tok, prompt, o, [&](std::string_view t) { out.chunks.emplace_back(t); });
  return out;
}

generate_options greedy(int64_t max_tokens) {
  generate_options o;
  o.sampling.temperature = 0;
  o.max_tokens = max_tokens;
  o.stop_tokens = {kEos};
  return o;
}

TEST(Generate, GreedyStreamsWholeCharactersAndStopsAtEos) {
  const auto tok = byte_tokenizer();
  const std::string want =
      "Hello, w\xc3\xb6rld \xe2\x82\xac!";  // 2- and 3-byte characters, one byte per token
  scripted_lm lm(tok.encode(want));
  const auto prompt = tok.encode("Say:");
  const auto out = go(lm, tok, prompt, greedy(100));
  EXPECT_EQ(out.text(), want);
  for (const auto& c : out.chunks) EXPECT_TRUE(utf8_valid(c)) << c;
  EXPECT_EQ(out.r.finish_reason, "stop");
  EXPECT_EQ(out.r.tokens.back(), kEos);
  EXPECT_EQ(out.r.tokens.size(), want.size() + 1);
  EXPECT_EQ(out.r.prompt_tokens, int64_t(prompt.size()));
  // Prefill once, then one decode call per generated token except the last (EOS needs no logits).
  ASSERT_EQ(lm.calls.size(), want.size() + 1);
  EXPECT_EQ(lm.calls[0], prompt.size());
  for (size_t i = 1; i < lm.calls.size(); ++i) EXPECT_EQ(lm.calls[i], 1u);
  EXPECT_EQ(std::vector<token_id>(lm.seen.begin() + long(prompt.size()), lm.seen.end()),
            std::vector<token_id>(out.r.tokens.begin(), out.r.tokens.end() - 1));
}

TEST(Generate, MaxTokensEndsWithLengthAndFlushesPartialCharacters) {
  const auto tok = byte_tokenizer();
  scripted_lm lm(tok.encode("ab\xe2\x82\xac"));
  const auto out = go(lm, tok, tok.encode("x"), greedy(3));  // cuts the euro sign after its first byte
  EXPECT_EQ(out.r.finish_reason, "length");
  EXPECT_EQ(out.r.tokens.size(), 3u);
  EXPECT_EQ(lm.calls.size(), 3u);
  EXPECT_EQ(out.text(), std::string("ab\xe2"));  // the held-back byte is released at the end, as decode does
}

TEST(Generate, StopStringEndsBeforeIt) {
  const auto tok = byte_tokenizer();
  scripted_lm lm(tok.encode("one, two. three"));
  auto o = greedy(100);
  o.stop_strings = {"two."};
  const auto out = go(lm, tok, tok.encode("count"), o);
  EXPECT_EQ(out.text(), "one, ");
  EXPECT_EQ(out.r.finish_reason, "stop");
}

TEST(Generate, SeededSamplingIsReproducible) {
  const auto tok = byte_tokenizer();
  generate_options o;
  o.max_tokens = 20;
  o.sampling.temperature = 1.0f;
  o.sampling.seed = 42;
  scripted_lm a({}, true), b({}, true), c({}, true);
  const auto ra = go(a, tok, {5, 6}, o), rb = go(b, tok, {5, 6}, o);
  EXPECT_EQ(ra.r.tokens, rb.r.tokens);
  // Ids 259..299 are beyond the byte tokenizer: never sampled from a flat distribution over 300.
  for (token_id id : ra.r.tokens) EXPECT_FALSE(tok.token_bytes(id).empty()) << id;
  o.sampling.seed = 43;
  EXPECT_NE(go(c, tok, {5, 6}, o).r.tokens, ra.r.tokens);
}

TEST(Generate, RejectsEmptyPromptAndBadParameters) {
  const auto tok = byte_tokenizer();
  scripted_lm lm({});
  EXPECT_THROW(go(lm, tok, {}, greedy(4)), error);
  auto o = greedy(4);
  o.sampling.top_p = 0;
  EXPECT_THROW(go(lm, tok, {5}, o), error);
  EXPECT_TRUE(lm.calls.empty());
  const auto none = go(lm, tok, {5}, greedy(0));
  EXPECT_TRUE(none.r.tokens.empty());
  EXPECT_TRUE(lm.calls.empty());
}

}  // namespace

namespace {

// Decodable ids: the loop never samples the others, so they are out of the softmax too.
int decodable(const tokenizer& tok, int64_t vocab) {
  int n = 0;
  for (int64_t id = 0; id < vocab; ++id) n += id < tok.vocab_size() && !tok.token_bytes(token_id(id)).empty();
  return n;
}

TEST(Generate, LogprobsAreTheModelsLogSoftmaxOfEachToken) {
  const auto tok = byte_tokenizer();
  const double d = decodable(tok, 300);
  scripted_lm lm(tok.encode("abc"));
  auto o = greedy(10);
  o.logprobs = true;
  const auto out = go(lm, tok, tok.encode("x"), o);
  ASSERT_EQ(out.r.tokens.size(), 4u);  // a, b, c, eos
  ASSERT_EQ(out.r.logprobs.size(), 4u);
  // One logit of 30 among d - 1 zeros, in fp64.
  const double want = 30.0 - std::log(std::exp(30.0) + (d - 1));
  for (float lp : out.r.logprobs) EXPECT_NEAR(lp, want, 1e-6);
  // Sampling at any temperature from uniform logits: each token's model log-prob is -log(d).
  scripted_lm flat({}, /*flat=*/true);
  auto s = greedy(6);
  s.sampling.temperature = 0.3;
  s.sampling.seed = 5;
  s.logprobs = true;
  const auto f = go(flat, tok, tok.encode("x"), s);
  ASSERT_EQ(f.r.logprobs.size(), f.r.tokens.size());
  for (float lp : f.r.logprobs) EXPECT_NEAR(lp, -std::log(d), 1e-5);
  // Off by default.
  scripted_lm again(tok.encode("abc"));
  EXPECT_TRUE(go(again, tok, tok.encode("x"), greedy(10)).r.logprobs.empty());
}

}  // namespace
