// Multi-dimensional RL rewards (see reward.h).
#include "moxi/eval/reward.h"

#include <algorithm>

#include "moxi/base/error.h"

namespace moxi::eval {

namespace {

std::vector<std::string> nonempty_lines(std::string_view s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t nl = s.find('\n', at);
    const auto line =
        trim_space(s.substr(at, nl == std::string_view::npos ? std::string_view::npos : nl - at));
    if (!line.empty()) out.push_back(line);
    if (nl == std::string_view::npos) break;
    at = nl + 1;
  }
  return out;
}

// "Answer: N" with N a number (the worked format's last line).
bool is_answer_line(const std::string& line) {
  constexpr std::string_view kPrefix = "Answer:";
  if (line.rfind(kPrefix, 0) != 0) return false;
  const std::string rest = trim_space(std::string_view(line).substr(kPrefix.size()));
  const auto n = extract_number(rest);
  return n && !rest.empty() && rest.find(' ') == std::string::npos;
}

}  // namespace

bool follows_format(const task& t, std::string_view reply) {
  const std::string text = trim_space(reply);
  if (text.empty()) return false;
  switch (t.domain) {
    case domain::math: {
      const auto lines = nonempty_lines(text);
      return is_answer_line(lines.back());
    }
    case domain::terminal: {
      // One command and nothing else: a single line, or a single line inside one fence.
      const std::string cmd = extract_command(text);
      if (cmd.empty() || cmd.find('\n') != std::string::npos) return false;
      if (text == cmd || text == "$ " + cmd) return true;
      const auto lines = nonempty_lines(text);
      return lines.size() == 3 && lines.front().rfind("```", 0) == 0 && lines.back() == "```";
    }
    case domain::code: {
      const std::string prog = extract_program(text);
      return prog.find("def ") != std::string::npos;
    }
    case domain::chat:
      return text.find("```") == std::string::npos;
    case domain::vision:  // one word
      return !text.empty() && text.find_first_of(" \t\n") == std::string::npos;
  }
  return false;
}

reward score_reply(const task& t, std::string_view reply, const check_result& check, int64_t reply_tokens,
                   bool truncated, const reward_options& o) {
  reward r;
  r.detail = check.detail;
  if (check.error) {
    r.dropped = true;
    return r;
  }
  r.correct = check.pass ? 1 : 0;
  r.completion = check.completed ? 1 : 0;
  r.format = follows_format(t, reply) ? 1 : 0;
  if (truncated) {
    r.length = -1;
  } else if (o.overlong_buffer > 0) {
    const int64_t start = o.max_tokens - o.overlong_buffer;
    if (reply_tokens > start)
      r.length = std::max(-1.0, -double(reply_tokens - start) / double(o.overlong_buffer));
  }
  const auto& w = o.weights;
  r.total = w.correct * r.correct + w.completion * r.completion + w.format * r.format + w.length * r.length;
  return r;
}

const std::vector<std::string>& reward_components() {
  static const std::vector<std::string> names = {"correct", "completion", "format", "length"};
  return names;
}

double component(const reward& r, const std::string& name) {
  if (name == "correct") return r.correct;
  if (name == "completion") return r.completion;
  if (name == "format") return r.format;
  if (name == "length") return r.length;
  if (name == "total") return r.total;
  throw error("unknown reward component '" + name + "'");
}

}  // namespace moxi::eval
