// `moxi eval -m DIR --tasks FILE.jsonl [--json] [--max-tasks N] [--max-tokens N] [--out records.jsonl]
// [--baseline report.json] [--like-for-like FILE...] [--by-template] [--workers N] [--draft-tokens K]`: the
// pass rate per domain of a chat model on verifiable tasks (moxi::eval::evaluate; docs/eval.md). --baseline
// compares with an earlier `--json` report on the same tasks: the paired net improvement rate with its
// interval first, then the raw pass rates. --like-for-like compares with other tasks stratum by stratum.
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
#include <set>

#include "moxi/base/error.h"
#include "moxi/base/interrupt.h"
#include "moxi/cli/command.h"
#include "moxi/cli/options.h"
#include "moxi/cli/terminal-text.h"
#include "moxi/eval/evaluate.h"
#include "moxi/eval/task-generator.h"

namespace moxi::cli {

void setup_eval_agent(CLI::App* eval);   // cmd-eval-agent.cpp: `moxi eval agent`
void setup_eval_report(CLI::App* eval);  // cmd-eval-agent.cpp: `moxi eval report`
void setup_eval_replay(CLI::App* eval);  // cmd-eval-agent.cpp: `moxi eval replay`

namespace {

void print_table(const eval::eval_report& r, bool by_template) {
  const int w = by_template ? 20 : 10;
  std::printf("%-*s %7s %7s %7s %10s\n", w, by_template ? "template" : "domain", "tasks", "passed", "errors",
              "pass rate");
  auto row = [w](const std::string& name, const eval::pass_stats& s) {
    std::printf("%-*s %7lld %7lld %7lld %9.1f%%\n", w, name.c_str(), (long long)s.n, (long long)s.passed,
                (long long)s.errors, 100.0 * s.pass_rate());
  };
  for (const auto& [d, s] : r.by_domain) {
    row(eval::to_string(d), s);
    const std::string prefix = std::string(eval::to_string(d)) + "/";
    std::set<std::string> test_only;
    for (const auto& info : eval::templates(d))
      if (info.test_only) test_only.insert(info.name);
    for (const auto& [t, ts] : r.by_template) {
      if (!by_template || t.compare(0, prefix.size(), prefix) != 0) continue;
      const std::string name = t.substr(prefix.size());
      row("  " + name + (test_only.count(name) ? " *" : ""), ts);
    }
  }
  row("overall", r.overall);
  if (by_template) std::printf("* a template only the test split has (docs/tasks.md)\n");
  if (r.draft_tokens > 0) {
    std::printf("speculative decoding, %lld drafts per step: drafts kept per domain\n", (long long)r.draft_tokens);
    auto spec = [](const std::string& name, const eval::pass_stats& s) {
      std::printf("  %-10s %7lld drafted %7lld kept (%5.1f%%), %.2f tokens per verify step\n", name.c_str(),
                  (long long)s.drafted, (long long)s.accepted, 100.0 * s.acceptance(), s.tokens_per_step());
    };
    for (const auto& [d, s] : r.by_domain) spec(eval::to_string(d), s);
    spec("overall", r.overall);
  }
  std::printf(
      "model %s: %zu tasks, max %lld tokens, %.1f s (%.2f tasks/s), %lld prompt + %lld reply tokens\n",
      r.model.c_str(), r.records.size(), (long long)r.max_tokens, r.seconds,
      r.seconds > 0 ? double(r.records.size()) / r.seconds : 0.0, (long long)r.prompt_tokens,
      (long long)r.reply_tokens);
}

// Up to n failed tasks per domain: what the model said and why it failed (model text made terminal-safe).
void print_failures(const eval::eval_report& r, size_t n) {
  std::map<eval::domain, size_t> shown;
  for (const auto& rec : r.records) {
    if (rec.pass || rec.error || shown[rec.domain]++ >= n) continue;
    std::string reply = rec.reply.size() > 300 ? rec.reply.substr(0, 300) + "..." : rec.reply;
    std::printf("\n%s (%s): %s\n  reply: %s\n", rec.id.c_str(), rec.template_name.c_str(),
                terminal_safe(rec.detail).c_str(), terminal_safe(reply).c_str());
  }
}

// The headline is the paired figure: raw pass rates of two reports can cover different tasks (a task
// missing from one, or an error in either), so they come second, with the unpaired count beside them.
void print_comparison(const eval::comparison& c, const std::string& baseline) {
  const auto& o = c.overall;
  std::printf(
      "\nvs baseline %s, over %lld paired tasks: net improvement %+.1f points (95%% interval %+.1f to "
      "%+.1f); %lld fixed, %lld broken, sign test p = %.3g\n",
      baseline.c_str(), (long long)o.n, 100.0 * o.net_improvement_rate(),
      100.0 * (o.net_improvement_rate() - o.nir_ci95()), 100.0 * (o.net_improvement_rate() + o.nir_ci95()),
      (long long)o.fixed, (long long)o.broken, o.sign_test_p());
  std::printf(
      "raw pass rates (each report over its own judged tasks; %lld tasks unpaired): %.1f%% -> %.1f%% "
      "(delta %+.1f points)\n",
      (long long)c.unpaired, 100.0 * c.baseline_pass_rate, 100.0 * c.candidate_pass_rate,
      100.0 * c.pass_rate_delta());
  std::printf("%-10s %7s %6s %7s %9s %10s %18s %8s\n", "domain", "paired", "fixed", "broken", "baseline",
              "candidate", "net improvement", "sign p");
  auto row = [](const char* name, const eval::paired_stats& s) {
    char nir[32];
    std::snprintf(nir, sizeof nir, "%+.1f%% ±%.1f", 100.0 * s.net_improvement_rate(), 100.0 * s.nir_ci95());
    // 19 bytes for 18 columns: "±" is two bytes of UTF-8.
    std::printf("%-10s %7lld %6lld %7lld %8.1f%% %9.1f%% %19s %8.3g\n", name, (long long)s.n,
                (long long)s.fixed, (long long)s.broken, 100.0 * s.baseline_rate, 100.0 * s.candidate_rate,
                nir, s.sign_test_p());
  };
  for (const auto& [d, s] : c.by_domain) row(eval::to_string(d), s);
  row("overall", c.overall);
}

// The like-for-like table: each stratum's pass rates in both sets, then the target's rate beside the rate the
// reference would have on the target's mix of strata (docs/eval.md "Comparing two task sets").
void print_standardized(const eval::standardized_comparison& c, const std::vector<std::string>& files) {
  std::string names;
  for (const auto& f : files) names += (names.empty() ? "" : ", ") + f;
  std::printf("\nlike for like vs %s (strata: domain, taught or not):\n", names.c_str());
  std::printf("%-20s %18s %18s\n", "stratum", "these tasks", "reference");
  auto cell = [](const eval::pass_stats& s) {
    char buf[40];
    if (s.judged() == 0) return std::string("-");
    std::snprintf(buf, sizeof buf, "%lld/%lld %5.1f%%", (long long)s.passed, (long long)s.judged(),
                  100.0 * s.pass_rate());
    return std::string(buf);
  };
  for (const auto& s : c.strata) {
    const std::string name = std::string(eval::to_string(s.domain)) + (s.taught ? " taught" : " new");
    std::printf("%-20s %18s %18s\n", name.c_str(), cell(s.target).c_str(), cell(s.reference).c_str());
  }
  if (c.n == 0) {
    std::printf("none of these tasks falls in a stratum the reference has: nothing to compare\n");
    return;
  }
  std::printf(
      "these %lld tasks pass %.1f%%; the reference on their mix of strata %.1f%%: gap %+.1f points (95%% "
      "interval %+.1f to %+.1f); the reference's own rate over these domains %.1f%%\n",
      (long long)c.n, 100.0 * c.target_rate, 100.0 * c.standardized_rate, 100.0 * c.gap(),
      100.0 * (c.gap() - c.gap_ci95), 100.0 * (c.gap() + c.gap_ci95), 100.0 * c.crude_reference_rate);
  if (c.uncovered > 0)
    std::printf("%lld tasks are in strata the reference lacks and are left out\n", (long long)c.uncovered);
}

// The reference of --like-for-like: the records of every file, one task id once.
eval::eval_report merged_reference(const std::vector<std::string>& files) {
  eval::eval_report ref;
  std::set<std::string> ids;
  for (const auto& f : files) {
    for (auto& rec : eval::read_report_or_records(f).records) {
      if (!ids.insert(rec.id).second) throw error(f + ": task " + rec.id + " is already in the reference");
      ref.records.push_back(std::move(rec));
    }
  }
  eval::summarize(ref);
  return ref;
}

void setup_eval(CLI::App& root) {
  auto* cmd = root.add_subcommand("eval", "Pass rate of a chat model on verifiable tasks, per domain");
  struct args {
    std::string model, tasks, out, baseline;
    std::vector<std::string> like_for_like;
    bool json = false, quiet = false, by_template = false;
    size_t failures = 0;
    size_t max_tasks = 0;
    eval::evaluate_options opt;
  };
  auto a = std::make_shared<args>();
  // -m and --tasks are required unless a subcommand (`moxi eval agent`) runs instead; checked below.
  add_model_option(cmd, a->model, /*required=*/false)
      ->description(
          "model directory (config.json, safetensors, tokenizer.json, tokenizer_config.json with a "
          "chat template)");
  cmd->add_option("--tasks", a->tasks, "tasks, one JSON object per line (`moxi data` writes them)")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--json", a->json, "print the report (with per-task records) as JSON");
  cmd->add_option("--max-tasks", a->max_tasks, "evaluate the first N tasks only (0: all)")
      ->check(integer_in(0, int64_t(1) << 40))
      ->capture_default_str();
  cmd->add_option("--max-tokens", a->opt.max_tokens, "reply length limit")
      ->check(integer_in(1, int64_t(1) << 20))
      ->capture_default_str();
  auto outs = std::make_shared<output_paths>(cmd);
  outs->add("--out", a->out, "also write the per-task records here (JSONL, written atomically)",
            output_paths::kind::file);
  cmd->add_option("--baseline", a->baseline,
                  "an earlier `moxi eval --json` report on the same tasks to compare with")
      ->check(CLI::ExistingFile);
  cmd->add_option("--like-for-like", a->like_for_like,
                  "reports (`--json`) or records (`--out`) of other tasks, e.g. the template prompts: compare "
                  "stratum by stratum (domain, taught or not) and print the gap at these tasks' mix "
                  "(docs/eval.md)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--draft-tokens", a->opt.draft_tokens,
                  "speculative decoding: MTP drafts per step (same greedy replies; prints the drafts kept per "
                  "domain, docs/speculative.md)")
      ->check(integer_in(0, 16))
      ->capture_default_str();
  cmd->add_option("--workers", a->opt.workers,
                  "sequences decoded at once, each on one thread (0: one per kernel thread; 1: one sequence "
                  "on all kernel threads)")
      ->check(integer_in(0, 256))
      ->capture_default_str();
  cmd->add_option("--audit-log", a->opt.check_opts.audit_log,
                  "append one JSON line per sandbox run of the checkers (docs/sandbox.md)");
  cmd->add_flag("--by-template", a->by_template, "also print the pass rate per generator template");
  cmd->add_option("--show-failures", a->failures,
                  "print up to N failed tasks per domain with reply and reason")
      ->check(integer_in(0, int64_t(1) << 40));
  cmd->add_flag("-q,--quiet", a->quiet, "no progress line");
  set_examples(cmd,
               {"moxi eval -m models/moxi-small --tasks test.jsonl --by-template",
                "moxi eval -m models/moxi-small --tasks test.jsonl --json > before.json",
                "moxi eval -m run/model --tasks test.jsonl --baseline before.json --out records.jsonl",
                "moxi eval -m models/moxi-small --tasks tasks/user-prompts.jsonl --like-for-like test-records.jsonl"},
               "docs/eval.md");
  setup_eval_agent(cmd);
  setup_eval_report(cmd);
  setup_eval_replay(cmd);
  cmd->require_subcommand(0, 1);
  cmd->callback([a, outs, cmd] {
    if (!cmd->get_subcommands().empty()) return;
    if (a->model.empty()) throw usage_error("--model is required");
    if (a->tasks.empty()) throw usage_error("--tasks is required");
    interrupt_guard stop_cleanly;  // SIGINT/SIGTERM: sandbox runs killed, workspaces removed, exit 130
    outs->check();
    auto tasks = eval::read_jsonl(a->tasks);
    if (tasks.empty()) throw error(a->tasks + ": no tasks");
    if (a->max_tasks > 0 && tasks.size() > a->max_tasks) tasks.resize(a->max_tasks);
    // Read the baseline first: a bad path should not cost a whole evaluation.
    std::optional<eval::eval_report> baseline;
    if (!a->baseline.empty()) baseline = eval::read_report(a->baseline);
    std::optional<eval::eval_report> reference;
    if (!a->like_for_like.empty()) reference = merged_reference(a->like_for_like);
    a->opt.progress = !a->quiet;
    const auto report = eval::evaluate(a->model, tasks, a->opt);
    if (!a->out.empty()) {
      std::string lines;
      for (const auto& rec : report.records) lines += eval::to_json(rec).dump() + "\n";
      eval::write_file_atomic(a->out, lines);
    }
    std::optional<eval::comparison> cmp;
    if (baseline) cmp = eval::compare(*baseline, report);
    std::optional<eval::standardized_comparison> std_cmp;
    if (reference) std_cmp = eval::compare_standardized(report, *reference);
    if (a->json) {
      auto j = eval::to_json(report);
      if (cmp) j["comparison"] = eval::to_json(*cmp);
      if (std_cmp) j["like_for_like"] = eval::to_json(*std_cmp);
      std::cout << j.dump(2) << "\n";
    } else {
      print_table(report, a->by_template);
      if (a->failures > 0) print_failures(report, a->failures);
      if (cmp) print_comparison(*cmp, a->baseline);
      if (std_cmp) print_standardized(*std_cmp, a->like_for_like);
    }
  });
}

MOXI_COMMAND("eval", setup_eval);

}  // namespace
}  // namespace moxi::cli
