// http-auth: constant-time key comparison (every byte of the longer string is visited and differences are
// OR-ed, with no early exit) and the key-file reader.
#include "moxi/serve/http-auth.h"

#include <algorithm>
#include <fstream>

#include "moxi/base/error.h"

namespace moxi::serve {

bool constant_time_equal(std::string_view a, std::string_view b) {
  const size_t n = std::max(a.size(), b.size());
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = static_cast<unsigned char>(diff | (x ^ y));
  }
  return diff == 0;
}

bool api_key_ok(std::string_view authorization, const std::vector<std::string>& keys) {
  constexpr std::string_view kBearer = "Bearer ";
  if (authorization.substr(0, kBearer.size()) != kBearer) return false;
  const std::string_view given = authorization.substr(kBearer.size());
  bool ok = false;
  for (const auto& k : keys) ok |= constant_time_equal(given, k);  // no short circuit over keys either
  return ok;
}

std::vector<std::string> read_api_key_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw error("serve: cannot read the API key file " + path);
  std::vector<std::string> keys;
  for (std::string line; std::getline(in, line);) {
    const auto b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos) continue;
    const auto e = line.find_last_not_of(" \t\r");
    keys.push_back(line.substr(b, e - b + 1));
  }
  if (keys.empty()) throw error("serve: the API key file " + path + " holds no key");
  return keys;
}

}  // namespace moxi::serve
