// The shipped agentic suite (tasks/terminal-bench, docs/agent-eval.md): every task loads, passes with its
// oracle solution and fails with the null agent, so each task is solvable and its tests check something.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "common/temp-dir.h"
#include "moxi/eval/agent-task.h"
#include "moxi/eval/episode.h"

namespace {
namespace fs = std::filesystem;
using namespace moxi::eval;

const std::string kSuite = std::string(MOXI_SOURCE_DIR) + "/tasks/terminal-bench";

class AgentSuite : public moxi::testing::temp_dir_test {
 protected:
  void SetUp() override { fs::permissions(dir_, fs::perms(0755)); }  // the sandbox uid reaches workspaces

  // Every task with `a`, four episodes at a time (they mostly wait on process start-up).
  std::vector<episode_result> run_all(const std::vector<agent_task>& tasks, agent& a, const std::string& sub) {
    std::vector<episode_result> out(tasks.size());
    std::atomic<size_t> next{0};
    episode_options o;
    o.work_dir = path(sub);
    fs::create_directories(o.work_dir);
    o.limits.sandbox.use_cgroup = false;
    std::vector<std::thread> threads;
    for (int k = 0; k < 4; ++k) {
      threads.emplace_back([&] {
        for (size_t i = next++; i < tasks.size(); i = next++) out[i] = run_episode(tasks[i], a, o);
      });
    }
    for (auto& t : threads) t.join();
    return out;
  }
};

TEST_F(AgentSuite, EveryTaskPassesWithItsOracleAndFailsWithNull) {
  const auto tasks = load_agent_tasks(kSuite);
  std::map<std::string, int> per_category;
  std::set<std::string> ids;
  for (const auto& t : tasks) {
    ++per_category[t.category];
    EXPECT_TRUE(ids.insert(t.id).second) << t.id;
    EXPECT_EQ(t.id.substr(0, t.id.find('-')), t.category) << t.id << ": ids start with their category";
    EXPECT_FALSE(t.solution.empty()) << t.id;
    EXPECT_EQ(t.workdir, "/app") << t.id;
  }
  EXPECT_GE(tasks.size(), 60u);
  for (const char* c : {"work", "coding", "chat"}) EXPECT_GE(per_category[c], 10) << c;
  EXPECT_EQ(per_category.size(), 3u);

  auto oracle = make_oracle_agent();
  const auto good = run_all(tasks, *oracle, "oracle");
  auto null = make_null_agent();
  const auto none = run_all(tasks, *null, "null");
  for (size_t i = 0; i < tasks.size(); ++i) {
    EXPECT_TRUE(good[i].pass) << tasks[i].id << ": the oracle fails: " << good[i].error << "\n"
                              << good[i].test_output;
    EXPECT_EQ(good[i].tests_passed, good[i].tests_total) << tasks[i].id;
    EXPECT_TRUE(none[i].error.empty()) << tasks[i].id << ": " << none[i].error;
    EXPECT_FALSE(none[i].pass) << tasks[i].id << ": passes with no agent at all";
    EXPECT_GE(good[i].tests_total, 2) << tasks[i].id << ": a partial solution should be able to pass some";
  }
}

}  // namespace
