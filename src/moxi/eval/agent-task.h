// Agentic tasks in Terminal-Bench 1.x's directory layout, loaded without Docker (docs/agent-eval.md):
// task.yaml (instruction and limits), a Dockerfile whose WORKDIR and COPY/ADD lines define the starting
// workspace, solution.sh or solution.yaml (the oracle), run-tests.sh and tests/ (run after the episode,
// hidden from the agent). What Docker would give and the sandbox does not (other base images, RUN build
// steps, services, network, remote ADD) is rejected with the Dockerfile line that needs it.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace moxi::eval {

struct agent_task {
  std::string id;   // the directory name
  std::string dir;  // the task directory
  std::string instruction;
  std::string category = "uncategorized", difficulty = "unknown";
  std::vector<std::string> tags;
  double max_agent_timeout_s = 360;  // Terminal-Bench's defaults
  double max_test_timeout_s = 60;
  std::string workdir = "/app";  // where the workspace appears (the Dockerfile's last WORKDIR)
  // Starting files: {source relative to dir, destination relative to the workspace ("" = its root)}.
  std::vector<std::pair<std::string, std::string>> copies;
  std::map<std::string, std::string> env;  // the Dockerfile's ENV
  // The oracle: a script (solution.sh) or commands (solution.yaml's `command` entries), in order.
  std::vector<std::string> solution;
};

// Loads one task directory; throws moxi::error naming the file (and line) of the first problem.
agent_task load_agent_task(const std::string& dir);

// DIR itself when it holds a task.yaml, else every subdirectory that does (sorted by name). Throws on
// the first task that does not load, or when there is none.
std::vector<agent_task> load_agent_tasks(const std::string& dir);

// The starting workspace: copies the task's COPY/ADD sources into `workspace` (an empty directory).
void stage_workspace(const agent_task& t, const std::string& workspace);

// What the verifier sees at TEST_DIR: tests/ and run-tests.sh, copied into `stage` (an empty directory).
void stage_tests(const agent_task& t, const std::string& stage);

}  // namespace moxi::eval
