// An SFT recipe: everything one `moxi train sft` run needs (model, tokenizer, chat template, data, optimizer,
// schedule, evaluation, QAT phase, output), read from a JSON file so that a run is one reproducible command.
// docs/train.md lists the fields; relative paths are resolved against the recipe file's directory.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "moxi/eval/task-generator.h"

namespace moxi::train {

// Where a set of tasks comes from: a JSONL file of `moxi data`, or generated in-process with the same
// generator (domain, split, n, seed).
struct data_source {
  std::string file;  // set: read this JSONL; otherwise generate
  std::string domain, split = "train";
  int64_t n = 0;
  uint64_t seed = 0;
  std::vector<std::string> templates;  // generate only these templates (all when empty)
  eval::generate_options options;      // "division", "capitals", "bare_requests": item variants
  double weight = 1.0;                 // RL: this source's share of each step's prompts (by weight)
};

struct recipe {
  std::string source;    // the recipe file (for messages)
  std::string base_dir;  // relative paths in the file are resolved against it
  nlohmann::json doc;    // the parsed file with overrides applied (written next to the run's checkpoints)

  uint64_t seed = 0;  // data order and the random initialization
  int threads = 0;    // torch intra-op threads; 0 = all cores

  // Model: a config to initialize from (engine init, seeded), or a checkpoint directory to start from.
  std::string config, init;

  // Tokenizer: a tokenizer.json to use, or (empty) one trained on the training conversations.
  std::string tokenizer;
  int64_t tokenizer_min_frequency = 2;     // vocabulary size = the model config's vocab_size
  std::string tokenizer_split = "llama3";  // pre-tokenizer of a trained one: llama3, llama3-digits, gpt2
  std::string chat_template;          // Jinja file; empty = moxi-tiny's (formats::moxi_tiny_chat_template)
  std::string end_token = "<|end|>";  // the template's end of turn: the reply is trained up to it

  std::vector<data_source> train_data, eval_data;
  int64_t max_tokens = 512;  // conversations longer than this (prompt + reply, tokens) are skipped

  int64_t batch_size = 16;
  int64_t steps = 1000;
  double lr = 1e-3, min_lr = 1e-4;
  int64_t warmup_steps = 50;
  double weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double clip_norm = 1.0;
  double mtp_weight = 0.3, balance_alpha = 1e-4, bias_update_speed = 1e-3;
  int64_t dsa_dense_steps = 0;  // DSA dense warm-up: the first steps attend densely while the indexer learns

  int64_t eval_every = 100;        // held-out loss every this many steps (and at the end of each phase)
  int64_t pass_eval_every = 0;     // greedy pass rates (moxi eval) every this many steps; always on the
                                   // pre-QAT and final exports when there is eval data
  int64_t pass_eval_max_new = 96;  // generated tokens per task for the pass rate
  int64_t checkpoint_every = 100;
  int64_t log_every = 10;

  // QAT phase after `steps`: routed experts fake-quantized to MXFP4 (MXFP8 inputs), lr cosine from qat_lr.
  int64_t qat_steps = 0;
  double qat_lr = 1e-4;

  std::string out = "runs/sft";  // checkpoints, logs, the trained tokenizer
  std::string export_dir;        // engine-loadable model; empty = <out>/model (see export_target)

  int64_t total_steps() const { return steps + qat_steps; }
};

// Parses a recipe (unknown keys are an error naming the file and key, so a typo never silently falls back
// to a default). Paths are made absolute against `base_dir`.
recipe parse_recipe(const nlohmann::json& j, const std::string& source, const std::string& base_dir);
recipe load_recipe(const std::string& path);
// Sets one field by its dotted key (e.g. "optimizer.steps") and parses again, so the value is checked
// exactly like the file's.
void set_field(recipe& r, const std::string& dotted_key, const nlohmann::json& value);
// Applies a `dotted.key=value` override (value as JSON, else a bare string), e.g. "optimizer.steps=200",
// and parses again, so an override is checked exactly like the file.
void apply_override(recipe& r, const std::string& assignment);

// Throws moxi::error naming the recipe and field when a value is out of range.
void validate(const recipe& r);

// Where the final model goes: the recipe's `export` (or --export, which sets it), else <out>/model, so that
// moving the run directory (--out) moves its export too.
std::string export_target(const recipe& r);

// Every field of the recipe with its effective value (defaults filled in, paths absolute): what a run saves
// as OUT/recipe.json, loadable again with --recipe.
nlohmann::json to_json(const recipe& r);

// The fields that shape the trajectory of the weights (seed, model, tokenizer, chat template, training data,
// optimizer and schedule, losses, QAT) that differ between the recipe a run was started with and the one it
// is resumed with, as "optimizer.steps: 400 -> 50". Fields that only say where files go or how often to
// report (threads, out, export, data.eval, eval.*, checkpoint_every, log_every) may change freely.
std::vector<std::string> schedule_differences(const recipe& saved, const recipe& now);

}  // namespace moxi::train
