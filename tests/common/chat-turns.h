// The `moxi chat --show-prompt` lines of a run's stderr: one JSON object per turn (prompt, token counts,
// reply).
#pragma once

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace moxi::testing {

inline std::vector<nlohmann::json> chat_turns(const std::string& err) {
  std::vector<nlohmann::json> out;
  std::istringstream in(err);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty() && line[0] == '{') out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace moxi::testing
