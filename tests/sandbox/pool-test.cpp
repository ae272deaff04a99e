// The sandbox pool: episodes run concurrently, each in its own workspace, results come back in order,
// failures stay per episode, and the shared audit log gets exactly one intact line per episode.
#include "moxi/sandbox/pool.h"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "moxi/base/error.h"
#include "test-util.h"

namespace moxi::sandbox::test {
namespace {

TEST(SandboxPool, EpisodesHaveIndependentWorkspacesAndOneAuditLineEach) {
  std::string log = "/tmp/moxi-sbpool-" + marker() + ".jsonl";
  std::vector<run_spec> specs;
  for (int i = 0; i < 6; ++i) {
    run_spec s;
    s.id = "ep" + std::to_string(i);
    s.env["EPISODE"] = s.id;
    s.argv = {"sh", "-c", "echo $EPISODE > mine && ls | wc -l && cat mine"};
    specs.push_back(s);
  }
  std::vector<run_result> results;
  {
    pool p(2, 2, log);
    EXPECT_EQ(p.workers(), 2u);
    results = p.run_all(specs);
  }
  ASSERT_EQ(results.size(), 6u);
  std::set<std::string> workspaces;
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(results[i].ok()) << results[i].error << results[i].err.data;
    EXPECT_EQ(results[i].out.data, "1\nep" + std::to_string(i) + "\n");  // only its own file
    workspaces.insert(results[i].workspace);
  }
  EXPECT_EQ(workspaces.size(), 6u);
  std::ifstream in(log);
  std::set<std::string> ids;
  for (std::string line; std::getline(in, line);)
    ids.insert(nlohmann::json::parse(line)["id"].get<std::string>());
  std::filesystem::remove(log);
  EXPECT_EQ(ids, (std::set<std::string>{"ep0", "ep1", "ep2", "ep3", "ep4", "ep5"}));
  EXPECT_EQ(live_children(), 0);
}

TEST(SandboxPool, RunsEpisodesConcurrently) {
  pool p(2, 4);
  run_spec s;
  s.argv = {"sleep", "1"};
  auto t0 = std::chrono::steady_clock::now();
  auto a = p.submit(s), b = p.submit(s);
  EXPECT_TRUE(a.get().ok());
  EXPECT_TRUE(b.get().ok());
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(elapsed, 1.8) << "two 1 s episodes on two workers ran one after the other";
}

TEST(SandboxPool, ABadSpecFailsOnlyItsOwnFuture) {
  pool p(1, 1);
  run_spec bad;  // empty argv
  run_spec good;
  good.argv = {"true"};
  auto f1 = p.submit(bad);
  auto f2 = p.submit(good);
  EXPECT_THROW(f1.get(), moxi::error);
  EXPECT_TRUE(f2.get().ok());
}

}  // namespace
}  // namespace moxi::sandbox::test
