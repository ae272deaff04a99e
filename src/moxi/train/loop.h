// The iterative post-training loop behind `moxi train loop` (docs/rl.md "The loop"). Each round:
//   1. collect  the current model samples replies to fresh training tasks (the serving engine, sandboxed
//               checkers); tasks it solved give SFT data (rejection sampling: a passing reply becomes the
//               reference), tasks it did not always solve become the RL prompts;
//   2. sft      (when the recipe has "sft") fine-tunes on the successes;
//   3. rl       (when the recipe has "rl") runs `moxi train rl` on the failures, from the SFT result;
//   4. eval     evaluates the round's start and end models greedily on the same fresh held-out tasks and
//               compares them: the net improvement rate with its 95 % interval, per domain.
// Every round writes its data, run directories, model, eval reports and summary.json under OUT/round-K; a
// killed loop started again resumes at the first unfinished stage (the SFT and RL runs resume from their
// own checkpoints).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "moxi/train/recipe.h"
#include "moxi/train/sft.h"

namespace moxi::train {

struct loop_recipe {
  std::string source, base_dir;
  nlohmann::json doc;
  uint64_t seed = 0;
  int threads = 0;
  std::string init;  // the model the loop starts from
  int64_t rounds = 1;
  // Fresh tasks every round: each source's seed is offset by 1000 x the round number.
  std::vector<data_source> collect_data, eval_data;
  int64_t collect_samples = 4, collect_max_tokens = 128;
  double collect_temperature = 1.0;
  int64_t eval_max_tokens = 128;
  nlohmann::json sft;  // null: no SFT stage; else {steps, lr, min_lr, batch_size, warmup_steps, qat_steps}
  nlohmann::json rl;   // null: no RL stage; else an RL recipe without model, data, out, export
  std::string out = "runs/loop";
};

loop_recipe load_loop_recipe(const std::string& path);
loop_recipe parse_loop_recipe(const nlohmann::json& j, const std::string& source,
                              const std::string& base_dir);
void apply_override(loop_recipe& r, const std::string& assignment);

struct loop_result {
  int64_t rounds_done = 0;  // rounds this process ran
  std::string model;        // the last round's model directory
};

loop_result run_loop(const loop_recipe& r, const run_options& o = {});

}  // namespace moxi::train
