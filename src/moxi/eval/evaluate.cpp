// evaluate(): worker threads render, encode and greedily decode one task each; a checker thread judges the
// finished replies in batches through checker::check_all (sandbox runs overlap with decoding) and draws
// the progress line. Then the report's JSON form and the paired comparison of two reports.
#include "moxi/eval/evaluate.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "moxi/base/clock.h"
#include "moxi/base/error.h"
#include "moxi/base/interrupt.h"
#include "moxi/base/progress.h"
#include "moxi/base/thread-pool.h"
#include "moxi/eval/task-generator.h"
#include "moxi/formats/json-file.h"
#include "moxi/runtime/local-model.h"
#include "moxi/runtime/multimodal.h"

namespace moxi::eval {
namespace {

// One task: its history's turns, then its prompt as the final user turn, rendered with the generation
// prompt, decoded greedily.
void generate_reply(const eval_model& m, const task& t, int64_t max_tokens, int64_t draft_tokens,
                    task_record& rec) {
  const std::string prompt = render_task_prompt(t, *m.chat);
  auto ids = m.tok->encode(prompt, /*allow_special=*/true);
  if (ids.empty()) throw error("eval: task " + t.id + " renders to an empty prompt");

  runtime::generate_options go;
  go.sampling.temperature = 0;  // greedy
  go.sampling.seed = 0;         // unused by greedy decoding; avoids seeding from std::random_device
  go.max_tokens = max_tokens;
  go.stop_tokens = m.stop_tokens;
  go.draft_tokens = draft_tokens;
  auto lm = m.new_sequence();
  if (!t.images.empty()) {
    if (!m.attach_images) throw error("eval: task " + t.id + " has pictures, but " + m.name + " takes text only");
    ids = m.attach_images(*lm, t, std::move(ids));
  }
  std::string reply;
  const auto g = runtime::generate(*lm, *m.tok, ids, go, [&](std::string_view text) {
    check_interrupt();  // a long reply stops at the next piece of text
    reply += text;
  });
  rec.reply = runtime::to_valid_utf8(reply);
  rec.finish_reason = g.finish_reason;
  rec.prompt_tokens = int64_t(ids.size());
  rec.reply_tokens = int64_t(g.tokens.size());
  rec.drafted = g.drafted;
  rec.accepted = g.accepted;
  rec.verify_steps = g.verify_steps;
}

}  // namespace

std::string render_task_prompt(const task& t, const formats::chat_template& chat) {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  for (const auto& h : t.history) messages.push_back({{"role", h.role}, {"content", h.content}});
  messages.push_back({{"role", "user"}, {"content", task_user_content(t)}});
  formats::render_options ro;
  ro.add_generation_prompt = true;
  return chat.render(messages, ro);
}

void summarize(eval_report& r) {
  r.by_domain.clear();
  r.by_template.clear();
  r.overall = {};
  r.prompt_tokens = r.reply_tokens = 0;
  for (const auto& rec : r.records) {
    const std::string tmpl = std::string(to_string(rec.domain)) + "/" + rec.template_name;
    for (pass_stats* s : {&r.by_domain[rec.domain], &r.by_template[tmpl], &r.overall}) {
      ++s->n;
      s->passed += rec.pass && !rec.error;
      s->errors += rec.error;
      s->drafted += rec.drafted;
      s->accepted += rec.accepted;
      s->verify_steps += rec.verify_steps;
    }
    r.prompt_tokens += rec.prompt_tokens;
    r.reply_tokens += rec.reply_tokens;
  }
}

namespace {

int resolve_workers(int requested) {
  if (requested < 0) throw error("eval: workers must be >= 0");
  return requested > 0 ? requested : thread_pool::global().size();
}

}  // namespace

eval_report evaluate(const eval_model& m, const std::vector<task>& tasks, const evaluate_options& o) {
  if (!m.new_sequence || !m.tok || !m.chat)
    throw error("eval: the model needs new_sequence, a tokenizer and a chat template");
  if (o.max_tokens < 1) throw error("eval: max_tokens must be >= 1");
  if (o.draft_tokens < 0) throw error("eval: draft_tokens must be >= 0");
  const int workers = resolve_workers(o.workers);
  const auto t0 = std::chrono::steady_clock::now();

  std::unique_ptr<checker> own_checker;
  checker* chk = o.check;
  if (!chk) {
    own_checker = std::make_unique<checker>(o.check_opts);
    chk = own_checker.get();
  }

  eval_report r;
  r.model = m.name;
  r.max_tokens = o.max_tokens;
  r.draft_tokens = o.draft_tokens;
  r.records.resize(tasks.size());
  std::unordered_map<std::string, size_t> ids;
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (const auto [it, fresh] = ids.emplace(tasks[i].id, i); !fresh)
      throw error("eval: task id " + tasks[i].id + " appears twice (tasks " + std::to_string(it->second + 1) +
                  " and " + std::to_string(i + 1) + ")");
    r.records[i].id = tasks[i].id;
    r.records[i].domain = tasks[i].domain;
    r.records[i].template_name = tasks[i].template_name;
  }

  std::mutex mu;
  std::condition_variable cv;
  std::deque<size_t> ready;  // generated, not yet checked
  bool generation_done = false;
  std::exception_ptr failure;
  std::atomic<bool> abort{false};
  std::atomic<size_t> next{0};
  auto fail = [&](std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(mu);
    if (!failure) failure = e;
    abort = true;
    cv.notify_all();
  };

  // Checker: judges whatever is ready as one batch, so sandbox runs overlap each other and the decoding.
  std::thread check_thread([&] {
    std::unique_ptr<progress> bar;
    if (o.progress) bar = std::make_unique<progress>("eval", tasks.size(), /*bytes=*/false);
    int64_t judged = 0, passed = 0;
    for (;;) {
      std::vector<size_t> batch;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return !ready.empty() || generation_done || abort; });
        if (abort || (ready.empty() && generation_done)) break;
        batch.assign(ready.begin(), ready.end());
        ready.clear();
      }
      std::vector<std::pair<const task*, std::string>> items;
      for (size_t i : batch) items.emplace_back(&tasks[i], r.records[i].reply);
      try {
        const auto results = chk->check_all(items);
        for (size_t k = 0; k < batch.size(); ++k) {
          auto& rec = r.records[batch[k]];
          rec.pass = results[k].pass && !results[k].error;
          rec.error = results[k].error;
          rec.detail = runtime::to_valid_utf8(results[k].detail);
          judged += !rec.error;
          passed += rec.pass;
        }
      } catch (...) {
        fail(std::current_exception());
        break;
      }
      if (bar) {
        char item[64];
        std::snprintf(item, sizeof item, "pass %lld/%lld (%.0f%%)", (long long)passed, (long long)judged,
                      judged > 0 ? 100.0 * double(passed) / double(judged) : 0.0);
        bar->advance(batch.size(), item);
      }
    }
    if (bar && !abort) bar->finish();
  });

  auto work = [&] {
    for (;;) {
      if (abort) return;
      const size_t i = next++;
      if (i >= tasks.size()) return;
      try {
        check_interrupt();
        generate_reply(m, tasks[i], o.max_tokens, o.draft_tokens, r.records[i]);
      } catch (...) {
        fail(std::current_exception());
        return;
      }
      std::lock_guard<std::mutex> lock(mu);
      ready.push_back(i);
      cv.notify_all();
    }
  };
  if (workers == 1) {
    work();
  } else {
    // Each of these threads runs its sequences' kernels inline (a thread_pool job nested in a job runs on
    // its own thread), so the sequences proceed in parallel instead of queueing for the global pool.
    thread_pool pool(workers);
    pool.run([&](int, int) { work(); });
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    generation_done = true;
    cv.notify_all();
  }
  check_thread.join();
  if (failure) std::rethrow_exception(failure);

  summarize(r);
  r.seconds = seconds_since(t0);
  return r;
}

nlohmann::ordered_json task_user_content(const task& t) {
  if (t.images.empty()) return t.prompt;
  nlohmann::ordered_json parts = nlohmann::ordered_json::array();
  for (size_t i = 0; i < t.images.size(); ++i) parts.push_back({{"type", "image"}});
  parts.push_back({{"type", "text"}, {"text", t.prompt}});
  return parts;
}

eval_model eval_model_of(const runtime::local_model& lm) {
  eval_model m;
  m.name = lm.dir;
  m.new_sequence = [&lm] { return std::make_unique<runtime::model_lm>(lm.model); };
  m.tok = &lm.tok;
  m.chat = &lm.require_chat();
  m.stop_tokens = lm.stop_tokens;
  if (lm.model.vision()) {
    m.attach_images = [&lm](runtime::causal_lm& seq, const task& t, std::vector<token_id> ids) {
      std::vector<runtime::prompt_image> images;
      for (size_t i = 0; i < t.images.size(); ++i) {
        images.push_back(runtime::prepare_image(
            lm.model, image::decode(t.images[i], {}, "task " + t.id + " image " + std::to_string(i + 1))));
      }
      auto expanded = runtime::expand_image_placeholders(
          ids, token_id(*lm.model.config().media_placeholder_token_id), images);
      dynamic_cast<runtime::model_lm&>(seq).set_media(runtime::encode_images(lm.model, images));
      return expanded;
    };
  }
  return m;
}

eval_report evaluate(const runtime::local_model& lm, const std::vector<task>& tasks,
                     const evaluate_options& o) {
  return evaluate(eval_model_of(lm), tasks, o);
}

eval_report evaluate(const std::string& model_dir, const std::vector<task>& tasks,
                     const evaluate_options& o) {
  return evaluate(runtime::local_model::load(model_dir), tasks, o);
}

// ---- JSON ----

namespace {

nlohmann::ordered_json stats_json(const pass_stats& s) {
  nlohmann::ordered_json j = {{"n", s.n}, {"passed", s.passed}, {"errors", s.errors}, {"pass_rate", s.pass_rate()}};
  if (s.verify_steps > 0) {
    j["drafted"] = s.drafted;
    j["accepted"] = s.accepted;
    j["verify_steps"] = s.verify_steps;
    j["acceptance"] = s.acceptance();
    j["tokens_per_step"] = s.tokens_per_step();
  }
  return j;
}

template <class T>
T field(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) throw error(where + ": missing field \"" + key + "\"");
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    throw error(where + ": field \"" + key + "\" has the wrong type");
  }
}

}  // namespace

nlohmann::ordered_json to_json(const task_record& rec) {
  return {{"id", rec.id},
          {"domain", to_string(rec.domain)},
          {"template", rec.template_name},
          {"pass", rec.pass},
          {"error", rec.error},
          {"detail", rec.detail},
          {"finish_reason", rec.finish_reason},
          {"prompt_tokens", rec.prompt_tokens},
          {"reply_tokens", rec.reply_tokens},
          {"drafted", rec.drafted},
          {"accepted", rec.accepted},
          {"verify_steps", rec.verify_steps},
          {"reply", rec.reply}};
}

nlohmann::ordered_json to_json(const eval_report& r, bool with_records) {
  nlohmann::ordered_json j;
  j["model"] = r.model;
  j["max_tokens"] = r.max_tokens;
  j["draft_tokens"] = r.draft_tokens;
  j["seconds"] = r.seconds;
  j["prompt_tokens"] = r.prompt_tokens;
  j["reply_tokens"] = r.reply_tokens;
  j["domains"] = nlohmann::ordered_json::object();
  for (const auto& [d, s] : r.by_domain) j["domains"][to_string(d)] = stats_json(s);
  j["templates"] = nlohmann::ordered_json::object();
  for (const auto& [t, s] : r.by_template) j["templates"][t] = stats_json(s);
  j["overall"] = stats_json(r.overall);
  if (with_records) {
    j["records"] = nlohmann::ordered_json::array();
    for (const auto& rec : r.records) j["records"].push_back(to_json(rec));
  }
  return j;
}

task_record record_from_json(const nlohmann::json& jr, const std::string& at) {
  task_record rec;
  rec.id = field<std::string>(jr, "id", at);
  rec.domain = parse_domain(field<std::string>(jr, "domain", at));
  rec.template_name = field<std::string>(jr, "template", at);
  rec.pass = field<bool>(jr, "pass", at);
  rec.error = field<bool>(jr, "error", at);
  rec.detail = field<std::string>(jr, "detail", at);
  rec.finish_reason = field<std::string>(jr, "finish_reason", at);
  rec.prompt_tokens = field<int64_t>(jr, "prompt_tokens", at);
  rec.reply_tokens = field<int64_t>(jr, "reply_tokens", at);
  rec.reply = field<std::string>(jr, "reply", at);
  // Reports written before speculative evaluation have no draft counts.
  if (jr.contains("drafted")) {
    rec.drafted = field<int64_t>(jr, "drafted", at);
    rec.accepted = field<int64_t>(jr, "accepted", at);
    rec.verify_steps = field<int64_t>(jr, "verify_steps", at);
  }
  return rec;
}

eval_report report_from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw error(where + ": an eval report must be a JSON object");
  eval_report r;
  r.model = field<std::string>(j, "model", where);
  r.max_tokens = field<int64_t>(j, "max_tokens", where);
  r.seconds = field<double>(j, "seconds", where);
  if (j.contains("draft_tokens")) r.draft_tokens = field<int64_t>(j, "draft_tokens", where);
  if (!j.contains("records") || !j["records"].is_array())
    throw error(where + ": missing field \"records\" (write the report with records to compare it)");
  size_t i = 0;
  for (const auto& jr : j["records"])
    r.records.push_back(record_from_json(jr, where + ": records[" + std::to_string(i++) + "]"));
  summarize(r);
  // The summary must be the records' summary: a hand-edited or truncated report is refused.
  const auto& o = j.contains("overall") ? j["overall"] : nlohmann::json();
  if (field<int64_t>(o, "n", where + ": overall") != r.overall.n ||
      field<int64_t>(o, "passed", where + ": overall") != r.overall.passed ||
      field<int64_t>(o, "errors", where + ": overall") != r.overall.errors)
    throw error(where + ": \"overall\" does not match the records");
  return r;
}

eval_report read_report(const std::string& path) {
  return report_from_json(formats::read_json_file(path, "eval report"), path);
}

eval_report read_report_or_records(const std::string& path) {
  const std::string text = formats::read_text_file(path, "eval report or records");
  // A `--json` report is one object with "records"; the `--out` records file is one object per line.
  const auto whole = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (whole.is_object() && whole.contains("records")) return report_from_json(whole, path);
  eval_report r;
  r.model = path;
  std::istringstream lines(text);
  std::string line;
  for (size_t no = 1; std::getline(lines, line); ++no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string at = path + ":" + std::to_string(no);
    const auto jr = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (jr.is_discarded()) throw error(at + ": neither an eval report (--json) nor a task record (--out)");
    r.records.push_back(record_from_json(jr, at));
  }
  if (r.records.empty()) throw error(path + ": no task records");
  summarize(r);
  return r;
}

// ---- comparison ----

double paired_stats::nir_ci95() const {
  if (n == 0) return 0;
  const double nir = net_improvement_rate();
  const double var = (double(fixed) / double(n) + double(broken) / double(n) - nir * nir) / double(n);
  return 1.96 * std::sqrt(var > 0 ? var : 0);
}

double paired_stats::sign_test_p() const {
  const int64_t m = fixed + broken;
  if (m == 0) return 1;
  const int64_t k = fixed < broken ? fixed : broken;
  // P(X <= k) for X ~ Binomial(m, 1/2), summed in log space (m may be thousands), doubled and capped at 1.
  double tail = 0;
  for (int64_t i = 0; i <= k; ++i)
    tail += std::exp(std::lgamma(double(m) + 1) - std::lgamma(double(i) + 1) -
                     std::lgamma(double(m - i) + 1) - double(m) * std::log(2.0));
  return tail * 2 < 1 ? tail * 2 : 1;
}

comparison compare(const eval_report& baseline, const eval_report& candidate) {
  comparison c;
  c.baseline_pass_rate = baseline.overall.pass_rate();
  c.candidate_pass_rate = candidate.overall.pass_rate();
  std::unordered_map<std::string, const task_record*> base;
  for (const auto& rec : baseline.records) {
    if (!base.emplace(rec.id, &rec).second)
      throw error("eval compare: task " + rec.id + " appears twice in the baseline");
  }
  size_t matched = 0;
  std::unordered_map<std::string, bool> seen;
  for (const auto& rec : candidate.records) {
    if (!seen.emplace(rec.id, true).second)
      throw error("eval compare: task " + rec.id + " appears twice in the candidate");
    const auto it = base.find(rec.id);
    if (it == base.end()) {
      ++c.unpaired;
      continue;
    }
    ++matched;
    const task_record& b = *it->second;
    if (b.domain != rec.domain)
      throw error("eval compare: task " + rec.id + " is " + to_string(b.domain) + " in the baseline and " +
                  to_string(rec.domain) + " in the candidate: not the same tasks");
    if (b.error || rec.error) {
      ++c.unpaired;
      continue;
    }
    for (paired_stats* s : {&c.by_domain[rec.domain], &c.overall}) {
      ++s->n;
      s->fixed += !b.pass && rec.pass;
      s->broken += b.pass && !rec.pass;
      s->both_passed += b.pass && rec.pass;
      s->both_failed += !b.pass && !rec.pass;
    }
  }
  c.unpaired += int64_t(baseline.records.size() - matched);
  auto rates = [](paired_stats& s) {
    if (s.n == 0) return;
    s.baseline_rate = double(s.both_passed + s.broken) / double(s.n);
    s.candidate_rate = double(s.both_passed + s.fixed) / double(s.n);
  };
  rates(c.overall);
  for (auto& [d, s] : c.by_domain) rates(s);
  return c;
}

namespace {

nlohmann::ordered_json paired_json(const paired_stats& s) {
  return {{"n", s.n},
          {"fixed", s.fixed},
          {"broken", s.broken},
          {"both_passed", s.both_passed},
          {"both_failed", s.both_failed},
          {"baseline_rate", s.baseline_rate},
          {"candidate_rate", s.candidate_rate},
          {"net_improvement_rate", s.net_improvement_rate()},
          {"nir_ci95", s.nir_ci95()},
          {"sign_test_p", s.sign_test_p()}};
}

}  // namespace

nlohmann::ordered_json to_json(const comparison& c) {
  nlohmann::ordered_json j;
  j["baseline_pass_rate"] = c.baseline_pass_rate;
  j["candidate_pass_rate"] = c.candidate_pass_rate;
  j["pass_rate_delta"] = c.pass_rate_delta();
  j["unpaired"] = c.unpaired;
  j["domains"] = nlohmann::ordered_json::object();
  for (const auto& [d, s] : c.by_domain) j["domains"][to_string(d)] = paired_json(s);
  j["overall"] = paired_json(c.overall);
  return j;
}

bool taught(domain d, const std::string& template_name) {
  if (template_name == "user-new") return false;
  if (template_name == "user-taught") return true;
  for (const auto& info : templates(d))
    if (info.name == template_name) return !info.test_only;
  return true;  // train-only templates (composed items, stories) and hand-made ones
}

standardized_comparison compare_standardized(const eval_report& target, const eval_report& reference) {
  // Strata keyed (domain, taught first): std::map orders false before true, so the key holds !taught.
  std::map<std::pair<domain, bool>, standardized_comparison::stratum> strata;
  auto add = [&](const task_record& rec, bool is_target) {
    const bool t = taught(rec.domain, rec.template_name);
    auto& s = strata[{rec.domain, !t}];
    s.domain = rec.domain;
    s.taught = t;
    pass_stats& p = is_target ? s.target : s.reference;
    ++p.n;
    p.passed += rec.pass && !rec.error;
    p.errors += rec.error;
  };
  for (const auto& rec : target.records) add(rec, true);
  for (const auto& rec : reference.records) add(rec, false);

  standardized_comparison c;
  std::set<domain> target_domains;
  int64_t covered_passed = 0;
  for (const auto& [key, s] : strata) {
    c.strata.push_back(s);
    if (s.target.judged() == 0) continue;
    target_domains.insert(s.domain);
    if (s.reference.judged() == 0) {
      c.uncovered += s.target.judged();
    } else {
      c.n += s.target.judged();
      covered_passed += s.target.passed;
    }
  }
  if (c.n > 0) {
    c.target_rate = double(covered_passed) / double(c.n);
    double var = 0;
    for (const auto& s : c.strata) {
      if (s.target.judged() == 0 || s.reference.judged() == 0) continue;
      const double w = double(s.target.judged()) / double(c.n);
      const double q = s.target.pass_rate(), p = s.reference.pass_rate();
      c.standardized_rate += w * p;
      var += w * w * (q * (1 - q) / double(s.target.judged()) + p * (1 - p) / double(s.reference.judged()));
    }
    c.gap_ci95 = 1.96 * std::sqrt(var);
  }
  pass_stats crude;
  for (const auto& s : c.strata) {
    if (!target_domains.count(s.domain)) continue;
    crude.n += s.reference.n;
    crude.passed += s.reference.passed;
    crude.errors += s.reference.errors;
  }
  c.crude_reference_rate = crude.pass_rate();
  return c;
}

nlohmann::ordered_json to_json(const standardized_comparison& c) {
  nlohmann::ordered_json j;
  j["n"] = c.n;
  j["target_rate"] = c.target_rate;
  j["standardized_rate"] = c.standardized_rate;
  j["gap"] = c.gap();
  j["gap_ci95"] = c.gap_ci95;
  j["crude_reference_rate"] = c.crude_reference_rate;
  j["uncovered"] = c.uncovered;
  j["strata"] = nlohmann::ordered_json::array();
  for (const auto& s : c.strata)
    j["strata"].push_back({{"domain", to_string(s.domain)},
                           {"taught", s.taught},
                           {"target", stats_json(s.target)},
                           {"reference", stats_json(s.reference)}});
  return j;
}

}  // namespace moxi::eval
