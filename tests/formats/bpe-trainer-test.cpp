// BPE trainer tests against a straightforward reference written here: recount every pair after every
// merge (O(n^2)), take the most frequent with the same documented tie rule, and encode by repeatedly
// merging the lowest-ranked pair (GPT-2's algorithm). The written tokenizer.json must load with
// moxi::formats::tokenizer and encode the corpus into the ids the reference predicts.
#include "moxi/formats/bpe-trainer.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "moxi/base/error.h"
#include "moxi/formats/tokenizer-regex.h"
#include "moxi/formats/tokenizer.h"

namespace {

using moxi::token_id;
using moxi::formats::bpe_model;
using moxi::formats::bpe_split;
using moxi::formats::bpe_train_options;
using moxi::formats::bpe_trainer;

// Pieces of `text` in order: specials (as {id, ""}) and pre-tokenized chunks (as {-1, bytes}).
std::vector<std::pair<int, std::string>> pieces(const std::string& text,
                                                const std::vector<std::string>& specials, bpe_split split) {
  moxi::formats::regex re(moxi::formats::bpe_split_pattern(split), "test");
  std::vector<std::pair<int, std::string>> out;
  auto chunk = [&](const std::string& c) {
    size_t pos = 0;
    for (auto [b, e] : re.find_all(c)) {
      if (b > pos) out.push_back({-1, c.substr(pos, b - pos)});
      out.push_back({-1, c.substr(b, e - b)});
      pos = e;
    }
    if (pos < c.size()) out.push_back({-1, c.substr(pos)});
  };
  size_t start = 0;
  while (true) {
    size_t best = std::string::npos;
    int which = -1;
    for (size_t i = 0; i < specials.size(); ++i) {
      const size_t at = text.find(specials[i], start);
      if (at < best ||
          (at == best && at != std::string::npos && specials[i].size() > specials[size_t(which)].size())) {
        best = at;
        which = int(i);
      }
    }
    if (best == std::string::npos) {
      chunk(text.substr(start));
      break;
    }
    chunk(text.substr(start, best - start));
    out.push_back({which, ""});
    start = best + specials[size_t(which)].size();
  }
  return out;
}

struct reference_bpe {
  std::vector<std::string> tokens;  // internal id -> bytes (byte b = id b)
  struct merge {
    int left, right, result;
  };
  std::vector<merge> merges;
};

// Counts all pairs from scratch for every merge.
reference_bpe train_reference(const std::vector<std::string>& words, int64_t new_tokens,
                              int64_t min_frequency) {
  reference_bpe r;
  for (int b = 0; b < 256; ++b) r.tokens.push_back(std::string(1, char(b)));
  std::vector<std::vector<int>> ws;
  for (const auto& w : words) {
    std::vector<int> v;
    for (unsigned char c : w) v.push_back(c);
    ws.push_back(v);
  }
  int64_t created = 0;
  while (created < new_tokens) {
    std::map<std::pair<int, int>, int64_t> counts;
    for (const auto& w : ws) {
      for (size_t i = 0; i + 1 < w.size(); ++i) ++counts[{w[i], w[i + 1]}];
    }
    std::pair<int, int> best{-1, -1};
    int64_t best_count = 0;
    for (const auto& [p, c] : counts) {  // ascending pairs: the first maximum is the smallest pair
      if (c > best_count) {
        best = p;
        best_count = c;
      }
    }
    if (best_count < std::max<int64_t>(min_frequency, 1)) break;
    const std::string bytes = r.tokens[size_t(best.first)] + r.tokens[size_t(best.second)];
    int id = -1;
    for (size_t i = 0; i < r.tokens.size(); ++i) {
      if (r.tokens[i] == bytes) id = int(i);
    }
    if (id < 0) {
      id = int(r.tokens.size());
      r.tokens.push_back(bytes);
      ++created;
    }
    r.merges.push_back({best.first, best.second, id});
    for (auto& w : ws) {
      std::vector<int> n;
      for (size_t i = 0; i < w.size();) {
        if (i + 1 < w.size() && w[i] == best.first && w[i + 1] == best.second) {
          n.push_back(id);
          i += 2;
        } else {
          n.push_back(w[i++]);
        }
      }
      w = n;
    }
  }
  return r;
}

// GPT-2's encoder: merge every occurrence of the lowest-ranked pair present, repeat.
std::vector<token_id> encode_reference(const reference_bpe& r, const std::string& text,
                                       const std::vector<std::string>& specials, bpe_split split) {
  const int offset = int(specials.size());
  std::map<std::pair<int, int>, std::pair<size_t, int>> rank;
  for (size_t i = 0; i < r.merges.size(); ++i)
    rank.emplace(std::pair{r.merges[i].left, r.merges[i].right}, std::pair{i, r.merges[i].result});
  std::vector<token_id> out;
  for (const auto& [special, bytes] : pieces(text, specials, split)) {
    if (special >= 0) {
      out.push_back(special);
      continue;
    }
    std::vector<int> w;
    for (unsigned char c : bytes) w.push_back(c);
    while (w.size() > 1) {
      size_t best_rank = SIZE_MAX;
      std::pair<int, int> best;
      int result = -1;
      for (size_t i = 0; i + 1 < w.size(); ++i) {
        auto it = rank.find({w[i], w[i + 1]});
        if (it != rank.end() && it->second.first < best_rank) {
          best_rank = it->second.first;
          best = it->first;
          result = it->second.second;
        }
      }
      if (result < 0) break;
      std::vector<int> n;
      for (size_t i = 0; i < w.size();) {
        if (i + 1 < w.size() && w[i] == best.first && w[i + 1] == best.second) {
          n.push_back(result);
          i += 2;
        } else {
          n.push_back(w[i++]);
        }
      }
      w = n;
    }
    for (int id : w) out.push_back(id + offset);
  }
  return out;
}

std::vector<std::string> words_of(const std::string& text, const std::vector<std::string>& specials,
                                  bpe_split s) {
  std::vector<std::string> w;
  for (const auto& [special, bytes] : pieces(text, specials, s)) {
    if (special < 0) w.push_back(bytes);
  }
  return w;
}

const char* const kCorpus =
    "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs!\n"
    "Count the lines of notes.txt: wc -l notes.txt\n<|user|>show the first 3 lines of log.txt<|end|>\n"
    "<|assistant|>head -n 3 log.txt<|end|>\n"
    "In 2024 there were 12345 foxes and 678 dogs. Café naïve résumé — 日本語のテキスト, 日本語.\n"
    "aaaa aaa aa a bbbb abab ababab   spaces    and\ttabs\n\n\n"
    "It's what we've done; they'll see. I'm sure you'd agree.\n"
    "def sum_to(n):\n    total = 0\n    for i in range(1, n + 1):\n        total += i\n    return total\n";

std::string corpus() {
  std::string s;
  for (int i = 0; i < 3; ++i) s += kCorpus;
  return s;
}

struct trained {
  bpe_model model;
  reference_bpe ref;
  std::vector<std::string> specials;
};

trained train_both(const std::string& text, const bpe_train_options& o) {
  bpe_trainer t(o);
  t.add_text(text);
  trained r{t.train(), {}, o.special_tokens};
  const int64_t new_tokens = o.vocab_size - 256 - int64_t(o.special_tokens.size());
  r.ref = train_reference(words_of(text, o.special_tokens, o.split), new_tokens, o.min_frequency);
  return r;
}

void expect_same_merges(const trained& t) {
  const int offset = int(t.specials.size());
  ASSERT_EQ(t.model.merges.size(), t.ref.merges.size());
  for (size_t i = 0; i < t.ref.merges.size(); ++i) {
    EXPECT_EQ(t.model.merges[i].left, t.ref.merges[i].left + offset) << "merge " << i;
    EXPECT_EQ(t.model.merges[i].right, t.ref.merges[i].right + offset) << "merge " << i;
    EXPECT_EQ(t.model.merges[i].result, t.ref.merges[i].result + offset) << "merge " << i;
  }
  ASSERT_EQ(t.model.token_bytes.size(), t.ref.tokens.size() + size_t(offset));
  for (size_t i = 0; i < t.ref.tokens.size(); ++i)
    EXPECT_EQ(t.model.token_bytes[i + size_t(offset)], t.ref.tokens[i]);
}

TEST(BpeTrainer, MergesEqualTheReference) {
  for (auto split : {bpe_split::llama3, bpe_split::llama3_digits, bpe_split::gpt2}) {
    bpe_train_options o;
    o.vocab_size = 256 + 7 + 120;
    o.split = split;
    auto t = train_both(corpus(), o);
    SCOPED_TRACE(moxi::formats::to_string(split));
    EXPECT_GT(t.model.merges.size(), 60u);
    expect_same_merges(t);
  }
}

TEST(BpeTrainer, MinFrequencyOneAndTinyAlphabets) {
  // Random words over {a, b, c}: long same-letter runs and many equal counts stress the left-to-right
  // merging and the tie rule.
  for (int seed = 1; seed <= 6; ++seed) {
    std::mt19937 gen(seed);
    std::string text;
    for (int i = 0; i < 200; ++i) {
      const int len = 1 + int(gen() % 12);
      for (int k = 0; k < len; ++k) text += char('a' + gen() % 3);
      text += ' ';
    }
    bpe_train_options o;
    o.vocab_size = 256 + 7 + 150;
    o.min_frequency = seed % 2 ? 1 : 2;
    auto t = train_both(text, o);
    SCOPED_TRACE("seed " + std::to_string(seed));
    expect_same_merges(t);
  }
}

TEST(BpeTrainer, TiesGoToTheSmallestPair) {
  bpe_train_options o;
  o.vocab_size = 256 + 7 + 2;
  o.special_tokens = moxi::formats::default_special_tokens();
  bpe_trainer t(o);
  t.add_text("cd\nab\ncd\nab");  // (a,b) and (c,d) both twice; newlines are pieces of their own
  const auto m = t.train();
  ASSERT_GE(m.merges.size(), 1u);
  EXPECT_EQ(m.token_bytes[size_t(m.merges[0].result)], "ab");
}

TEST(BpeTrainer, StopsWhenNoPairIsFrequentEnough) {
  bpe_train_options o;
  o.vocab_size = 4096;
  bpe_trainer t(o);
  t.add_text("abc abc xyz");
  const auto m = t.train();
  // "abc" twice: (a,b) -> ab, then (ab,c) -> abc, then " abc" once... nothing else reaches 2.
  ASSERT_EQ(m.merges.size(), 2u);
  EXPECT_EQ(m.token_bytes[size_t(m.merges[1].result)], "abc");
}

TEST(BpeTrainer, WrittenJsonLoadsAndEncodesLikeTheReference) {
  for (auto split : {bpe_split::llama3, bpe_split::llama3_digits, bpe_split::gpt2}) {
    SCOPED_TRACE(moxi::formats::to_string(split));
    bpe_train_options o;
    o.vocab_size = 256 + 7 + 150;
    o.split = split;
    const std::string text = corpus();
    auto t = train_both(text, o);
    const std::string json = moxi::formats::bpe_to_hf_json(t.model);
    const auto tok = moxi::formats::tokenizer::from_hf_json(json, "trained.json");
    EXPECT_EQ(tok.vocab_size(), token_id(t.model.token_bytes.size()));
    const auto ids = tok.encode(text);
    EXPECT_EQ(ids, encode_reference(t.ref, text, o.special_tokens, split));
    EXPECT_LT(ids.size(), text.size() / 2) << "merges should compress the training text";
    EXPECT_EQ(tok.decode(ids), text);
    // Unseen text, including bytes that are not valid UTF-8 on their own once split.
    for (const std::string s :
         {"The fox and the dog count 99999 lines.", "héllo wörld 日本", "", "\n\n  x"}) {
      const auto e = tok.encode(s);
      EXPECT_EQ(e, encode_reference(t.ref, s, o.special_tokens, split)) << s;
      EXPECT_EQ(tok.decode(e), s);
    }
    // Specials: ids 0.. in order, matched whole, skipped on request.
    EXPECT_EQ(tok.find("<|pad|>"), token_id(0));
    EXPECT_EQ(tok.find("<|bos|>"), token_id(1));
    EXPECT_EQ(tok.find("<|eos|>"), token_id(2));
    EXPECT_TRUE(tok.is_special(4));
    const auto chat = tok.encode("<|user|>hi<|end|>");
    ASSERT_GE(chat.size(), 3u);
    EXPECT_EQ(chat.front(), 4);
    EXPECT_EQ(chat.back(), 6);
    EXPECT_EQ(tok.decode(chat, /*skip_special=*/true), "hi");
  }
}

TEST(BpeTrainer, DeterministicAndValidated) {
  bpe_train_options o;
  o.vocab_size = 300;
  auto once = [&] {
    bpe_trainer t(o);
    t.add_text(corpus());
    return moxi::formats::bpe_to_hf_json(t.train());
  };
  EXPECT_EQ(once(), once());

  o.vocab_size = 100;
  EXPECT_THROW(bpe_trainer{o}, moxi::error);
  o.vocab_size = 300;
  o.special_tokens = {"<|a|>", "<|a|>"};
  EXPECT_THROW(bpe_trainer{o}, moxi::error);
  o.special_tokens = {"<|a|>"};
  bpe_trainer t(o);
  EXPECT_THROW(t.add_text(std::string("bad \xff utf8"), "x.txt"), moxi::error);
}

TEST(BpeTrainer, FewMegabytesInSeconds) {
  // ~2 MB of varied text: the incremental counts must keep this well inside a test's time.
  std::mt19937 gen(7);
  static const char* words[] = {"count", "lines",  "notes", "file", "the",      "of",
                                "find",  "larger", "than",  "show", "first",    "log",
                                "print", "sort",   "words", "copy", "directory"};
  std::string text;
  while (text.size() < (2u << 20)) {
    text += words[gen() % 17];
    text += gen() % 9 == 0 ? ".\n" : " ";
    if (gen() % 13 == 0) text += std::to_string(gen() % 5000) + " ";
  }
  bpe_train_options o;
  o.vocab_size = 2048;
  bpe_trainer t(o);
  t.add_text(text);
  const auto m = t.train();
  EXPECT_GT(m.merges.size(), 100u);
  EXPECT_LT(t.stats().count_s + t.stats().merge_s, 20.0);
}

}  // namespace

// The digit split: trained on text full of numbers (where the llama3 split would merge "12", "123", ...),
// the written tokenizer spells every number digit by digit (each token holding a digit is exactly that one
// byte) and decodes back to the same text, for every number 0..99999 and a few long ones.
TEST(BpeTrainer, DigitSplitSpellsEveryNumberDigitByDigit) {
  std::string text;
  for (int i = 0; i < 3000; ++i) text += "What is " + std::to_string(i * 37 % 1000) + " + 12? Answer: 123.\n";
  bpe_train_options o;
  o.vocab_size = 256 + 7 + 200;
  o.split = bpe_split::llama3_digits;
  moxi::formats::bpe_trainer trainer(o);
  trainer.add_text(text);
  const auto model = trainer.train();
  const auto tok =
      moxi::formats::tokenizer::from_hf_json(moxi::formats::bpe_to_hf_json(model), "digits.json");
  auto check = [&](const std::string& s) {
    const auto ids = tok.encode(s);
    for (auto id : ids) {
      const std::string_view b = tok.token_bytes(id);
      const bool has_digit = b.find_first_of("0123456789") != std::string_view::npos;
      if (has_digit) {
        ASSERT_EQ(b.size(), 1u) << "token '" << b << "' of '" << s << "' joins a digit";
      }
    }
    ASSERT_EQ(tok.decode(ids), s);
  };
  for (int n = 0; n < 100000; ++n) check(std::to_string(n));
  for (const std::string s : {"-42", "3.14159", "x=1000000007;", "1,234,567", " 99 bottles", "a1b22c333",
                              "12345678901234567890", "Answer: 432\n"})
    check(s);
  // The same text under the llama3 split does merge digits (so the test can tell the two apart).
  o.split = bpe_split::llama3;
  moxi::formats::bpe_trainer grouped(o);
  grouped.add_text(text);
  const auto m3 = grouped.train();
  const auto tok3 = moxi::formats::tokenizer::from_hf_json(moxi::formats::bpe_to_hf_json(m3), "llama3.json");
  EXPECT_EQ(tok3.encode("123").size(), 1u);
}

TEST(BpeTrainer, SplitNamesRoundTrip) {
  for (auto s : {bpe_split::llama3, bpe_split::llama3_digits, bpe_split::gpt2})
    EXPECT_EQ(moxi::formats::parse_bpe_split(moxi::formats::to_string(s), "test"), s);
  EXPECT_THROW(moxi::formats::parse_bpe_split("digits", "recipe.json: tokenizer.split"), moxi::error);
}
