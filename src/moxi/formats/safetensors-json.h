// Internal to formats/: the strict JSON parse that safetensors headers and checkpoint index files share.
// nlohmann::json keeps the last of duplicate keys silently; checkpoints must not, so this rejects them.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace moxi::formats::detail {

// Parses text as one JSON value (surrounding whitespace allowed). Rejects duplicate object keys at any
// depth and nesting deeper than max_depth (the files we read are shallow; this bounds work on hostile
// input). Throws moxi::error whose message starts with `what` (e.g. "safetensors '/x/a.safetensors'").
// Linear in the text (a SAX parse that builds the document itself; nlohmann's callback parser rescans the
// parent object at every nested object's end, which made a 200k-tensor header take minutes).
nlohmann::json parse_json_strict(std::string_view text, const std::string& what, int max_depth = 8);

// The same parse for a document whose top level is an object of many members (a safetensors header):
// each top-level member is handed to `on_member(key, value)` as soon as it is complete and then dropped,
// so memory holds one member at a time, not the whole document. Returns the top-level value with its
// members removed (an empty object), or the whole value when the top level is not an object. Duplicate
// top-level keys are still rejected. An exception from on_member stops the parse.
using member_fn = std::function<void(const std::string& key, nlohmann::json& value)>;
nlohmann::json parse_json_strict_members(std::string_view text, const std::string& what, int max_depth,
                                         const member_fn& on_member);

}  // namespace moxi::formats::detail
