// Generated terminal tasks in Terminal-Bench's layout: every one loads, passes with its oracle (the
// reference as solution.sh) and fails with the null agent, in all four compare modes; the directory is
// replaced only when this exporter wrote it.
#include "moxi/eval/terminal-bench-export.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "common/temp-dir.h"
#include "moxi/base/error.h"
#include "moxi/eval/agent-task.h"
#include "moxi/eval/episode.h"
#include "moxi/eval/task-generator.h"

namespace {
namespace fs = std::filesystem;
using namespace moxi::eval;

class TerminalBenchExport : public moxi::testing::temp_dir_test {
 protected:
  void SetUp() override { fs::permissions(dir_, fs::perms(0755)); }  // the sandbox uid reaches workspaces
};

TEST_F(TerminalBenchExport, OraclePassesAndNullFailsInEveryCompareMode) {
  auto tasks = generate_tasks(domain::terminal, split::train, 16, 3);
  for (auto& t : generate_tasks(domain::terminal, split::test, 8, 3)) tasks.push_back(std::move(t));
  std::set<int> modes;
  for (const auto& t : tasks) modes.insert(int(t.compare));
  ASSERT_EQ(modes.size(), 4u) << "the sample covers stdout, lines, count and files";
  write_terminal_bench(tasks, path("tb"));
  const auto loaded = load_agent_tasks(path("tb"));
  ASSERT_EQ(loaded.size(), tasks.size());
  auto oracle = make_oracle_agent();
  auto null = make_null_agent();
  episode_options o;
  o.work_dir = path("work");
  fs::create_directories(o.work_dir);
  o.limits.sandbox.use_cgroup = false;
  std::vector<episode_result> good(loaded.size()), none(loaded.size());
  std::atomic<size_t> next{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&] {
      for (size_t i = next++; i < loaded.size(); i = next++) {
        good[i] = run_episode(loaded[i], *oracle, o);
        none[i] = run_episode(loaded[i], *null, o);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < loaded.size(); ++i) {
    EXPECT_TRUE(good[i].pass) << loaded[i].id << ": " << good[i].error << "\n" << good[i].test_output;
    EXPECT_FALSE(none[i].pass) << loaded[i].id << " passes with no agent";
    EXPECT_TRUE(none[i].error.empty()) << none[i].error;
    EXPECT_EQ(good[i].tests_total, 3) << loaded[i].id;
  }
}

TEST_F(TerminalBenchExport, ReplacesOnlyWhatItWrote) {
  const auto tasks = generate_tasks(domain::terminal, split::train, 2, 1);
  write_terminal_bench(tasks, path("tb"));
  EXPECT_TRUE(fs::exists(path("tb/") + kExportMarker));
  write_terminal_bench(generate_tasks(domain::terminal, split::train, 1, 2), path("tb"));  // its own: replaced
  EXPECT_EQ(load_agent_tasks(path("tb")).size(), 1u);
  fs::create_directories(path("mine"));
  std::ofstream(path("mine/notes.txt")) << "keep me\n";
  EXPECT_THROW(write_terminal_bench(tasks, path("mine")), moxi::error);
  EXPECT_TRUE(fs::exists(path("mine/notes.txt")));
  EXPECT_THROW(write_terminal_bench(generate_tasks(domain::math, split::train, 1, 1), path("m")), moxi::error);
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << "left " << e.path();
}

}  // namespace
