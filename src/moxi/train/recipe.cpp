// SFT recipe files (see recipe.h): strict JSON parsing with errors that name the file and the field.
#include "moxi/train/recipe.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "moxi/base/error.h"
#include "moxi/eval/task-generator.h"
#include "moxi/formats/bpe-trainer.h"
#include "moxi/train/recipe-detail.h"

namespace moxi::train {

namespace fs = std::filesystem;
using nlohmann::json;

namespace detail {

std::string resolve(const std::string& base, const std::string& p) {
  if (p.empty() || fs::path(p).is_absolute()) return p;
  return (fs::path(base) / p).lexically_normal().string();
}

std::vector<data_source> parse_sources(const json& list, const std::string& where, const std::string& base,
                                       const std::string& default_split, bool weighted) {
  if (!list.is_array()) throw error(where + ": expected a list of {file} or {domain, split, n, seed}");
  std::vector<data_source> out;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string w = where + "[" + std::to_string(i) + "]";
    if (list[i].is_string()) {
      out.push_back({resolve(base, list[i].get<std::string>()), "", "", 0, 0});
      continue;
    }
    reader r(list[i], w);
    data_source s;
    s.split = default_split;
    r.get("file", s.file);
    r.get("domain", s.domain);
    r.get("split", s.split);
    r.get("n", s.n);
    r.get("seed", s.seed);
    r.get("templates", s.templates);
    std::string division = eval::to_string(s.options.division);
    r.get("division", division);
    r.get("capitals", s.options.capitals);
    r.get("bare_requests", s.options.bare_requests);
    try {
      s.options.division = eval::parse_division_format(division);
    } catch (const error& e) {
      throw error(w + ".division: " + e.what());
    }
    if (weighted) {
      r.get("weight", s.weight);
      if (!(s.weight > 0)) throw error(w + ".weight: must be > 0");
    }
    if (s.file.empty() && (s.domain.empty() || s.n <= 0))
      throw error(w + ": needs either \"file\" or \"domain\" and \"n\" > 0");
    r.finish();
    s.file = resolve(base, s.file);
    out.push_back(std::move(s));
  }
  return out;
}

json read_recipe_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw error("recipe " + path + ": cannot open");
  try {
    return json::parse(f);
  } catch (const json::exception& e) {
    throw error("recipe " + path + ": " + e.what());
  }
}

void apply_assignment(json& doc, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos) throw error("override '" + assignment + "': expected key=value");
  const std::string key = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  json value;
  try {
    value = json::parse(text);
  } catch (const json::exception&) {
    value = text;  // a bare string (a path, a name)
  }
  set_dotted(doc, key, std::move(value));
}

void set_dotted(json& doc, const std::string& key, json value) {
  json* at = &doc;
  std::stringstream ss(key);
  std::string part;
  std::vector<std::string> parts;
  while (std::getline(ss, part, '.')) parts.push_back(part);
  if (parts.empty() || key.empty()) throw error("override '" + key + "': empty key");
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (!at->is_object()) throw error("override '" + key + "': '" + parts[i] + "' is not an object");
    at = &(*at)[parts[i]];
    if (at->is_null()) *at = json::object();
  }
  if (!at->is_object()) throw error("override '" + key + "': the parent is not an object");
  (*at)[parts.back()] = std::move(value);
}

}  // namespace detail

using namespace detail;

recipe parse_recipe(const json& j, const std::string& source, const std::string& base_dir) {
  recipe r;
  r.source = source;
  r.base_dir = base_dir;
  r.doc = j;
  reader top(j, source);
  top.get("seed", r.seed);
  top.get("threads", r.threads);
  if (top.has("model")) {
    reader m(top.at("model"), top.field("model"));
    m.get("config", r.config);
    m.get("init", r.init);
    m.finish();
  }
  if (top.has("tokenizer")) {
    reader t(top.at("tokenizer"), top.field("tokenizer"));
    t.get("path", r.tokenizer);
    t.get("min_frequency", r.tokenizer_min_frequency);
    t.get("split", r.tokenizer_split);
    t.finish();
    formats::parse_bpe_split(r.tokenizer_split, t.field("split"));
  }
  top.get("chat_template", r.chat_template);
  top.get("end_token", r.end_token);
  if (top.has("data")) {
    reader d(top.at("data"), top.field("data"));
    if (d.has("train")) r.train_data = parse_sources(d.at("train"), d.field("train"), base_dir, "train");
    if (d.has("eval")) r.eval_data = parse_sources(d.at("eval"), d.field("eval"), base_dir, "test");
    d.get("max_tokens", r.max_tokens);
    d.finish();
  }
  if (top.has("optimizer")) {
    reader o(top.at("optimizer"), top.field("optimizer"));
    o.get("batch_size", r.batch_size);
    o.get("steps", r.steps);
    o.get("lr", r.lr);
    o.get("min_lr", r.min_lr);
    o.get("warmup_steps", r.warmup_steps);
    o.get("weight_decay", r.weight_decay);
    o.get("beta1", r.beta1);
    o.get("beta2", r.beta2);
    o.get("eps", r.eps);
    o.get("clip_norm", r.clip_norm);
    o.finish();
  }
  if (top.has("losses")) {
    reader l(top.at("losses"), top.field("losses"));
    l.get("mtp_weight", r.mtp_weight);
    l.get("balance_alpha", r.balance_alpha);
    l.get("bias_update_speed", r.bias_update_speed);
    l.get("dsa_dense_steps", r.dsa_dense_steps);
    l.finish();
  }
  if (top.has("eval")) {
    reader e(top.at("eval"), top.field("eval"));
    e.get("every", r.eval_every);
    e.get("pass_every", r.pass_eval_every);
    e.get("max_new_tokens", r.pass_eval_max_new);
    e.finish();
  }
  top.get("checkpoint_every", r.checkpoint_every);
  top.get("log_every", r.log_every);
  if (top.has("qat")) {
    reader q(top.at("qat"), top.field("qat"));
    q.get("steps", r.qat_steps);
    q.get("lr", r.qat_lr);
    q.finish();
  }
  top.get("out", r.out);
  top.get("export", r.export_dir);
  top.finish();
  r.config = resolve(base_dir, r.config);
  r.init = resolve(base_dir, r.init);
  r.tokenizer = resolve(base_dir, r.tokenizer);
  r.chat_template = resolve(base_dir, r.chat_template);
  r.out = resolve(base_dir, r.out);
  r.export_dir = resolve(base_dir, r.export_dir);
  return r;
}

recipe load_recipe(const std::string& path) {
  return parse_recipe(read_recipe_file(path), path, fs::absolute(path).parent_path().string());
}

void apply_override(recipe& r, const std::string& assignment) {
  auto doc = r.doc;
  apply_assignment(doc, assignment);
  r = parse_recipe(doc, r.source, r.base_dir);
}

void set_field(recipe& r, const std::string& dotted_key, const nlohmann::json& value) {
  auto doc = r.doc;
  set_dotted(doc, dotted_key, value);
  r = parse_recipe(doc, r.source, r.base_dir);
}

void validate(const recipe& r) {
  auto need = [&](bool ok, const std::string& field, const std::string& what) {
    if (!ok) throw error(r.source + ": " + field + " " + what);
  };
  need(!r.config.empty() || !r.init.empty(), "model",
       "needs \"config\" (initialize) or \"init\" (a checkpoint)");
  need(r.config.empty() || r.init.empty(), "model", "takes \"config\" or \"init\", not both");
  need(!r.train_data.empty(), "data.train", "is empty");
  need(r.max_tokens >= 4, "data.max_tokens", "must be >= 4");
  need(r.batch_size >= 1, "optimizer.batch_size", "must be >= 1");
  need(r.steps >= 0 && r.qat_steps >= 0 && r.total_steps() >= 1, "optimizer.steps",
       "+ qat.steps must be >= 1");
  need(r.lr > 0 && r.min_lr >= 0 && r.min_lr <= r.lr, "optimizer.lr/min_lr",
       "need 0 <= min_lr <= lr, lr > 0");
  need(r.warmup_steps >= 0, "optimizer.warmup_steps", "must be >= 0");
  need(r.weight_decay >= 0, "optimizer.weight_decay", "must be >= 0");
  need(r.beta1 >= 0 && r.beta1 < 1 && r.beta2 >= 0 && r.beta2 < 1, "optimizer.beta1/beta2",
       "must be in [0, 1)");
  need(r.clip_norm >= 0, "optimizer.clip_norm", "must be >= 0 (0: no clipping)");
  need(r.qat_steps == 0 || r.qat_lr > 0, "qat.lr", "must be > 0");
  need(r.eval_every >= 0 && r.pass_eval_every >= 0, "eval.every/pass_every", "must be >= 0");
  need(r.checkpoint_every >= 1, "checkpoint_every", "must be >= 1");
  need(r.log_every >= 1, "log_every", "must be >= 1");
  need(!r.out.empty(), "out", "is required");
}

std::string export_target(const recipe& r) {
  return r.export_dir.empty() ? (fs::path(r.out) / "model").lexically_normal().string() : r.export_dir;
}

json detail::sources_json(const std::vector<data_source>& sources) {
  json out = json::array();
  for (const auto& s : sources) {
    json j;
    if (!s.file.empty())
      j = {{"file", s.file}};
    else if (s.templates.empty())
      j = {{"domain", s.domain}, {"split", s.split}, {"n", s.n}, {"seed", s.seed}};
    else
      j = {
          {"domain", s.domain}, {"split", s.split}, {"n", s.n}, {"seed", s.seed}, {"templates", s.templates}};
    if (s.options.division != eval::division_format::plain)
      j["division"] = eval::to_string(s.options.division);
    if (s.options.capitals) j["capitals"] = true;
    if (s.options.bare_requests) j["bare_requests"] = true;
    if (s.weight != 1.0) j["weight"] = s.weight;
    out.push_back(j);
  }
  return out;
}

void detail::flatten(const json& j, const std::string& prefix, std::map<std::string, json>& out) {
  if (!j.is_object()) {
    out[prefix] = j;
    return;
  }
  for (const auto& [k, v] : j.items()) flatten(v, prefix.empty() ? k : prefix + "." + k, out);
}

json to_json(const recipe& r) {
  json j = {{"seed", r.seed}, {"threads", r.threads}};
  j["model"] = json::object();
  if (!r.config.empty()) j["model"]["config"] = r.config;
  if (!r.init.empty()) j["model"]["init"] = r.init;
  j["tokenizer"] = {{"min_frequency", r.tokenizer_min_frequency}, {"split", r.tokenizer_split}};
  if (!r.tokenizer.empty()) j["tokenizer"]["path"] = r.tokenizer;
  j["chat_template"] = r.chat_template;
  j["end_token"] = r.end_token;
  j["data"] = {{"train", sources_json(r.train_data)},
               {"eval", sources_json(r.eval_data)},
               {"max_tokens", r.max_tokens}};
  j["optimizer"] = {{"batch_size", r.batch_size},
                    {"steps", r.steps},
                    {"lr", r.lr},
                    {"min_lr", r.min_lr},
                    {"warmup_steps", r.warmup_steps},
                    {"weight_decay", r.weight_decay},
                    {"beta1", r.beta1},
                    {"beta2", r.beta2},
                    {"eps", r.eps},
                    {"clip_norm", r.clip_norm}};
  j["losses"] = {{"mtp_weight", r.mtp_weight},
                 {"balance_alpha", r.balance_alpha},
                 {"bias_update_speed", r.bias_update_speed},
                 {"dsa_dense_steps", r.dsa_dense_steps}};
  j["eval"] = {
      {"every", r.eval_every}, {"pass_every", r.pass_eval_every}, {"max_new_tokens", r.pass_eval_max_new}};
  j["checkpoint_every"] = r.checkpoint_every;
  j["log_every"] = r.log_every;
  j["qat"] = {{"steps", r.qat_steps}, {"lr", r.qat_lr}};
  j["out"] = r.out;
  j["export"] = export_target(r);
  return j;
}

std::vector<std::string> schedule_differences(const recipe& saved, const recipe& now) {
  static const std::set<std::string> free_fields = {"threads",          "out",      "export", "data.eval",
                                                    "checkpoint_every", "log_every"};
  std::map<std::string, json> a, b;
  flatten(to_json(saved), "", a);
  flatten(to_json(now), "", b);
  std::set<std::string> keys;
  for (const auto& [k, v] : a) keys.insert(k);
  for (const auto& [k, v] : b) keys.insert(k);
  std::vector<std::string> out;
  for (const auto& k : keys) {
    if (free_fields.count(k) || k.rfind("eval.", 0) == 0) continue;
    const json va = a.count(k) ? a[k] : json(), vb = b.count(k) ? b[k] : json();
    if (va != vb)
      out.push_back(k + ": " + (va.is_null() ? "(unset)" : va.dump()) + " -> " +
                    (vb.is_null() ? "(unset)" : vb.dump()));
  }
  return out;
}

}  // namespace moxi::train
