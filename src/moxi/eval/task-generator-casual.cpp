// Casual rewrites of train requests (docs/tasks.md "Casual rewrites"): the surface of how people type
// (lowercase, no final punctuation, a greeting before, "pls" or "thx" after) put on phrasings of the train
// families, so a reply learns to ignore it. Only train items get them; the markers are words no held-out
// family uses alone (task-generator-test.cpp checks).
#include <algorithm>
#include <cctype>

#include "moxi/eval/task-generator-detail.h"

namespace moxi::eval::detail {

const std::vector<std::string>& casual_prefixes() {
  static const std::vector<std::string> v = {"um ",  "hi, ", "hello, ", "right, ", "alright, ",
                                             "yo ", "question: ", "help: ", "hi "};
  return v;
}

const std::vector<std::string>& casual_suffixes() {
  static const std::vector<std::string> v = {" pls", " plz",  " please",     " thx",  " thanks",
                                             " ty",  " :)", " thank you", " asap", " ??"};
  return v;
}

namespace {

bool is_alpha_word(const std::string& w) {
  return !w.empty() && std::all_of(w.begin(), w.end(), [](char c) { return std::isalpha(uint8_t(c)); });
}

// Lowercases the first letter of capitalized words (letters only, final punctuation aside) that `keep`
// does not contain: "Count the lines of Notes.md." keeps the file name.
std::string lower_words(const std::string& text, const std::string& keep) {
  std::string out = text;
  for (size_t i = 0; i < out.size();) {
    size_t e = out.find(' ', i);
    if (e == std::string::npos) e = out.size();
    size_t we = e;
    while (we > i && std::string(",.?!:;").find(out[we - 1]) != std::string::npos) --we;
    const std::string w = out.substr(i, we - i);
    if (is_alpha_word(w) && std::isupper(uint8_t(w[0])) && keep.find(w) == std::string::npos) {
      out[i] = char(std::tolower(uint8_t(out[i])));
    }
    i = e + 1;
  }
  return out;
}

}  // namespace

std::string casualize(rng& r, const std::string& text, const std::string& keep) {
  if (text.empty()) return text;
  std::string out = text;
  bool changed = false;
  if (r.range(0, 1) == 0) {
    const std::string lowered = lower_words(out, keep);
    changed = lowered != out;
    out = lowered;
  }
  if (r.range(0, 1) == 0 && std::string(".?!").find(out.back()) != std::string::npos) {
    out.pop_back();
    changed = true;
  }
  if (r.range(0, 2) == 0) {
    // A greeting before a capitalized request reads "hi, Count ...": its first word is lowered too.
    const size_t sp = out.find(' ');
    const std::string first = out.substr(0, sp), rest = sp == std::string::npos ? "" : out.substr(sp);
    out = r.pick(casual_prefixes()) + lower_words(first, keep) + rest;
    changed = true;
  }
  if (!changed || r.range(0, 1) == 0) {
    if (std::string(".!").find(out.back()) != std::string::npos) out.pop_back();
    out += r.pick(casual_suffixes());
  }
  return out;
}

}  // namespace moxi::eval::detail
