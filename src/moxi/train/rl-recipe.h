// An RL recipe: everything one `moxi train rl` run needs (the SFT model it starts from and keeps as the
// frozen reference, the prompt mix, rollout sampling, the algorithm and its knobs, reward weights,
// optimizer, evaluation, output), strict JSON like the SFT recipe. docs/rl.md lists the fields.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "moxi/eval/reward.h"
#include "moxi/train/recipe.h"
#include "moxi/train/rl-core.h"

namespace moxi::train {

enum class rl_algorithm { grpo, ppo };
enum class kl_placement { none, loss, reward };

struct rl_recipe {
  std::string source, base_dir;
  nlohmann::json doc;

  uint64_t seed = 0;
  int threads = 0;
  std::string init;  // the SFT model directory: the policy's start and the frozen reference

  std::vector<data_source> train_data;  // prompts, each source drawn by its weight
  std::vector<data_source> eval_data;   // held-out tasks for greedy pass rates

  // Rollouts: `prompts` prompts per step, `samples` replies each, through the serving engine.
  int64_t prompts = 16, samples = 8, max_tokens = 128;
  double temperature = 1.0;
  // The dense weights the engine samples with: "f32", the trainer's master weights (the engine's and the
  // trainer's log-probs then agree to about 1e-6 nats), or "bf16", rounded as the export will be served
  // (about 1e-2 nats apart once training moves the weights off the BF16 grid; see algorithm.tis_cap).
  // Routed experts are MXFP4 either way.
  std::string rollout_weights = "f32";
  int64_t max_running = 64, max_batch_tokens = 2048;
  bool dynamic_sampling = true;  // drop groups whose rewards are all equal (DAPO); GRPO only
  int64_t max_gen_batches = 3;   // rollout rounds per step at most while filling the prompts with signal

  rl_algorithm algorithm = rl_algorithm::grpo;
  bool norm_adv_by_std = true;     // GRPO; false = Dr.GRPO
  double gamma = 1.0, lam = 0.95;  // PPO's GAE
  rl::clip_options clip{0.2, 0.28, 3.0};
  rl::loss_agg agg = rl::loss_agg::token_mean;
  kl_placement kl_where = kl_placement::loss;
  rl::kl_estimator kl_estimator = rl::kl_estimator::k3;
  double kl_coef = 0.001, kl_target = 0, kl_horizon = 10000;  // kl_target > 0: adaptive (reward only)
  double entropy_coef = 0;
  double value_lr = 1e-3,
         value_clip = 0.5;  // PPO: the value head (a linear map of the policy's detached final hidden state)
  double tis_cap = 0;       // > 0: truncated importance sampling min(pi_old / pi_engine, cap) per token

  eval::reward_options reward;

  int64_t steps = 100, mini_batches = 1, epochs = 1;
  // Tokens per trainer forward at most (rows grouped by length, each group cut to its longest row; the
  // gradients of a mini-batch's groups add up to its one-forward gradient). 0: a mini-batch in one forward.
  int64_t micro_batch_tokens = 4096;
  double lr = 1e-5, weight_decay = 0.0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, clip_norm = 1.0;
  int64_t warmup_steps = 0;
  bool qat = true;  // fake-quantized experts through RL, as the engine serves them

  int64_t eval_every = 0, eval_max_tokens = 128;
  int64_t checkpoint_every = 10, log_every = 1;
  std::string out = "runs/rl", export_dir;
};

rl_recipe parse_rl_recipe(const nlohmann::json& j, const std::string& source, const std::string& base_dir);
rl_recipe load_rl_recipe(const std::string& path);
void apply_override(rl_recipe& r, const std::string& assignment);
void validate(const rl_recipe& r);
nlohmann::json to_json(const rl_recipe& r);
std::string export_target(const rl_recipe& r);
// Fields that shape the weights' trajectory and differ between a run's saved recipe and this one.
std::vector<std::string> schedule_differences(const rl_recipe& saved, const rl_recipe& now);
const char* to_string(rl_algorithm a);
const char* to_string(kl_placement k);

}  // namespace moxi::train
