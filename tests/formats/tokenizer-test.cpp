// Tokenizer tests. The reference tests compare ids exactly with tokenizers no one on moxi wrote (Hugging
// Face's tokenizers.js on the DeepSeek-V3 tokenizer.json, js-tiktoken on o200k_base, V8's /v-mode regex for
// Kimi's pattern); their data comes from tests/tokenizer-ref (scripts/setup-test-deps.sh). The unit tests
// use small tokenizers written out here, with expected ids worked out by hand from the BPE rules.
#include "moxi/formats/tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "moxi/base/error.h"
#include "moxi/formats/tokenizer-regex.h"

namespace {

using moxi::token_id;
using moxi::formats::tokenizer;
using json = nlohmann::json;
using ids = std::vector<token_id>;

const std::filesystem::path kRefDir =
    std::filesystem::path(MOXI_SOURCE_DIR) / "tests/tokenizer-ref/generated";

// GPT-2's bytes_to_unicode, written independently of the library: printable bytes keep their code point,
// the other 68 get U+0100.. in byte order.
std::string byte_char(unsigned b) {
  unsigned cp = b;
  if (!((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE))) {
    unsigned n = 0;
    for (unsigned x = 0; x < b; ++x) {
      if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE))) ++n;
    }
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s.push_back(char(cp));
  } else {
    s.push_back(char(0xC0 | (cp >> 6)));
    s.push_back(char(0x80 | (cp & 0x3F)));
  }
  return s;
}

// A tokenizer.json with all 256 byte tokens (id = byte), extra tokens from 256 on, and the given merges.
json tiny_json(const std::vector<std::string>& extra, const json& merges, const json& pre_tokenizer) {
  json vocab = json::object();
  for (unsigned b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  for (size_t i = 0; i < extra.size(); ++i) vocab[extra[i]] = 256 + i;
  return json{{"version", "1.0"},
              {"normalizer", nullptr},
              {"pre_tokenizer", pre_tokenizer},
              {"decoder", {{"type", "ByteLevel"}}},
              {"added_tokens", json::array()},
              {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
}

json byte_level_only() {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
}

tokenizer load(const json& j) {
  return tokenizer::from_hf_json(j.dump(), "tiny.json");
}

// Expects a moxi::error whose message contains every fragment.
template <typename F>
void expect_error(F&& f, std::vector<std::string> fragments) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning " << fragments.front();
  } catch (const moxi::error& e) {
    for (const auto& frag : fragments) {
      EXPECT_NE(std::string(e.what()).find(frag), std::string::npos)
          << "message: " << e.what() << "\nmissing: " << frag;
    }
  }
}

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// ---------------------------------------------------------------------------------------------------------
// BPE on small tokenizers

TEST(tokenizer, MergesApplyByRankNotByPosition) {
  // "abc": rank 0 is "b c", so a + bc, although "a b" comes first in the text.
  auto tok = load(tiny_json({"ab", "bc", "abc"}, {"b c", "a b", "ab c"}, byte_level_only()));
  EXPECT_EQ(tok.encode("abc"), (ids{'a', 257}));
  // With "a b" ranked first, ab then ab+c -> abc.
  auto tok2 = load(tiny_json({"ab", "bc", "abc"}, {"a b", "b c", "ab c"}, byte_level_only()));
  EXPECT_EQ(tok2.encode("abc"), (ids{258}));
  EXPECT_EQ(tok2.encode("abcab"), (ids{258, 256}));
}

TEST(tokenizer, ArrayAndStringMergesAreTheSame) {
  auto a = load(tiny_json({"ab", "bc", "abc"}, {"b c", "a b", "ab c"}, byte_level_only()));
  auto b = load(
      tiny_json({"ab", "bc", "abc"}, json::array({{"b", "c"}, {"a", "b"}, {"ab", "c"}}), byte_level_only()));
  for (std::string s : {"abc", "aabbcc", "cab", "abcabcab", ""}) EXPECT_EQ(a.encode(s), b.encode(s)) << s;
}

TEST(tokenizer, EqualRanksMergeLeftmostFirst) {
  // "aaa": both pairs are (a, a); the left one merges, leaving aa + a.
  auto tok = load(tiny_json({"aa"}, {"a a"}, byte_level_only()));
  EXPECT_EQ(tok.encode("aaa"), (ids{256, 'a'}));
  EXPECT_EQ(tok.encode("aaaa"), (ids{256, 256}));
}

TEST(tokenizer, ByteLevelCharsForSpaceAndHighBytes) {
  // Space is byte-level "Ġ" (U+0120); é is bytes C3 A9 -> "Ã©".
  auto tok = load(tiny_json({"Ġh", "Ã©"}, {"Ġ h", "Ã ©"}, byte_level_only()));
  EXPECT_EQ(tok.encode(" h\xC3\xA9"), (ids{256, 257}));
  EXPECT_EQ(tok.decode(ids{256, 257}), " h\xC3\xA9");
  EXPECT_EQ(tok.token_bytes(256), " h");
}

TEST(tokenizer, ByteLevelRegexSplitsBeforeMerging) {
  // GPT-2's regex keeps " b" apart from "a", so the "a Ġ" merge cannot fire across it.
  json pre = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  auto tok = load(tiny_json({"aĠ", "Ġb"}, {"a Ġ", "Ġ b"}, pre));
  EXPECT_EQ(tok.encode("a b"), (ids{'a', 257}));
  auto no_regex = load(tiny_json({"aĠ", "Ġb"}, {"a Ġ", "Ġ b"}, byte_level_only()));
  EXPECT_EQ(no_regex.encode("a b"), (ids{256, 'b'}));
}

TEST(tokenizer, AddPrefixSpace) {
  json pre = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", false}};
  auto tok = load(tiny_json({"Ġh"}, {"Ġ h"}, pre));
  EXPECT_EQ(tok.encode("h"), (ids{256}));
  EXPECT_EQ(tok.encode(" h"), (ids{256}));
}

TEST(tokenizer, IgnoreMergesTakesWholeWords) {
  // The merges cannot build "abc" (no "ab c"), but ignore_merges looks the word up first.
  auto j = tiny_json({"ab", "abc"}, {"a b"}, byte_level_only());
  EXPECT_EQ(load(j).encode("abc"), (ids{256, 'c'}));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(load(j).encode("abc"), (ids{257}));
}

// Split behaviors, observed through merges that only fire when the pieces stay together:
// vocab has "a-" (a,-) and "-b" (-,b).
ids split_ids(const std::string& behavior, bool invert, const std::string& text) {
  json split = {
      {"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}, {"invert", invert}};
  json pre = {{"type", "Sequence"}, {"pretokenizers", {split, byte_level_only()}}};
  return load(tiny_json({"a-", "-b", "--"}, {"a -", "- b", "- -"}, pre)).encode(text);
}

TEST(tokenizer, SplitBehaviors) {
  const token_id a = 'a', b = 'b', dash = '-', a_dash = 256, dash_b = 257, dash_dash = 258;
  EXPECT_EQ(split_ids("Isolated", false, "a-b"), (ids{a, dash, b}));
  EXPECT_EQ(split_ids("Removed", false, "a-b"), (ids{a, b}));
  EXPECT_EQ(split_ids("MergedWithPrevious", false, "a-b"), (ids{a_dash, b}));
  EXPECT_EQ(split_ids("MergedWithNext", false, "a-b"), (ids{a, dash_b}));
  EXPECT_EQ(split_ids("Isolated", false, "a--b"), (ids{a, dash, dash, b}));
  EXPECT_EQ(split_ids("Contiguous", false, "a--b"), (ids{a, dash_dash, b}));
  // Inverted, the text between dashes is the "match": Removed keeps only the dashes.
  EXPECT_EQ(split_ids("Removed", true, "a-b"), (ids{dash}));
  // Inverted MergedWithPrevious: "a" merges into nothing (first), "b" merges into "-" -> "a", "-b".
  EXPECT_EQ(split_ids("MergedWithPrevious", true, "a-b"), (ids{a, dash_b}));
}

TEST(tokenizer, RegexSplitWithUnicodeClasses) {
  json split = {{"type", "Split"},
                {"pattern", {{"Regex", "\\p{N}{1,3}"}}},
                {"behavior", "Isolated"},
                {"invert", false}};
  json pre = {{"type", "Sequence"}, {"pretokenizers", {split, byte_level_only()}}};
  auto tok = load(tiny_json({"12", "123", "34"}, {"1 2", "12 3", "3 4"}, pre));
  // 1234 -> "123" + "4" (three digits at most per piece, so "3 4" never fires).
  EXPECT_EQ(tok.encode("1234"), (ids{257, '4'}));
}

// ---------------------------------------------------------------------------------------------------------
// Added tokens

json with_added(json j, const json& added) {
  j["added_tokens"] = added;
  return j;
}

TEST(tokenizer, AddedTokensLongestMatchAndSpecialFlag) {
  auto j = with_added(tiny_json({}, json::array(), byte_level_only()),
                      {{{"id", 300}, {"content", "<s>"}, {"special", true}},
                       {{"id", 301}, {"content", "<s>x"}, {"special", true}},
                       {{"id", 302}, {"content", "<u>"}, {"special", false}}});
  auto tok = load(j);
  EXPECT_EQ(tok.encode("a<s>b"), (ids{'a', 300, 'b'}));
  EXPECT_EQ(tok.encode("<s>xy"), (ids{301, 'y'}));  // longest
  EXPECT_EQ(tok.encode("<u><s>"), (ids{302, 300}));
  // Special tokens off: <s> is text, the non-special <u> still matches.
  EXPECT_EQ(tok.encode("<u><s>", false), (ids{302, '<', 's', '>'}));
  EXPECT_TRUE(tok.is_special(300));
  EXPECT_FALSE(tok.is_special(302));
  EXPECT_EQ(tok.decode(ids{'a', 300, 302}), "a<s><u>");
  EXPECT_EQ(tok.decode(ids{'a', 300, 302}, true), "a<u>");
  EXPECT_EQ(tok.find("<s>"), std::optional<token_id>(300));
  EXPECT_EQ(tok.find("a"), std::optional<token_id>('a'));
  EXPECT_EQ(tok.find("zz"), std::nullopt);
}

TEST(tokenizer, AddedTokenStripAndSingleWord) {
  auto j =
      with_added(tiny_json({}, json::array(), byte_level_only()),
                 {{{"id", 300}, {"content", "<m>"}, {"special", true}, {"lstrip", true}, {"rstrip", true}},
                  {{"id", 301}, {"content", "cat"}, {"special", false}, {"single_word", true}}});
  auto tok = load(j);
  EXPECT_EQ(tok.encode("a  <m>  b"), (ids{'a', 300, 'b'}));
  EXPECT_EQ(tok.encode("a cat"), (ids{'a', ' ', 301}));
  EXPECT_EQ(tok.encode("concat"), (ids{'c', 'o', 'n', 'c', 'a', 't'}));
}

TEST(tokenizer, NonNormalizedAddedTokensMatchFirst) {
  // HF extracts normalized=false tokens in a first pass, so "<x>" wins over the overlapping "a<x".
  auto j = with_added(tiny_json({}, json::array(), byte_level_only()),
                      {{{"id", 300}, {"content", "a<x"}, {"special", false}, {"normalized", true}},
                       {{"id", 301}, {"content", "<x>"}, {"special", true}, {"normalized", false}}});
  EXPECT_EQ(load(j).encode("a<x>"), (ids{'a', 301}));
}

// ---------------------------------------------------------------------------------------------------------
// Hostile and unsupported inputs

TEST(tokenizer, ErrorsNameTheField) {
  auto base = tiny_json({"ab"}, {"a b"}, byte_level_only());
  expect_error([] { tokenizer::from_hf_json("{not json", "bad.json"); }, {"bad.json", "invalid JSON"});
  expect_error([] { tokenizer::from_hf_json("[1,2]", "bad.json"); }, {"bad.json", "expected a JSON object"});
  {
    auto j = base;
    j["model"]["type"] = "Unigram";
    expect_error([&] { load(j); }, {"tiny.json", "model.type", "Unigram"});
  }
  {
    auto j = base;
    j["normalizer"] = {{"type", "NFC"}};
    expect_error([&] { load(j); }, {"tiny.json", "normalizer.type", "NFC"});
  }
  {
    auto j = base;
    j["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers", {byte_level_only(), {{"type", "Metaspace"}}}}};
    expect_error([&] { load(j); }, {"pre_tokenizer.pretokenizers[1].type", "Metaspace"});
  }
  {
    auto j = base;
    j["pre_tokenizer"] = nullptr;
    expect_error([&] { load(j); }, {"pre_tokenizer", "ByteLevel"});
  }
  {
    auto j = base;
    j["decoder"] = {{"type", "WordPiece"}};
    expect_error([&] { load(j); }, {"decoder.type", "WordPiece"});
  }
  {
    auto j = base;
    j["model"]["merges"] = {"a b", "a zz"};
    expect_error([&] { load(j); }, {"model.merges[1]", "not in model.vocab"});
  }
  {
    auto j = base;
    j["model"]["merges"] = {"a b c"};
    expect_error([&] { load(j); }, {"model.merges[0]"});
  }
  {
    auto j = base;
    j["model"]["merges"] = {42};
    expect_error([&] { load(j); }, {"model.merges[0]"});
  }
  {
    auto j = base;
    j["model"]["vocab"]["zz"] = -5;
    expect_error([&] { load(j); }, {"model.vocab[\"zz\"]", "out of range"});
  }
  {
    auto j = base;
    j["model"]["vocab"]["zz"] = 4000000000LL;
    expect_error([&] { load(j); }, {"model.vocab[\"zz\"]", "out of range"});
  }
  {
    auto j = base;
    j["model"]["vocab"]["zz"] = "7";
    expect_error([&] { load(j); }, {"model.vocab[\"zz\"]", "integer"});
  }
  {
    auto j = base;
    j["model"]["vocab"]["zz"] = 3;
    expect_error([&] { load(j); }, {"used twice"});
  }
  {
    auto j = base;
    j["model"].erase("vocab");
    expect_error([&] { load(j); }, {"model.vocab", "missing"});
  }
  {
    auto j = base;
    j["added_tokens"] = {{{"id", -1}, {"content", "<s>"}}};
    expect_error([&] { load(j); }, {"added_tokens[0].id"});
  }
  {
    auto j = base;
    j["added_tokens"] = {{{"id", 5}, {"content", ""}}};
    expect_error([&] { load(j); }, {"added_tokens[0].content"});
  }
  {
    auto j = base;
    j["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}},
          byte_level_only()}}};
    expect_error([&] { load(j); }, {"pre_tokenizer.pretokenizers[0].pattern", "compile"});
  }
  {
    auto j = base;
    j["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Sideways"}}, byte_level_only()}}};
    expect_error([&] { load(j); }, {"pre_tokenizer.pretokenizers[0].behavior", "Sideways"});
  }
  {
    auto j = base;
    j["model"]["dropout"] = 0.1;
    expect_error([&] { load(j); }, {"model.dropout"});
  }
  expect_error([] { tokenizer::from_hf_json_file("/nonexistent/tokenizer.json"); },
               {"/nonexistent/tokenizer.json"});
}

TEST(tokenizer, EncodeAndDecodeErrors) {
  auto tok = load(tiny_json({}, json::array(), byte_level_only()));
  expect_error([&] { tok.encode("ok\xFFnot"); }, {"UTF-8"});
  expect_error([&] { tok.encode("\xC3"); }, {"UTF-8"});
  expect_error([&] { tok.encode("\xED\xA0\x80"); }, {"UTF-8"});  // surrogate
  expect_error([&] { tok.decode(ids{1, 999999}); }, {"999999"});
  expect_error([&] { tok.decode(ids{-1}); }, {"-1"});
  moxi::formats::stream_decoder sd(tok);
  expect_error([&] { sd.push(12345678); }, {"12345678"});
}

// Mutated files never crash the loader: each either loads or throws moxi::error.
TEST(tokenizer, FuzzedTokenizerJsonNeverCrashes) {
  auto j = with_added(
      tiny_json({"ab", "bc", "abc"}, {"a b", "b c", "ab c"},
                {{"type", "Sequence"},
                 {"pretokenizers",
                  {{{"type", "Split"}, {"pattern", {{"Regex", "\\p{L}+|\\s+"}}}, {"behavior", "Isolated"}},
                   byte_level_only()}}}),
      {{{"id", 300}, {"content", "<s>"}, {"special", true}}});
  const std::string good = j.dump();
  std::mt19937_64 rng(7);
  int loaded = 0, rejected = 0;
  for (int iter = 0; iter < 400; ++iter) {
    std::string s = good;
    const int edits = 1 + int(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % s.size();
      switch (rng() % 3) {
        case 0:
          s[at] = char(rng() % 256);
          break;
        case 1:
          s.erase(at, 1 + rng() % 8);
          break;
        default:
          s.insert(at, 1, "{}[]\":,0-9\\"[rng() % 12]);
          break;
      }
      if (s.empty()) s = "{";
    }
    try {
      auto tok = tokenizer::from_hf_json(s, "fuzz.json");
      auto out = tok.encode("abc <s> ab");
      (void)tok.decode(out);
      ++loaded;
    } catch (const moxi::error&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 0);
  EXPECT_EQ(loaded + rejected, 400);
}

// ---------------------------------------------------------------------------------------------------------
// tiktoken

std::string b64(std::string_view s) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < s.size(); i += 3) {
    unsigned v = (unsigned char)s[i] << 16 | (unsigned char)s[i + 1] << 8 | (unsigned char)s[i + 2];
    out += {k[v >> 18], k[(v >> 12) & 63], k[(v >> 6) & 63], k[v & 63]};
  }
  if (s.size() - i == 1) {
    unsigned v = (unsigned char)s[i] << 16;
    out += {k[v >> 18], k[(v >> 12) & 63], '=', '='};
  } else if (s.size() - i == 2) {
    unsigned v = (unsigned char)s[i] << 16 | (unsigned char)s[i + 1] << 8;
    out += {k[v >> 18], k[(v >> 12) & 63], k[(v >> 6) & 63], '='};
  }
  return out;
}

std::string tiny_tiktoken(const std::vector<std::string>& extra) {
  std::string file;
  for (unsigned b = 0; b < 256; ++b) file += b64(std::string(1, char(b))) + " " + std::to_string(b) + "\n";
  for (size_t i = 0; i < extra.size(); ++i) file += b64(extra[i]) + " " + std::to_string(256 + i) + "\n";
  return file;
}

TEST(tokenizerTiktoken, MergesByRankOfTheConcatenation) {
  moxi::formats::tiktoken_options opt;
  opt.pattern = "\\S+|\\s+";
  opt.special_tokens = {{"<|end|>", 1000}};
  // "bc" (256) outranks "ab" (257). "abc" is no token, so a + bc stays; "abd" is one, reached whole or
  // through ab + d.
  auto tok = tokenizer::from_tiktoken(tiny_tiktoken({"bc", "ab", "abd"}), "tiny.tiktoken", opt);
  EXPECT_EQ(tok.encode("abc"), (ids{'a', 256}));
  EXPECT_EQ(tok.encode("abd"), (ids{258}));
  EXPECT_EQ(tok.encode("abdx"), (ids{258, 'x'}));
  EXPECT_EQ(tok.encode("xbcab"), (ids{'x', 256, 257}));
  EXPECT_EQ(tok.encode("x<|end|>ab"), (ids{'x', 1000, 257}));
  EXPECT_EQ(tok.encode("x<|end|>", false), (ids{'x', '<', '|', 'e', 'n', 'd', '|', '>'}));
  EXPECT_EQ(tok.decode(ids{'a', 256, 1000}), "abc<|end|>");
  EXPECT_EQ(tok.decode(ids{'a', 256, 1000}, true), "abc");
}

TEST(tokenizerTiktoken, ErrorsNameFileAndLine) {
  moxi::formats::tiktoken_options opt;
  expect_error([&] { tokenizer::from_tiktoken("YQ== 0\nYg 1\n", "t.model", opt); },
               {"t.model", "line 2", "base64"});
  expect_error([&] { tokenizer::from_tiktoken("YQ== 0\nYg== x\n", "t.model", opt); }, {"line 2", "rank"});
  expect_error([&] { tokenizer::from_tiktoken("YQ== 0\nYg== 0\n", "t.model", opt); }, {"line 2", "twice"});
  expect_error([&] { tokenizer::from_tiktoken("YQ== 0\nYQ== 1\n", "t.model", opt); }, {"line 2", "twice"});
  expect_error([&] { tokenizer::from_tiktoken("YQ==\n", "t.model", opt); }, {"line 1"});
  expect_error([&] { tokenizer::from_tiktoken("YQ== 99999999999\n", "t.model", opt); }, {"line 1"});
  expect_error([&] { tokenizer::from_tiktoken("", "t.model", opt); }, {"no tokens"});
  opt.special_tokens = {{"<s>", 0}};
  expect_error([&] { tokenizer::from_tiktoken("YQ== 0\n", "t.model", opt); }, {"special_tokens[\"<s>\"]"});
  opt.special_tokens.clear();
  opt.pattern = "[a&&b]";
  expect_error([&] { tokenizer::from_tiktoken("YQ== 0\n", "t.model", opt); }, {"pattern"});
  expect_error([] { tokenizer::from_tiktoken_file("/nonexistent/tiktoken.model", {}); }, {"/nonexistent"});
}

TEST(tokenizerTiktoken, KimiPatternCompilesAndKeepsHanApart) {
  moxi::formats::tiktoken_options opt;  // default pattern: Kimi's
  auto tok = tokenizer::from_tiktoken(tiny_tiktoken({}), "bytes.tiktoken", opt);
  // Every byte is a token and there are no merges, so ids are the bytes: checks the split is lossless.
  const std::string text = "中文English混合 it's 123456 ...\n\n";
  auto out = tok.encode(text);
  EXPECT_EQ(out.size(), text.size());
  EXPECT_EQ(tok.decode(out), text);
}

// ---------------------------------------------------------------------------------------------------------
// Regex translation

std::vector<std::string> pieces(const std::string& pattern, const std::string& text) {
  moxi::formats::regex re(moxi::formats::translate_class_intersections(pattern, "test"), "test");
  std::vector<std::string> out;
  for (auto [b, e] : re.find_all(text)) out.push_back(text.substr(b, e - b));
  return out;
}

TEST(tokenizerRegex, ClassIntersection) {
  EXPECT_EQ(moxi::formats::translate_class_intersections("[\\p{L}&&[^\\p{Han}]]+", "t"),
            "(?:(?![\\p{Han}])[\\p{L}])+");
  EXPECT_EQ(pieces("[\\p{L}&&[^\\p{Han}]]+|[\\p{Han}]+", "abc中文def"),
            (std::vector<std::string>{"abc", "中文", "def"}));
  EXPECT_EQ(pieces("[a-z&&[aeiou]]+", "xaeb"), (std::vector<std::string>{"ae"}));
  // An escaped bracket is not a nested class: "[\\[&&]" has an empty right operand.
  EXPECT_THROW(moxi::formats::translate_class_intersections("[\\[&&]", "t"), moxi::error);
  EXPECT_THROW(moxi::formats::translate_class_intersections("[^a&&[b]]", "t"), moxi::error);
  EXPECT_THROW(moxi::formats::translate_class_intersections("[a&&b]", "t"), moxi::error);
}

TEST(tokenizerRegex, BareScriptNamesMeanScriptNotExtensions) {
  // U+3001 "、" has Script=Common with Han among its script extensions: Oniguruma and Rust's regex do not
  // count it as \p{Han}, PCRE2 10.42 would.
  EXPECT_EQ(pieces("\\p{Han}+", "中、文"), (std::vector<std::string>{"中", "文"}));
  EXPECT_EQ(pieces("[\\p{Han}]+", "中、文"), (std::vector<std::string>{"中", "文"}));
  EXPECT_EQ(pieces("\\P{Han}+", "中、文"), (std::vector<std::string>{"、"}));
  EXPECT_EQ(moxi::formats::pin_script_properties("\\p{L}\\p{Lu}\\p{Han}\\p{^Latin}\\\\p{x}"),
            "\\p{L}\\p{Lu}\\p{sc:Han}\\p{^sc:Latin}\\\\p{x}");
}

TEST(tokenizerRegex, LongRunsDoNotExhaustTheMatcher) {
  moxi::formats::regex re("\\s+(?!\\S)|\\s+|\\p{L}+", "test");
  const std::string text = std::string(1 << 20, ' ') + "x" + std::string(1 << 20, 'y');
  auto m = re.find_all(text);
  ASSERT_FALSE(m.empty());
  EXPECT_EQ(m.back().second, text.size());
}

// ---------------------------------------------------------------------------------------------------------
// UTF-8 and streaming

TEST(tokenizerUtf8, CompletePrefixHoldsBackOnlyPossibleSequences) {
  using moxi::formats::utf8_complete_prefix;
  EXPECT_EQ(utf8_complete_prefix(""), 0u);
  EXPECT_EQ(utf8_complete_prefix("abc"), 3u);
  EXPECT_EQ(utf8_complete_prefix("a\xE4"), 1u);             // 1 of 3
  EXPECT_EQ(utf8_complete_prefix("a\xE4\xB8"), 1u);         // 2 of 3
  EXPECT_EQ(utf8_complete_prefix("a\xE4\xB8\xAD"), 4u);     // 中
  EXPECT_EQ(utf8_complete_prefix("\xF0\x9F\x98"), 0u);      // 3 of 4
  EXPECT_EQ(utf8_complete_prefix("\xF0\x9F\x98\x80"), 4u);  // 😀
  EXPECT_EQ(utf8_complete_prefix("a\x80"), 2u);             // stray continuation: never completes
  EXPECT_EQ(utf8_complete_prefix("a\xFF"), 2u);             // invalid byte
  EXPECT_EQ(utf8_complete_prefix("a\xC0"), 2u);             // overlong lead
  EXPECT_EQ(utf8_complete_prefix("a\xE0\x80"), 3u);         // overlong second byte
  EXPECT_EQ(utf8_complete_prefix("a\xED\xA0"), 3u);         // surrogate
  EXPECT_EQ(utf8_complete_prefix("a\xF4\x90"), 3u);         // above U+10FFFF
  EXPECT_EQ(utf8_complete_prefix("\xE4\xB8\xAD\xE4"), 3u);
  EXPECT_TRUE(moxi::formats::utf8_valid("中文😀"));
  EXPECT_FALSE(moxi::formats::utf8_valid("\xC0\x80"));
  EXPECT_FALSE(moxi::formats::utf8_valid("\xF8\x88\x80\x80\x80"));
}

TEST(tokenizerStream, SplitsCharactersAcrossTokens) {
  // Byte tokens only: each byte of "中😀" arrives alone.
  auto tok = load(tiny_json({}, json::array(), byte_level_only()));
  const std::string text = "a中😀b";
  moxi::formats::stream_decoder sd(tok);
  std::vector<std::string> chunks;
  for (unsigned char c : text) chunks.push_back(sd.push(c));
  chunks.push_back(sd.flush());
  EXPECT_EQ(chunks, (std::vector<std::string>{"a", "", "", "中", "", "", "", "😀", "b", ""}));
  // A truncated character at the end comes out on flush, unchanged.
  moxi::formats::stream_decoder sd2(tok);
  EXPECT_EQ(sd2.push(0xE4), "");
  EXPECT_EQ(sd2.pending(), 1u);
  EXPECT_EQ(sd2.flush(), "\xE4");
}

// ---------------------------------------------------------------------------------------------------------
// Reference tests

struct ref_case {
  std::string text;
  ids expected;
};

std::vector<ref_case> load_cases(const std::string& name, json* whole = nullptr) {
  const auto path = kRefDir / name;
  if (!std::filesystem::exists(path)) {
    ADD_FAILURE() << path << " is missing: run scripts/setup-test-deps.sh (npm ci + node generate.mjs in "
                  << "tests/tokenizer-ref)";
    return {};
  }
  json j = json::parse(read_text(path));
  std::vector<ref_case> out;
  for (const auto& c : j["cases"]) out.push_back({c["text"].get<std::string>(), c["ids"].get<ids>()});
  if (whole) *whole = std::move(j);
  return out;
}

// Exact ids, round trip, and streaming == full decode with every emitted chunk ending on a character
// boundary.
void check_cases(const tokenizer& tok, const std::vector<ref_case>& cases, bool allow_special = true) {
  for (const auto& c : cases) {
    const ids got = tok.encode(c.text, allow_special);
    EXPECT_EQ(got, c.expected) << "text: " << c.text.substr(0, 200);
    EXPECT_EQ(tok.decode(got), c.text);
    moxi::formats::stream_decoder sd(tok);
    std::string streamed;
    for (token_id id : got) {
      std::string chunk = sd.push(id);
      EXPECT_TRUE(moxi::formats::utf8_valid(chunk))
          << "half a character emitted for: " << c.text.substr(0, 80);
      streamed += chunk;
    }
    streamed += sd.flush();
    EXPECT_EQ(streamed, c.text);
  }
}

TEST(tokenizerReference, DeepSeekV3MatchesHuggingFaceTokenizersJs) {
  auto cases = load_cases("deepseek_v3.expected.json");
  if (cases.empty()) return;
  auto tok = tokenizer::from_hf_json_file((kRefDir / "deepseek_v3.tokenizer.json").string());
  EXPECT_GE(cases.size(), 40u);
  check_cases(tok, cases);
  // Encoding twice gives the same ids (the word cache is transparent).
  for (const auto& c : cases) EXPECT_EQ(tok.encode(c.text), c.expected);
  // Special markers as text when special tokens are off: no special id appears.
  for (const auto& c : cases) {
    for (token_id id : tok.encode(c.text, false)) EXPECT_FALSE(tok.is_special(id)) << c.text;
  }
  EXPECT_EQ(tok.find("<｜begin▁of▁sentence｜>"), std::optional<token_id>(0));
  EXPECT_TRUE(tok.is_special(0));
}

TEST(tokenizerReference, O200kMatchesJsTiktoken) {
  json whole;
  auto cases = load_cases("o200k_base.expected.json", &whole);
  if (cases.empty()) return;
  moxi::formats::tiktoken_options opt;
  // o200k_base's pat_str as published in tiktoken (openai_public.py), in its original syntax.
  opt.pattern =
      R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
      R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
      R"(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  opt.special_tokens = whole["special_tokens"].get<std::map<std::string, token_id>>();
  auto tok = tokenizer::from_tiktoken_file((kRefDir / "o200k_base.tiktoken").string(), opt);
  check_cases(tok, cases);
}

TEST(tokenizerReference, KimiPatternMatchesV8SetOperations) {
  auto cases = load_cases("kimi_pattern.expected.json");
  if (cases.empty()) return;
  moxi::formats::tiktoken_options opt;  // Kimi's pat_str, translated for PCRE2 by the library
  auto tok = tokenizer::from_tiktoken_file((kRefDir / "o200k_base.tiktoken").string(), opt);
  check_cases(tok, cases, false);
}

}  // namespace
