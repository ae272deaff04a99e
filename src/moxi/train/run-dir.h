// Run-directory plumbing shared by the training drivers (SFT, RL): files written whole, atomic resumable
// checkpoints under RUN/checkpoints (docs/train.md "Run directory"), the JSONL log, the RNG state, and the
// rule that an export never replaces a model directory the run did not write.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "moxi/eval/evaluate.h"
#include "moxi/train/interrupt.h"
#include "moxi/train/model.h"

namespace moxi::train {

std::string read_text(const std::string& path, const std::string& what);  // throws naming `what` and path
void write_file(const std::string& path, const std::string& text);
void fsync_path(const std::string& path, bool directory);
void fsync_tree(const std::string& dir);      // every file of the directory, then the directory
std::string step_name(int64_t step);          // "step-00000042"
std::string format_duration(double seconds);  // "1h02m", "3m05s", "?" when unknown
// A deep copy with its own parameters (an export must not round the weights training continues from).
train_model clone(const train_model& m);

// out/checkpoints/step-N: `fill` writes the files into a temporary directory, which is fsynced and renamed
// into place; then `latest` is replaced atomically and older checkpoints are removed. A kill at any point
// leaves `latest` naming a complete checkpoint.
void commit_checkpoint(const std::string& out, int64_t step,
                       const std::function<void(const std::string& dir)>& fill);
// The directory `latest` names, or "" when the run has no checkpoint yet.
std::string latest_checkpoint(const std::string& out);
// libtorch's default CPU generator, saved and restored exactly.
void save_rng(const std::string& path);
void load_rng(const std::string& path);

void append_log(const std::string& out, const nlohmann::json& line);  // one line of out/log.jsonl

// Greedy pass rates of the model directory `dir` on `tasks` (moxi eval, checkers in the sandbox): prints
// "<tag>: step N pass rate (<name>): math 3/10 (30.0%) ...", logs {step, <key>: {domain: rate}, model: name}
// to out/log.jsonl and writes the report to out/eval-<name>.json. Nothing without tasks.
void log_pass_rates(const std::string& out, const char* tag, const char* key, const std::string& dir,
                    const std::string& name, int64_t step, const std::vector<eval::task>& tasks,
                    const eval::evaluate_options& options);

// What a driver throws when a signal stopped it after `step` was checkpointed: the message names the
// checkpoint and the command that resumes the run (interrupt.h).
interrupted interrupted_after(int sig, const std::string& out, int64_t step);

// Removes what a process killed while writing a checkpoint left in out/checkpoints (call under the lock).
void remove_checkpoint_leftovers(const std::string& out);

// A run directory keeps the recipe it was started with (out/recipe.json); resuming with other values for what
// shapes the training would silently change the schedule halfway. `differences` parses the saved recipe
// (JSON) and lists the schedule fields that differ from the current one ("optimizer.steps: 400 -> 50").
// Without a saved recipe, `now` is saved. With differences: an error listing them, unless override_recipe,
// which logs them (to stderr with `tag`, and to the run's log) and saves `now` as the run's recipe.
void adopt_recipe(const std::string& out, const nlohmann::json& now, bool override_recipe, const char* tag,
                  const std::function<std::vector<std::string>(const nlohmann::json& saved)>& differences);

// An export may write into a directory that holds no model, into the run's own directory, or into the one
// this run recorded as its export target (claim_export_target); anything else needs force. Throws
// moxi::error explaining the choices.
void check_export_target(const std::string& out, const std::string& target, bool force);
void claim_export_target(const std::string& out, const std::string& target);

// A run that starts from a model (recipe model.init) checks it is one before touching its run directory: a
// stage recipe names another run's export, and before that run it should say so and write nothing. Throws
// moxi::error naming `source` and the path. An empty `init` (a run from a config) passes.
void check_init_model(const std::string& source, const std::string& init);

}  // namespace moxi::train
