// The command line's shared rules (cli/options.h, docs/design.md §3): a flag out of range or a bad
// combination is a usage error (exit 2, `usage error` and the flag on stderr, nothing written), an existing
// output is refused unless --force, --help ends with EXAMPLES, -m/--model and `moxi serve MODEL_DIR` name the
// model, chat and generate decode greedily by default, progress lines carry no '\r' off a terminal, and
// `moxi plan` exits 1 when the layout does not fit.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

#include "common/read-file.h"
#include "common/run-moxi.h"
#include "common/temp-dir.h"

extern char** environ;

namespace fs = std::filesystem;

namespace {

using result = moxi::testing::command_result;

using moxi::testing::read_file;  // common/read-file.h

std::string cfg(const char* name) {
  return std::string(MOXI_SOURCE_DIR) + "/configs/" + name;
}
std::string tiny() {
  return std::string(MOXI_SOURCE_DIR) + "/models/moxi-tiny";
}

class Usage : public moxi::testing::temp_dir_test {
 protected:
  result run(const std::string& args, const std::string& env = "") {
    return moxi::testing::run_moxi(args, "", dir_, env);
  }
  // A usage error: exit 2, the message names `needle`, and the hint to --help follows.
  void expect_usage_error(const std::string& args, const std::string& needle) {
    const auto r = run(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.err;
    EXPECT_NE(r.err.find("usage error"), std::string::npos) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << args << ": '" << needle << "' not in\n" << r.err;
    EXPECT_NE(r.err.find("--help"), std::string::npos) << r.err;
  }
};

TEST_F(Usage, OutOfRangeValuesAreUsageErrorsBeforeAnyWork) {
  expect_usage_error("serve --port 99999", "--port");
  expect_usage_error("serve --port -1", "--port");
  expect_usage_error("serve --block-size 0", "--block-size");
  expect_usage_error("data --domain math --n -3 --out " + path("n.jsonl"), "--n");
  expect_usage_error("data --domain math --n 0 --out " + path("n.jsonl"), "--n");
  expect_usage_error("data --domain math --seed -7 --out " + path("n.jsonl"), "--seed");
  expect_usage_error("data --domain math --n 3x --out " + path("n.jsonl"), "3x");
  EXPECT_FALSE(fs::exists(path("n.jsonl")));
  expect_usage_error("generate --prompt hi --temperature -1", "--temperature");
  expect_usage_error("generate --prompt hi --top-p 0", "--top-p");
  expect_usage_error("chat --top-k -2", "--top-k");
  expect_usage_error("chat --max-tokens 0", "--max-tokens");
  expect_usage_error("plan --config " + cfg("seed-2.8t.json") + " --tp 0", "--tp");
  expect_usage_error("init --config " + cfg("tiny-seed.json") + " --out " + path("ck") + " --seed -1",
                     "--seed");
  EXPECT_FALSE(fs::exists(path("ck")));
  expect_usage_error("eval -m " + tiny() + " --tasks " + path("none.jsonl"), "none.jsonl");
  std::ofstream(path("tasks.jsonl")) << "{}\n";
  expect_usage_error("eval -m " + tiny() + " --tasks " + path("tasks.jsonl") + " --workers 300", "--workers");
  // Parse errors of CLI11 itself are usage errors too.
  expect_usage_error("plan --config " + cfg("seed-2.8t.json") + " --no-such-flag", "--no-such-flag");
  expect_usage_error("data --n 3 --out " + path("n.jsonl"), "--domain");
  expect_usage_error("frobnicate", "frobnicate");
  // --help is not an error.
  const auto h = run("data --help");
  EXPECT_EQ(h.code, 0) << h.err;
}

TEST_F(Usage, TrainerStepsAreCheckedToo) {
  if (!fs::exists(std::string(MOXI_BINARY_DIR) + "/moxi-train")) GTEST_SKIP() << "moxi-train is not built";
  for (const char* bad : {"--steps -5", "--qat-steps -1", "--batch-size 0", "--lr -0.1"}) {
    const auto r = run(std::string("train sft --recipe ") + MOXI_SOURCE_DIR +
                       "/recipes/moxi-tiny.json --out " + path("run") + " " + bad);
    EXPECT_EQ(r.code, 2) << bad << "\n" << r.err;
    EXPECT_NE(r.err.find(std::string(bad).substr(0, std::string(bad).find(' '))), std::string::npos) << r.err;
  }
  EXPECT_FALSE(fs::exists(path("run")));
}

TEST_F(Usage, TokenizerChecksInputsAndOutputBeforeTraining) {
  std::ofstream(path("corpus.txt")) << "the quick brown fox jumps over the lazy dog\n";
  expect_usage_error("tokenizer encode --tokenizer " + tiny() + "/tokenizer.json", "--text");
  expect_usage_error(
      "tokenizer encode --tokenizer " + tiny() + "/tokenizer.json --text a --input " + path("corpus.txt"),
      "--text");
  expect_usage_error("tokenizer encode --tokenizer " + path("nope.json") + " --text a", "nope.json");
  expect_usage_error("tokenizer train --input " + path("corpus.txt") + " --vocab-size 300 --out " +
                         path("no-such-dir/tok.json"),
                     "no-such-dir");
  expect_usage_error(
      "tokenizer train --input " + path("missing.txt") + " --vocab-size 300 --out " + path("tok.json"),
      "missing.txt");
  EXPECT_FALSE(fs::exists(path("tok.json")));
  // `--text ""` is an empty text given on purpose: allowed.
  const auto e = run("tokenizer encode --tokenizer " + tiny() + "/tokenizer.json --text ''");
  EXPECT_EQ(e.code, 0) << e.err;
  EXPECT_NE(e.err.find("0 bytes -> 0 tokens"), std::string::npos) << e.err;
}

// stderr is a file here, not a terminal: progress comes as whole lines, never redrawn with '\r'.
TEST_F(Usage, ProgressLinesOffATerminalHaveNoCarriageReturns) {
  std::string text;
  for (int i = 0; i < 400; ++i)
    text += "word" + std::to_string(i % 37) + " and more text " + std::to_string(i) + "\n";
  std::ofstream(path("corpus.txt")) << text;
  auto r = run("tokenizer train --input " + path("corpus.txt") +
               " --vocab-size 600 --min-frequency 1 --out " + path("tok.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err.find('\r'), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("merged tokens"), std::string::npos) << r.err;
  r = run("init --config " + cfg("tiny-kimi-linear.json") + " --out " + path("ck"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err.find('\r'), std::string::npos) << r.err;
  r = run("quantize " + path("ck") + " " + path("q"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err.find('\r'), std::string::npos) << r.err;
}

TEST_F(Usage, ExistingOutputsAreRefusedUnlessForce) {
  // A file output: data.
  ASSERT_EQ(run("data --domain math --n 2 --seed 1 --out " + path("t.jsonl")).code, 0);
  const std::string first = read_file(path("t.jsonl"));
  expect_usage_error("data --domain math --n 2 --seed 2 --out " + path("t.jsonl"), "already exists");
  EXPECT_EQ(read_file(path("t.jsonl")), first);
  ASSERT_EQ(run("data --domain math --n 2 --seed 2 --out " + path("t.jsonl") + " --force").code, 0);
  ASSERT_EQ(run("data --domain math --n 2 --seed 2 --out " + path("fresh.jsonl")).code, 0);
  EXPECT_EQ(read_file(path("t.jsonl")), read_file(path("fresh.jsonl")));
  EXPECT_NE(read_file(path("t.jsonl")), first);
  expect_usage_error("data --domain math --n 2 --out " + dir_ + " --force", "is a directory");

  // A directory output: init, then logits (a file) from it.
  ASSERT_EQ(run("init --config " + cfg("tiny-seed.json") + " --out " + path("ck") + " --seed 1").code, 0);
  const std::string shard = path("ck/model-00001-of-00001.safetensors");
  ASSERT_TRUE(fs::exists(shard));
  const std::string seed1 = read_file(shard);
  const auto r = run("init --config " + cfg("tiny-seed.json") + " --out " + path("ck") + " --seed 2");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find(path("ck") + "' already exists (--force replaces it)"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("checkpoint_writer"), std::string::npos) << "no internal names: " << r.err;
  EXPECT_EQ(read_file(shard), seed1);
  ASSERT_EQ(run("init --config " + cfg("tiny-seed.json") + " --out " + path("ck") + " --seed 2 --force").code,
            0);
  ASSERT_EQ(run("init --config " + cfg("tiny-seed.json") + " --out " + path("ck2") + " --seed 2").code, 0);
  EXPECT_EQ(read_file(shard), read_file(path("ck2/model-00001-of-00001.safetensors")));
  EXPECT_NE(read_file(shard), seed1);
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".new-"), std::string::npos) << "left behind: " << e.path();

  // --force replaces checkpoints, never other directories.
  fs::create_directories(path("notes"));
  std::ofstream(path("notes/todo.txt")) << "keep me";
  expect_usage_error("init --config " + cfg("tiny-seed.json") + " --out " + path("notes") + " --force",
                     "not a checkpoint directory");
  EXPECT_EQ(read_file(path("notes/todo.txt")), "keep me");

  ASSERT_EQ(run("logits -m " + path("ck") + " --tokens 1,2,3 --out " + path("l.safetensors")).code, 0);
  const std::string logits = read_file(path("l.safetensors"));
  expect_usage_error("logits -m " + path("ck") + " --tokens 1,2 --out " + path("l.safetensors"),
                     "already exists");
  EXPECT_EQ(read_file(path("l.safetensors")), logits);
  ASSERT_EQ(run("logits -m " + path("ck") + " --tokens 1,2 --out " + path("l.safetensors") + " --force").code,
            0);
  EXPECT_NE(read_file(path("l.safetensors")), logits);
  expect_usage_error("logits -m " + path("ck") + " --tokens 1,2 --out " + path("nowhere/l.safetensors"),
                     "nowhere");

  // quantize: OUT_DIR follows the same rule.
  ASSERT_EQ(run("init --config " + cfg("tiny-kimi-linear.json") + " --out " + path("bf16")).code, 0);
  ASSERT_EQ(run("quantize " + path("bf16") + " " + path("q")).code, 0);
  expect_usage_error("quantize " + path("bf16") + " " + path("q"), "already exists");
  const auto q = run("quantize " + path("bf16") + " " + path("q") + " --force --activations bf16");
  EXPECT_EQ(q.code, 0) << q.err;
  const auto qc = nlohmann::json::parse(read_file(path("q/config.json"))).at("quantization_config");
  EXPECT_EQ(qc.at("activation_format"), "bf16") << "the new checkpoint is in place: " << qc;
  EXPECT_EQ(run("inspect " + path("q")).code, 0);
}

TEST_F(Usage, EveryModelFlagTakesDashM) {
  ASSERT_EQ(run("init --config " + cfg("tiny-seed.json") + " --out " + path("ck") + " --seed 4").code, 0);
  const auto a = run("generate -m " + path("ck") + " --prompt Hello --max-tokens 8");
  const auto b = run("generate --model " + path("ck") + " --prompt Hello --max-tokens 8 --temperature 0");
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(b.code, 0) << b.err;
  // No --temperature: greedy, the same policy as chat (and the same text as an explicit --temperature 0).
  EXPECT_EQ(a.out, b.out);
  for (const char* cmd : {"chat", "generate", "serve", "eval", "logits"}) {
    const auto h = run(std::string(cmd) + " --help");
    EXPECT_NE(h.out.find("-m,--model"), std::string::npos) << cmd << h.out;
  }
  const auto h = run("bench serve --help");
  EXPECT_NE(h.out.find("-m,--model"), std::string::npos) << h.out;
}

// `moxi eval` keeps its required flags now that `moxi eval agent` lives under it.
TEST_F(Usage, EvalAndEvalAgentCheckTheirFlags) {
  std::ofstream(path("t.jsonl")) << "{}\n";
  expect_usage_error("eval --tasks " + path("t.jsonl"), "--model");
  expect_usage_error("eval -m " + tiny(), "--tasks");
  expect_usage_error("eval agent --agent oracle", "--tasks");
  fs::create_directories(path("tasks"));
  expect_usage_error("eval agent --tasks " + path("tasks") + " --agent bogus", "--agent");
  fs::create_directories(path("run"));
  std::ofstream(path("run/results.json")) << "{}";
  const auto t = std::string(MOXI_SOURCE_DIR) + "/tasks/terminal-bench";
  if (fs::exists(t)) expect_usage_error("eval agent --tasks " + t + " --agent null --out " + path("run"), "--force");
}

// `moxi serve DIR` as `vllm serve MODEL`: the served name is the directory's.
TEST_F(Usage, ServeTakesThePositionalModelDirectory) {
  fs::create_directories(path("my-model"));
  for (const auto& e : fs::directory_iterator(tiny()))
    fs::create_symlink(e.path(), path("my-model") / e.path().filename());
  expect_usage_error("serve " + path("my-model") + " -m " + tiny() + " --port 0", "--model");

  std::vector<std::string> args = {std::string(MOXI_BINARY_DIR) + "/moxi",
                                   "serve",
                                   path("my-model"),
                                   "--host",
                                   "127.0.0.1",
                                   "--port",
                                   "0"};
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  const std::string log = path("serve.log");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  ASSERT_EQ(posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  // Wait for the startup line (or an early exit); the model is tiny, the bound only stops a hang.
  std::string text;
  int status = 0;
  bool exited = false;
  for (int i = 0; i < 1200 && text.find("http://") == std::string::npos && !exited; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    text = read_file(log);
    exited = ::waitpid(pid, &status, WNOHANG) == pid;
  }
  if (!exited) {
    ::kill(pid, SIGTERM);
    ::waitpid(pid, &status, 0);
  }
  text = read_file(log);
  EXPECT_NE(text.find("moxi serve: my-model on http://127.0.0.1:"), std::string::npos) << text;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << text;
}

TEST_F(Usage, PlanThatDoesNotFitExitsOneAndSaysByHowMuch) {
  const std::string layout = "plan --config " + cfg("seed-2.8t.json") +
                             " --tp 8 --ep 8 --nodes 8 --device-memory 80 --context 1048576";
  const auto j = run(layout + " --json");
  EXPECT_EQ(j.code, 1) << j.err;
  const auto plan = nlohmann::json::parse(j.out);  // the plan is printed all the same
  const auto& stages = plan.at("layout").at("stages");
  ASSERT_FALSE(plan.at("layout").at("fits").get<bool>());
  const auto r = run(layout);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("does NOT fit"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("does NOT fit 80 GiB per device"), std::string::npos) << r.err;
  // Each stage over the limit is named with its need and its excess, as the JSON's byte counts give them.
  int over = 0;
  for (const auto& st : stages) {
    const double need =
        (st.at("weight_bytes_per_device").get<double>() + st.at("cache_bytes_per_device").get<double>()) /
        (1 << 30);
    if (need <= 80) continue;
    ++over;
    char line[64];
    std::snprintf(line, sizeof line, "needs %.2f GiB per device, %.2f GiB over", need, need - 80);
    EXPECT_NE(r.err.find(line), std::string::npos) << line << " not in " << r.err;
  }
  EXPECT_GT(over, 0);
  // Fits: exit 0. No layout flags: stderr says what was assumed.
  const auto ok = run("plan --config " + cfg("tiny-seed.json"));
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_NE(ok.err.find("assumed one node of 8 devices"), std::string::npos) << ok.err;
  const auto given = run("plan --config " + cfg("tiny-seed.json") + " --gpus-per-node 8");
  EXPECT_EQ(given.err.find("assumed"), std::string::npos) << given.err;
}

TEST_F(Usage, ATextFileIsNotASafetensorsFile) {
  std::ofstream(path("notes.txt")) << "hello world, this is text and not a checkpoint\n";
  const auto r = run("inspect " + path("notes.txt"));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find(path("notes.txt")), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("not a safetensors file"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("header length"), std::string::npos) << r.err;
}

TEST_F(Usage, RootHelpPointsToTheDocs) {
  const auto r = run("--help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find(std::string(MOXI_SOURCE_DIR) + "/docs"), std::string::npos) << r.out;
  const auto s = run("serve --help");
  EXPECT_EQ(s.code, 0);
  EXPECT_NE(s.out.find("EXAMPLES:\n  moxi serve models/moxi-small"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("docs/serving.md"), std::string::npos) << s.out;
}

}  // namespace
