// `moxi data --domain D --split S --n N --seed S --out FILE.jsonl`: writes generated verifiable tasks
// (eval/task-generator.h), atomically; --verify runs every reference solution through its checker.
// `--format terminal-bench`: terminal tasks as Terminal-Bench task directories (eval/terminal-bench-export.h).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>

#include "moxi/base/clock.h"
#include "moxi/base/error.h"
#include "moxi/cli/command.h"
#include "moxi/cli/options.h"
#include "moxi/eval/check.h"
#include "moxi/eval/task-generator.h"
#include "moxi/eval/terminal-bench-export.h"

namespace moxi::cli {
namespace fs = std::filesystem;
namespace {

void setup_data(CLI::App& root) {
  auto* cmd = root.add_subcommand("data", "Generate verifiable tasks (math, terminal, code, chat) as JSONL");
  struct args {
    std::string domain, split = "train", out;
    size_t n = 100;
    uint64_t seed = 0;
    std::vector<std::string> templates;
    std::string format = "jsonl";
    std::string division = "plain";
    bool capitals = false;
    bool bare_requests = false;
    bool verify = false;
  };
  auto a = std::make_shared<args>();
  cmd->add_option("--domain", a->domain, "math, terminal, code, chat or vision (pictures to read)")
      ->required()
      ->check(CLI::IsMember({"math", "terminal", "code", "chat", "vision"}));
  cmd->add_option(
         "--split", a->split,
         "train, test (holds out templates, parameters, phrasings) or length (math: longer operands)")
      ->check(CLI::IsMember({"train", "test", "length"}))
      ->capture_default_str();
  cmd->add_option("--n", a->n, "number of tasks")->check(integer_in(1, 10'000'000))->capture_default_str();
  cmd->add_option("--seed", a->seed, "generator seed")->check(unsigned_integer())->capture_default_str();
  cmd->add_option("--templates", a->templates,
                  "only these templates of the split, comma-separated (all by default; docs/tasks.md lists them; "
                  "'shared' stands for the templates both splits draw)")
      ->delimiter(',');
  cmd->add_option(
         "--division", a->division,
         "math: how references work a division out: plain (each quotient digit stated, multiplied back "
         "and subtracted) or multiples (the divisor's multiples 1..9 first, each digit read off them)")
      ->check(CLI::IsMember({"plain", "multiples"}))
      ->capture_default_str();
  cmd->add_flag("--capitals", a->capitals,
                "terminal, train split: one made-up name word in five in capitals (TAVOKU.md) or capitalized "
                "(Tavoku.log); the test split is the same either way");
  cmd->add_flag("--bare-requests", a->bare_requests,
                "code, train split: one request in four names only the function (\"count_above has a bug, "
                "can you fix it?\"); the test split is the same either way");
  cmd->add_option("--format", a->format,
                  "jsonl: one task per line; terminal-bench: --out is a directory of Terminal-Bench tasks "
                  "(terminal domain only) for `moxi eval agent`")
      ->check(CLI::IsMember({"jsonl", "terminal-bench"}))
      ->capture_default_str();
  auto outs = std::make_shared<output_paths>(cmd);
  outs->add("--out", a->out, "output JSONL file (written atomically)", output_paths::kind::file)->required();
  cmd->add_flag("--verify", a->verify, "check every reference solution with its checker (in the sandbox)");
  set_examples(cmd,
               {"moxi data --domain math --split test --n 30 --seed 7 --out test-math.jsonl",
                "moxi data --domain code --n 200 --out train-code.jsonl --verify",
                "moxi data --domain chat --templates repeat --n 50 --out repeat.jsonl",
                "moxi data --domain math --templates div,share --division multiples --n 20 --out div.jsonl",
                "moxi data --domain terminal --capitals --n 200 --out train-terminal.jsonl",
                "moxi data --domain vision --split test --n 100 --out test-vision.jsonl",
                "moxi data --domain terminal --split test --n 20 --format terminal-bench --out tb-tasks"},
               "docs/tasks.md");
  cmd->callback([a, outs] {
    eval::generate_options options;
    options.division = eval::parse_division_format(a->division);
    options.capitals = a->capitals;
    options.bare_requests = a->bare_requests;
    if (a->format == "terminal-bench") {
      if (a->domain != "terminal") throw usage_error("--format terminal-bench needs --domain terminal");
      if (a->verify)
        throw usage_error("--verify checks JSONL tasks; `moxi eval agent --agent oracle` checks a directory");
      if (fs::exists(a->out) && !outs->force())
        throw usage_error(a->out + " exists (give --force to replace a directory this command wrote)");
      const auto tasks = eval::generate_tasks(eval::parse_domain(a->domain), eval::parse_split(a->split),
                                              a->n, a->seed, a->templates, options);
      eval::write_terminal_bench(tasks, a->out);
      std::fprintf(stderr, "moxi data: %zu terminal/%s tasks (seed %llu) -> %s/ (Terminal-Bench layout)\n",
                   tasks.size(), a->split.c_str(), static_cast<unsigned long long>(a->seed), a->out.c_str());
      return;
    }
    outs->check();
    const auto t0 = std::chrono::steady_clock::now();
    const auto tasks = eval::generate_tasks(eval::parse_domain(a->domain), eval::parse_split(a->split), a->n,
                                            a->seed, a->templates, options);
    const std::string text = eval::to_jsonl(tasks);
    eval::write_file_atomic(a->out, text);
    const double secs = seconds_since(t0);
    std::map<std::string, int> per_template;
    for (const auto& t : tasks) ++per_template[t.template_name];
    std::string summary;
    for (const auto& [name, count] : per_template) summary += " " + name + ":" + std::to_string(count);
    std::fprintf(stderr, "moxi data: %zu %s/%s tasks (seed %llu, %zu bytes) -> %s in %.3f s; templates%s\n",
                 tasks.size(), a->domain.c_str(), a->split.c_str(), static_cast<unsigned long long>(a->seed),
                 text.size(), a->out.c_str(), secs, summary.c_str());
    if (!a->verify) return;
    eval::checker checker;
    std::vector<std::pair<const eval::task*, std::string>> items;
    for (const auto& t : tasks) items.emplace_back(&t, t.reference);
    const auto results = checker.check_all(items);
    size_t pass = 0;
    for (size_t i = 0; i < results.size(); ++i) {
      if (results[i].pass) {
        ++pass;
      } else {
        std::fprintf(stderr, "moxi data: %s: reference fails: %s\n", tasks[i].id.c_str(),
                     results[i].detail.c_str());
      }
    }
    std::fprintf(stderr, "moxi data: %zu/%zu reference solutions pass their checkers\n", pass,
                 results.size());
    if (pass != results.size()) throw error("some reference solutions fail their checkers");
  });
}

MOXI_COMMAND("data", setup_data);

}  // namespace
}  // namespace moxi::cli
