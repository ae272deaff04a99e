// Terminal-Bench task directories (task.yaml, Dockerfile, solution, run-tests.sh, tests/) and multi-turn
// episodes in the sandbox: the loader against the format's rules (docs/agent-eval.md), episodes against
// what their commands must observably do, and pytest's counts against a real pytest run.
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/temp-dir.h"
#include "moxi/base/error.h"
#include "moxi/eval/agent-task.h"
#include "moxi/eval/episode.h"
#include "moxi/eval/evaluate.h"
#include "moxi/runtime/local-model.h"

namespace {
namespace fs = std::filesystem;
using moxi::testing::temp_dir_test;
using namespace moxi::eval;

void write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

const char* kYaml =
    "# a task\n"
    "instruction: |-\n"
    "  Write the number of lines of /app/in.txt to /app/count.txt.\n"
    "author_name: moxi\n"
    "difficulty: easy\n"
    "category: work\n"
    "tags: [wc, files]\n"
    "parser_name: pytest\n"
    "max_agent_timeout_sec: 50\n"
    "max_test_timeout_sec: 20\n"
    "run_tests_in_same_shell: false\n";

const char* kTests =
    "from pathlib import Path\n"
    "def test_exists():\n"
    "    assert Path('/app/count.txt').exists()\n"
    "def test_value():\n"
    "    assert Path('/app/count.txt').read_text().split() == ['3']\n"
    "def test_input_kept():\n"
    "    assert Path('/app/in.txt').read_text() == 'a\\nb\\nc\\n'\n";

// A complete task in dir/name; `dockerfile` replaces the default one.
std::string make_task(const std::string& dir, const std::string& name, const std::string& dockerfile = "") {
  const std::string t = dir + "/" + name;
  write(t + "/task.yaml", kYaml);
  write(t + "/Dockerfile", dockerfile.empty() ? "FROM debian:bookworm-slim\nWORKDIR /app\nCOPY in.txt /app/in.txt\n"
                                              : dockerfile);
  write(t + "/in.txt", "a\nb\nc\n");
  write(t + "/solution.sh", "#!/bin/bash\nset -euo pipefail\nwc -l < /app/in.txt > /app/count.txt\n");
  write(t + "/run-tests.sh",
        "#!/bin/bash\npython3 -m pytest -rA -p no:cacheprovider \"$TEST_DIR/test_outputs.py\"\n");
  write(t + "/tests/test_outputs.py", kTests);
  return t;
}

class AgentTask : public temp_dir_test {};

TEST_F(AgentTask, LoadsTheFieldsAndTheStartingFiles) {
  const auto dir = make_task(dir_, "count-lines",
                             "# comment\nFROM debian:12-slim\nWORKDIR /app\nENV GREETING=hi MODE=\"fast\"\n"
                             "COPY in.txt /app/in.txt\nCOPY data/ /app/data/\nCOPY [\"notes.md\", \"docs/\"]\n"
                             "ADD extra.txt \\\n  /app/x/renamed.txt\nUSER nobody\n");
  write(dir + "/data/a.csv", "1,2\n");
  write(dir + "/data/sub/b.csv", "3,4\n");
  write(dir + "/notes.md", "# notes\n");
  write(dir + "/extra.txt", "extra\n");
  const auto t = load_agent_task(dir);
  EXPECT_EQ(t.id, "count-lines");
  EXPECT_EQ(t.instruction, "Write the number of lines of /app/in.txt to /app/count.txt.");
  EXPECT_EQ(t.category, "work");
  EXPECT_EQ(t.difficulty, "easy");
  EXPECT_EQ(t.tags, (std::vector<std::string>{"wc", "files"}));
  EXPECT_EQ(t.max_agent_timeout_s, 50);
  EXPECT_EQ(t.max_test_timeout_s, 20);
  EXPECT_EQ(t.workdir, "/app");
  EXPECT_EQ(t.env, (std::map<std::string, std::string>{{"GREETING", "hi"}, {"MODE", "fast"}}));
  ASSERT_EQ(t.solution.size(), 1u);
  const std::string ws = path("ws");
  fs::create_directories(ws);
  stage_workspace(t, ws);
  EXPECT_EQ(read(ws + "/in.txt"), "a\nb\nc\n");
  EXPECT_EQ(read(ws + "/data/a.csv"), "1,2\n");  // a directory's contents, into the destination
  EXPECT_EQ(read(ws + "/data/sub/b.csv"), "3,4\n");
  EXPECT_EQ(read(ws + "/docs/notes.md"), "# notes\n");  // relative to WORKDIR, into a directory
  EXPECT_EQ(read(ws + "/x/renamed.txt"), "extra\n");
  EXPECT_FALSE(fs::exists(ws + "/tests"));
  EXPECT_FALSE(fs::exists(ws + "/solution.sh"));
}

TEST_F(AgentTask, TerminalBenchDefaultsAndSolutionYaml) {
  const auto dir = make_task(dir_, "t");
  write(dir + "/task.yaml", "instruction: do it\n");
  fs::remove(dir + "/solution.sh");
  write(dir + "/solution.yaml", "- command: echo one > a\n  min_timeout_sec: 1\n- command: echo two > b\n");
  const auto t = load_agent_task(dir);
  EXPECT_EQ(t.max_agent_timeout_s, 360);  // Terminal-Bench 1.x defaults
  EXPECT_EQ(t.max_test_timeout_s, 60);
  EXPECT_EQ(t.solution, (std::vector<std::string>{"echo one > a", "echo two > b"}));
}

TEST_F(AgentTask, CopyDotLeavesTheHarnessFilesOut) {
  const auto dir = make_task(dir_, "t", "FROM debian:bookworm\nWORKDIR /app\nCOPY . /app/\n");
  const auto t = load_agent_task(dir);
  const std::string ws = path("ws");
  fs::create_directories(ws);
  stage_workspace(t, ws);
  EXPECT_TRUE(fs::exists(ws + "/in.txt"));
  for (const char* hidden : {"tests", "solution.sh", "run-tests.sh", "task.yaml", "Dockerfile"})
    EXPECT_FALSE(fs::exists(ws + "/" + hidden)) << hidden;
}

// Every Dockerfile the sandbox cannot honour is refused, naming its line and the reason.
TEST_F(AgentTask, RefusesWhatNeedsDockerNamingTheLine) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"FROM ubuntu:24.04\nWORKDIR /app\n", ":1: FROM ubuntu:24.04: the sandbox runs the host's Debian 12"},
      {"FROM debian:bookworm\nRUN apt-get install -y jq\n", ":2: RUN apt-get install -y jq: RUN is a build step"},
      {"FROM debian:bookworm\nWORKDIR /app\nADD https://example.com/x.tgz /app/\n", ":3: ADD https://"},
      {"FROM debian:bookworm\nWORKDIR /app\nCOPY in.txt /etc/in.txt\n", "outside WORKDIR /app"},
      {"FROM debian:bookworm\nWORKDIR /app\nCMD [\"python3\", \"-m\", \"http.server\"]\n", ":3: CMD"},
      {"FROM debian:bookworm AS a\nFROM debian:bookworm\n", ":2: FROM debian:bookworm: a second FROM"},
      {"FROM debian:bookworm\nWORKDIR /app\nCOPY --from=build /x /app/x\n", ":3: COPY --from=build"},
      {"FROM debian:bookworm\nWORKDIR /app\nCOPY *.txt /app/\n", "wildcard"},
      {"FROM debian:bookworm\nWORKDIR /app\nCOPY ../secret /app/\n", "outside the task directory"},
      {"FROM debian:bookworm\nWORKDIR /app\nCOPY missing.txt /app/\n", "does not exist"},
      {"FROM debian:bookworm\nWORKDIR /app\nCOPY linked/hostname /app/\n", "through a link"},
      {"FROM debian:bookworm\nWORKDIR /usr/src\n", "WORKDIR /usr/src cannot hold the workspace"},
      {"WORKDIR /app\n", ":1: WORKDIR /app: the first instruction must be FROM"},
      {"FROM debian:bookworm\nFROBNICATE x\n", ":2: FROBNICATE x: unknown instruction"},
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    const auto dir = make_task(dir_, "t" + std::to_string(i), bad[i].first);
    fs::create_directory_symlink("/etc", dir + "/linked");  // a linked directory on a source's way
    try {
      load_agent_task(dir);
      ADD_FAILURE() << "accepted:\n" << bad[i].first;
    } catch (const moxi::error& e) {
      EXPECT_NE(std::string(e.what()).find(bad[i].second), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("Dockerfile"), std::string::npos) << e.what();
    }
  }
}

TEST_F(AgentTask, RefusesBadTaskYaml) {
  const auto dir = make_task(dir_, "t");
  for (const auto& [yaml, want] : std::vector<std::pair<std::string, std::string>>{
           {"author_name: x\n", "no 'instruction'"},
           {"instruction: [a, b]\n", "'instruction' must be a string"},
           {"instruction: x\nmax_agent_timeout_sec: -5\n", "max_agent_timeout_sec"},
           {"instruction: x\nparser_name: swebench\n", "parser_name 'swebench' is not supported"},
           {"instruction: x\n  bad: indent: here\n", "task.yaml:"},
       }) {
    write(dir + "/task.yaml", yaml);
    try {
      load_agent_task(dir);
      ADD_FAILURE() << "accepted " << yaml;
    } catch (const moxi::error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
  write(dir + "/task.yaml", kYaml);
  fs::remove(dir + "/run-tests.sh");
  EXPECT_THROW(load_agent_task(dir), moxi::error);
}

// pytest's own output (a real run of Debian's python3-pytest, not a transcript) gives the counts.
TEST_F(AgentTask, PytestCountsMatchARealRun) {
  write(path("t/test_x.py"), "def test_a(): pass\ndef test_b(): pass\ndef test_c(): assert 0\n");
  const std::string cmd = "cd " + path("t") + " && /usr/bin/python3 -m pytest -rA -p no:cacheprovider test_x.py > " +
                          path("out.txt") + " 2>&1; /usr/bin/python3 -m pytest -p no:cacheprovider -q test_x.py > " +
                          path("quiet.txt") + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()) >= 0, true);
  EXPECT_EQ(pytest_counts(read(path("out.txt"))), std::make_pair(2, 3)) << read(path("out.txt"));
  EXPECT_EQ(pytest_counts(read(path("quiet.txt"))), std::make_pair(2, 3)) << read(path("quiet.txt"));
  EXPECT_EQ(pytest_counts("no tests ran"), std::make_pair(0, 0));
  // A run killed before its final line: the -rA lines that made it out.
  std::string out = read(path("out.txt"));
  out = out.substr(0, out.rfind("FAILED test_x.py::test_c")) + "FAILED test_x.py::test_c\n";
  EXPECT_EQ(pytest_counts(out), std::make_pair(2, 3)) << out;
}

// An agent that runs a fixed list of commands and keeps what it observed.
struct scripted : agent {
  std::vector<std::string> commands;
  std::vector<observation> seen;
  std::string name() const override { return "scripted"; }
  std::unique_ptr<agent_session> start(const agent_task&) override {
    struct session : agent_session {
      scripted* owner;
      size_t i = 0;
      explicit session(scripted* o) : owner(o) {}
      action next(const observation* last) override {
        if (last) owner->seen.push_back(*last);
        action a;
        if (i >= owner->commands.size()) {
          a.finish = true;
        } else {
          a.command = owner->commands[i++];
        }
        return a;
      }
    };
    return std::make_unique<session>(this);
  }
};

class Episode : public temp_dir_test {
 protected:
  // The sandbox's uid must reach the workspaces (mkdtemp makes the test directory 0700).
  void SetUp() override { fs::permissions(dir_, fs::perms(0755)); }
  episode_options options() {
    episode_options o;
    o.work_dir = path("work");
    fs::create_directories(o.work_dir);
    o.trajectory = path("trajectory.jsonl");
    o.limits.sandbox.use_cgroup = false;
    return o;
  }
};

TEST_F(Episode, OraclePassesNullFails) {
  const auto t = load_agent_task(make_task(dir_, "count"));
  auto oracle = make_oracle_agent();
  const auto r = run_episode(t, *oracle, options());
  EXPECT_TRUE(r.pass) << r.error << r.test_output;
  EXPECT_EQ(r.tests_passed, 3);
  EXPECT_EQ(r.tests_total, 3);
  EXPECT_EQ(r.turns, 1);
  EXPECT_EQ(r.stop, "finished");
  auto null = make_null_agent();
  const auto n = run_episode(t, *null, options());
  EXPECT_FALSE(n.pass);
  EXPECT_EQ(n.tests_passed, 1);  // the input is still there; the count is not
  EXPECT_EQ(n.tests_total, 3);
  EXPECT_EQ(n.turns, 0);
  EXPECT_TRUE(n.error.empty()) << n.error;
  EXPECT_FALSE(fs::exists(path("work/count"))) << "the episode's workspace is removed";
}

TEST_F(Episode, CommandsShareTheWorkspaceAndSeeTheirOutput) {
  const auto t = load_agent_task(make_task(dir_, "count"));
  scripted a;
  a.commands = {"pwd; ls", "echo 3 > count.txt; echo to-stderr >&2; exit 7", "cat count.txt",
                "ls /tests solution.sh 2>&1; true", "head -c 10000 /dev/zero | tr '\\0' x"};
  auto o = options();
  o.limits.observation_bytes = 100;
  const auto r = run_episode(t, a, o);
  ASSERT_EQ(a.seen.size(), 5u);
  EXPECT_EQ(a.seen[0].output, "/app\nin.txt\n");  // WORKDIR, the starting files only
  EXPECT_EQ(a.seen[1].exit_code, 7);
  EXPECT_EQ(a.seen[1].output, "to-stderr\n");
  EXPECT_EQ(a.seen[2].output, "3\n");  // state persists between turns
  EXPECT_NE(a.seen[3].output.find("No such file"), std::string::npos) << "tests and solution are hidden";
  EXPECT_TRUE(a.seen[4].truncated);
  EXPECT_EQ(a.seen[4].output, std::string(100, 'x') + "\n[... 9900 more bytes not shown]\n");
  EXPECT_TRUE(r.pass) << r.test_output;  // the agent wrote the right count
  EXPECT_EQ(r.turns, 5);
  // The trajectory has every action and observation, then the tests and the result.
  std::ifstream in(path("trajectory.jsonl"));
  std::vector<std::string> events;
  for (std::string line; std::getline(in, line);) events.push_back(nlohmann::json::parse(line).at("event"));
  ASSERT_EQ(events.size(), 1u + 5 * 2 + 1 + 2);
  EXPECT_EQ(events.front(), "start");
  EXPECT_EQ(events[1], "action");
  EXPECT_EQ(events[2], "observation");
  EXPECT_EQ(events[events.size() - 2], "tests");
  EXPECT_EQ(events.back(), "result");
}

TEST_F(Episode, LimitsEndTheEpisode) {
  const auto t = load_agent_task(make_task(dir_, "count"));
  scripted a;
  a.commands = {"sleep 5", "true", "true", "true"};
  auto o = options();
  o.limits.command_timeout_s = 0.5;
  o.limits.max_turns = 2;
  const auto r = run_episode(t, a, o);
  ASSERT_GE(a.seen.size(), 1u);
  EXPECT_EQ(a.seen[0].limit, "timeout");
  EXPECT_LT(a.seen[0].seconds, 4);
  EXPECT_EQ(r.turns, 2);
  EXPECT_EQ(r.stop, "max_turns");
  EXPECT_FALSE(r.pass);
  scripted slow;
  slow.commands = {"sleep 1", "sleep 1", "sleep 1"};
  o.limits.max_turns = 30;
  o.limits.command_timeout_s = 5;
  o.limits.episode_timeout_s = 1.5;
  const auto s = run_episode(t, slow, o);
  EXPECT_EQ(s.stop, "timeout");
  EXPECT_LE(s.turns, 2);
  // The episode's output budget: 3000 bytes a command against 5000 in all ends it after two.
  scripted loud;
  loud.commands = {"head -c 3000 /dev/zero", "head -c 3000 /dev/zero", "head -c 3000 /dev/zero", "true"};
  o.limits.episode_timeout_s = 0;
  o.limits.episode_output_bytes = 5000;
  const auto l = run_episode(t, loud, o);
  EXPECT_EQ(l.stop, "output");
  EXPECT_EQ(l.turns, 2);
}

TEST_F(Episode, ResultsSummarizePerCategory) {
  std::vector<episode_result> rs(3);
  rs[0].category = "work", rs[0].pass = true;
  rs[1].category = "work";
  rs[2].category = "coding", rs[2].error = "sandbox: boom";
  const auto j = results_json("oracle", rs, 1.5);
  EXPECT_EQ(j.at("overall").at("tasks"), 3);
  EXPECT_EQ(j.at("overall").at("errors"), 1);
  EXPECT_DOUBLE_EQ(j.at("overall").at("pass_rate").get<double>(), 0.5);  // errors are not judged
  EXPECT_DOUBLE_EQ(j.at("by_category").at("work").at("pass_rate").get<double>(), 0.5);
  EXPECT_EQ(j.at("tasks").size(), 3u);
}

}  // namespace

namespace {

TEST(ModelAgent, ACommandIsTheReplyOrItsFence) {
  bool finish = true;
  EXPECT_EQ(command_of_reply("  wc -l notes.txt\n", finish), "wc -l notes.txt");
  EXPECT_FALSE(finish);
  EXPECT_EQ(command_of_reply("```sh\nsort a.txt | uniq\n```", finish), "sort a.txt | uniq");
  EXPECT_FALSE(finish);
  EXPECT_EQ(command_of_reply("$ ls -la", finish), "ls -la");
  EXPECT_EQ(command_of_reply("for f in *; do\n  echo $f\ndone", finish), "for f in *; do\n  echo $f\ndone");
  for (const char* done : {"DONE", "done.", "  Done \n", ""}) {
    EXPECT_EQ(command_of_reply(done, finish), "") << done;
    EXPECT_TRUE(finish) << done;
  }
  observation o;
  o.exit_code = 124;
  o.limit = "timeout";
  EXPECT_EQ(observation_message(o), "exit code 124 (stopped: timeout limit)\n(no output)");
  o.exit_code = 0;
  o.limit = "";
  o.output = "3 notes.txt\n";
  EXPECT_EQ(observation_message(o), "exit code 0\n3 notes.txt\n");
}

}  // namespace

namespace {

// The bundled tiny model as the agent: a real episode, whatever it types, with the reply's token ids and
// their log-probs in the trajectory, the conversation growing each turn.
TEST_F(Episode, AModelAgentPlaysThroughTheChatTemplate) {
  const auto t = load_agent_task(make_task(dir_, "count"));
  const auto lm = moxi::runtime::local_model::load(std::string(MOXI_SOURCE_DIR) + "/models/moxi-tiny");
  const eval_model m = eval_model_of(lm);
  model_agent_options mo;
  mo.max_tokens = 24;
  auto a = make_model_agent(m, mo);
  auto o = options();
  o.limits.max_turns = 3;
  const auto r = run_episode(t, *a, o);
  EXPECT_TRUE(r.error.empty()) << r.error;
  EXPECT_GE(r.turns, 0);
  EXPECT_LE(r.turns, 3);
  std::ifstream in(path("trajectory.jsonl"));
  int actions = 0;
  int64_t last_prompt = 0;
  std::vector<int64_t> sequence;
  for (std::string line; std::getline(in, line);) {
    const auto e = nlohmann::json::parse(line);
    if (e.at("event") != "action") continue;
    ++actions;
    const auto ids = e.at("token_ids"), lps = e.at("logprobs");
    EXPECT_EQ(int64_t(ids.size()), e.at("reply_tokens").get<int64_t>());
    EXPECT_EQ(ids.size(), lps.size());
    for (const auto& lp : lps) EXPECT_LE(lp.get<double>(), 1e-6);
    EXPECT_GT(e.at("prompt_tokens").get<int64_t>(), last_prompt) << "each turn sees the whole conversation";
    // Contexts and replies add up to each prompt. moxi-tiny's template renders a past reply differently
    // from how it was generated, so a later turn's context starts over (context_reset); the moxi-small
    // template keeps it (AModelAgentRecordsTheEpisodesExactTokens).
    if (e.value("context_reset", false)) sequence.clear();
    for (const auto& id : e.at("context_token_ids")) sequence.push_back(id);
    EXPECT_EQ(int64_t(sequence.size()), e.at("prompt_tokens").get<int64_t>());
    for (const auto& id : ids) sequence.push_back(id);
    last_prompt = e.at("prompt_tokens");
    // Greedy: the first token is the model's most likely one, so its probability is at least 1 / vocab.
    if (!lps.empty()) {
      EXPECT_GE(lps[0].get<double>(), -std::log(double(lm.tok.vocab_size())));
    }
  }
  EXPECT_EQ(actions, std::min(r.turns + 1, 3 + (r.stop == "finished")));
}

}  // namespace

namespace {

// A scripted OpenAI-compatible server: replies in order, and keeps every request body it got.
struct fake_openai {
  httplib::Server server;
  std::vector<nlohmann::json> replies, requests;
  std::string key = "sk-test";
  int port = 0;
  std::thread thread;
  fake_openai() {
    server.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      if (req.get_header_value("Authorization") != "Bearer " + key) {
        res.status = 401;
        res.set_content(R"({"error":{"message":"bad key"}})", "application/json");
        return;
      }
      requests.push_back(nlohmann::json::parse(req.body));
      const size_t i = requests.size() - 1;
      res.set_content((i < replies.size() ? replies[i] : replies.back()).dump(), "application/json");
    });
    server.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"object":"list","data":[{"id":"fake-model","object":"model"}]})", "application/json");
    });
    port = server.bind_to_any_port("127.0.0.1");
    thread = std::thread([this] { server.listen_after_bind(); });
    while (!server.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~fake_openai() {
    server.stop();
    thread.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port) + "/v1"; }
};

nlohmann::json tool_reply(const std::vector<std::pair<std::string, std::string>>& calls) {
  nlohmann::json tc = nlohmann::json::array();
  for (const auto& [id, cmd] : calls)
    tc.push_back({{"id", id},
                  {"type", "function"},
                  {"function", {{"name", "run_command"}, {"arguments", nlohmann::json{{"command", cmd}}.dump()}}}});
  return {{"choices", {{{"index", 0}, {"message", {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", tc}}},
                        {"finish_reason", "tool_calls"}}}},
          {"usage", {{"prompt_tokens", 50}, {"completion_tokens", 7}}}};
}

nlohmann::json text_reply(const std::string& text) {
  return {{"choices", {{{"index", 0}, {"message", {{"role", "assistant"}, {"content", text}}}, {"finish_reason", "stop"}}}},
          {"usage", {{"prompt_tokens", 90}, {"completion_tokens", 3}}}};
}

TEST_F(Episode, AnEndpointAgentRunsToolCallsAndGetsToolMessagesBack) {
  const auto t = load_agent_task(make_task(dir_, "count"));
  fake_openai api;
  api.replies = {tool_reply({{"call_a", "wc -l < in.txt > count.txt"}, {"call_b", "rm -rf ."}}),
                 tool_reply({{"call_c", "cat count.txt"}}), text_reply("The count is in count.txt.")};
  endpoint_options eo;
  eo.url = api.url();
  eo.api_key = api.key;  // no model: the first of GET /models
  auto a = make_endpoint_agent(eo);
  EXPECT_EQ(a->name(), "endpoint:fake-model");
  const auto r = run_episode(t, *a, options());
  EXPECT_TRUE(r.error.empty()) << r.error;
  EXPECT_TRUE(r.pass) << r.test_output;  // call_b never ran, or in.txt would be gone
  EXPECT_EQ(r.turns, 2);
  EXPECT_EQ(r.stop, "finished");
  EXPECT_EQ(r.prompt_tokens, 50 + 50 + 90);
  ASSERT_EQ(api.requests.size(), 3u);
  const auto& first = api.requests[0];
  EXPECT_EQ(first.at("model"), "fake-model");
  EXPECT_EQ(first.at("tools")[0].at("function").at("name"), "run_command");
  EXPECT_EQ(first.at("messages").back().at("content"), t.instruction);
  // Every call of a reply is answered, in order, by a tool message with its id; only the first ran.
  const auto& m = api.requests[1].at("messages");
  ASSERT_GE(m.size(), 5u);
  EXPECT_EQ(m[m.size() - 3].at("tool_calls").size(), 2u);
  EXPECT_EQ(m[m.size() - 2].at("role"), "tool");
  EXPECT_EQ(m[m.size() - 2].at("tool_call_id"), "call_a");
  EXPECT_EQ(m[m.size() - 2].at("content"), "exit code 0\n(no output)");
  EXPECT_EQ(m.back().at("tool_call_id"), "call_b");
  EXPECT_EQ(m.back().at("content"), "not run: run one command per turn");
  EXPECT_EQ(api.requests[2].at("messages").back().at("content"), "exit code 0\n3\n");

  // A rejected key is an agent error, not a verdict.
  eo.api_key = "wrong";
  eo.model = "fake-model";
  auto bad = make_endpoint_agent(eo);
  const auto e = run_episode(t, *bad, options());
  EXPECT_EQ(e.stop, "error");
  EXPECT_NE(e.error.find("HTTP 401"), std::string::npos) << e.error;
  EXPECT_THROW(make_endpoint_agent({"ftp://x", "", "m"}), moxi::error);
}

}  // namespace

namespace {

TEST_F(Episode, ATrajectoryReadsBackAndReplaysTheSame) {
  const auto t = load_agent_task(make_task(dir_, "count"));
  scripted a;
  a.commands = {"echo hi > a.txt", "cat a.txt", "wc -l < in.txt > count.txt"};
  auto o = options();
  const auto r = run_episode(t, a, o);
  ASSERT_TRUE(r.pass) << r.test_output;
  const auto rec = read_trajectory(o.trajectory);
  EXPECT_EQ(rec.task, "count");
  EXPECT_EQ(rec.commands, a.commands);
  ASSERT_EQ(rec.observations.size(), 3u);
  EXPECT_EQ(rec.observations[1].output, "hi\n");
  EXPECT_TRUE(rec.pass);
  EXPECT_EQ(rec.tests_total, 3);
  auto replay = make_replay_agent(rec);
  o.trajectory = path("replay.jsonl");
  const auto again = run_episode(t, *replay, o);
  EXPECT_TRUE(again.pass);
  EXPECT_EQ(again.turns, 3);
  const auto rec2 = read_trajectory(o.trajectory);
  ASSERT_EQ(rec2.observations.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(rec2.observations[i].output, rec.observations[i].output);
    EXPECT_EQ(rec2.observations[i].exit_code, rec.observations[i].exit_code);
  }
  // A trajectory cut before its result is refused, naming the problem.
  std::ifstream in(path("trajectory.jsonl"));
  std::string first;
  std::getline(in, first);
  std::ofstream(path("cut.jsonl")) << first << "\n";
  EXPECT_THROW(read_trajectory(path("cut.jsonl")), moxi::error);
  std::ofstream(path("garbage.jsonl")) << first << "\n{\"event\": \"observation\"}\n";
  try {
    read_trajectory(path("garbage.jsonl"));
    ADD_FAILURE();
  } catch (const moxi::error& e) {
    EXPECT_NE(std::string(e.what()).find("garbage.jsonl:2"), std::string::npos) << e.what();
  }
}

}  // namespace

namespace {

// With moxi-small's template (a past reply renders exactly as generated) the contexts are only what each
// turn added: the observation and the template's markers, whenever the reply's text encodes back to the
// reply's tokens.
TEST_F(Episode, AModelAgentRecordsTheEpisodesExactTokens) {
  auto t = load_agent_task(make_task(dir_, "count"));
  // Worded like moxi-small's training requests, so that its replies are short commands that end with a stop
  // token (the property below needs a turn that follows a finished reply; an instruction the model never saw
  // can make every reply run to max_tokens).
  t.instruction = "How many lines are in in.txt? Reply with one shell command.";
  const auto lm = moxi::runtime::local_model::load(std::string(MOXI_SOURCE_DIR) + "/models/moxi-small");
  const eval_model m = eval_model_of(lm);
  model_agent_options mo;
  mo.max_tokens = 64;
  auto a = make_model_agent(m, mo);
  auto o = options();
  o.limits.max_turns = 3;
  const auto r = run_episode(t, *a, o);
  ASSERT_TRUE(r.error.empty()) << r.error;
  std::ifstream in(path("trajectory.jsonl"));
  std::vector<int64_t> sequence;
  bool ended = true;  // the previous reply ended with a stop token (the first turn has none)
  int later = 0;
  for (std::string line; std::getline(in, line);) {
    const auto e = nlohmann::json::parse(line);
    if (e.at("event") != "action") continue;
    // A reply the tokenizer would encode differently (BPE need not give the model's own split back) makes
    // the next turn start over; otherwise the turn extends the sequence.
    if (ended && !e.value("context_reset", false)) later += !sequence.empty();
    if (e.value("context_reset", false)) sequence.clear();
    for (const auto& id : e.at("context_token_ids")) sequence.push_back(id);
    EXPECT_EQ(int64_t(sequence.size()), e.at("prompt_tokens").get<int64_t>());
    const auto ids = e.at("token_ids");
    for (const auto& id : ids) sequence.push_back(id);
    ended = !ids.empty() && std::find(lm.stop_tokens.begin(), lm.stop_tokens.end(), ids.back().get<int>()) !=
                                lm.stop_tokens.end();
  }
  EXPECT_GE(later, 1) << "no later turn extended the sequence";
}

}  // namespace
