// Agentic episodes (episode.h, docs/agent-eval.md).
#include "moxi/eval/episode.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "moxi/base/error.h"

namespace moxi::eval {
namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;
using json = nlohmann::json;

namespace {

double since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

class oracle_session final : public agent_session {
 public:
  explicit oracle_session(std::vector<std::string> steps) : steps_(std::move(steps)) {}
  action next(const observation*) override {
    action a;
    if (next_ >= steps_.size()) {
      a.finish = true;
      return a;
    }
    a.command = steps_[next_++];
    return a;
  }

 private:
  std::vector<std::string> steps_;
  size_t next_ = 0;
};

class oracle_agent final : public agent {
 public:
  std::string name() const override { return "oracle"; }
  std::unique_ptr<agent_session> start(const agent_task& t) override {
    if (t.solution.empty()) throw error(t.dir + ": no solution.sh or solution.yaml for the oracle");
    return std::make_unique<oracle_session>(t.solution);
  }
};

class null_session final : public agent_session {
 public:
  action next(const observation*) override {
    action a;
    a.finish = true;
    return a;
  }
};

class null_agent final : public agent {
 public:
  std::string name() const override { return "null"; }
  std::unique_ptr<agent_session> start(const agent_task&) override { return std::make_unique<null_session>(); }
};

// One stream as the agent sees it: at most `keep` bytes, and a marker saying how much was cut.
std::string shown(const sandbox::captured_stream& s, uint64_t keep, bool& truncated) {
  std::string out = s.data.substr(0, keep);
  if (s.bytes > out.size()) {
    truncated = true;
    const uint64_t cut = s.bytes - out.size();
    if (!out.empty() && out.back() != '\n') out += '\n';
    out += "[... " + std::to_string(cut) + " more bytes not shown]\n";
  }
  return out;
}

sandbox::run_spec base_spec(const agent_task& t, const std::string& ws, const episode_limits& l) {
  sandbox::run_spec spec;
  spec.workspace = ws;
  spec.policy.workspace_mount = t.workdir;
  spec.env = t.env;
  spec.limits = l.sandbox;
  spec.limits.output_bytes = l.output_bytes;
  spec.id = t.id;
  return spec;
}

// Appends JSON lines to the trajectory file (nothing when there is none).
class trajectory_log {
 public:
  explicit trajectory_log(const std::string& path) {
    if (!path.empty()) out_.open(path, std::ios::app);
    if (!path.empty() && !out_) throw error(path + ": cannot write the trajectory");
  }
  void write(const json& j) {
    if (out_.is_open()) out_ << j.dump(-1, ' ', false, json::error_handler_t::replace) << "\n" << std::flush;
  }

 private:
  std::ofstream out_;
};

// Removes the episode directory on every way out, unless asked to keep it.
struct dir_guard {
  fs::path dir;
  bool keep;
  ~dir_guard() {
    std::error_code ec;
    if (!keep) fs::remove_all(dir, ec);
  }
};

}  // namespace

std::unique_ptr<agent> make_oracle_agent() {
  return std::make_unique<oracle_agent>();
}
std::unique_ptr<agent> make_null_agent() {
  return std::make_unique<null_agent>();
}

std::pair<int, int> pytest_counts(const std::string& output) {
  // pytest's final line is the whole count: "=== 1 failed, 2 passed, 1 error in 0.12s ===".
  static const std::regex count(R"((\d+) (passed|failed|errors?)\b)");
  std::string last;
  int lines_passed = 0, lines_total = 0;  // -rA summary lines, when the final line is missing (a killed run)
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (line.find(" in ") != std::string::npos && std::regex_search(line, count)) last = line;
    if (line.rfind("PASSED ", 0) == 0) ++lines_passed, ++lines_total;
    if (line.rfind("FAILED ", 0) == 0 || line.rfind("ERROR ", 0) == 0) ++lines_total;
  }
  if (last.empty()) return {lines_passed, lines_total};
  int passed = 0, total = 0;
  for (std::sregex_iterator it(last.begin(), last.end(), count), end; it != end; ++it) {
    const int n = std::stoi((*it)[1]);
    total += n;
    if ((*it)[2] == "passed") passed += n;
  }
  return {passed, total};
}

episode_result run_episode(const agent_task& t, agent& a, const episode_options& opt) {
  const auto t0 = clock_type::now();
  const episode_limits& lim = opt.limits;
  episode_result r;
  r.id = t.id;
  r.category = t.category;
  r.difficulty = t.difficulty;
  trajectory_log log(opt.trajectory);
  const fs::path ep = fs::path(opt.work_dir) / t.id;
  const fs::path ws = ep / "workspace", tests = ep / "tests";
  dir_guard cleanup{ep, opt.keep_workspace};
  const double budget = lim.episode_timeout_s > 0 ? lim.episode_timeout_s : t.max_agent_timeout_s;
  log.write({{"event", "start"},
             {"task", t.id},
             {"agent", a.name()},
             {"instruction", t.instruction},
             {"workdir", t.workdir},
             {"max_turns", lim.max_turns},
             {"episode_timeout_s", budget},
             {"command_timeout_s", lim.command_timeout_s}});
  auto fail = [&](const std::string& why) {
    r.stop = "error";
    r.error = why;
    r.seconds = since(t0);
    log.write({{"event", "result"}, {"result", to_json(r)}});
    return r;
  };
  std::unique_ptr<agent_session> session;
  try {
    fs::remove_all(ep);  // a workspace left by a killed run
    fs::create_directories(ws);
    fs::create_directories(tests);
    stage_workspace(t, ws.string());
    stage_tests(t, tests.string());
    session = a.start(t);
  } catch (const std::exception& e) {
    return fail(std::string("setup: ") + e.what());
  }

  observation last;
  bool have_last = false;
  uint64_t output_total = 0;
  for (;;) {
    if (output_total > lim.episode_output_bytes) {
      r.stop = "output";
      break;
    }
    const double left = budget - since(t0);
    if (left <= 0) {
      r.stop = "timeout";
      break;
    }
    if (r.turns >= lim.max_turns) {
      r.stop = "max_turns";
      break;
    }
    action act;
    try {
      act = session->next(have_last ? &last : nullptr);
    } catch (const std::exception& e) {
      return fail(std::string("agent: ") + e.what());
    }
    r.prompt_tokens += act.prompt_tokens;
    r.reply_tokens += act.reply_tokens;
    json ev = {{"event", "action"},          {"turn", r.turns + 1},
               {"finish", act.finish},       {"command", act.command},
               {"text", act.text},           {"prompt_tokens", act.prompt_tokens},
               {"reply_tokens", act.reply_tokens}, {"t", since(t0)}};
    if (!act.context_token_ids.empty()) ev["context_token_ids"] = act.context_token_ids;
    if (act.context_reset) ev["context_reset"] = true;
    if (!act.token_ids.empty()) ev["token_ids"] = act.token_ids;
    if (!act.logprobs.empty()) ev["logprobs"] = act.logprobs;
    log.write(ev);
    if (act.finish) {
      r.stop = "finished";
      break;
    }
    auto spec = base_spec(t, ws.string(), lim);
    spec.argv = {"bash", "-c", act.command};
    spec.limits.timeout_s = std::min(lim.command_timeout_s, std::max(left, 0.1));
    sandbox::run_result rr;
    try {
      rr = sandbox::run(spec);
    } catch (const std::exception& e) {
      return fail(std::string("sandbox: ") + e.what());
    }
    if (!rr.started) return fail("sandbox: the command did not start: " + rr.error);
    ++r.turns;
    output_total += rr.out.bytes + rr.err.bytes;
    last = observation{};
    last.exit_code = rr.exit_code;
    last.seconds = rr.duration_s;
    last.output = shown(rr.out, lim.observation_bytes, last.truncated) +
                  shown(rr.err, lim.observation_bytes, last.truncated);
    if (rr.fired != sandbox::limit_kind::none) last.limit = sandbox::to_string(rr.fired);
    have_last = true;
    log.write({{"event", "observation"},
               {"turn", r.turns},
               {"exit_code", last.exit_code},
               {"output", last.output},
               {"truncated", last.truncated},
               {"seconds", last.seconds},
               {"limit", last.limit},
               {"stdout_bytes", rr.out.bytes},
               {"stderr_bytes", rr.err.bytes}});
  }

  // The hidden tests, in the same workspace, with TEST_DIR holding tests/ and run-tests.sh.
  auto spec = base_spec(t, ws.string(), lim);
  spec.argv = {"bash", "/tests/run-tests.sh"};
  spec.policy.ro_binds.push_back({tests.string(), "/tests"});
  spec.env["TEST_DIR"] = "/tests";
  spec.env["PYTHONDONTWRITEBYTECODE"] = "1";
  spec.limits.timeout_s = t.max_test_timeout_s;
  sandbox::run_result rr;
  try {
    rr = sandbox::run(spec);
  } catch (const std::exception& e) {
    return fail(std::string("tests: ") + e.what());
  }
  if (!rr.started) return fail("tests: did not start: " + rr.error);
  const std::string out = rr.out.data + rr.err.data;
  r.test_output = out.substr(0, 16384);
  std::tie(r.tests_passed, r.tests_total) = pytest_counts(out);
  if (r.tests_total == 0) {  // a run-tests.sh that is not pytest: its exit status is the only verdict
    r.tests_total = 1;
    r.tests_passed = rr.ok() ? 1 : 0;
  }
  r.pass = rr.ok() && r.tests_passed == r.tests_total;
  r.seconds = since(t0);
  log.write({{"event", "tests"},
             {"exit_code", rr.exit_code},
             {"limit", rr.fired == sandbox::limit_kind::none ? "" : sandbox::to_string(rr.fired)},
             {"passed", r.tests_passed},
             {"total", r.tests_total},
             {"output", r.test_output}});
  log.write({{"event", "result"}, {"result", to_json(r)}});
  return r;
}

json to_json(const episode_result& r) {
  return {{"id", r.id},
          {"category", r.category},
          {"difficulty", r.difficulty},
          {"pass", r.pass},
          {"tests_passed", r.tests_passed},
          {"tests_total", r.tests_total},
          {"turns", r.turns},
          {"prompt_tokens", r.prompt_tokens},
          {"reply_tokens", r.reply_tokens},
          {"seconds", r.seconds},
          {"stop", r.stop},
          {"error", r.error}};
}

json results_json(const std::string& agent_name, const std::vector<episode_result>& results, double seconds) {
  struct tally {
    int n = 0, passed = 0, errors = 0;
  };
  std::map<std::string, tally> by;
  tally all;
  json records = json::array();
  for (const auto& r : results) {
    for (tally* t : {&all, &by[r.category]}) {
      ++t->n;
      t->passed += r.pass ? 1 : 0;
      t->errors += r.error.empty() ? 0 : 1;
    }
    records.push_back(to_json(r));
  }
  auto summary = [](const tally& t) {
    const int judged = t.n - t.errors;
    return json{{"tasks", t.n},
                {"passed", t.passed},
                {"errors", t.errors},
                {"pass_rate", judged > 0 ? double(t.passed) / judged : 0.0}};
  };
  json cats = json::object();
  for (const auto& [c, t] : by) cats[c] = summary(t);
  return {{"agent", agent_name},
          {"seconds", seconds},
          {"overall", summary(all)},
          {"by_category", cats},
          {"tasks", records}};
}

}  // namespace moxi::eval

namespace moxi::eval {

recorded_episode read_trajectory(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw error(path + ": cannot read");
  recorded_episode e;
  bool started = false, ended = false;
  size_t n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    if (line.empty()) continue;
    const std::string where = path + ":" + std::to_string(n);
    json j;
    try {
      j = json::parse(line);
      const std::string ev = j.at("event");
      if (ev == "start") {
        e.task = j.at("task");
        started = true;
      } else if (ev == "action" && !j.at("finish").get<bool>()) {
        e.commands.push_back(j.at("command"));
      } else if (ev == "observation") {
        observation o;
        o.exit_code = j.at("exit_code");
        o.output = j.at("output");
        o.truncated = j.at("truncated");
        o.limit = j.at("limit");
        o.seconds = j.at("seconds");
        e.observations.push_back(o);
      } else if (ev == "result") {
        const json& r = j.at("result");
        e.pass = r.at("pass");
        e.tests_passed = r.at("tests_passed");
        e.tests_total = r.at("tests_total");
        ended = true;
      }
    } catch (const json::exception& x) {
      throw error(where + ": " + x.what());
    }
  }
  if (!started) throw error(path + ": no start event (not a trajectory of `moxi eval agent`)");
  if (!ended) throw error(path + ": no result event (the episode did not finish)");
  return e;
}

std::unique_ptr<agent> make_replay_agent(const recorded_episode& e) {
  struct replay_agent final : agent {
    std::vector<std::string> commands;
    std::string name() const override { return "replay"; }
    std::unique_ptr<agent_session> start(const agent_task&) override {
      return std::make_unique<oracle_session>(commands);
    }
  };
  auto a = std::make_unique<replay_agent>();
  a->commands = e.commands;
  return a;
}

}  // namespace moxi::eval
