// Checkers for generated tasks: the reward of RL and the pass/fail of `moxi eval`. Math answers are
// compared as numbers (the last line's number); chat replies must be prose that answers the intent; terminal
// commands and code fixes are RUN in the sandbox (moxi::sandbox) with tight limits, a terminal command on a
// fresh copy of the task's file tree next to the reference command.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "moxi/eval/task.h"
#include "moxi/sandbox/sandbox.h"

namespace moxi::sandbox {
class pool;
}

namespace moxi::eval {

struct check_result {
  bool pass = false;
  // Infrastructure failure (the sandbox could not be set up, the reference itself failed): the
  // candidate was not judged, so RL should drop the sample rather than punish it.
  bool error = false;
  std::string detail;  // why it failed, or what passed ("12 == 12")
  // The reply did its job mechanically, right or wrong (RL's "task completion" reward): the command exited
  // 0 within its limits, the program imported and its function returned (a failed assertion counts, an
  // exception does not), a final number was given, a chat reply is not empty.
  bool completed = false;
};

// Limits for one candidate run: the tasks need milliseconds and kilobytes.
sandbox::limits default_check_limits();

struct check_options {
  sandbox::limits limits = default_check_limits();
  size_t workers = 0;     // concurrent sandbox runs; 0 = 2 per CPU (runs mostly wait on namespace setup)
  std::string audit_log;  // one JSON line per sandbox run when set
  // Where the checker makes its directory (moxi-eval-XXXXXX, holding every run's workspace, removed
  // with the checker); empty: $TMPDIR, else /tmp. The sandbox uid must be able to reach it.
  std::string work_dir;
};

// The part of a model reply that is the answer: the first fenced ``` block if there is one (without its
// language tag), else the whole reply; trimmed. For terminal replies a leading "$ " prompt is dropped.
std::string extract_command(std::string_view reply);
std::string extract_program(std::string_view reply);
// The last number in the text ("-1,234.5" -> "-1234.5"), as gsm8k-style graders take it; nullopt if none.
std::optional<std::string> extract_number(std::string_view reply);

// Runs checks through one sandbox pool; thread-safe. Reference outcomes of terminal tasks are cached by
// task id and reference, so RL's many samples per task pay one reference run. Every workspace lives in
// one directory of the checker's own, so that whatever happens, one removal cleans up: each chunk
// removes its workspaces, and the destructor (after the pool's runs are over) the directory. An interrupt
// (base/interrupt.h) stops the runs and check_all throws moxi::interrupted once they are gone.
class checker {
 public:
  explicit checker(check_options options = {});
  ~checker();  // ends the pool (queued runs, then the workers), then removes the checker's directory
  checker(const checker&) = delete;
  checker& operator=(const checker&) = delete;

  check_result check(const task& t, std::string_view candidate);
  // Checks many (task, candidate) pairs concurrently; results in the same order.
  std::vector<check_result> check_all(const std::vector<std::pair<const task*, std::string>>& items);

  struct outcome;  // what one sandbox run produced (defined in check.cpp)

 private:
  std::vector<check_result> check_chunk(const std::vector<std::pair<const task*, std::string>>& items);
  const std::string& directory();  // made on first use

  check_options options_;
  std::mutex dir_mutex_;
  std::string dir_;
  std::unique_ptr<sandbox::pool> pool_;
  std::mutex cache_mutex_;
  std::unordered_map<std::string, std::shared_ptr<const outcome>> reference_cache_;
};

// One-off check through a process-wide checker with the default options.
check_result check(const task& t, std::string_view candidate);

}  // namespace moxi::eval
