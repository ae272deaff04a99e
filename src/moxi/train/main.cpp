// `moxi-train`: the trainer's command line (`moxi train ...` runs it). A separate executable so that the
// `moxi` binary never links libtorch. Subcommands: sft.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <filesystem>

#include "moxi/base/error.h"
#include "moxi/train/interrupt.h"
#include "moxi/train/loop.h"
#include "moxi/train/rl.h"
#include "moxi/train/sft.h"

namespace {

namespace fs = std::filesystem;

std::string absolute(const std::string& p) {
  return p.empty() ? p : fs::absolute(p).lexically_normal().string();
}

// --dist-rank --dist-world --dist-store --dist-timeout (docs/train.md "Data-parallel training").
struct dist_args {
  int rank = -1, world = -1;
  std::string store;
  double timeout = -1;
  moxi::train::dist_layout resolve() const {
    return moxi::train::resolve_dist_layout(rank, world, store, timeout);
  }
  void add(CLI::App* cmd, const char* batch_note) {
    cmd->add_option("--dist-rank", rank,
                    "data parallelism: this process's rank, 0..N-1 (else MOXI_DIST_RANK, else mpirun's "
                    "OMPI_COMM_WORLD_RANK)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--dist-world", world,
                    std::string("data parallelism: the number of ranks N (else MOXI_DIST_WORLD, else mpirun's "
                                "OMPI_COMM_WORLD_SIZE)") +
                        batch_note)
        ->check(CLI::PositiveNumber);
    cmd->add_option("--dist-store", store,
                    "where the ranks meet: file:PATH (a fresh path per launch) or tcp:HOST:PORT (rank 0 serves "
                    "it) (else MOXI_DIST_STORE)");
    cmd->add_option("--dist-timeout", timeout,
                    "seconds to reach the store and see every rank join (default 300, else MOXI_DIST_TIMEOUT)")
        ->check(CLI::PositiveNumber);
  }
};

struct sft_args {
  std::string recipe, config, init, chat_template, tokenizer, out, export_dir;
  std::vector<std::string> data, eval_data, set;
  int64_t steps = -1, qat_steps = -1, batch_size = -1, threads = -1;
  double lr = -1;
  int64_t seed = -1;
  dist_args dist;
  moxi::train::run_options run;
};

void run_sft(const sft_args& a) {
  using namespace moxi::train;
  // Command-line paths are relative to the working directory (the recipe's own to the recipe's directory).
  recipe r = a.recipe.empty()
                 ? parse_recipe(nlohmann::json::object(), "(command line)", fs::current_path().string())
                 : load_recipe(a.recipe);
  auto set = [&](const std::string& key, const nlohmann::json& v) { set_field(r, key, v); };
  if (!a.config.empty()) set("model", {{"config", absolute(a.config)}});
  if (!a.init.empty()) set("model", {{"init", absolute(a.init)}});
  if (!a.chat_template.empty()) set("chat_template", absolute(a.chat_template));
  if (!a.tokenizer.empty()) set("tokenizer.path", absolute(a.tokenizer));
  if (!a.data.empty()) {
    nlohmann::json files = nlohmann::json::array();
    for (const auto& d : a.data) files.push_back(absolute(d));
    set("data.train", files);
  }
  if (!a.eval_data.empty()) {
    nlohmann::json files = nlohmann::json::array();
    for (const auto& d : a.eval_data) files.push_back(absolute(d));
    set("data.eval", files);
  }
  if (!a.out.empty()) set("out", absolute(a.out));
  if (!a.export_dir.empty()) set("export", absolute(a.export_dir));
  if (a.steps >= 0) set("optimizer.steps", a.steps);
  if (a.batch_size >= 0) set("optimizer.batch_size", a.batch_size);
  if (a.lr >= 0) set("optimizer.lr", a.lr);
  if (a.qat_steps >= 0) set("qat.steps", a.qat_steps);
  if (a.threads >= 0) set("threads", a.threads);
  if (a.seed >= 0) set("seed", a.seed);
  for (const auto& s : a.set) apply_override(r, s);
  auto ro = a.run;
  ro.dist = a.dist.resolve();
  const auto res = moxi::train::run_sft(r, ro);
  if (!res.lead) return;  // rank 0 reports for the whole data-parallel run
  std::printf("trained %lld steps; final loss %.4f", static_cast<long long>(res.steps_done), res.final_loss);
  if (res.final_eval_loss >= 0) std::printf(", held-out loss %.4f", res.final_eval_loss);
  std::printf("; model: %s\n", res.export_dir.c_str());
}

struct rl_args {
  std::string recipe, init, out, export_dir;
  std::vector<std::string> set;
  int64_t steps = -1, threads = -1, seed = -1;
  dist_args dist;
  moxi::train::run_options run;
};

// The loop trains in one process; under mpirun (or with MOXI_DIST_WORLD) they would all write the
// same run directory, so they refuse to start.
void refuse_ranks(const char* command) {
  if (moxi::train::environment_asks_for_ranks())
    throw moxi::error(std::string("moxi train ") + command +
                      " trains in one process; data-parallel training (mpirun, MOXI_DIST_WORLD) is for "
                      "`moxi train sft` and `moxi train rl` only (docs/train.md, \"Data-parallel training\")");
}

void run_rl(const rl_args& a) {
  using namespace moxi::train;
  rl_recipe r = load_rl_recipe(a.recipe);
  auto set = [&](const std::string& key, const nlohmann::json& v) {
    apply_override(r, key + "=" + v.dump());
  };
  if (!a.init.empty()) set("model.init", absolute(a.init));
  if (!a.out.empty()) set("out", absolute(a.out));
  if (!a.export_dir.empty()) set("export", absolute(a.export_dir));
  if (a.steps >= 0) set("optimizer.steps", a.steps);
  if (a.threads >= 0) set("threads", a.threads);
  if (a.seed >= 0) set("seed", a.seed);
  for (const auto& s : a.set) apply_override(r, s);
  auto ro = a.run;
  ro.dist = a.dist.resolve();
  const auto res = moxi::train::run_rl(r, ro);
  if (!res.lead) return;  // rank 0 reports for the whole data-parallel run
  std::printf("trained %lld RL steps; model: %s\n", static_cast<long long>(res.steps_done),
              res.export_dir.c_str());
}

struct loop_args {
  std::string recipe, init, out;
  std::vector<std::string> set;
  int64_t rounds = -1, threads = -1;
  moxi::train::run_options run;
};

void run_loop(const loop_args& a) {
  using namespace moxi::train;
  refuse_ranks("loop");
  loop_recipe r = load_loop_recipe(a.recipe);
  auto set = [&](const std::string& key, const nlohmann::json& v) {
    apply_override(r, key + "=" + v.dump());
  };
  if (!a.init.empty()) set("model.init", absolute(a.init));
  if (!a.out.empty()) set("out", absolute(a.out));
  if (a.rounds >= 0) set("rounds", a.rounds);
  if (a.threads >= 0) set("threads", a.threads);
  for (const auto& s : a.set) apply_override(r, s);
  const auto res = moxi::train::run_loop(r, a.run);
  std::printf("ran %lld rounds; model: %s\n", static_cast<long long>(res.rounds_done), res.model.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"moxi-train: post-train moxi models (run as `moxi train ...`)", "moxi train"};
  app.require_subcommand(1);
  auto* sft = app.add_subcommand("sft", "Supervised fine-tuning from a recipe (docs/train.md), resumable");
  sft_args a;
  sft->add_option("--recipe", a.recipe, "recipe JSON (recipes/moxi-tiny.json)")->check(CLI::ExistingFile);
  sft->add_option("--config", a.config, "model config.json to initialize from (recipe model.config)");
  sft->add_option("--init", a.init, "checkpoint directory to start from (recipe model.init)");
  sft->add_option("--chat-template", a.chat_template, "Jinja chat template file (recipe chat_template)");
  sft->add_option("--tokenizer", a.tokenizer, "tokenizer.json to use instead of training one");
  sft->add_option("--data", a.data, "training task JSONL files from `moxi data` (replace data.train)");
  sft->add_option("--eval-data", a.eval_data, "held-out task JSONL files (replace data.eval)");
  sft->add_option("--out", a.out,
                  "run directory: checkpoints, log, tokenizer (resumed when it has a checkpoint)");
  sft->add_option("--export", a.export_dir, "where the final model goes (default OUT/model)");
  sft->add_option("--steps", a.steps, "training steps before QAT")->check(CLI::NonNegativeNumber);
  sft->add_option("--qat-steps", a.qat_steps, "QAT steps at the end")->check(CLI::NonNegativeNumber);
  sft->add_option("--batch-size", a.batch_size, "conversations per step")->check(CLI::PositiveNumber);
  sft->add_option("--lr", a.lr, "peak learning rate")->check(CLI::PositiveNumber);
  sft->add_option("--seed", a.seed, "seed of the initialization and the data order")
      ->check(CLI::NonNegativeNumber);
  sft->add_option("--threads", a.threads, "torch threads (0: all cores)")->check(CLI::NonNegativeNumber);
  sft->footer(
      "EXAMPLES:\n  moxi train sft --recipe recipes/moxi-tiny.json --out run\n"
      "  moxi train sft --recipe recipes/moxi-tiny.json --out run --steps 200 --set eval.every=50\n"
      "  mpirun -np 2 moxi train sft --recipe recipes/moxi-tiny.json --out run --dist-store file:run.store\n"
      "  moxi train sft --recipe R --dist-world 2 --dist-rank 0 --dist-store tcp:127.0.0.1:29500 &  # and "
      "rank 1\n\n"
      "Documentation: docs/train.md in the moxi source tree.");
  app.footer(
      "EXAMPLES:\n  moxi train sft --recipe recipes/moxi-tiny.json --out run\n"
      "  moxi train rl --recipe recipes/moxi-small-rl.json\n\n"
      "Documentation: docs/train.md and docs/rl.md in the moxi source tree.");
  sft->add_option("--set", a.set, "any recipe field, dotted: --set eval.every=50 (value as JSON)");
  sft->add_flag("--override", a.run.override_recipe,
                "resume even though steps, lr, data, ... differ from the run's saved recipe (the new values "
                "become the run's)");
  sft->add_flag("--force", a.run.force_export,
                "export over an existing model directory this run did not write (e.g. models/moxi-tiny): its "
                "model files are replaced, other files (a README) stay");
  a.dist.add(sft, "; optimizer.batch_size is the global batch, a multiple of N");
  sft->callback([&a] { run_sft(a); });

  auto* rl = app.add_subcommand(
      "rl", "Reinforcement learning (GRPO or PPO) from an SFT model (docs/rl.md), resumable");
  rl_args ra;
  rl->add_option("--recipe", ra.recipe, "RL recipe JSON (recipes/moxi-small-rl.json)")
      ->required()
      ->check(CLI::ExistingFile);
  rl->add_option("--init", ra.init, "the SFT model directory to start from (recipe model.init)");
  rl->add_option("--out", ra.out, "run directory: checkpoints, log.jsonl (resumed when it has a checkpoint)");
  rl->add_option("--export", ra.export_dir, "where the final model goes (default OUT/model)");
  rl->add_option("--steps", ra.steps, "policy-update steps")->check(CLI::PositiveNumber);
  rl->add_option("--seed", ra.seed, "seed of the prompt draw, the samplers and the mini-batch order")
      ->check(CLI::NonNegativeNumber);
  rl->add_option("--threads", ra.threads, "torch threads (0: all cores)")->check(CLI::NonNegativeNumber);
  rl->add_option("--set", ra.set, "any recipe field, dotted: --set algorithm.kl.coef=0.01 (value as JSON)");
  rl->add_flag(
      "--override", ra.run.override_recipe,
      "resume even though the recipe differs from the run's saved one (the new values become the run's)");
  rl->add_flag("--force", ra.run.force_export,
               "export over an existing model directory this run did not write");
  ra.dist.add(rl, "; each rank rolls out its share of rollout.prompts");
  rl->footer(
      "EXAMPLES:\n  moxi train rl --recipe recipes/moxi-small-rl.json\n"
      "  mpirun -np 2 moxi train rl --recipe recipes/moxi-small-rl.json --dist-store file:rl.store\n"
      "  moxi train rl --recipe recipes/moxi-small-rl.json --out runs/rl-try --steps 5 --set "
      "rollout.prompts=4\n\n"
      "Documentation: docs/rl.md in the moxi source tree.");
  rl->callback([&ra] { run_rl(ra); });

  auto* loop = app.add_subcommand(
      "loop",
      "The iterative loop: collect, SFT on successes, RL on failures, evaluate (docs/rl.md), resumable");
  loop_args la;
  loop->add_option("--recipe", la.recipe, "loop recipe JSON (recipes/moxi-small-loop.json)")
      ->required()
      ->check(CLI::ExistingFile);
  loop->add_option("--init", la.init, "the model to start from (recipe model.init)");
  loop->add_option("--out", la.out, "loop directory: round-K/ per round (resumed where it stopped)");
  loop->add_option("--rounds", la.rounds, "rounds to run")->check(CLI::PositiveNumber);
  loop->add_option("--threads", la.threads, "torch threads (0: all cores)")->check(CLI::NonNegativeNumber);
  loop->add_option("--set", la.set, "any recipe field, dotted: --set rl.optimizer.steps=5 (value as JSON)");
  loop->footer(
      "EXAMPLES:\n  moxi train loop --recipe recipes/moxi-small-loop.json --rounds 2\n\n"
      "Documentation: docs/rl.md in the moxi source tree.");
  loop->callback([&la] { run_loop(la); });
  // Interrupted, the trainer says how to resume: the same command (`moxi train` execs this with its args).
  std::string command = "moxi train";
  for (int i = 1; i < argc; ++i) command += " " + moxi::train::shell_quote(argv[i]);
  moxi::train::install_interrupt_handlers(command);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // a usage error exits 2, as in `moxi` (docs/design.md §3)
  } catch (const moxi::train::interrupted& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "moxi train: %s\n", e.what());
    moxi::train::die_of(e.signal);
  } catch (const moxi::error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "moxi train: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "moxi train: unexpected error: %s\n", e.what());
    return 2;
  }
  return 0;
}
