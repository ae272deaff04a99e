// A file's bytes, for tests that check what a command wrote ("" when it cannot be read).
#pragma once

#include <fstream>
#include <sstream>
#include <string>

namespace moxi::testing {

inline std::string read_file(const std::string& path) {
  std::stringstream ss;
  ss << std::ifstream(path, std::ios::binary).rdbuf();
  return ss.str();
}

}  // namespace moxi::testing
