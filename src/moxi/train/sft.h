// The SFT driver behind `moxi train sft`: builds (or resumes) a run from a recipe, trains with AdamW under a
// warmup + cosine schedule with grad-norm clipping on chat-rendered tasks, evaluates on held-out tasks,
// writes atomic resumable checkpoints, runs the QAT phase and exports an engine-loadable model directory.
// docs/train.md describes the run directory and the recipe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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

// Mean cross-entropy per target token of samples under the model's current options (no gradient).
double held_out_loss(const train_model& m, const std::vector<sft_sample>& samples, int64_t batch_size,
                     int64_t pad_id);

struct sft_result {
  int64_t steps_done = 0;       // steps this process ran (after a resume: the remaining ones)
  double final_loss = 0;        // training loss of the last step
  double final_eval_loss = -1;  // held-out loss at the end (-1 without eval data)
  std::string export_dir;
};

// Runs or resumes the recipe: a run directory with a checkpoint (out/checkpoints/latest) continues from it.
sft_result run_sft(const recipe& r);

}  // namespace moxi::train
