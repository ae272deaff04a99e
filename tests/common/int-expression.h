// An integer expression evaluator written for the tests (+ - * /, parentheses, spaces), independent of the
// task generator that writes the expressions and of the checkers.
#pragma once

#include <cctype>
#include <cstdint>
#include <optional>
#include <string>

namespace moxi::testing {

struct evaluator {
  const std::string& s;
  size_t i = 0;
  bool ok = true;
  void ws() {
    while (i < s.size() && s[i] == ' ') ++i;
  }
  int64_t atom() {
    ws();
    if (i < s.size() && s[i] == '(') {
      ++i;
      const int64_t v = sum();
      ws();
      if (i < s.size() && s[i] == ')') {
        ++i;
      } else {
        ok = false;
      }
      return v;
    }
    if (i >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i]))) {
      ok = false;
      return 0;
    }
    int64_t v = 0;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) v = v * 10 + (s[i++] - '0');
    return v;
  }
  int64_t product() {
    int64_t v = atom();
    for (ws(); i < s.size() && (s[i] == '*' || s[i] == '/'); ws()) {
      const char op = s[i++];
      const int64_t r = atom();
      if (op == '*') {
        v *= r;
      } else if (r == 0 || v % r != 0) {
        ok = false;
      } else {
        v /= r;
      }
    }
    return v;
  }
  int64_t sum() {
    int64_t v = product();
    for (ws(); i < s.size() && (s[i] == '+' || s[i] == '-'); ws()) {
      const char op = s[i++];
      const int64_t r = product();
      v = op == '+' ? v + r : v - r;
    }
    return v;
  }
};

// The value of a whole expression; nullopt unless all of `s` parses (an inexact or zero division too).
inline std::optional<int64_t> eval_int_expression(const std::string& s) {
  evaluator e{s};
  const int64_t v = e.sum();
  e.ws();
  if (!e.ok || e.i != s.size()) return std::nullopt;
  return v;
}

}  // namespace moxi::testing
