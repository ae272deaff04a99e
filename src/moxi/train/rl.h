// The RL driver behind `moxi train rl` (docs/rl.md): from an SFT model, each step samples G replies to a
// mix of prompts with the serving engine (the policy's current weights, MXFP4 experts and MXFP8 inputs as
// served, per-token log-probs kept), scores them with the sandboxed checkers into multi-dimensional rewards,
// recomputes log-probs on the trainer's graph (QAT fake-quant on) and against the frozen SFT reference,
// turns rewards into advantages (GRPO or PPO with a value head and GAE), and takes clipped policy-gradient
// steps with a KL constraint. Atomic resumable checkpoints, a progress line, per-domain JSONL logs, held-out
// greedy pass rates, and an export in the engine's MXFP4 format.
#pragma once

#include <cstdint>
#include <string>

#include "moxi/train/rl-recipe.h"
#include "moxi/train/sft.h"

namespace moxi::train {

struct rl_result {
  int64_t steps_done = 0;  // steps this process ran
  std::string export_dir;
  bool lead = true;  // rank 0 of a data-parallel run (or a single process): the one that reports
};

// Runs or resumes the recipe (a run directory with a checkpoint continues from it, exactly: a killed and
// resumed run ends with the parameters of an uninterrupted one). Throws moxi::error before any work for a
// recipe that differs from the run's saved one (unless override_recipe) or an export target this run did
// not write (unless force_export); throws `interrupted` after checkpointing when a signal asked it to stop.
rl_result run_rl(const rl_recipe& r, const run_options& o = {});

}  // namespace moxi::train
