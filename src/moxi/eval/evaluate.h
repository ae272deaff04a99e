// Evaluation of a chat model on verifiable tasks (`moxi eval`, the trainer's periodic eval): each task's
// prompt is rendered with the model's chat template as one user turn, decoded greedily to the end of the
// turn, and the reply is judged by the task's checker (terminal and code replies run in the sandbox).
// Reports pass rates per domain, per-task records, and the comparison of two reports on the same tasks
// (pass-rate delta and net improvement rate). docs/eval.md describes the report.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "moxi/eval/check.h"
#include "moxi/eval/task.h"
#include "moxi/formats/chat-template.h"
#include "moxi/formats/tokenizer.h"
#include "moxi/runtime/generate.h"

namespace moxi::runtime {
struct local_model;
}

namespace moxi::eval {

// What evaluate() needs of a model; any causal_lm works (the engine's model_lm, a trainer's model, a fake).
struct eval_model {
  std::string name;  // reported as the report's "model"
  // A new empty sequence. Called from the worker threads, one sequence per task; each sequence is used by
  // one thread only. A model that cannot run sequences concurrently needs evaluate_options::workers = 1.
  std::function<std::unique_ptr<runtime::causal_lm>()> new_sequence;
  const formats::tokenizer* tok = nullptr;
  const formats::chat_template* chat = nullptr;
  std::vector<token_id> stop_tokens;  // end of the reply (e.g. <|end|>, eos)
  // A task's pictures (vision): given a new sequence and the task's prompt ids, expands the image
  // placeholders and hands the sequence the image rows. Null for a model that takes text only (a task with
  // pictures is then an error).
  std::function<std::vector<token_id>(runtime::causal_lm& seq, const task& t, std::vector<token_id> ids)>
      attach_images;
};

// The text a model is given for a task: its history's turns, then its prompt as the final user turn (after
// one image part per picture when it has pictures), rendered with the template's generation prompt (what
// evaluation and RL rollouts both decode from).
std::string render_task_prompt(const task& t, const formats::chat_template& chat);
// The final user turn's content: the prompt, or (with pictures) image parts then the prompt as a text part.
nlohmann::ordered_json task_user_content(const task& t);

// An engine model as an eval_model (sequences are runtime::model_lm over lm.model); `lm` must outlive it.
eval_model eval_model_of(const runtime::local_model& lm);

struct evaluate_options {
  int64_t max_tokens = 256;  // reply length limit (greedy decoding)
  // Sequences decoded at once. 1: one at a time, each on the kernels' thread pool. n > 1: n threads, each
  // running its own sequence with single-threaded kernels (thread_pool runs a nested job inline), which
  // suits small models whose kernels are too short to split. 0: the kernels' thread pool size.
  int workers = 0;
  checker* check = nullptr;  // a shared checker (e.g. the trainer's); nullptr: one made from check_options
  check_options check_opts;
  bool progress = true;  // a progress line on stderr (tasks checked, pass so far, ETA)
  // Speculative decoding with the model's MTP head (docs/speculative.md): drafts per step, 0 = off. Greedy
  // replies are the same either way; the report then counts drafts and kept drafts per task and domain.
  int64_t draft_tokens = 0;
};

struct task_record {
  std::string id;
  eval::domain domain = domain::math;
  std::string template_name;
  std::string reply;  // the reply text (special tokens dropped, invalid UTF-8 replaced by U+FFFD)
  bool pass = false;
  bool error = false;         // the checker could not judge the reply (infrastructure failure): not a fail
  std::string detail;         // the checker's reason
  std::string finish_reason;  // "stop" (end of turn) or "length" (max_tokens)
  int64_t prompt_tokens = 0, reply_tokens = 0;
  int64_t drafted = 0, accepted = 0, verify_steps = 0;  // speculative decoding (evaluate_options::draft_tokens)
};

struct pass_stats {
  int64_t n = 0;       // tasks
  int64_t passed = 0;  // judged and passed
  int64_t errors = 0;  // not judged (infrastructure failures)
  int64_t judged() const { return n - errors; }
  // passed / judged; 0 when nothing was judged.
  double pass_rate() const { return judged() > 0 ? double(passed) / double(judged()) : 0.0; }
  // Speculative decoding over these tasks: drafts, drafts kept, verifying forwards.
  int64_t drafted = 0, accepted = 0, verify_steps = 0;
  double acceptance() const { return drafted > 0 ? double(accepted) / double(drafted) : 0.0; }
  // Tokens each verifying forward yields: its own plus the drafts it kept.
  double tokens_per_step() const {
    return verify_steps > 0 ? double(verify_steps + accepted) / double(verify_steps) : 0.0;
  }
};

struct eval_report {
  std::string model;
  int64_t max_tokens = 0;
  int64_t draft_tokens = 0;  // evaluate_options::draft_tokens of the run
  std::map<domain, pass_stats> by_domain;  // only the domains present
  // Per generator template, keyed "domain/template": the test split's held-out rules are per template
  // (docs/tasks.md), so this separates unseen parameter ranges from unseen templates.
  std::map<std::string, pass_stats> by_template;
  pass_stats overall;
  std::vector<task_record> records;  // in task order
  double seconds = 0;                // wall time of the whole evaluation
  int64_t prompt_tokens = 0, reply_tokens = 0;
};

// Runs the evaluation. Generation errors (a template that raises, a prompt the tokenizer rejects) are
// thrown as moxi::error; checker infrastructure failures are counted per task as errors.
eval_report evaluate(const eval_model& model, const std::vector<task>& tasks,
                     const evaluate_options& options = {});
// A model loaded with the engine (runtime/local-model.h); it must have a chat template.
eval_report evaluate(const runtime::local_model& model, const std::vector<task>& tasks,
                     const evaluate_options& options = {});
// Loads DIR with the engine, then as above.
eval_report evaluate(const std::string& model_dir, const std::vector<task>& tasks,
                     const evaluate_options& options = {});

// Recomputes by_domain, by_template, overall and the token totals from the records (e.g. after building a
// report by hand or filtering its records).
void summarize(eval_report& report);

// The report as JSON (docs/eval.md): {"model", "max_tokens", "seconds", "prompt_tokens", "reply_tokens",
// "domains": {"math": {n, passed, errors, pass_rate}, ...}, "templates": {"math/add": {...}, ...},
// "overall": {...}, "records": [...]}.
nlohmann::ordered_json to_json(const eval_report& report, bool with_records = true);
nlohmann::ordered_json to_json(const task_record& record);
// Reads what to_json wrote; errors name `where` and the field. Per-domain and overall counts are recomputed
// from the records and must agree with the stored ones.
eval_report report_from_json(const nlohmann::json& j, const std::string& where);
eval_report read_report(const std::string& path);
// A `--json` report, or the per-task records `moxi eval --out` writes (one JSON object per line), summarized.
eval_report read_report_or_records(const std::string& path);
// One per-task record of either file; errors name `at` and the field.
task_record record_from_json(const nlohmann::json& j, const std::string& at);

// Two evaluations of the same model family on the same tasks, paired by task id. Only tasks judged in both
// (present in both, no error in either) are paired.
struct paired_stats {
  int64_t n = 0;                                 // paired tasks
  int64_t fixed = 0, broken = 0;                 // fail -> pass, pass -> fail
  int64_t both_passed = 0, both_failed = 0;      // ties
  double baseline_rate = 0, candidate_rate = 0;  // pass rates over the paired tasks
  // Net improvement rate, (wins - losses) / (wins + losses + ties) with win = fixed, loss = broken,
  // tie = unchanged: the paired definition of docs/eval.md "Comparing two reports". On pass/fail data
  // it equals candidate_rate - baseline_rate over the paired tasks; fixed and broken say how it arose.
  double net_improvement_rate() const { return n > 0 ? double(fixed - broken) / double(n) : 0.0; }
  // Half width of its 95% interval, 1.96 * sqrt((p_win + p_loss - NIR^2) / n) (§4.3); 0 when n = 0.
  double nir_ci95() const;
  // Two-sided exact sign test on the changed tasks (fixed vs broken, p = 1/2); 1 when none changed.
  double sign_test_p() const;
};

struct comparison {
  std::map<domain, paired_stats> by_domain;
  paired_stats overall;
  // Each report's own overall pass rate (over its judged tasks, paired or not) and their difference.
  double baseline_pass_rate = 0, candidate_pass_rate = 0;
  double pass_rate_delta() const { return candidate_pass_rate - baseline_pass_rate; }
  int64_t unpaired = 0;  // tasks of either report left out (missing from the other, or an error in either)
};

comparison compare(const eval_report& baseline, const eval_report& candidate);
nlohmann::ordered_json to_json(const comparison& c);

// Whether a task asks for something training teaches: false for a generator template only the test split
// has (task-generator.h) and for a hand-written task marked "user-new" (docs/tasks.md "The user prompt
// set"), true otherwise.
bool taught(domain d, const std::string& template_name);

// Two different task sets compared like for like (direct standardization; docs/eval.md "Comparing two
// task sets"): every judged task falls into a stratum, its domain and whether training teaches what it
// asks for. The reference set's pass rate in each stratum, weighted by the target set's share of that
// stratum, is what the reference would pass asking for what the target asks for; its difference from the
// target's own rate is the cost of how the target asks (typed by users rather than by the generator).
struct standardized_comparison {
  struct stratum {
    eval::domain domain = domain::math;
    bool taught = true;
    pass_stats target, reference;
  };
  std::vector<stratum> strata;  // every stratum either report has, by domain, taught first
  // Over the target's judged tasks in strata the reference also has:
  int64_t n = 0;
  double target_rate = 0;        // the target's pass rate
  double standardized_rate = 0;  // sum over strata of (target share) x (reference pass rate)
  // Half width of the 95 % interval of target_rate - standardized_rate, 1.96 * sqrt(sum over strata of
  // w^2 (q (1 - q) / m + p (1 - p) / r)), w the stratum's target share, q and m the target's rate and
  // judged count there, p and r the reference's.
  double gap_ci95 = 0;
  // The unadjusted comparison: the reference's pass rate over its judged tasks of the target's domains.
  double crude_reference_rate = 0;
  int64_t uncovered = 0;  // the target's judged tasks in strata the reference lacks (left out above)
  double gap() const { return target_rate - standardized_rate; }
};

standardized_comparison compare_standardized(const eval_report& target, const eval_report& reference);
nlohmann::ordered_json to_json(const standardized_comparison& c);

}  // namespace moxi::eval
