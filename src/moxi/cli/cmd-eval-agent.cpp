// `moxi eval agent --tasks DIR --agent model|endpoint|oracle|null [-m DIR | --endpoint URL] [--concurrency N]
// [--max-turns N] [--out RUN_DIR]`:
// multi-turn episodes on Terminal-Bench-layout tasks in the sandbox (moxi::eval::run_episode,
// docs/agent-eval.md). Writes RUN_DIR/results.json and one trajectory per task under RUN_DIR/trajectories.
// `moxi eval report RUN_DIR... --out report.html [--json]`: the runs' pass rates and, against the first,
// each other run's net improvement rate, as a self-contained HTML page (moxi::eval::agent_report_html).
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <optional>
#include <stdlib.h>
#include <thread>

#include "moxi/base/error.h"
#include "moxi/base/interrupt.h"
#include "moxi/cli/options.h"
#include "moxi/eval/agent-report.h"
#include "moxi/eval/episode.h"
#include "moxi/eval/evaluate.h"
#include "moxi/runtime/local-model.h"
#include "moxi/eval/task.h"

namespace moxi::cli {
namespace fs = std::filesystem;

namespace {

std::string default_run_dir(const std::string& agent) {
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  return "runs/agent-" + agent + "-" + stamp;
}

void print_summary(const nlohmann::json& res) {
  std::printf("%-14s %7s %7s %7s %10s\n", "category", "tasks", "passed", "errors", "pass rate");
  auto row = [](const std::string& name, const nlohmann::json& s) {
    std::printf("%-14s %7d %7d %7d %9.1f%%\n", name.c_str(), s.at("tasks").get<int>(), s.at("passed").get<int>(),
                s.at("errors").get<int>(), 100.0 * s.at("pass_rate").get<double>());
  };
  for (const auto& [c, s] : res.at("by_category").items()) row(c, s);
  row("overall", res.at("overall"));
}

}  // namespace

void setup_eval_agent(CLI::App* eval) {
  auto* cmd = eval->add_subcommand("agent", "Multi-turn agent episodes on Terminal-Bench-layout tasks, in the sandbox");
  struct args {
    std::string tasks, agent, out, model;
    eval::model_agent_options model_opt;
    eval::endpoint_options endpoint;
    int concurrency = 1;
    bool keep = false, force = false, quiet = false;
    eval::episode_limits limits;
  };
  auto a = std::make_shared<args>();
  cmd->add_option("--tasks", a->tasks, "a task directory, or a directory of them (tasks/terminal-bench)")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--agent", a->agent,
                  "model: a moxi model (-m) runs commands; endpoint: an OpenAI-compatible server (--endpoint) "
                  "with function calling; oracle: runs each task's solution; null: does nothing")
      ->required()
      ->check(CLI::IsMember({"model", "endpoint", "oracle", "null"}));
  cmd->add_option("--endpoint", a->endpoint.url, "API base URL for --agent endpoint (http://HOST:PORT/v1)");
  cmd->add_option("--api-key", a->endpoint.api_key, "bearer token for --endpoint (default: $OPENAI_API_KEY)");
  cmd->add_option("--endpoint-model", a->endpoint.model,
                  "model name in the requests (default: the first of GET /models)");
  add_model_option(cmd, a->model, /*required=*/false)->description("model directory for --agent model");
  cmd->add_option("--max-tokens", a->model_opt.max_tokens, "reply length limit per turn (--agent model, endpoint)")
      ->check(integer_in(1, int64_t(1) << 20))
      ->capture_default_str();
  cmd->add_option("--temperature", a->model_opt.temperature, "0 = greedy (--agent model, endpoint)")
      ->check(number_in(0, 100))
      ->capture_default_str();
  cmd->add_option("--seed", a->model_opt.seed, "sampling seed (--agent model)")->check(unsigned_integer());
  cmd->add_option("--concurrency", a->concurrency, "episodes at once, each in its own sandboxed workspace")
      ->check(integer_in(1, 256))
      ->capture_default_str();
  cmd->add_option("--max-turns", a->limits.max_turns, "commands per episode")
      ->check(integer_in(1, 10000))
      ->capture_default_str();
  cmd->add_option("--command-timeout", a->limits.command_timeout_s, "seconds per command")
      ->check(number_in(0.1, 86400))
      ->capture_default_str();
  cmd->add_option("--episode-timeout", a->limits.episode_timeout_s,
                  "seconds per episode (0: the task's max_agent_timeout_sec)")
      ->check(number_in(0, 86400))
      ->capture_default_str();
  cmd->add_option("--episode-output-bytes", a->limits.episode_output_bytes,
                  "stdout + stderr bytes of all an episode's commands together; past it the episode ends")
      ->check(integer_in(1, int64_t(1) << 40))
      ->capture_default_str();
  cmd->add_option("--observation-bytes", a->limits.observation_bytes,
                  "bytes of each stream of a command's output the agent sees (the rest is marked as cut)")
      ->check(integer_in(16, int64_t(1) << 24))
      ->capture_default_str();
  cmd->add_option("--out", a->out, "run directory: results.json, trajectories/ (default runs/agent-AGENT-TIME)");
  cmd->add_flag("--force", a->force, "write into an existing run directory (its results.json and trajectories are replaced)");
  cmd->add_flag("--keep-workspaces", a->keep, "keep each episode's workspace under RUN_DIR/work");
  cmd->add_flag("-q,--quiet", a->quiet, "no line per finished task");
  set_examples(cmd,
               {"moxi eval agent --tasks tasks/terminal-bench --agent model -m models/moxi-small",
                "moxi eval agent --tasks tasks/terminal-bench --agent endpoint --endpoint http://127.0.0.1:8000/v1",
                "moxi eval agent --tasks tasks/terminal-bench --agent oracle --concurrency 2",
                "moxi eval agent --tasks tasks/terminal-bench/work-count-errors --agent null --out run1"},
               "docs/agent-eval.md");
  cmd->callback([a] {
    interrupt_guard stop_cleanly;  // SIGINT/SIGTERM: running commands killed, workspaces removed, exit 130
    if (a->agent == "model" && a->model.empty()) throw usage_error("--agent model needs -m/--model");
    if (a->agent != "model" && !a->model.empty()) throw usage_error("-m/--model is for --agent model only");
    if (a->agent == "endpoint" && a->endpoint.url.empty()) throw usage_error("--agent endpoint needs --endpoint URL");
    if (a->agent != "endpoint" && !a->endpoint.url.empty()) throw usage_error("--endpoint is for --agent endpoint only");
    const auto tasks = eval::load_agent_tasks(a->tasks);
    const std::string run = a->out.empty() ? default_run_dir(a->agent) : a->out;
    if (fs::exists(run) && !fs::is_empty(run) && !a->force)
      throw usage_error(run + " exists and is not empty (give --force to write into it, or another --out)");
    const fs::path traj = fs::path(run) / "trajectories", work = fs::path(run) / "work";
    fs::create_directories(traj);
    fs::create_directories(work);
    std::optional<runtime::local_model> lm;
    eval::eval_model em;
    std::unique_ptr<eval::agent> agent;
    if (a->agent == "model") {
      lm.emplace(runtime::local_model::load(a->model));
      em = eval::eval_model_of(*lm);
      em.name = a->model;
      agent = eval::make_model_agent(em, a->model_opt);
    } else if (a->agent == "endpoint") {
      if (a->endpoint.api_key.empty() && std::getenv("OPENAI_API_KEY")) a->endpoint.api_key = std::getenv("OPENAI_API_KEY");
      a->endpoint.max_tokens = a->model_opt.max_tokens;
      a->endpoint.temperature = a->model_opt.temperature;
      agent = eval::make_endpoint_agent(a->endpoint);
    } else {
      agent = a->agent == "oracle" ? eval::make_oracle_agent() : eval::make_null_agent();
    }
    std::vector<eval::episode_result> results(tasks.size());
    std::atomic<size_t> next{0}, done{0};
    std::mutex print;
    const auto t0 = std::chrono::steady_clock::now();
    auto worker = [&] {
      for (size_t i = next++; i < tasks.size(); i = next++) {
        if (interrupt_requested()) return;
        eval::episode_options opt;
        opt.limits = a->limits;
        opt.work_dir = work.string();
        opt.keep_workspace = a->keep;
        opt.trajectory = (traj / (tasks[i].id + ".jsonl")).string();
        std::error_code ec;
        fs::remove(opt.trajectory, ec);  // --force: a new run's trajectory, not appended to the old one
        try {
          results[i] = eval::run_episode(tasks[i], *agent, opt);
        } catch (const interrupted&) {
          return;
        }
        const auto& r = results[i];
        if (!a->quiet) {
          std::lock_guard<std::mutex> lock(print);
          std::fprintf(stderr, "[%zu/%zu] %-32s %s %d/%d tests, %d turns, %.1f s%s%s\n", ++done, tasks.size(),
                       r.id.c_str(), r.pass ? "pass" : r.error.empty() ? "FAIL" : "ERROR", r.tests_passed,
                       r.tests_total, r.turns, r.seconds, r.error.empty() ? "" : ": ", r.error.c_str());
        }
      }
    };
    std::vector<std::thread> threads;
    for (int k = 0; k < a->concurrency; ++k) threads.emplace_back(worker);
    for (auto& th : threads) th.join();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // Interrupted: the finished episodes are kept (results.json says "interrupted"), then moxi exits 130.
    const bool stopped = interrupt_requested();
    std::vector<eval::episode_result> finished;
    for (auto& r : results)
      if (!r.id.empty()) finished.push_back(std::move(r));
    auto res = eval::results_json(agent->name(), finished, secs);
    res["tasks_dir"] = a->tasks;
    if (stopped) res["interrupted"] = true;
    eval::write_file_atomic((fs::path(run) / "results.json").string(), res.dump(2) + "\n");
    if (stopped) {
      std::error_code ec;
      if (!a->keep) fs::remove_all(work, ec);
      check_interrupt();
    }
    if (!a->keep) fs::remove_all(work);
    print_summary(res);
    std::printf("agent %s: %zu tasks in %.1f s, concurrency %d -> %s/results.json\n", agent->name().c_str(),
                tasks.size(), secs, a->concurrency, run.c_str());
  });
}

void setup_eval_report(CLI::App* eval) {
  auto* cmd = eval->add_subcommand("report", "HTML report (and --json numbers) of `moxi eval agent` runs, paired against the first");
  struct args {
    std::vector<std::string> runs;
    std::string out;
    bool json = false;
  };
  auto a = std::make_shared<args>();
  cmd->add_option("runs", a->runs, "run directories (results.json); the first is the baseline of the others")
      ->required()
      ->check(CLI::ExistingDirectory);
  auto outs = std::make_shared<output_paths>(cmd);
  outs->add("--out", a->out, "the HTML page (self-contained; links into the runs' trajectories)",
            output_paths::kind::file);
  cmd->add_flag("--json", a->json, "print the numbers as JSON");
  set_examples(cmd,
               {"moxi eval report runs/agent-sft runs/agent-rl --out report.html",
                "moxi eval report runs/agent-sft runs/agent-rl --json"},
               "docs/agent-eval.md");
  cmd->callback([a, outs] {
    outs->check();
    if (a->out.empty() && !a->json) throw usage_error("give --out report.html, --json, or both");
    std::vector<eval::agent_run> runs;
    for (const auto& d : a->runs) runs.push_back(eval::read_agent_run(d));
    if (!a->out.empty()) {
      const std::string dir = fs::path(a->out).parent_path().string();
      eval::write_file_atomic(a->out, eval::agent_report_html(runs, dir.empty() ? "." : dir));
      std::fprintf(stderr, "moxi eval report: %zu runs -> %s\n", runs.size(), a->out.c_str());
    }
    if (a->json) std::cout << eval::agent_report_json(runs).dump(2) << "\n";
  });
}

void setup_eval_replay(CLI::App* eval) {
  auto* cmd = eval->add_subcommand("replay", "Run a recorded episode's commands again and compare what they do now");
  struct args {
    std::string trajectory, tasks, out;
  };
  auto a = std::make_shared<args>();
  cmd->add_option("trajectory", a->trajectory, "RUN_DIR/trajectories/TASK.jsonl of `moxi eval agent`")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--tasks", a->tasks, "the task directory, or the directory of tasks the run used")
      ->required()
      ->check(CLI::ExistingDirectory);
  auto outs = std::make_shared<output_paths>(cmd);
  outs->add("--out", a->out, "also write the replay's trajectory here", output_paths::kind::file);
  set_examples(cmd, {"moxi eval replay run1/trajectories/work-top-ips.jsonl --tasks tasks/terminal-bench"},
               "docs/agent-eval.md");
  cmd->callback([a, outs] {
    interrupt_guard stop_cleanly;
    outs->check();
    const auto rec = eval::read_trajectory(a->trajectory);
    const auto tasks = eval::load_agent_tasks(a->tasks);
    const eval::agent_task* task = nullptr;
    for (const auto& t : tasks) task = t.id == rec.task ? &t : task;
    if (!task) throw error(a->tasks + ": no task '" + rec.task + "' (the trajectory's task)");
    std::string scratch = (fs::temp_directory_path() / "moxi-replay-XXXXXX").string();
    if (!::mkdtemp(scratch.data())) throw error("cannot create a scratch directory under " + scratch);
    fs::permissions(scratch, fs::perms(0755));  // the sandbox uid reaches the workspace below it
    struct cleanup {
      std::string dir;
      ~cleanup() {
        std::error_code ec;
        fs::remove_all(dir, ec);
      }
    } remove_scratch{scratch};
    eval::episode_options opt;
    opt.work_dir = scratch;
    opt.limits.max_turns = int(rec.commands.size()) + 1;
    opt.trajectory = a->out.empty() ? scratch + "/replay.jsonl" : a->out;
    if (!a->out.empty()) fs::remove(a->out);
    auto agent = eval::make_replay_agent(rec);
    const auto r = eval::run_episode(*task, *agent, opt);
    if (!r.error.empty()) throw error("replay: " + r.error);
    const auto now = eval::read_trajectory(opt.trajectory);
    int differ = 0;
    auto cut = [](const std::string& s) {
      std::string t = s.substr(0, 120);
      for (auto& c : t) c = c == '\n' ? ' ' : c;
      return "'" + t + (s.size() > 120 ? "...'" : "'");
    };
    for (size_t i = 0; i < rec.observations.size() && i < now.observations.size(); ++i) {
      const auto &was = rec.observations[i], &is = now.observations[i];
      const bool same = was.exit_code == is.exit_code && was.output == is.output && was.limit == is.limit;
      differ += !same;
      std::printf("turn %zu: %s (exit %d", i + 1, same ? "same" : "differs", was.exit_code);
      if (is.exit_code != was.exit_code) std::printf(" -> %d", is.exit_code);
      std::printf(")\n");
      if (was.output != is.output) std::printf("  was %s\n  now %s\n", cut(was.output).c_str(), cut(is.output).c_str());
    }
    const bool same_verdict = rec.pass == r.pass && rec.tests_passed == r.tests_passed && rec.tests_total == r.tests_total;
    differ += !same_verdict;
    std::printf("tests: %s %d/%d -> %s %d/%d: %s\n", rec.pass ? "pass" : "fail", rec.tests_passed, rec.tests_total,
                r.pass ? "pass" : "fail", r.tests_passed, r.tests_total, same_verdict ? "same" : "differs");
    std::printf("replay of %s: %zu commands, %d differences\n", rec.task.c_str(), rec.commands.size(), differ);
    if (differ) throw error("the replay differs from the recording in " + std::to_string(differ) + " places");
  });
}

}  // namespace moxi::cli
