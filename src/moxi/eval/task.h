// Verifiable tasks (math, terminal, code, chat, vision) as the generator writes them and the checkers, SFT, RL and
// `moxi eval` read them: one JSON object per line (docs/tasks.md has the format).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace moxi::eval {

enum class domain { math, terminal, code, chat, vision };
// length: math only, operands longer than any train operand (docs/tasks.md); never part of test.
enum class split { train, test, length };

const char* to_string(domain d);
const char* to_string(split s);
// Throw moxi::error naming the accepted values.
domain parse_domain(std::string_view s);
split parse_split(std::string_view s);

// How a terminal candidate's outcome is compared with the reference command's outcome.
enum class compare_mode {
  stdout_text,  // stdout, trailing spaces of each line and trailing empty lines ignored
  lines,        // the set of non-empty output lines, trimmed, a leading "./" dropped, order ignored
  count,        // one line: an integer, optionally followed by a name (`wc -l 'a b'` prints "12 a b")
  files,        // the resulting file tree (paths, kinds, contents); stdout ignored
};
const char* to_string(compare_mode m);
compare_mode parse_compare_mode(std::string_view s);

struct file_entry {
  std::string path;  // relative, '/'-separated; parent directories are implied
  std::string content;
};

// One earlier turn of a conversation the task continues.
struct message {
  std::string role;  // "user" or "assistant"
  std::string content;
};

struct task {
  std::string id;
  eval::domain domain = domain::math;
  eval::split split = split::train;
  std::string template_name;  // which generator template made it (the held-out rules are per template)
  nlohmann::json params;      // the sampled parameters the held-out ranges are stated in
  // Earlier turns, oldest first (user, assistant, ..., assistant); the prompt is the final user turn and only
  // the reply to it is checked. Empty for a single-turn task.
  std::vector<message> history;
  std::string prompt;
  std::string reference;  // one correct solution: the number, the command, or the fixed program

  // math: the exact answer (an integer in decimal) and the arithmetic expression it is the value of.
  // vision: the exact answer (a number or a colour name).
  std::string answer, expression;
  // vision: the pictures (PNG bytes), shown before the prompt's text in the final user turn.
  std::vector<std::string> images;
  // terminal: the tree the command runs in and how outcomes are compared.
  std::vector<file_entry> files;
  compare_mode compare = compare_mode::stdout_text;
  // code: the program with the bug (solution.py, also shown in the prompt) and the test that imports it.
  std::string program, test;
};

nlohmann::json to_json(const task& t);
// Throws moxi::error naming `where` (file:line) and the field.
task task_from_json(const nlohmann::json& j, const std::string& where);

// One compact JSON object per line.
std::string to_jsonl(const std::vector<task>& tasks);
std::vector<task> read_jsonl(const std::string& path);

// `s` without leading and trailing spaces, tabs, CRs and LFs.
std::string trim_space(std::string_view s);

// Writes path.tmp-<pid>, fsyncs it, renames it over path and fsyncs the directory: a reader sees the old
// file or the complete new one, never a torn one.
void write_file_atomic(const std::string& path, std::string_view data);

}  // namespace moxi::eval
