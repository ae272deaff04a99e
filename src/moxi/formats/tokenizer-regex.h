// PCRE2 wrapper for tokenizer pre-splitting: compiled once with UTF + UCP (and JIT where available),
// matched from many threads, plus the translation of fancy-regex class intersections that PCRE2 10.42 lacks.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace moxi::formats {

class regex {
 public:
  // `what` names the pattern in errors (file and field). literal=true matches the pattern as plain text.
  regex(const std::string& pattern, const std::string& what, bool literal = false);
  ~regex();
  regex(const regex&) = delete;
  regex& operator=(const regex&) = delete;

  // All non-overlapping, non-empty matches in `text` (valid UTF-8), as [begin, end) byte offsets.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

 private:
  void* code_ = nullptr;  // pcre2_code_8*, kept opaque so that users of this header need no PCRE2
  std::string what_;
};

// Rewrites character-class intersections `[A&&[^B]]` (Rust regex / fancy-regex syntax, used by Kimi's
// pat_str) as `(?:(?![B])[A])` and `[A&&[B]]` as `(?:(?=[B])[A])`, which PCRE2 understands; PCRE2 would
// otherwise read `&&` as two literal ampersands and silently split differently. Other uses of `&&` inside
// a class are an error naming `what`.
std::string translate_class_intersections(const std::string& pattern, const std::string& what);

// PCRE2 >= 10.40 reads a bare script name such as \p{Han} as Script_Extensions (so U+3001 "、" is Han),
// while Oniguruma (HF tokenizers) and Rust's regex (tiktoken) read it as Script; this rewrites bare script
// names to \p{sc:Name}. General categories (\p{L}, \p{Lu}, ...) are left alone. Applied by regex.
std::string pin_script_properties(const std::string& pattern);

}  // namespace moxi::formats
