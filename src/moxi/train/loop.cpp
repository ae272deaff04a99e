// The iterative post-training loop (see loop.h; docs/rl.md "The loop").
#include "moxi/train/loop.h"

#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "moxi/base/error.h"
#include "moxi/eval/evaluate.h"
#include "moxi/runtime/local-model.h"
#include "moxi/serve/offline.h"
#include "moxi/train/recipe-detail.h"
#include "moxi/train/rl.h"
#include "moxi/train/run-dir.h"
#include "moxi/train/run-lock.h"
#include "moxi/train/sft-data.h"

namespace moxi::train {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace detail;

loop_recipe parse_loop_recipe(const json& j, const std::string& source, const std::string& base_dir) {
  loop_recipe r;
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
  top.get("rounds", r.rounds);
  if (top.has("collect")) {
    reader c(top.at("collect"), top.field("collect"));
    if (c.has("data")) r.collect_data = parse_sources(c.at("data"), c.field("data"), base_dir, "train");
    c.get("samples", r.collect_samples);
    c.get("max_tokens", r.collect_max_tokens);
    c.get("temperature", r.collect_temperature);
    c.finish();
  }
  if (top.has("eval")) {
    reader e(top.at("eval"), top.field("eval"));
    if (e.has("data")) r.eval_data = parse_sources(e.at("data"), e.field("data"), base_dir, "test");
    e.get("max_tokens", r.eval_max_tokens);
    e.finish();
  }
  // The stages' own recipes are checked when the stage builds them; here only what the loop owns.
  for (const char* stage : {"sft", "rl"}) {
    if (!top.has(stage)) continue;
    const json& s = top.at(stage);
    if (!s.is_object()) throw error(top.field(stage) + ": expected an object (a recipe fragment)");
    for (const char* owned : {"model", "out", "export", "seed", "threads"})
      if (s.contains(owned))
        throw error(top.field(stage) + "." + owned +
                    ": set by the loop (each round's model, directory, seed)");
    if (s.contains("data") && s["data"].is_object() && s["data"].contains("train"))
      throw error(top.field(stage) + ".data.train: set by the loop (the round's collected data)");
    (std::string(stage) == "sft" ? r.sft : r.rl) = s;
  }
  top.get("out", r.out);
  top.finish();
  r.init = resolve(base_dir, r.init);
  r.out = resolve(base_dir, r.out);
  auto need = [&](bool ok, const std::string& what) {
    if (!ok) throw error(source + ": " + what);
  };
  need(!r.init.empty(), "model.init is required (the model the loop starts from)");
  need(r.rounds >= 1, "rounds must be >= 1");
  need(!r.collect_data.empty(), "collect.data is empty");
  need(!r.eval_data.empty(), "eval.data is empty (every round compares its start and end models on it)");
  need(r.collect_samples >= 1 && r.collect_max_tokens >= 1,
       "collect.samples and collect.max_tokens must be >= 1");
  need(r.collect_temperature > 0, "collect.temperature must be > 0");
  need(r.eval_max_tokens >= 1, "eval.max_tokens must be >= 1");
  need(!r.sft.is_null() || !r.rl.is_null(), "needs an \"sft\" or an \"rl\" stage (or both)");
  need(!r.out.empty(), "out is required");
  return r;
}

loop_recipe load_loop_recipe(const std::string& path) {
  return parse_loop_recipe(read_recipe_file(path), path, fs::absolute(path).parent_path().string());
}

void apply_override(loop_recipe& r, const std::string& assignment) {
  auto doc = r.doc;
  apply_assignment(doc, assignment);
  r = parse_loop_recipe(doc, r.source, r.base_dir);
}

namespace {

// The round's own tasks: every source's seed offset by 1000 x round, so no round sees another's tasks.
std::vector<eval::task> round_tasks(const std::vector<data_source>& sources, int64_t round) {
  std::vector<eval::task> out;
  for (auto s : sources) {
    if (s.file.empty()) s.seed += uint64_t(round) * 1000;
    auto t = load_tasks(s);
    out.insert(out.end(), std::make_move_iterator(t.begin()), std::make_move_iterator(t.end()));
  }
  return out;
}

std::string pct(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f%%", 100 * x);
  return b;
}

// Stage 1: samples, checks, and splits the tasks into successes (SFT data) and not-always-solved (RL data).
json collect(const loop_recipe& r, int64_t round, const std::string& model_dir, const std::string& dir,
             eval::checker& checker) {
  const auto lm = runtime::local_model::load(model_dir);
  const auto& chat = lm.require_chat();
  const auto tasks = round_tasks(r.collect_data, round);
  std::vector<serve::offline_request> reqs;
  for (size_t i = 0; i < tasks.size(); ++i) {
    serve::offline_request q;
    if (!tasks[i].images.empty())
      throw error(r.source + ": task " + tasks[i].id + " has pictures; the loop takes text tasks only");
    const auto ids = lm.tok.encode(eval::render_task_prompt(tasks[i], chat), /*allow_special=*/true);
    q.prompt.assign(ids.begin(), ids.end());
    q.n = int(r.collect_samples);
    q.max_tokens = r.collect_max_tokens;
    q.sampling.temperature = float(r.collect_temperature);
    q.sampling.seed = r.seed * 1000003 + uint64_t(round) * 7919 + i;
    q.stop_tokens = lm.stop_tokens;
    q.logprobs = false;
    reqs.push_back(std::move(q));
  }
  serve::offline_stats os;
  const auto outs = serve::generate_offline(lm.model, reqs, {}, &os);
  std::vector<std::pair<const eval::task*, std::string>> items;
  for (size_t i = 0; i < tasks.size(); ++i)
    for (const auto& s : outs[i]) {
      std::vector<token_id> ids = s.tokens;
      if (s.finish == serve::finish_reason::STOP && !ids.empty()) ids.pop_back();
      items.emplace_back(&tasks[i], runtime::to_valid_utf8(lm.tok.decode(ids, /*skip_special=*/true)));
    }
  const auto checks = checker.check_all(items);
  std::vector<eval::task> successes, failures;
  int64_t passed = 0, judged = 0;
  size_t at = 0;
  for (const auto& t : tasks) {
    int64_t pass = 0, ok = 0;
    std::string first_pass;
    for (int64_t k = 0; k < r.collect_samples; ++k, ++at) {
      if (checks[at].error) continue;
      ++ok;
      if (checks[at].pass) {
        if (pass++ == 0) first_pass = items[at].second;
      }
    }
    passed += pass;
    judged += ok;
    if (pass > 0) {
      eval::task s = t;
      s.reference = first_pass;  // rejection sampling: the model's own passing reply is the target
      successes.push_back(std::move(s));
    }
    if (ok > 0 && pass < ok) failures.push_back(t);
  }
  eval::write_file_atomic(dir + "/successes.jsonl", eval::to_jsonl(successes));
  eval::write_file_atomic(dir + "/failures.jsonl", eval::to_jsonl(failures));
  const json summary = {{"tasks", tasks.size()},
                        {"samples", int64_t(items.size())},
                        {"judged", judged},
                        {"pass_rate", judged ? double(passed) / double(judged) : 0.0},
                        {"successes", successes.size()},
                        {"failures", failures.size()},
                        {"generated_tokens", os.generated_tokens},
                        {"seconds", os.seconds}};
  eval::write_file_atomic(dir + "/collect.json", summary.dump(2) + "\n");  // the stage's marker, last
  return summary;
}

// The chat template and end token of a model directory (the SFT stage renders with them).
std::pair<std::string, std::string> template_and_end(const std::string& model_dir) {
  const auto lm = runtime::local_model::load(model_dir);
  const json tc = json::parse(read_text(model_dir + "/tokenizer_config.json", "tokenizer config"));
  const std::string tmpl = tc.value("chat_template", "");
  if (tmpl.empty()) throw error(model_dir + ": the model has no chat template");
  std::string end;
  for (token_id t : lm.stop_tokens)
    if (!lm.model.config().eos_token_id || t != *lm.model.config().eos_token_id) end = lm.tok.token_bytes(t);
  if (end.empty()) throw error(model_dir + ": no end-of-turn token besides eos (generation_config.json)");
  return {tmpl, end};
}

}  // namespace

loop_result run_loop(const loop_recipe& r, const run_options& o) {
  fs::create_directories(r.out);
  const run_lock lock(r.out);
  eval::write_file_atomic(r.out + "/recipe.json", r.doc.dump(2) + "\n");
  eval::checker checker;
  loop_result res;
  std::string current = r.init;
  for (int64_t k = 1; k <= r.rounds; ++k) {
    const std::string dir = r.out + "/round-" + std::to_string(k);
    const std::string tag = "loop: round " + std::to_string(k) + "/" + std::to_string(r.rounds);
    if (fs::exists(dir + "/summary.json")) {
      const json s = json::parse(read_text(dir + "/summary.json", "round summary"));
      current = s.at("model").get<std::string>();
      std::fprintf(stderr, "%s: done before (%s)\n", tag.c_str(), current.c_str());
      continue;
    }
    fs::create_directories(dir);
    const std::string start = current;

    // 1. collect
    json collected;
    if (fs::exists(dir + "/collect.json")) {
      collected = json::parse(read_text(dir + "/collect.json", "collect summary"));
      std::fprintf(stderr, "%s: collect: done before\n", tag.c_str());
    } else {
      collected = collect(r, k, start, dir, checker);
      std::fprintf(stderr,
                   "%s: collect: %" PRId64 " tasks x %" PRId64 " samples, pass %s: %" PRId64
                   " tasks solved (SFT data), %" PRId64 " not always solved (RL prompts)\n",
                   tag.c_str(), collected.at("tasks").get<int64_t>(), r.collect_samples,
                   pct(collected.at("pass_rate").get<double>()).c_str(),
                   collected.at("successes").get<int64_t>(), collected.at("failures").get<int64_t>());
    }
    std::string model = start;
    json stages = json::object();

    // 2. sft on the successes
    if (!r.sft.is_null() && collected.at("successes").get<int64_t>() > 0) {
      const auto [tmpl, end] = template_and_end(model);
      eval::write_file_atomic(dir + "/chat_template.jinja", tmpl);
      json doc = {{"seed", r.seed + uint64_t(k)},
                  {"threads", r.threads},
                  {"model", {{"init", model}}},
                  {"tokenizer", {{"path", model + "/tokenizer.json"}}},
                  {"chat_template", dir + "/chat_template.jinja"},
                  {"end_token", end},
                  {"data", {{"train", {dir + "/successes.jsonl"}}}},
                  {"eval", {{"every", 0}}},
                  {"out", dir + "/sft"}};
      doc.merge_patch(r.sft);
      const recipe sr = parse_recipe(doc, r.source + " (round " + std::to_string(k) + " sft)", r.base_dir);
      if (!fs::exists(dir + "/sft.done")) {
        std::fprintf(stderr, "%s: sft on %" PRId64 " solved tasks\n", tag.c_str(),
                     collected.at("successes").get<int64_t>());
        run_options so = o;
        so.force_export = false;
        run_sft(sr, so);
        eval::write_file_atomic(dir + "/sft.done", "\n");
      }
      model = export_target(sr);
      stages["sft"] = {{"model", model}, {"conversations", collected.at("successes")}};
    }

    // 3. rl on the tasks not always solved
    if (!r.rl.is_null() && collected.at("failures").get<int64_t>() > 0) {
      json doc = {{"seed", r.seed + uint64_t(k)},
                  {"threads", r.threads},
                  {"model", {{"init", model}}},
                  {"data", {{"train", {{{"file", dir + "/failures.jsonl"}}}}}},
                  {"out", dir + "/rl"}};
      doc.merge_patch(r.rl);
      const rl_recipe rr =
          parse_rl_recipe(doc, r.source + " (round " + std::to_string(k) + " rl)", r.base_dir);
      if (!fs::exists(dir + "/rl.done")) {
        std::fprintf(stderr, "%s: rl on %" PRId64 " prompts\n", tag.c_str(),
                     collected.at("failures").get<int64_t>());
        run_options ro = o;
        ro.force_export = false;
        run_rl(rr, ro);
        eval::write_file_atomic(dir + "/rl.done", "\n");
      }
      model = export_target(rr);
      stages["rl"] = {{"model", model}, {"prompts", collected.at("failures")}};
    }

    // 4. eval: the round's start and end models on the same fresh held-out tasks
    const auto tasks = round_tasks(r.eval_data, k);
    eval::evaluate_options eo;
    eo.max_tokens = r.eval_max_tokens;
    eo.progress = false;
    eo.check = &checker;
    const auto before = eval::evaluate(start, tasks, eo);
    const auto after = model == start ? before : eval::evaluate(model, tasks, eo);
    eval::write_file_atomic(dir + "/eval-before.json", eval::to_json(before).dump(2) + "\n");
    eval::write_file_atomic(dir + "/eval-after.json", eval::to_json(after).dump(2) + "\n");
    const auto cmp = eval::compare(before, after);
    const json summary = {{"round", k},
                          {"start_model", start},
                          {"model", fs::absolute(model).lexically_normal().string()},
                          {"collect", collected},
                          {"stages", stages},
                          {"eval", {{"tasks", tasks.size()}, {"comparison", eval::to_json(cmp)}}}};
    eval::write_file_atomic(dir + "/summary.json", summary.dump(2) + "\n");
    append_log(r.out, summary);
    std::fprintf(
        stderr,
        "%s: eval on %zu fresh held-out tasks: %s -> %s, net improvement %+.1f%% (95%% CI +/- %.1f)\n",
        tag.c_str(), tasks.size(), pct(cmp.overall.baseline_rate).c_str(),
        pct(cmp.overall.candidate_rate).c_str(), 100 * cmp.overall.net_improvement_rate(),
        100 * cmp.overall.nir_ci95());
    current = summary.at("model").get<std::string>();
    ++res.rounds_done;
  }
  res.model = current;
  return res;
}

}  // namespace moxi::train
