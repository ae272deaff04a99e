// The sandbox audit log: one JSON object per execution, one line each, appended atomically. This is the
// trajectory record that monitoring reads and that later becomes training data.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "moxi/sandbox/sandbox.h"

namespace moxi::sandbox {

// The record of one execution (schema in docs/sandbox.md). `head_bytes` of each stream are included as
// text (invalid UTF-8 replaced) so that a log line is self-contained without growing unboundedly.
nlohmann::json audit_record(const run_spec& spec, const run_result& result, size_t head_bytes = 4096);

// Appends `record` as one line with a single O_APPEND write, so concurrent runs (threads or processes)
// never interleave lines. Throws moxi::error when the file cannot be written.
void append_audit(const std::string& path, const nlohmann::json& record);

}  // namespace moxi::sandbox
