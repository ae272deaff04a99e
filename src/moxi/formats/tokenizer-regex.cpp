// PCRE2 matching for tokenizer pre-splitting; see tokenizer-regex.h for why the class translation exists.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "moxi/formats/tokenizer-regex.h"

#include <pcre2.h>

#include "moxi/base/error.h"

namespace moxi::formats {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof(buf)) < 0) return "PCRE2 error " + std::to_string(code);
  return reinterpret_cast<const char*>(buf);
}

// Per-thread match state: a one-pair match block (only the whole match is used) and a JIT stack larger
// than PCRE2's 32 KiB default, so that long runs of one character class (megabytes of spaces) match.
struct thread_match_state {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  thread_match_state() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    jit_stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
    MOXI_ASSERT(data && context && jit_stack, "PCRE2 allocation failed");
    pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~thread_match_state() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  thread_match_state(const thread_match_state&) = delete;
  thread_match_state& operator=(const thread_match_state&) = delete;
};

thread_match_state& match_state() {
  thread_local thread_match_state state;
  return state;
}

size_t utf8_char_len(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c >> 5) == 0x6) return 2;
  if ((c >> 4) == 0xE) return 3;
  if ((c >> 3) == 0x1E) return 4;
  return 1;
}

// Unicode general categories and PCRE2's own property names: these stay as they are.
bool is_category_name(std::string_view name) {
  static const char* const kNames[] = {
      "L",  "Lu", "Ll", "Lt", "Lm", "Lo", "LC", "L&", "M",  "Mn",  "Mc",  "Me",  "N",   "Nd",  "Nl",
      "No", "P",  "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "S",   "Sm",  "Sc",  "Sk",  "So",  "Z",
      "Zs", "Zl", "Zp", "C",  "Cc", "Cf", "Cs", "Co", "Cn", "Any", "Xan", "Xps", "Xsp", "Xwd", "Xuc"};
  for (const char* n : kNames) {
    if (name == n) return true;
  }
  return false;
}

}  // namespace

std::string pin_script_properties(const std::string& p) {
  std::string out;
  out.reserve(p.size());
  size_t i = 0;
  while (i < p.size()) {
    if (p[i] != '\\' || i + 1 >= p.size()) {
      out.push_back(p[i++]);
      continue;
    }
    const char e = p[i + 1];
    if ((e == 'p' || e == 'P') && i + 2 < p.size() && p[i + 2] == '{') {
      const size_t close = p.find('}', i + 3);
      if (close != std::string::npos) {
        std::string_view name(p.data() + i + 3, close - (i + 3));
        const bool negated = !name.empty() && name[0] == '^';
        if (negated) name.remove_prefix(1);
        out.append(p, i, 3);
        if (negated) out.push_back('^');
        const bool qualified = name.find_first_of(":=") != std::string_view::npos;
        if (!qualified && !is_category_name(name)) out += "sc:";
        out.append(name);
        out.push_back('}');
        i = close + 1;
        continue;
      }
    }
    out.append(p, i, 2);
    i += 2;
  }
  return out;
}

regex::regex(const std::string& pattern, const std::string& what, bool literal) : what_(what) {
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  uint32_t options = PCRE2_UTF | PCRE2_UCP;          // the pattern itself is checked: it comes from a file
  if (literal) options = PCRE2_UTF | PCRE2_LITERAL;  // PCRE2 rejects UCP together with LITERAL
  const std::string source = literal ? pattern : pin_script_properties(pattern);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(source.data()), source.size(), options, &err,
                                   &err_offset, nullptr);
  if (!code) {
    throw error(what + ": cannot compile regex at offset " + std::to_string(err_offset) + ": " +
                pcre2_message(err));
  }
  // JIT is an optimization: where it is unavailable pcre2_match falls back to the interpreter.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = code;
}

regex::~regex() {
  pcre2_code_free(static_cast<pcre2_code*>(code_));
}

std::vector<std::pair<size_t, size_t>> regex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  auto& st = match_state();
  auto* code = static_cast<pcre2_code*>(code_);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    // The caller validated UTF-8 once for the whole text.
    int rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, st.data, st.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) throw error(what_ + ": regex match failed: " + pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
    size_t begin = ov[0], end = ov[1];
    if (end <= begin) {
      // An empty match adds no piece; step over one character so the scan always advances.
      pos = begin + utf8_char_len(static_cast<unsigned char>(text[begin < text.size() ? begin : 0]));
      continue;
    }
    out.emplace_back(begin, end);
    pos = end;
  }
  return out;
}

std::string translate_class_intersections(const std::string& p, const std::string& what) {
  std::string out;
  const size_t n = p.size();
  size_t i = 0;
  auto fail = [&](const std::string& why) {
    return error(what + ": unsupported class intersection at offset " + std::to_string(i) + ": " + why);
  };
  while (i < n) {
    char c = p[i];
    if (c == '\\') {
      out.append(p, i, 2);
      i += 2;
      continue;
    }
    if (c != '[') {
      out.push_back(c);
      ++i;
      continue;
    }
    // Scan one class to its closing bracket, remembering a top-level "&&".
    size_t k = i + 1;
    if (k < n && p[k] == '^') ++k;
    if (k < n && p[k] == ']') ++k;  // a leading ']' is a literal
    int depth = 1;
    size_t amp = std::string::npos;
    bool nested_amp = false;
    while (k < n && depth > 0) {
      if (p[k] == '\\') {
        k += 2;
      } else if (p[k] == '[' && k + 1 < n && p[k + 1] == ':') {
        size_t close = p.find(":]", k + 2);
        k = close == std::string::npos ? n : close + 2;
      } else if (p[k] == '[') {
        ++depth;
        ++k;
      } else if (p[k] == ']') {
        --depth;
        ++k;
      } else if (p[k] == '&' && k + 1 < n && p[k + 1] == '&') {
        if (depth == 1 && amp == std::string::npos) {
          amp = k;
        } else {
          nested_amp = true;
        }
        k += 2;
      } else {
        ++k;
      }
    }
    if (depth > 0 || amp == std::string::npos) {
      if (nested_amp) throw fail("only one top-level && per class is supported");
      out.append(p, i, k - i);  // not an intersection (or unterminated: PCRE2 reports it)
      i = k;
      continue;
    }
    if (nested_amp) throw fail("only one top-level && per class is supported");
    if (p[i + 1] == '^') throw fail("a negated class with && is not supported");
    std::string left = p.substr(i + 1, amp - (i + 1));
    std::string right = p.substr(amp + 2, (k - 1) - (amp + 2));
    if (right.size() < 3 || right.front() != '[' || right.back() != ']') {
      throw fail("the right operand must be one bracketed class");
    }
    const bool negated = right[1] == '^';
    std::string inner = right.substr(negated ? 2 : 1, right.size() - (negated ? 3 : 2));
    out += negated ? "(?:(?![" : "(?:(?=[";
    out += inner;
    out += "])[";
    out += left;
    out += "])";
    i = k;
  }
  return out;
}

}  // namespace moxi::formats
