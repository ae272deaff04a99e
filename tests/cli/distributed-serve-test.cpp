// `mpirun -np N moxi serve --tp --ep --pp` (docs/distributed.md "Serving") against `moxi serve` in one
// process, the reference, over real HTTP: concurrent requests (continuous batching), prompts sharing a
// prefix (prefix-cache hits), parallel sampling with a seed (forks) must give the same tokens. Then the
// failures: a follower or a pipeline stage killed, a follower stopped; the in-flight stream must end with a
// 503 error event, the job must exit non-zero and leave no rank behind. Tiny seed-shaped model (KDA + Gated
// DSA, MXFP4 experts, MTP); each rank runs one thread on this 2-core machine.
#include <gtest/gtest.h>
#include <httplib.h>

#include <signal.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <sstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/mpi-job.h"
#include "common/run-moxi.h"
#include "common/temp-dir.h"

namespace moxi {
namespace {

using nlohmann::json;
using testing::any_process_with;
using testing::rank_pids;
using testing::wait_for;

const std::string kMoxi = std::string(MOXI_BINARY_DIR) + "/moxi";

std::string read_text(const std::string& file) {
  std::ifstream in(file);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// A server started in the background, and its port once its log says it listens.
struct server_proc {
  pid_t pid = -1;
  int port = 0;
  std::string log;
};

server_proc start(const std::vector<std::string>& args, const std::string& log) {
  testing::set_mpi_env();
  server_proc s;
  s.log = log;
  s.pid = testing::spawn_logged(args, log);
  const std::string mark = "on http://127.0.0.1:";
  for (int i = 0; i < 1200 && s.port == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const std::string text = read_text(log);
    if (const size_t at = text.find(mark); at != std::string::npos) s.port = std::stoi(text.substr(at + mark.size()));
    if (wait_for(s.pid, 0) >= 0) break;
  }
  EXPECT_GT(s.port, 0) << "the server never listened:\n" << read_text(log);
  return s;
}

void stop(server_proc& s) {
  if (s.pid <= 0) return;
  ::kill(s.pid, SIGTERM);
  if (wait_for(s.pid, 30) < 0) ::kill(s.pid, SIGKILL), wait_for(s.pid, 10);
  s.pid = -1;
}

std::vector<int> token_ids(const json& choice) {
  std::vector<int> out;
  for (const auto& t : choice["logprobs"]["tokens"]) out.push_back(std::stoi(t.get<std::string>().substr(9)));
  return out;
}

std::vector<int> prompt(int n, uint32_t seed) {
  std::vector<int> p;
  for (int i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    p.push_back(3 + int((seed >> 8) % 480u));
  }
  return p;
}

// Completions keyed "request/choice": 5 greedy requests sharing a 40-token prefix and one n = 2 seeded
// sampling request, all at once; then two of them again, which hit the prefix cache.
std::map<std::string, std::vector<int>> workload(int port) {
  const std::vector<int> prefix = prompt(40, 7);
  std::vector<json> bodies;
  for (int i = 0; i < 5; ++i) {
    std::vector<int> p = prefix;
    for (int t : prompt(3 + 2 * i, 100 + uint32_t(i))) p.push_back(t);
    bodies.push_back({{"prompt", p}, {"max_tokens", 10}, {"temperature", 0}, {"ignore_eos", true}});
  }
  bodies.push_back({{"prompt", prompt(30, 99)}, {"max_tokens", 10}, {"temperature", 0.9}, {"seed", 11},
                    {"n", 2}, {"ignore_eos", true}});
  for (auto& b : bodies) b["logprobs"] = 1, b["return_tokens_as_token_ids"] = true;
  std::map<std::string, std::vector<int>> out;
  std::mutex m;
  auto run = [&](size_t i, const std::string& name) {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(120, 0);
    auto res = c.Post("/v1/completions", bodies[i].dump(), "application/json");
    ASSERT_TRUE(res) << name;
    ASSERT_EQ(res->status, 200) << res->body;
    const json j = json::parse(res->body);
    std::lock_guard<std::mutex> l(m);
    for (const auto& ch : j["choices"]) out[name + "/" + std::to_string(ch["index"].get<int>())] = token_ids(ch);
  };
  std::vector<std::thread> wave;
  for (size_t i = 0; i < bodies.size(); ++i) wave.emplace_back(run, i, "r" + std::to_string(i));
  for (auto& t : wave) t.join();
  run(0, "again0");
  run(1, "again1");
  return out;
}

double prefix_hits(int port) {
  httplib::Client c("127.0.0.1", port);
  auto res = c.Get("/metrics");
  if (!res) return -1;
  const std::string key = "moxi:prefix_cache_hits_total";
  std::istringstream in(res->body);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key, 0) == 0) return std::stod(line.substr(line.rfind(' ') + 1));
  return -1;
}

class DistributedServe : public testing::temp_dir_test {
 protected:
  void SetUp() override {
    model_ = path("model");
    const auto r = testing::run_shell(kMoxi + " init --config " + std::string(MOXI_SOURCE_DIR) +
                                      "/configs/tiny-seed.json --out " + model_ + " --seed 5 2>&1");
    ASSERT_EQ(r.code, 0) << r.out;
  }
  std::vector<std::string> mpirun(int np, const std::vector<std::string>& args) const {
    std::vector<std::string> a = {"/usr/bin/mpirun", "--oversubscribe", "--allow-run-as-root", "-np",
                                  std::to_string(np), kMoxi, "serve", "-m", model_, "--port", "0"};
    a.insert(a.end(), args.begin(), args.end());
    return a;
  }
  std::string model_;
};

TEST_F(DistributedServe, EveryLayoutServesTheTokensOfOneProcess) {
  auto ref_server = start({kMoxi, "serve", "-m", model_, "--port", "0"}, path("single.log"));
  ASSERT_GT(ref_server.port, 0);
  const auto ref = workload(ref_server.port);
  EXPECT_GT(prefix_hits(ref_server.port), 0);
  stop(ref_server);
  ASSERT_EQ(ref.size(), 9u);

  const std::vector<std::pair<int, std::vector<std::string>>> layouts = {
      {2, {"--tp", "2"}}, {2, {"--pp", "2"}}, {4, {"--tp", "2", "--ep", "2", "--pp", "2"}}};
  for (const auto& [np, flags] : layouts) {
    std::string name;
    for (const auto& f : flags) name += f + " ";
    auto group = start(mpirun(np, flags), path("group.log"));
    ASSERT_GT(group.port, 0) << name;
    const auto got = workload(group.port);
    EXPECT_GT(prefix_hits(group.port), 0) << name;
    stop(group);
    for (const auto& [key, tokens] : ref) {
      ASSERT_TRUE(got.count(key)) << name << key;
      EXPECT_EQ(got.at(key), tokens) << name << key;
    }
  }
}

// A long greedy stream on a group; `victim` (a world rank) gets `sig` once tokens flow. The stream must
// end with a 503 error event naming the cause, and the job must exit non-zero with no rank left. A killed
// rank: mpirun sends rank 0 SIGTERM about a second later (SIGKILL another second on), or rank 0's own
// collective passes --rank-timeout first; either way the client is told. A stopped rank: only the timeout.
void expect_stream_fails_when_rank_gets(const std::string& model, const std::string& dir,
                                        const std::vector<std::string>& flags, int victim, int sig,
                                        const std::string& cause) {
  std::vector<std::string> args = {"/usr/bin/mpirun", "--oversubscribe", "--allow-run-as-root", "-np", "2",
                                   kMoxi, "serve", "-m", model, "--port", "0", "--rank-timeout", "3"};
  args.insert(args.end(), flags.begin(), flags.end());
  auto group = start(args, dir + "/group-" + std::to_string(sig) + ".log");
  ASSERT_GT(group.port, 0);
  std::string body;
  std::atomic<bool> flowing{false};
  std::thread client([&] {
    httplib::Client c("127.0.0.1", group.port);
    c.set_read_timeout(120, 0);
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = json{{"prompt", prompt(20, 3)}, {"max_tokens", 4000}, {"stream", true}, {"ignore_eos", true},
                    {"temperature", 0}}
                   .dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
      body.append(d, n);
      if (body.find("\"text\"") != std::string::npos) flowing = true;
      return true;
    };
    c.send(req);
    flowing = true;
  });
  for (int i = 0; i < 600 && !flowing; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto pids = rank_pids(model, victim);
  ASSERT_EQ(pids.size(), 1u);
  ASSERT_EQ(::kill(pids[0], sig), 0);
  // A stopped rank is noticed by rank 0's hang detector; while rank 0 finishes, /health says why.
  int health = 0;
  for (int i = 0; sig == SIGSTOP && i < 100 && health != 503; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    httplib::Client c("127.0.0.1", group.port);
    c.set_read_timeout(1, 0);
    if (auto res = c.Get("/health")) health = res->status;
  }
  client.join();
  const int code = wait_for(group.pid, 60);
  if (code < 0) ::kill(group.pid, SIGKILL), wait_for(group.pid, 10);
  if (sig == SIGSTOP) ::kill(pids[0], SIGKILL);
  EXPECT_GT(code, 0) << "the job did not end within 60 s";
  if (sig == SIGSTOP) {
    EXPECT_EQ(health, 503);
  }
  // The stream's last events: an error with status 503 and the cause, then [DONE].
  EXPECT_NE(body.find("\"code\":503"), std::string::npos) << body.substr(body.size() > 600 ? body.size() - 600 : 0);
  EXPECT_NE(body.find(cause), std::string::npos) << body.substr(body.size() > 600 ? body.size() - 600 : 0);
  EXPECT_NE(body.find("data: [DONE]"), std::string::npos);
  for (int i = 0; i < 100 && any_process_with(model); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(any_process_with(model)) << "a rank outlived its job:\n" << read_text(group.log);
}

TEST_F(DistributedServe, AKilledFollowerFailsTheInFlightStreamAndEndsTheJob) {
  expect_stream_fails_when_rank_gets(model_, dir_, {"--tp", "2"}, 1, SIGKILL, "the serving group");
}

TEST_F(DistributedServe, AKilledPipelineStageFailsTheInFlightStreamAndEndsTheJob) {
  expect_stream_fails_when_rank_gets(model_, dir_, {"--pp", "2"}, 1, SIGKILL, "the serving group");
}

TEST_F(DistributedServe, AStoppedFollowerTurnsHealthTo503AndEndsTheJob) {
  expect_stream_fails_when_rank_gets(model_, dir_, {"--tp", "2"}, 1, SIGSTOP, "lost a rank");
}

}  // namespace
}  // namespace moxi
