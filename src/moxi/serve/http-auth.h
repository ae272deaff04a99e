// http-auth: API-key checks for the HTTP server (`--api-key` / `--api-key-file`), compared in constant
// time so that response timing does not reveal how much of a guessed key was right.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace moxi::serve {

// Whether `a` equals `b`, taking time that depends only on the lengths, not on where they differ.
bool constant_time_equal(std::string_view a, std::string_view b);

// Whether an Authorization header value ("Bearer <key>") carries one of `keys`; every key is compared.
bool api_key_ok(std::string_view authorization, const std::vector<std::string>& keys);

// Keys from a file: one per line, blank lines and surrounding whitespace ignored. Throws moxi::error when
// the file cannot be read or holds no key.
std::vector<std::string> read_api_key_file(const std::string& path);

}  // namespace moxi::serve
