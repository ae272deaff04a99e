// evaluate() and the report comparison. A scripted model (a fake causal_lm that replies a chosen text for
// each prompt) gives exactly the pass counts the checkers' verdicts imply, through the real chat template,
// tokenizer, greedy loop and sandboxed checkers; on a random tiny checkpoint the replies equal an
// independent greedy decoder (full recompute, no cache reuse) with one worker and with several; the net
// improvement arithmetic is checked on constructed reports against docs/eval.md
// §4.3's formulas worked by hand.
#include "moxi/eval/evaluate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <set>

#include "common/temp-dir.h"
#include "moxi/base/error.h"
#include "moxi/eval/task-generator.h"
#include "moxi/formats/byte-tokenizer.h"
#include "moxi/formats/model-config.h"
#include "moxi/model/config.h"
#include "moxi/model/init.h"
#include "moxi/model/model.h"
#include "moxi/runtime/local-model.h"

namespace {

using namespace moxi;
using namespace moxi::eval;
using moxi::formats::tokenizer;

// moxi init's vocabulary layout for a 512-id config: pad/bos/eos at 0..2, bytes, chat specials on top.
tokenizer chat_tokenizer() {
  std::map<int64_t, std::string> specials = {{0, "<|pad|>"}, {1, "<|bos|>"}, {2, "<|eos|>"}};
  for (int64_t i = 0; i < 4; ++i) specials[508 + i] = formats::kMoxiTinyChatSpecials[i];
  return tokenizer::from_hf_json(formats::byte_level_tokenizer_json(512, specials), "test-tokenizer");
}

formats::chat_template tiny_template() {
  const nlohmann::ordered_json config = {{"bos_token", "<|bos|>"},
                                         {"eos_token", "<|eos|>"},
                                         {"chat_template", std::string(formats::moxi_tiny_chat_template())}};
  return formats::chat_template::from_tokenizer_config_json(config, "moxi-tiny");
}

// Replies with a scripted text for each prompt, then <|end|>: returns one-hot logits for the next scripted
// token and checks that the loop feeds back exactly the token it was steered to.
class scripted_lm final : public runtime::causal_lm {
 public:
  using script_fn = std::function<std::string(const std::string& prompt_text)>;
  scripted_lm(const tokenizer& tok, script_fn script) : tok_(tok), script_(std::move(script)) {}
  int64_t vocab_size() const override { return 512; }
  std::vector<float> append(std::span<const token_id> tokens) override {
    if (!started_) {
      started_ = true;
      const std::string prompt = tok_.decode(tokens);
      reply_ = tok_.encode(script_(prompt) + "<|end|>");
    } else {
      EXPECT_EQ(tokens.size(), 1u);
      EXPECT_EQ(tokens[0], reply_.at(pos_)) << "the loop fed back a token it was not steered to";
      ++pos_;
    }
    std::vector<float> logits(512, -10.0f);
    logits[size_t(pos_ < reply_.size() ? reply_[pos_] : 2)] = 10.0f;
    return logits;
  }

 private:
  const tokenizer& tok_;
  script_fn script_;
  bool started_ = false;
  std::vector<token_id> reply_;
  size_t pos_ = 0;
};

std::string fenced(const char* lang, const std::string& body) {
  return std::string("Here you go:\n```") + lang + "\n" + body + "\n```";
}

// The reference for even tasks, a reply that must fail for odd ones.
std::string scripted_reply(const task& t, size_t i) {
  const bool right = i % 2 == 0;
  switch (t.domain) {
    case domain::math:
      return right ? "The answer is " + t.reference + "." : "I am not sure.";
    case domain::terminal:
      return fenced("sh", right ? t.reference : "ls /no-such-directory");
    case domain::code:
      return fenced("python", right ? t.reference : t.program);  // the program with its bug
    case domain::chat:
      return right ? t.reference : "ls -la";
    case domain::vision:
      return right ? t.reference : "maybe";
  }
  return "";
}

// The conversation a task is, restated: its history's turns, then its prompt as the final user turn.
nlohmann::ordered_json conversation(const task& t) {
  auto turns = nlohmann::ordered_json::array();
  for (const auto& h : t.history) turns.push_back({{"role", h.role}, {"content", h.content}});
  turns.push_back({{"role", "user"}, {"content", t.prompt}});
  return turns;
}

TEST(Evaluate, ScriptedRepliesGiveExactlyTheCheckersPassCounts) {
  std::vector<task> tasks;
  for (auto d : {domain::math, domain::terminal, domain::code}) {
    const size_t n = d == domain::code ? 4 : 6;
    for (auto& t : generate_tasks(d, split::test, n, 11)) tasks.push_back(t);
  }
  // A follow-up (index 16, so it gets its reference): the earlier turns come before the prompt, and only
  // the final reply is checked.
  task followup = generate_tasks(domain::terminal, split::test, 8, 11).back();
  followup.id = "terminal-with-history";
  followup.history = {{"user", "What is in this directory?"}, {"assistant", "ls"}};
  tasks.push_back(followup);
  // A task whose reference command fails cannot judge anything: an error, not a fail.
  task broken = generate_tasks(domain::terminal, split::test, 7, 11).back();
  broken.id = "terminal-broken-reference";
  broken.reference = "exit 3";
  tasks.push_back(broken);

  // The template trims the content, so prompts are found by their trimmed text.
  auto trim = [](const std::string& s) {
    const auto b = s.find_first_not_of(" \n"), e = s.find_last_not_of(" \n");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  };
  std::map<std::string, std::pair<const task*, std::string>> by_prompt;  // trimmed prompt -> (task, reply)
  for (size_t i = 0; i < tasks.size(); ++i)
    by_prompt[trim(tasks[i].prompt)] = {&tasks[i], scripted_reply(tasks[i], i)};

  const tokenizer tok = chat_tokenizer();
  const formats::chat_template tpl = tiny_template();
  std::mutex mu;
  std::vector<std::string> prompts_seen;
  eval_model m;
  m.name = "scripted";
  m.tok = &tok;
  m.chat = &tpl;
  m.stop_tokens = {2, *tok.find("<|end|>")};
  m.new_sequence = [&] {
    return std::make_unique<scripted_lm>(tok, [&](const std::string& prompt) {
      {
        std::lock_guard<std::mutex> lock(mu);
        prompts_seen.push_back(prompt);
      }
      const std::string* best = nullptr;  // the longest task prompt in the text (one may contain another)
      for (const auto& [p, tr] : by_prompt)
        if (prompt.find(p) != std::string::npos && (!best || p.size() > best->size())) best = &p;
      if (!best) ADD_FAILURE() << "no task prompt in " << prompt;
      return best ? by_prompt.at(*best).second : std::string();
    });
  };
  evaluate_options o;
  o.workers = 3;
  o.progress = false;
  o.max_tokens = 4096;
  const eval_report r = evaluate(m, tasks, o);

  // Every prompt the model saw is the template's rendering of the task's conversation.
  std::set<std::string> expected_prompts;
  for (const auto& t : tasks) {
    formats::render_options ro;
    ro.add_generation_prompt = true;
    expected_prompts.insert(tpl.render(conversation(t), ro));
  }
  formats::render_options gen;
  gen.add_generation_prompt = true;
  EXPECT_NE(tpl.render(conversation(followup), gen).find("What is in this directory?"), std::string::npos);
  EXPECT_EQ(std::set<std::string>(prompts_seen.begin(), prompts_seen.end()), expected_prompts);
  EXPECT_EQ(prompts_seen.size(), tasks.size());

  ASSERT_EQ(r.records.size(), tasks.size());
  checker independent;  // the checkers' own verdict on each scripted reply
  for (size_t i = 0; i < tasks.size(); ++i) {
    const auto& rec = r.records[i];
    EXPECT_EQ(rec.id, tasks[i].id);
    EXPECT_EQ(rec.reply, by_prompt.at(trim(tasks[i].prompt)).second)
        << "the reply ends at <|end|>, without it";
    EXPECT_EQ(rec.finish_reason, "stop");
    EXPECT_EQ(rec.reply_tokens, int64_t(tok.encode(rec.reply + "<|end|>").size()));
    const auto want = independent.check(tasks[i], rec.reply);
    EXPECT_EQ(rec.pass, want.pass) << rec.id << ": " << rec.detail;
    EXPECT_EQ(rec.error, want.error) << rec.id << ": " << rec.detail;
  }
  // Even tasks got their reference, odd ones a wrong reply; the broken-reference task is an error.
  EXPECT_EQ(r.by_domain.at(domain::math).n, 6);
  EXPECT_EQ(r.by_domain.at(domain::math).passed, 3);
  EXPECT_EQ(r.by_domain.at(domain::terminal).n, 8);
  EXPECT_EQ(r.by_domain.at(domain::terminal).passed, 4);
  EXPECT_EQ(r.by_domain.at(domain::terminal).errors, 1);
  EXPECT_DOUBLE_EQ(r.by_domain.at(domain::terminal).pass_rate(), 4.0 / 7.0);
  EXPECT_EQ(r.by_domain.at(domain::code).n, 4);
  EXPECT_EQ(r.by_domain.at(domain::code).passed, 2);
  EXPECT_EQ(r.overall.n, 18);
  EXPECT_EQ(r.overall.passed, 9);
  EXPECT_EQ(r.overall.errors, 1);
  EXPECT_DOUBLE_EQ(r.overall.pass_rate(), 9.0 / 17.0);

  // Per template: the even tasks of each template passed (the broken-reference task is its error).
  std::map<std::string, pass_stats> want_templates;
  for (size_t i = 0; i < tasks.size(); ++i) {
    auto& s = want_templates[std::string(to_string(tasks[i].domain)) + "/" + tasks[i].template_name];
    ++s.n;
    s.errors += tasks[i].id == broken.id;
    s.passed += i % 2 == 0 && tasks[i].id != broken.id;
  }
  ASSERT_EQ(r.by_template.size(), want_templates.size());
  for (const auto& [name, s] : want_templates) {
    EXPECT_EQ(r.by_template.at(name).n, s.n) << name;
    EXPECT_EQ(r.by_template.at(name).passed, s.passed) << name;
    EXPECT_EQ(r.by_template.at(name).errors, s.errors) << name;
  }

  // The JSON form reads back to the same report.
  const eval_report back = report_from_json(nlohmann::json::parse(to_json(r).dump()), "report");
  ASSERT_EQ(back.records.size(), r.records.size());
  for (size_t i = 0; i < r.records.size(); ++i) {
    EXPECT_EQ(back.records[i].reply, r.records[i].reply);
    EXPECT_EQ(back.records[i].pass, r.records[i].pass);
    EXPECT_EQ(back.records[i].error, r.records[i].error);
  }
  EXPECT_EQ(back.overall.passed, 9);
  EXPECT_EQ(back.by_domain.at(domain::terminal).errors, 1);
}

// Greedy decoding written independently of generate() and model_lm: every step recomputes the whole
// sequence on a fresh cache and takes the argmax of the last logits over the decodable ids.
std::string reference_greedy(const model::model& m, const tokenizer& tok, std::vector<token_id> seq,
                             const std::vector<token_id>& stops, int64_t max_tokens) {
  std::vector<token_id> out;
  const int64_t V = m.config().vocab_size;
  for (int64_t step = 0; step < max_tokens; ++step) {
    auto cache = m.new_cache();
    const auto logits = m.forward(seq, *cache);
    const float* last = logits.data() + (int64_t(seq.size()) - 1) * V;
    token_id best = -1;
    for (int64_t id = 0; id < V; ++id) {
      if (id >= tok.vocab_size() || tok.token_bytes(token_id(id)).empty()) continue;
      if (best < 0 || last[id] > last[best]) best = token_id(id);
    }
    if (std::find(stops.begin(), stops.end(), best) != stops.end()) break;
    out.push_back(best);
    seq.push_back(best);
  }
  return runtime::to_valid_utf8(tok.decode(out, /*skip_special=*/true));
}

TEST(Evaluate, RandomCheckpointRepliesEqualAnIndependentGreedyDecoderWithAnyWorkerCount) {
  moxi::testing::temp_dir dir("moxi-eval");
  const auto config = model::load_model_config(std::string(MOXI_SOURCE_DIR) + "/configs/tiny-seed.json");
  model::init_options io;
  io.seed = 5;
  io.show_progress = false;
  model::init_checkpoint(config, dir / "m", io);

  std::vector<task> tasks = generate_tasks(domain::math, split::test, 3, 2);
  for (auto& t : generate_tasks(domain::terminal, split::test, 2, 2)) tasks.push_back(t);
  evaluate_options o;
  o.max_tokens = 6;
  o.progress = false;
  o.workers = 1;
  const eval_report one = evaluate(dir / "m", tasks, o);
  const runtime::local_model lm = runtime::local_model::load(dir / "m");
  o.workers = 3;
  const eval_report three = evaluate(lm, tasks, o);

  ASSERT_TRUE(lm.chat.has_value()) << "moxi init writes the moxi-tiny chat template";
  for (size_t i = 0; i < tasks.size(); ++i) {
    formats::render_options ro;
    ro.add_generation_prompt = true;
    const auto prompt = lm.tok.encode(lm.chat->render(conversation(tasks[i]), ro));
    const std::string want = reference_greedy(lm.model, lm.tok, prompt, lm.stop_tokens, o.max_tokens);
    EXPECT_EQ(one.records[i].reply, want) << tasks[i].id;
    EXPECT_EQ(three.records[i].reply, want) << tasks[i].id;
    EXPECT_EQ(one.records[i].prompt_tokens, int64_t(prompt.size()));
    EXPECT_EQ(one.records[i].pass, three.records[i].pass);
  }
  EXPECT_EQ(one.overall.n, 5);
}

// Speculative evaluation of the bundled model (a trained MTP head): the same greedy replies and verdicts as
// plain decoding, and draft counts that add up per task, per domain and through the JSON report.
TEST(Evaluate, SpeculativeRepliesEqualPlainOnesAndCountTheirDrafts) {
  const runtime::local_model lm = runtime::local_model::load(std::string(MOXI_SOURCE_DIR) + "/models/moxi-small");
  std::vector<task> tasks;
  for (domain d : {domain::math, domain::terminal, domain::code, domain::chat})
    for (auto& t : generate_tasks(d, split::train, 2, 7)) tasks.push_back(t);
  evaluate_options o;
  o.max_tokens = 48;
  o.progress = false;
  const eval_report plain = evaluate(lm, tasks, o);
  o.draft_tokens = 2;
  const eval_report spec = evaluate(lm, tasks, o);
  ASSERT_EQ(spec.records.size(), tasks.size());
  int64_t drafted = 0, accepted = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const auto &p = plain.records[i], &r = spec.records[i];
    EXPECT_EQ(r.reply, p.reply) << tasks[i].id;
    EXPECT_EQ(r.pass, p.pass) << tasks[i].id;
    EXPECT_EQ(r.reply_tokens, p.reply_tokens) << tasks[i].id;
    EXPECT_EQ(p.drafted + p.accepted + p.verify_steps, 0) << "no drafts without --draft-tokens";
    EXPECT_LE(r.accepted, r.drafted);
    EXPECT_LE(r.drafted, o.draft_tokens * r.verify_steps);
    // The first token comes from the prompt's forward; each verify step gives one token plus its kept drafts
    // (the last step may stop inside them); with one token of the budget left there is no room for a draft,
    // so a reply that reaches max_tokens may end with one plain step (runtime::generate).
    const int64_t plain_steps = r.reply_tokens == o.max_tokens ? 1 : 0;
    EXPECT_LE(r.reply_tokens, 1 + r.verify_steps + r.accepted + plain_steps) << tasks[i].id;
    if (r.reply_tokens > 1) {
      EXPECT_GT(r.verify_steps, 0) << tasks[i].id;
    }
    drafted += r.drafted;
    accepted += r.accepted;
  }
  EXPECT_EQ(spec.overall.drafted, drafted);
  EXPECT_EQ(spec.overall.accepted, accepted);
  int64_t by_domain = 0;
  for (const auto& [d, st] : spec.by_domain) by_domain += st.accepted;
  EXPECT_EQ(by_domain, accepted);
  EXPECT_GT(spec.overall.acceptance(), 0.2) << "a trained MTP head's drafts are often kept";
  const eval_report back = report_from_json(nlohmann::json::parse(to_json(spec, true).dump()), "report");
  EXPECT_EQ(back.draft_tokens, 2);
  EXPECT_EQ(back.overall.verify_steps, spec.overall.verify_steps);
  EXPECT_EQ(back.by_domain.at(domain::math).accepted, spec.by_domain.at(domain::math).accepted);
}

task_record rec(const std::string& id, domain d, bool pass, bool error = false) {
  task_record r;
  r.id = id;
  r.domain = d;
  r.pass = pass;
  r.error = error;
  return r;
}

eval_report report(std::vector<task_record> records) {
  eval_report r;
  r.model = "m";
  r.records = std::move(records);
  summarize(r);
  return r;
}

TEST(Compare, NetImprovementRateIsFixedMinusBrokenOverPairedTasks) {
  // 10 paired math tasks: 3 fixed, 1 broken, 4 both passed, 2 both failed; plus a task with an error in the
  // candidate and one only the baseline has (both unpaired).
  std::vector<task_record> b, c;
  auto add = [&](const std::string& id, bool pb, bool pc) {
    b.push_back(rec(id, domain::math, pb));
    c.push_back(rec(id, domain::math, pc));
  };
  for (int i = 0; i < 3; ++i) add("fixed" + std::to_string(i), false, true);
  add("broken", true, false);
  for (int i = 0; i < 4; ++i) add("pass" + std::to_string(i), true, true);
  for (int i = 0; i < 2; ++i) add("fail" + std::to_string(i), false, false);
  b.push_back(rec("err", domain::math, true));
  c.push_back(rec("err", domain::math, false, /*error=*/true));
  b.push_back(rec("only-baseline", domain::math, true));
  // Terminal: one paired task, unchanged.
  b.push_back(rec("t", domain::terminal, false));
  c.push_back(rec("t", domain::terminal, false));

  const comparison cmp = compare(report(b), report(c));
  const auto& s = cmp.by_domain.at(domain::math);
  EXPECT_EQ(s.n, 10);
  EXPECT_EQ(s.fixed, 3);
  EXPECT_EQ(s.broken, 1);
  EXPECT_EQ(s.both_passed, 4);
  EXPECT_EQ(s.both_failed, 2);
  EXPECT_DOUBLE_EQ(s.net_improvement_rate(), 0.2);
  EXPECT_DOUBLE_EQ(s.baseline_rate, 0.5);
  EXPECT_DOUBLE_EQ(s.candidate_rate, 0.7);
  // 1.96 * sqrt((0.3 + 0.1 - 0.2^2) / 10)
  EXPECT_NEAR(s.nir_ci95(), 1.96 * std::sqrt(0.036), 1e-12);
  // 4 changed tasks, 1 against: P(X <= 1 | Bin(4, 1/2)) = 5/16, two-sided 10/16.
  EXPECT_NEAR(s.sign_test_p(), 10.0 / 16.0, 1e-12);
  EXPECT_EQ(cmp.overall.n, 11);
  EXPECT_NEAR(cmp.overall.net_improvement_rate(), 2.0 / 11.0, 1e-12);
  EXPECT_EQ(cmp.unpaired, 2);
  // Each report's own pass rate: baseline 4+1+1+1 = 7 of 13 judged; candidate 7 of 11 judged (err excluded).
  EXPECT_NEAR(cmp.baseline_pass_rate, 7.0 / 13.0, 1e-12);
  EXPECT_NEAR(cmp.candidate_pass_rate, 7.0 / 11.0, 1e-12);
  EXPECT_NEAR(cmp.pass_rate_delta(), 7.0 / 11.0 - 7.0 / 13.0, 1e-12);
}

TEST(Compare, SignTestOnManyChangesAndRefusesDifferentTasks) {
  paired_stats s;
  s.n = 2000;
  s.fixed = 1000;
  s.broken = 1000;
  EXPECT_NEAR(s.sign_test_p(), 1.0, 1e-9);  // capped at 1
  s.fixed = 0;
  s.broken = 20;
  EXPECT_NEAR(s.sign_test_p(), 2.0 / std::pow(2.0, 20), 1e-18);
  s.fixed = s.broken = 0;
  EXPECT_EQ(s.sign_test_p(), 1.0);

  const eval_report a = report({rec("x", domain::math, true)});
  const eval_report b = report({rec("x", domain::code, true)});
  try {
    compare(a, b);
    FAIL() << "tasks with one id and two domains are not the same tasks";
  } catch (const moxi::error& e) {
    EXPECT_NE(std::string(e.what()).find("x is math in the baseline"), std::string::npos) << e.what();
  }
}

task_record rec_of(const std::string& id, domain d, const std::string& tmpl, bool pass, bool error = false) {
  task_record r = rec(id, d, pass, error);
  r.template_name = tmpl;
  return r;
}

TEST(CompareStandardized, WeighsTheReferenceByTheTargetsStrata) {
  // Strata follow the generator's test-only marks and the hand-written sets' labels.
  EXPECT_TRUE(taught(domain::math, "add"));
  EXPECT_FALSE(taught(domain::math, "ages"));
  EXPECT_FALSE(taught(domain::terminal, "largest_file"));
  EXPECT_FALSE(taught(domain::code, "user-new"));
  EXPECT_TRUE(taught(domain::code, "user-taught"));
  EXPECT_TRUE(taught(domain::code, "composed"));

  std::vector<task_record> t, r;
  auto add = [](std::vector<task_record>& v, const std::string& id, domain d, const std::string& tmpl, int n,
                int passed) {
    for (int i = 0; i < n; ++i) v.push_back(rec_of(id + std::to_string(i), d, tmpl, i < passed));
  };
  add(t, "tm", domain::math, "user-taught", 4, 1);
  add(t, "tt", domain::terminal, "user-taught", 6, 3);
  add(t, "tn", domain::terminal, "user-new", 2, 0);
  add(t, "tc", domain::code, "user-new", 2, 1);  // no code in the reference: uncovered
  t.push_back(rec_of("terr", domain::terminal, "user-taught", false, /*error=*/true));
  add(r, "ra", domain::math, "add", 10, 6);
  add(r, "rg", domain::math, "ages", 5, 0);
  add(r, "rc", domain::terminal, "count_lines", 8, 4);
  add(r, "rl", domain::terminal, "largest_file", 4, 1);
  add(r, "rh", domain::chat, "greeting", 3, 3);  // not among the target's domains

  const auto c = compare_standardized(report(t), report(r));
  EXPECT_EQ(c.n, 12);
  EXPECT_EQ(c.uncovered, 2);
  EXPECT_NEAR(c.target_rate, 4.0 / 12.0, 1e-15);
  // Weights 4, 6, 2 of 12 on the reference's rates 6/10, 4/8, 1/4.
  EXPECT_NEAR(c.standardized_rate, (4 * 0.6 + 6 * 0.5 + 2 * 0.25) / 12.0, 1e-15);
  EXPECT_NEAR(c.gap(), (4.0 - 5.9) / 12.0, 1e-15);
  const double var = (4.0 / 12) * (4.0 / 12) * (0.25 * 0.75 / 4 + 0.6 * 0.4 / 10) +
                     (6.0 / 12) * (6.0 / 12) * (0.5 * 0.5 / 6 + 0.5 * 0.5 / 8) +
                     (2.0 / 12) * (2.0 / 12) * (0.0 + 0.25 * 0.75 / 4);
  EXPECT_NEAR(c.gap_ci95, 1.96 * std::sqrt(var), 1e-15);
  EXPECT_NEAR(c.crude_reference_rate, 11.0 / 27.0, 1e-15);  // math and terminal, chat left out
  ASSERT_EQ(c.strata.size(), 6u);  // math taught / new, terminal taught / new, code new, chat taught
  EXPECT_EQ(c.strata[0].domain, domain::math);
  EXPECT_TRUE(c.strata[0].taught);
  EXPECT_FALSE(c.strata[1].taught);
  const auto j = to_json(c);
  EXPECT_EQ(j["n"], 12);
  EXPECT_EQ(j["strata"].size(), 6u);
}

TEST(Report, RecordsFileReadsAsItsReport) {
  moxi::testing::temp_dir dir("moxi-eval");
  const eval_report r = report({rec_of("a", domain::math, "add", true), rec_of("b", domain::code, "half", false),
                                rec_of("c", domain::code, "half", false, /*error=*/true)});
  std::string lines;
  for (const auto& x : r.records) lines += to_json(x).dump() + "\n";
  std::ofstream(dir / "records.jsonl") << lines << "\n";
  std::ofstream(dir / "report.json") << to_json(r).dump(2);
  for (const char* f : {"records.jsonl", "report.json"}) {
    const eval_report back = read_report_or_records(dir / f);
    EXPECT_EQ(back.records.size(), 3u) << f;
    EXPECT_EQ(back.overall.passed, 1) << f;
    EXPECT_EQ(back.overall.errors, 1) << f;
    EXPECT_EQ(back.by_template.at("code/half").n, 2) << f;
  }
  std::ofstream(dir / "bad.jsonl") << lines << "{\"id\": \"d\"}\n";
  try {
    read_report_or_records(dir / "bad.jsonl");
    FAIL() << "accepted a record without its fields";
  } catch (const moxi::error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.jsonl:4: missing field \"domain\""), std::string::npos) << e.what();
  }
}

TEST(Report, BadReportsNameTheField) {
  eval_report r = report({rec("a", domain::math, true), rec("b", domain::code, false)});
  auto j = nlohmann::json::parse(to_json(r).dump());
  auto expect_error = [](const nlohmann::json& bad, const std::string& what) {
    try {
      report_from_json(bad, "r.json");
      FAIL() << "accepted a report without " << what;
    } catch (const moxi::error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  auto no_reply = j;
  no_reply["records"][1].erase("reply");
  expect_error(no_reply, "r.json: records[1]: missing field \"reply\"");
  auto wrong = j;
  wrong["overall"]["passed"] = 2;
  expect_error(wrong, "\"overall\" does not match the records");
  auto no_records = j;
  no_records.erase("records");
  expect_error(no_records, "records");
}

TEST(Evaluate, TaskFileErrorsNameLineAndField) {
  moxi::testing::temp_dir dir("moxi-eval");
  const auto tasks = generate_tasks(domain::math, split::test, 2, 3);
  auto write = [&](const std::string& text) {
    std::ofstream(dir / "t.jsonl") << text;
    return dir / "t.jsonl";
  };
  auto good = to_json(tasks[0]).dump();
  auto bad = to_json(tasks[1]);
  bad.erase("prompt");
  try {
    read_jsonl(write(good + "\n\n" + bad.dump() + "\n"));
    FAIL();
  } catch (const moxi::error& e) {
    EXPECT_NE(std::string(e.what()).find("t.jsonl:3: field 'prompt'"), std::string::npos) << e.what();
  }
  try {
    read_jsonl(write(good + "\n{\"id\": \n"));
    FAIL();
  } catch (const moxi::error& e) {
    EXPECT_NE(std::string(e.what()).find("t.jsonl:2: invalid JSON"), std::string::npos) << e.what();
  }
  // Duplicate ids would make the records ambiguous.
  const tokenizer tok = chat_tokenizer();
  const formats::chat_template tpl = tiny_template();
  eval_model m;
  m.tok = &tok;
  m.chat = &tpl;
  m.new_sequence = [&] { return std::make_unique<scripted_lm>(tok, [](const std::string&) { return "1"; }); };
  evaluate_options o;
  o.progress = false;
  try {
    evaluate(m, {tasks[0], tasks[1], tasks[0]}, o);
    FAIL();
  } catch (const moxi::error& e) {
    EXPECT_NE(std::string(e.what()).find("appears twice (tasks 1 and 3)"), std::string::npos) << e.what();
  }
}

}  // namespace
