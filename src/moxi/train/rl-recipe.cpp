// RL recipe files (see rl-recipe.h): strict JSON, errors naming the file and the field.
#include "moxi/train/rl-recipe.h"

#include <filesystem>
#include <fstream>

#include "moxi/train/recipe-detail.h"

namespace moxi::train {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace detail;

const char* to_string(rl_algorithm a) {
  return a == rl_algorithm::grpo ? "grpo" : "ppo";
}

const char* to_string(kl_placement k) {
  switch (k) {
    case kl_placement::none:
      return "none";
    case kl_placement::loss:
      return "loss";
    case kl_placement::reward:
      return "reward";
  }
  return "?";
}

rl_recipe parse_rl_recipe(const json& j, const std::string& source, const std::string& base_dir) {
  rl_recipe r;
  r.source = source;
  r.base_dir = base_dir;
  r.doc = j;
  reader top(j, source);
  top.get("seed", r.seed);
  top.get("threads", r.threads);
  if (top.has("model")) {
    reader m(top.at("model"), top.field("model"));
    m.get("init", r.init);
    m.finish();
  }
  if (top.has("data")) {
    reader d(top.at("data"), top.field("data"));
    if (d.has("train"))
      r.train_data = parse_sources(d.at("train"), d.field("train"), base_dir, "train", true);
    if (d.has("eval")) r.eval_data = parse_sources(d.at("eval"), d.field("eval"), base_dir, "test");
    d.finish();
  }
  if (top.has("rollout")) {
    reader o(top.at("rollout"), top.field("rollout"));
    o.get("prompts", r.prompts);
    o.get("samples", r.samples);
    o.get("max_tokens", r.max_tokens);
    o.get("temperature", r.temperature);
    o.get("weights", r.rollout_weights);
    o.get("max_running", r.max_running);
    o.get("max_batch_tokens", r.max_batch_tokens);
    o.get("dynamic_sampling", r.dynamic_sampling);
    o.get("max_gen_batches", r.max_gen_batches);
    o.finish();
  }
  if (top.has("algorithm")) {
    reader a(top.at("algorithm"), top.field("algorithm"));
    std::string name = to_string(r.algorithm), agg = rl::to_string(r.agg);
    a.get("name", name);
    if (name == "grpo")
      r.algorithm = rl_algorithm::grpo;
    else if (name == "ppo")
      r.algorithm = rl_algorithm::ppo;
    else
      throw error(a.field("name") + ": unknown algorithm '" + name + "' (grpo or ppo)");
    a.get("norm_adv_by_std", r.norm_adv_by_std);
    a.get("gamma", r.gamma);
    a.get("lam", r.lam);
    a.get("clip_low", r.clip.eps_low);
    a.get("clip_high", r.clip.eps_high);
    a.get("dual_clip", r.clip.dual_clip);
    a.get("loss_agg", agg);
    try {
      r.agg = rl::parse_loss_agg(agg);
    } catch (const error& e) {
      throw error(a.field("loss_agg") + ": " + e.what());
    }
    if (a.has("kl")) {
      reader k(a.at("kl"), a.field("kl"));
      std::string where = to_string(r.kl_where), est = rl::to_string(r.kl_estimator);
      k.get("where", where);
      if (where == "none")
        r.kl_where = kl_placement::none;
      else if (where == "loss")
        r.kl_where = kl_placement::loss;
      else if (where == "reward")
        r.kl_where = kl_placement::reward;
      else
        throw error(k.field("where") + ": '" + where + "' is not none, loss or reward");
      k.get("estimator", est);
      try {
        r.kl_estimator = rl::parse_kl_estimator(est);
      } catch (const error& e) {
        throw error(k.field("estimator") + ": " + e.what());
      }
      k.get("coef", r.kl_coef);
      k.get("target", r.kl_target);
      k.get("horizon", r.kl_horizon);
      k.finish();
    }
    a.get("entropy_coef", r.entropy_coef);
    a.get("value_lr", r.value_lr);
    a.get("value_clip", r.value_clip);
    a.get("tis_cap", r.tis_cap);
    a.finish();
  }
  if (top.has("reward")) {
    reader w(top.at("reward"), top.field("reward"));
    w.get("correct", r.reward.weights.correct);
    w.get("completion", r.reward.weights.completion);
    w.get("format", r.reward.weights.format);
    w.get("length", r.reward.weights.length);
    w.get("overlong_buffer", r.reward.overlong_buffer);
    w.finish();
  }
  if (top.has("optimizer")) {
    reader o(top.at("optimizer"), top.field("optimizer"));
    o.get("steps", r.steps);
    o.get("mini_batches", r.mini_batches);
    o.get("epochs", r.epochs);
    o.get("micro_batch_tokens", r.micro_batch_tokens);
    o.get("lr", r.lr);
    o.get("warmup_steps", r.warmup_steps);
    o.get("weight_decay", r.weight_decay);
    o.get("beta1", r.beta1);
    o.get("beta2", r.beta2);
    o.get("eps", r.eps);
    o.get("clip_norm", r.clip_norm);
    o.finish();
  }
  top.get("qat", r.qat);
  if (top.has("eval")) {
    reader e(top.at("eval"), top.field("eval"));
    e.get("every", r.eval_every);
    e.get("max_tokens", r.eval_max_tokens);
    e.finish();
  }
  top.get("checkpoint_every", r.checkpoint_every);
  top.get("log_every", r.log_every);
  top.get("out", r.out);
  top.get("export", r.export_dir);
  top.finish();
  r.reward.max_tokens = r.max_tokens;
  r.init = resolve(base_dir, r.init);
  r.out = resolve(base_dir, r.out);
  r.export_dir = resolve(base_dir, r.export_dir);
  return r;
}

rl_recipe load_rl_recipe(const std::string& path) {
  return parse_rl_recipe(read_recipe_file(path), path, fs::absolute(path).parent_path().string());
}

void apply_override(rl_recipe& r, const std::string& assignment) {
  auto doc = r.doc;
  apply_assignment(doc, assignment);
  r = parse_rl_recipe(doc, r.source, r.base_dir);
}

void validate(const rl_recipe& r) {
  auto need = [&](bool ok, const std::string& field, const std::string& what) {
    if (!ok) throw error(r.source + ": " + field + " " + what);
  };
  need(!r.init.empty(), "model.init", "is required (the SFT model directory RL starts from)");
  need(!r.train_data.empty(), "data.train", "is empty");
  need(r.prompts >= 1, "rollout.prompts", "must be >= 1");
  need(r.samples >= 1, "rollout.samples", "must be >= 1");
  need(r.algorithm != rl_algorithm::grpo || r.samples >= 2, "rollout.samples", "must be >= 2 for GRPO");
  need(r.max_tokens >= 1, "rollout.max_tokens", "must be >= 1");
  need(r.temperature > 0, "rollout.temperature", "must be > 0 (RL samples)");
  need(r.rollout_weights == "f32" || r.rollout_weights == "bf16", "rollout.weights",
       "must be \"f32\" or \"bf16\"");
  need(r.max_running >= 1 && r.max_batch_tokens >= 1, "rollout.max_running/max_batch_tokens", "must be >= 1");
  need(r.max_gen_batches >= 1, "rollout.max_gen_batches", "must be >= 1");
  need(r.gamma >= 0 && r.gamma <= 1 && r.lam >= 0 && r.lam <= 1, "algorithm.gamma/lam", "must be in [0, 1]");
  need(r.clip.eps_low > 0 && r.clip.eps_low < 1 && r.clip.eps_high > 0, "algorithm.clip_low/clip_high",
       "need 0 < clip_low < 1 and clip_high > 0");
  need(r.clip.dual_clip == 0 || r.clip.dual_clip > 1, "algorithm.dual_clip", "must be > 1 (or 0: off)");
  need(r.kl_coef >= 0 && r.kl_target >= 0 && r.kl_horizon > 0, "algorithm.kl",
       "needs coef, target >= 0 and horizon > 0");
  need(r.kl_target == 0 || r.kl_where == kl_placement::reward, "algorithm.kl.target",
       "(the adaptive coefficient) applies to KL in the reward only");
  need(r.entropy_coef >= 0, "algorithm.entropy_coef", "must be >= 0");
  need(r.value_lr > 0 && r.value_clip > 0, "algorithm.value_lr/value_clip", "must be > 0");
  need(r.tis_cap >= 0, "algorithm.tis_cap", "must be >= 0 (0: off)");
  need(r.reward.overlong_buffer >= 0 && r.reward.overlong_buffer < r.max_tokens, "reward.overlong_buffer",
       "must be in [0, rollout.max_tokens)");
  need(r.steps >= 1, "optimizer.steps", "must be >= 1");
  need(r.mini_batches >= 1 && r.epochs >= 1, "optimizer.mini_batches/epochs", "must be >= 1");
  need(r.micro_batch_tokens >= 0, "optimizer.micro_batch_tokens",
       "must be >= 0 (0: a mini-batch in one forward)");
  need(r.lr > 0, "optimizer.lr", "must be > 0");
  need(r.warmup_steps >= 0 && r.weight_decay >= 0 && r.clip_norm >= 0, "optimizer",
       "warmup_steps, weight_decay and clip_norm must be >= 0");
  need(r.beta1 >= 0 && r.beta1 < 1 && r.beta2 >= 0 && r.beta2 < 1, "optimizer.beta1/beta2",
       "must be in [0, 1)");
  need(r.eval_every >= 0 && r.eval_max_tokens >= 1, "eval.every/max_tokens",
       "need every >= 0, max_tokens >= 1");
  need(r.checkpoint_every >= 1 && r.log_every >= 1, "checkpoint_every/log_every", "must be >= 1");
  need(!r.out.empty(), "out", "is required");
}

std::string export_target(const rl_recipe& r) {
  return r.export_dir.empty() ? (fs::path(r.out) / "model").lexically_normal().string() : r.export_dir;
}

json to_json(const rl_recipe& r) {
  json j = {{"seed", r.seed}, {"threads", r.threads}};
  j["model"] = {{"init", r.init}};
  j["data"] = {{"train", sources_json(r.train_data)}, {"eval", sources_json(r.eval_data)}};
  j["rollout"] = {{"prompts", r.prompts},
                  {"samples", r.samples},
                  {"max_tokens", r.max_tokens},
                  {"temperature", r.temperature},
                  {"weights", r.rollout_weights},
                  {"max_running", r.max_running},
                  {"max_batch_tokens", r.max_batch_tokens},
                  {"dynamic_sampling", r.dynamic_sampling},
                  {"max_gen_batches", r.max_gen_batches}};
  j["algorithm"] = {{"name", to_string(r.algorithm)},
                    {"norm_adv_by_std", r.norm_adv_by_std},
                    {"gamma", r.gamma},
                    {"lam", r.lam},
                    {"clip_low", r.clip.eps_low},
                    {"clip_high", r.clip.eps_high},
                    {"dual_clip", r.clip.dual_clip},
                    {"loss_agg", rl::to_string(r.agg)},
                    {"kl",
                     {{"where", to_string(r.kl_where)},
                      {"estimator", rl::to_string(r.kl_estimator)},
                      {"coef", r.kl_coef},
                      {"target", r.kl_target},
                      {"horizon", r.kl_horizon}}},
                    {"entropy_coef", r.entropy_coef},
                    {"value_lr", r.value_lr},
                    {"value_clip", r.value_clip},
                    {"tis_cap", r.tis_cap}};
  j["reward"] = {{"correct", r.reward.weights.correct},
                 {"completion", r.reward.weights.completion},
                 {"format", r.reward.weights.format},
                 {"length", r.reward.weights.length},
                 {"overlong_buffer", r.reward.overlong_buffer}};
  j["optimizer"] = {{"steps", r.steps},
                    {"mini_batches", r.mini_batches},
                    {"epochs", r.epochs},
                    {"micro_batch_tokens", r.micro_batch_tokens},
                    {"lr", r.lr},
                    {"warmup_steps", r.warmup_steps},
                    {"weight_decay", r.weight_decay},
                    {"beta1", r.beta1},
                    {"beta2", r.beta2},
                    {"eps", r.eps},
                    {"clip_norm", r.clip_norm}};
  j["qat"] = r.qat;
  j["eval"] = {{"every", r.eval_every}, {"max_tokens", r.eval_max_tokens}};
  j["checkpoint_every"] = r.checkpoint_every;
  j["log_every"] = r.log_every;
  j["out"] = r.out;
  j["export"] = export_target(r);
  return j;
}

std::vector<std::string> schedule_differences(const rl_recipe& saved, const rl_recipe& now) {
  std::map<std::string, json> a, b;
  flatten(to_json(saved), "", a);
  flatten(to_json(now), "", b);
  std::set<std::string> keys;
  for (const auto& [k, v] : a) keys.insert(k);
  for (const auto& [k, v] : b) keys.insert(k);
  std::vector<std::string> out;
  for (const auto& k : keys) {
    if (k == "threads" || k == "out" || k == "export" || k == "data.eval" || k == "checkpoint_every" ||
        k == "log_every" || k.rfind("eval.", 0) == 0 || k == "rollout.max_running" ||
        k == "rollout.max_batch_tokens" || k == "optimizer.micro_batch_tokens")
      continue;
    const json va = a.count(k) ? a[k] : json(), vb = b.count(k) ? b[k] : json();
    if (va != vb)
      out.push_back(k + ": " + (va.is_null() ? "(unset)" : va.dump()) + " -> " +
                    (vb.is_null() ? "(unset)" : vb.dump()));
  }
  return out;
}

}  // namespace moxi::train
