// The SFT driver behind `moxi train sft`: builds (or resumes) a run from a recipe, trains with AdamW under a
// warmup + cosine schedule with grad-norm clipping on chat-rendered tasks, evaluates on held-out tasks,
// writes atomic resumable checkpoints, runs the QAT phase and exports an engine-loadable model directory.
// docs/train.md describes the run directory and the recipe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moxi/train/dist.h"
#include "moxi/train/model.h"
#include "moxi/train/recipe.h"
#include "moxi/train/sft-data.h"

namespace moxi::train {

// The files besides the weights that make a model directory servable and chattable.
struct export_assets {
  std::string tokenizer_json;  // the tokenizer.json text
  std::string chat_template;   // the Jinja text (tokenizer_config.json "chat_template")
  std::string bos_token, eos_token, pad_token, end_token;  // special token strings
  int64_t end_token_id = -1;  // generation also stops here (generation_config.json eos_token_id list)
};

// Writes DIR/{config.json, model.safetensors, tokenizer.json, tokenizer_config.json, generation_config.json}:
// routed experts as real MXFP4 when the config quantizes them, other tensors BF16 (those the manifest keeps
// in F32, e.g. A_log, stay F32). The model's own parameters are first rounded to BF16 in place, so that the
// trainer holds exactly the weights it shipped (its QAT forward then equals the engine's on the export).
// The files are written to a temporary directory and renamed into DIR one by one, so other files in DIR
// (a README) survive and a reader never sees a torn file.
void export_model(train_model& m, const export_assets& assets, const std::string& dir);
// The tokenizer, chat template and generation files of a model directory (what export_model writes besides
// config.json and the weights); checkpoints get them too, so every checkpoint is a loadable model directory.
void write_model_assets(const std::string& dir, const formats::model_config& c, const export_assets& assets);

// Mean cross-entropy per target token of samples under the model's current options (no gradient).
double held_out_loss(const train_model& m, const std::vector<sft_sample>& samples, int64_t batch_size,
                     int64_t pad_id, const sample_vision* vision = nullptr);

struct sft_result {
  int64_t steps_done = 0;       // steps this process ran (after a resume: the remaining ones)
  double final_loss = 0;        // training loss of the last step
  double final_eval_loss = -1;  // held-out loss at the end (-1 without eval data)
  std::string export_dir;
  bool lead = true;  // rank 0 of a data-parallel run (or a single process): the one that writes and reports
};

// What a run may do beyond the recipe (command-line flags, never saved in the run).
struct run_options {
  // Resume even though schedule-affecting fields differ from the run's saved recipe (schedule_differences);
  // the new values then become the run's recipe.
  bool override_recipe = false;
  // Export over an existing model directory this run did not write (its model files are replaced; other
  // files, a README, stay).
  bool force_export = false;
  // Data parallelism (dist.h): this process's rank, the world size and the store where the ranks meet.
  // world 1: a single process.
  dist_layout dist;
};

// Runs or resumes the recipe: a run directory with a checkpoint (out/checkpoints/latest) continues from it.
// The run directory is locked for the duration (run_lock). Throws moxi::error, before any training, when the
// recipe's schedule differs from the run's saved recipe (unless override_recipe) or when the export target
// is an existing model directory this run did not write (unless force_export); throws `interrupted` after
// checkpointing when a signal asked the loop to stop (interrupt.h).
sft_result run_sft(const recipe& r, const run_options& o = {});

}  // namespace moxi::train
