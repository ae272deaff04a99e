// The task generator's shared pieces (task-generator.h is the public interface): the portable RNG, template
// filling, phrasing families, and the domain generators kept in their own files (math, chat, vision).
// Internal to moxi_eval.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "moxi/base/error.h"
#include "moxi/eval/task-generator.h"

namespace moxi::eval::detail {

using json = nlohmann::json;

// SplitMix64: tiny, fast and identical everywhere; std::uniform_int_distribution is not portable.
class rng {
 public:
  explicit rng(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [lo, hi] by rejection (no modulo bias).
  int64_t range(int64_t lo, int64_t hi) {
    const uint64_t span = uint64_t(hi - lo) + 1;
    const uint64_t limit = UINT64_MAX - UINT64_MAX % span;
    uint64_t x;
    do {
      x = next();
    } while (x >= limit);
    return lo + int64_t(x % span);
  }
  template <class T>
  const T& pick(const std::vector<T>& v) {
    return v[size_t(range(0, int64_t(v.size()) - 1))];
  }
  template <class T>
  void shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[size_t(range(0, int64_t(i) - 1))]);
  }

 private:
  uint64_t s_;
};

inline uint64_t mix(uint64_t a, uint64_t b) {
  rng r(a ^ (b * 0xD1B54A32D192ED03ull));
  return r.next();
}

struct irange {
  int64_t lo, hi;
};

inline std::string S(int64_t v) {
  return std::to_string(v);
}

// A union of integer ranges; draws are uniform over its members. Held-out ranges interleave with train's
// (head_n k: train 1..5 and 11..20, test 6..10), so the test split never asks for a number length that
// train never shows.
using ranges = std::vector<irange>;

inline int64_t draw(rng& r, const ranges& rs) {
  int64_t total = 0;
  for (const auto& x : rs) total += x.hi - x.lo + 1;
  int64_t i = r.range(0, total - 1);
  for (const auto& x : rs) {
    if (i <= x.hi - x.lo) return x.lo + i;
    i -= x.hi - x.lo + 1;
  }
  MOXI_ASSERT(false, "empty range");
}

// Fills the {name} fields of a task template with their values.
inline std::string fill(std::string text, const std::map<std::string, std::string>& vars) {
  for (const auto& [k, v] : vars) {
    const std::string key = "{" + k + "}";
    for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + v.size())) {
      text.replace(at, key.size(), v);
    }
  }
  return text;
}

// Phrasing families per template: test_only families never appear in train; `suffix` families end with
// " Answer with a number.".
struct family {
  std::string name;
  bool test_only = false;
  bool suffix = false;
  std::vector<std::string> phrasings;
};

// math (task-generator-math.cpp)
const std::vector<template_info>& math_templates();
task make_math(rng& r, const std::string& tmpl, split s, bool test_only_template, division_format division);

// chat (task-generator-chat.cpp)
const std::vector<template_info>& chat_templates();
struct chat_parts {
  std::string prompt, reply, family;
};
chat_parts make_chat(rng& r, split s, const std::string& intent);
chat_parts make_repeat(rng& r, split s, const std::string& text);

// code (task-generator-code.cpp): a buggy program, its fix and the calls its test asserts.
const std::vector<template_info>& code_templates();
struct code_parts {
  std::string fn;  // the function the test imports
  std::string describe, buggy, fixed;
  std::vector<std::pair<std::string, std::string>> asserts;  // python expression, expected value
  json params;
};
code_parts make_code(rng& r, bool test_range, const std::string& tmpl);
// The test program: reads a nonce, imports c.fn from solution.py, asserts c.asserts, prints the nonce.
std::string python_test(const code_parts& c);

// vision (task-generator-vision.cpp)
const std::vector<template_info>& vision_templates();
task make_vision(rng& r, split s, const std::string& tmpl);

// Common English words (task-generator-words.cpp) whose pieces the made-up train names join; none overlaps a
// test name word or a filler word.
const std::vector<std::string>& english_words();

// A made-up word (task-generator.cpp: `tavoku`, `shemblor`) that overlaps no test-split name word.
std::string made_up_word(rng& r);

// The terminal phrasing families (task-generator-phrasings.cpp): template -> family -> phrasings.
// Placeholders: {f} file, {g} second file or new name, {k} number, {w} word, {e} extension, {d} directory,
// {t} text, {a} and {b} words, {x} lines/words, {p} first/last.
using phrasing_table = std::map<std::string, std::map<std::string, std::vector<std::string>>>;
const phrasing_table& terminal_phrasings();
// Follow-up requests: kind (other_file, other_count, part_of_it) -> family -> phrasings.
const phrasing_table& followup_phrasings();
// Code requests: family -> phrasings with {desc} (what the program should do), {ex} (a call), {want} (its
// value).
const std::map<std::string, std::vector<std::string>>& code_phrasings();
// Requests that name only the function ({fn}): generate_options::bare_requests.
const std::vector<std::string>& bare_code_phrasings();

// Math phrasing families per template (task-generator-math.cpp), and the casual phrasings only train uses,
// per template (same placeholders, plus {et}: the expression without spaces).
const std::map<std::string, std::vector<family>>& math_families();
const std::map<std::string, std::vector<std::string>>& math_casual_phrasings();

// The sentence parts of the train-only math stories (task-generator-math.cpp, docs/tasks.md "Math
// stories"), by kind: "start", "groups", "gain", "loss", "more", "fewer", "times", "ask", "ask_after".
const std::map<std::string, std::vector<std::string>>& math_story_parts();

// Casual rewrites (task-generator-casual.cpp), train only: lowercased words, no final punctuation, a
// greeting before or a "pls" after. Words of `keep` (the names and values the reply copies) stay as they are.
std::string casualize(rng& r, const std::string& text, const std::string& keep);
const std::vector<std::string>& casual_prefixes();
const std::vector<std::string>& casual_suffixes();

}  // namespace moxi::eval::detail
