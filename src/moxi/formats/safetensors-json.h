// Internal to formats/: the strict JSON parse that safetensors headers and checkpoint index files share.
// nlohmann::json keeps the last of duplicate keys silently; checkpoints must not, so this rejects them.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace moxi::formats::detail {

// Parses text as one JSON value (surrounding whitespace allowed). Rejects duplicate object keys at any
// depth and nesting deeper than max_depth (the files we read are shallow; this bounds work on hostile
// input). Throws moxi::error whose message starts with `what` (e.g. "safetensors '/x/a.safetensors'").
nlohmann::json parse_json_strict(std::string_view text, const std::string& what, int max_depth = 8);

}  // namespace moxi::formats::detail
