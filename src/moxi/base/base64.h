// Standard base64 (RFC 4648 §4, '+' and '/', '=' padding), strict: the tiktoken vocabulary format and the
// data: URLs of image parts in the OpenAI API, the pictures of vision tasks in JSONL.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace moxi {

// The decoded bytes, or nullopt for empty input, a length that is not a multiple of 4, or any character
// outside the alphabet (whitespace included) before the padding.
std::optional<std::string> base64_decode(std::string_view s);
// The padded standard encoding of `bytes`.
std::string base64_encode(std::string_view bytes);

}  // namespace moxi
