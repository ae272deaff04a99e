// Generated terminal tasks written as Terminal-Bench task directories (`moxi data --format terminal-bench`,
// docs/agent-eval.md "Generated tasks"), so that `moxi eval agent` runs them as multi-turn episodes.
#pragma once

#include <string>
#include <vector>

#include "moxi/eval/task.h"

namespace moxi::eval {

// The file that marks a directory as written by write_terminal_bench (only such a directory is replaced).
inline constexpr const char* kExportMarker = ".moxi-terminal-bench";

// Writes DIR/<task id>/ for each task: task.yaml (the request, with the conversation so far and, for an
// output, "write it to /app/answer.txt"), a Dockerfile copying work/ (the task's files) to /app/work, the
// reference as solution.sh, and tests/ that run the reference on a copy of the starting files and compare
// outcomes by the terminal checker's rules. Terminal tasks only (moxi::error otherwise). Written to a
// sibling temporary directory and renamed; an existing DIR is replaced only if this function wrote it.
void write_terminal_bench(const std::vector<task>& tasks, const std::string& dir);

}  // namespace moxi::eval
