// Multi-turn agentic episodes in the sandbox (`moxi eval agent`, docs/agent-eval.md): an agent gets a
// task's instruction and a persistent workspace, runs one command per turn and sees its exit code and
// (truncated) output, until it finishes or a limit ends the episode. Then the task's hidden tests run in
// the same workspace; the reward is their verdict (all passed) and the fraction passed.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "moxi/eval/agent-task.h"
#include "moxi/sandbox/sandbox.h"

namespace moxi::eval {

struct eval_model;  // evaluate.h

// What one command did, as the agent sees it.
struct observation {
  int exit_code = -1;
  std::string output;      // stdout then stderr, each cut to episode_limits::observation_bytes with a marker
  bool truncated = false;  // something was cut
  double seconds = 0;
  std::string limit;  // the sandbox limit that ended the command ("timeout", "memory", ...), else ""
};

// The agent's move: a shell command, or finishing the episode.
struct action {
  bool finish = false;
  std::string command;  // run with `bash -c` in the workspace
  std::string text;     // what the agent said (a model's raw reply), for the trajectory
  int64_t prompt_tokens = 0, reply_tokens = 0;
  // Model agents, for RL on episodes: the tokens that came before this reply and were not the model's
  // (the instruction or the last observation, with the template's markers: masked out of a loss), the
  // reply's token ids and their log-probs. Concatenating context, reply, context, reply ... gives the
  // episode's exact token sequence; context_reset says this turn's context is the whole prompt instead
  // (the template re-rendered earlier turns differently).
  std::vector<int32_t> context_token_ids;
  bool context_reset = false;
  std::vector<int32_t> token_ids;
  std::vector<float> logprobs;
};

// One episode of an agent; created per task, used by one thread.
class agent_session {
 public:
  virtual ~agent_session() = default;
  // The next move; `last` is the previous command's observation (nullptr on the first turn).
  virtual action next(const observation* last) = 0;
};

class agent {
 public:
  virtual ~agent() = default;
  virtual std::string name() const = 0;
  virtual std::unique_ptr<agent_session> start(const agent_task& t) = 0;
};

// Runs the task's solution (every command of it in order), then finishes: every shipped task must pass.
std::unique_ptr<agent> make_oracle_agent();
// Finishes at once: every shipped task must fail.
std::unique_ptr<agent> make_null_agent();

// A chat model as the agent (model-agent.cpp): the first user message is the instruction with the
// protocol (one shell command per reply, DONE when finished); each command's observation comes back as
// the next user message. Each turn renders the whole conversation with the model's chat template and
// decodes a reply (greedy unless temperature > 0), recording its token ids and log-probs. `m` must
// outlive the agent.
struct model_agent_options {
  int64_t max_tokens = 256;  // per reply
  double temperature = 0;
  uint64_t seed = 0;
};
std::unique_ptr<agent> make_model_agent(const eval_model& m, const model_agent_options& o = {});
// The command in a model's reply: the text of a ``` fence when there is one, without a leading `$ `;
// finish is true for an empty reply or DONE. Exposed for tests.
std::string command_of_reply(const std::string& reply, bool& finish);
// The user message that carries an observation back to the model.
std::string observation_message(const observation& o);

// Any OpenAI-compatible chat server as the agent (endpoint-agent.cpp), with function calling: one tool,
// `run_command` ({"command": string}); each call runs and its observation goes back as the `tool`
// message of that call id; a reply without tool calls finishes. Several calls in one reply: the first
// runs, the others are answered "not run: one command per turn". HTTP or API failures are agent errors.
struct endpoint_options {
  std::string url;      // the API base, e.g. http://127.0.0.1:8000/v1
  std::string api_key;  // sent as a bearer token when not empty
  std::string model;    // the request's "model"; empty: the first id of GET {url}/models
  int64_t max_tokens = 512;
  double temperature = 0;
  double timeout_s = 300;  // per request
};
std::unique_ptr<agent> make_endpoint_agent(const endpoint_options& o);

// A recorded episode (a trajectory file of `moxi eval agent`), read back for `moxi eval replay`.
struct recorded_episode {
  std::string task;                   // the task id of the start event
  std::vector<std::string> commands;  // the actions that ran a command, in order
  std::vector<observation> observations;
  bool pass = false;  // the recorded verdict
  int tests_passed = 0, tests_total = 0;
};
// Throws moxi::error naming the file and line of the first event it cannot read.
recorded_episode read_trajectory(const std::string& path);
// Runs the recorded commands again, in order, then finishes.
std::unique_ptr<agent> make_replay_agent(const recorded_episode& e);

struct episode_limits {
  int max_turns = 30;
  double command_timeout_s = 60;  // per command, also capped by the time left in the episode
  double episode_timeout_s = 0;   // 0: the task's max_agent_timeout_sec
  uint64_t observation_bytes = 4096;  // per stream shown to the agent
  uint64_t output_bytes = 1 << 20;    // captured per stream and command (the rest is only counted)
  uint64_t episode_output_bytes = 16 << 20;  // all commands' stdout + stderr together; past it the episode ends
  sandbox::limits sandbox;            // memory, pids, disk ... of every command and of the tests
};

struct episode_result {
  std::string id, category, difficulty;
  bool pass = false;
  int tests_passed = 0, tests_total = 0;
  int turns = 0;  // commands run
  int64_t prompt_tokens = 0, reply_tokens = 0;
  double seconds = 0;       // the whole episode, tests included
  std::string stop;         // "finished", "max_turns", "timeout", "output", or "error"
  std::string error;        // an infrastructure failure (setup, sandbox, agent): not a verdict
  std::string test_output;  // the tests' output (cut to 16 KB)
};

struct episode_options {
  episode_limits limits;
  std::string work_dir;        // per-episode workspaces are made under it (must exist)
  bool keep_workspace = false;  // leave WORK_DIR/<id>/ after the episode
  std::string trajectory;       // append the episode's events here as JSONL ("" = none)
};

// Runs one episode and its tests. Never throws for what the agent or its commands do; a setup or sandbox
// failure becomes result.error. Throws moxi::interrupted on SIGINT/SIGTERM under an interrupt_guard.
episode_result run_episode(const agent_task& t, agent& a, const episode_options& opt);

// Tests passed and run, from pytest's final "N failed, M passed in Ts" line, else (a run killed before
// it) from the -rA summary's PASSED/FAILED/ERROR lines; {0, 0} when neither is there.
std::pair<int, int> pytest_counts(const std::string& output);

nlohmann::json to_json(const episode_result& r);

// results.json of a run: the records plus the pass rate overall and per category.
nlohmann::json results_json(const std::string& agent_name, const std::vector<episode_result>& results,
                            double seconds);

}  // namespace moxi::eval
