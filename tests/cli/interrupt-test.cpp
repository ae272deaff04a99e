// Interrupts leave nothing behind: real `moxi eval` (sandboxed checkers), `moxi init` and `moxi quantize`
// runs get SIGINT or SIGTERM, sent to their process group as a terminal's Ctrl-C is, at random moments
// (fixed seed) and at a moment known to be mid-work. Each run must end with 128 + signal after cleaning
// up, or 0 when it finished first (or die by the signal when it came before the command installed its
// handler), and then: no file in the run's TMPDIR (a directory this test made), no OUT.tmp-* directory
// (and OUT only when the exit was 0, then complete), no live process of the run's tree (this test is a
// child subreaper, so every orphan becomes its child and is counted), no per-run cgroup of that moxi, and
// no mount below the test's directory. docs/eval.md, docs/checkpoints.md, docs/sandbox.md.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/read-file.h"
#include "common/run-moxi.h"
#include "common/temp-dir.h"
#include "moxi/formats/checkpoint.h"

extern char** environ;

namespace fs = std::filesystem;

namespace {

using moxi::testing::read_file;  // common/read-file.h

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> v;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) v.push_back(e.path().filename().string());
  return v;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// Mount points at or below `dir` (/proc/self/mountinfo field 5).
std::vector<std::string> mounts_below(const std::string& dir) {
  std::vector<std::string> v;
  std::istringstream in(read_file("/proc/self/mountinfo"));
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    std::string id, parent, dev, root, point;
    f >> id >> parent >> dev >> root >> point;
    if (point == dir || point.rfind(dir + "/", 0) == 0) v.push_back(point);
  }
  return v;
}

struct proc_info {
  pid_t pid;
  char state;
  std::string cmdline;
};

// Our children, from /proc: with PR_SET_CHILD_SUBREAPER, whatever a finished moxi left behind.
std::vector<proc_info> children() {
  std::vector<proc_info> v;
  const pid_t self = ::getpid();
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = read_file("/proc/" + name + "/stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    int ppid = 0;
    if (std::sscanf(stat.c_str() + close + 1, " %c %d", &state, &ppid) != 2 || ppid != self) continue;
    std::string cmd = read_file("/proc/" + name + "/cmdline");
    for (auto& c : cmd)
      if (c == '\0') c = ' ';
    v.push_back({std::stoi(name), state, cmd});
  }
  return v;
}

// Directories of the per-run cgroups (moxi-sb-<pid>-...) a given moxi made below our own cgroups.
std::vector<std::string> cgroups_of(pid_t moxi) {
  std::vector<std::string> found;
  const std::string prefix = "moxi-sb-" + std::to_string(moxi) + "-";
  std::istringstream in(read_file("/proc/self/cgroup"));
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    std::vector<std::string> roots = {"/sys/fs/cgroup/unified", "/sys/fs/cgroup"};
    if (!controllers.empty()) {
      roots = {"/sys/fs/cgroup/" + controllers};
      std::istringstream cs(controllers);
      for (std::string c; std::getline(cs, c, ',');) roots.push_back("/sys/fs/cgroup/" + c);
    }
    for (const auto& r : roots)
      for (const auto& e : entries(r + path))
        if (e.rfind(prefix, 0) == 0) found.push_back(r + path + "/" + e);
  }
  return found;
}

struct outcome {
  pid_t pid = -1;
  int status = 0;
  bool signal_sent = false;
  std::string out, err;
};

class Interrupts : public moxi::testing::temp_dir_test {
 protected:
  static void SetUpTestSuite() {
    // Orphans of the runs (a process whose parent died) are re-parented to us, so none can hide.
    ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
  }

  void SetUp() override {
    // The sandbox uid must reach the eval workspaces below TMPDIR (docs/sandbox.md#workspace).
    ::chmod(dir_.c_str(), 0755);
    tmpdir_ = path("tmp");
    fs::create_directory(tmpdir_);
    ::chmod(tmpdir_.c_str(), 0755);
    fs::create_directory(path("out"));
    fs::create_directory(path("logs"));
    mounts_ = mounts_below(dir_);
  }

  // Starts moxi in a process group of its own (a terminal's foreground job), SIGINT and SIGTERM at their
  // defaults whatever this test inherited, TMPDIR pointing at tmpdir_.
  pid_t spawn(const std::vector<std::string>& args) {
    std::vector<std::string> env_strings = {"TMPDIR=" + tmpdir_};
    for (char** e = environ; *e; ++e)
      if (std::strncmp(*e, "TMPDIR=", 7) != 0) env_strings.push_back(*e);
    std::vector<char*> envp, argv;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> all = {std::string(MOXI_BINARY_DIR) + "/moxi"};
    all.insert(all.end(), args.begin(), args.end());
    for (auto& s : all) argv.push_back(s.data());
    argv.push_back(nullptr);

    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, path("logs/out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, path("logs/err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
    posix_spawnattr_setpgroup(&at, 0);
    sigset_t def, none;
    sigemptyset(&def);
    sigaddset(&def, SIGINT);
    sigaddset(&def, SIGTERM);
    sigemptyset(&none);
    posix_spawnattr_setsigdefault(&at, &def);
    posix_spawnattr_setsigmask(&at, &none);
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, argv[0], &fa, &at, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    EXPECT_EQ(rc, 0) << std::strerror(rc);
    return rc == 0 ? pid : -1;
  }

  // Runs moxi; once `when` says so (polled every millisecond), sends `sig` to its process group. The
  // group's leader is not reaped before the signal is sent, so its id cannot have been reused.
  outcome run(const std::vector<std::string>& args, int sig, const std::function<bool()>& when) {
    outcome o;
    o.pid = spawn(args);
    if (o.pid < 0) return o;
    for (;;) {
      if (::waitpid(o.pid, &o.status, WNOHANG) == o.pid) break;  // finished before the moment came
      if (sig && when()) {
        EXPECT_EQ(::kill(-o.pid, sig), 0);
        o.signal_sent = true;
        EXPECT_EQ(::waitpid(o.pid, &o.status, 0), o.pid);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    o.out = read_file(path("logs/out"));
    o.err = read_file(path("logs/err"));
    return o;
  }

  outcome run_after(const std::vector<std::string>& args, int sig, double seconds) {
    const auto at = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    return run(args, sig, [at] { return std::chrono::steady_clock::now() >= at; });
  }

  // Everything a finished run may not leave; `out` is the run's output directory (or empty).
  void expect_nothing_left(const outcome& o, const std::string& what, const std::string& out = {}) {
    EXPECT_TRUE(entries(tmpdir_).empty()) << what << ": left in TMPDIR: " << join(entries(tmpdir_));
    if (!out.empty()) {
      for (const auto& e : entries(fs::path(out).parent_path().string()))
        EXPECT_NE(e.rfind(fs::path(out).filename().string() + ".tmp-", 0), 0u) << what << ": left " << e;
    }
    // Dead orphans (zombies) are reaped; a live one is a process the run failed to end.
    for (const auto& c : children()) {
      EXPECT_EQ(c.state, 'Z') << what << ": process " << c.pid << " (" << c.cmdline << ") still runs";
      if (c.state == 'Z') ::waitpid(c.pid, nullptr, 0);
    }
    EXPECT_TRUE(cgroups_of(o.pid).empty()) << what << ": cgroups left: " << join(cgroups_of(o.pid));
    EXPECT_EQ(mounts_below(dir_), mounts_) << what << ": mounts below the test directory changed";
  }

  // Checks the exit of one run against the signal it got; returns true when moxi stopped cleanly on it.
  static bool check_exit(const outcome& o, int sig, const std::string& what) {
    if (WIFSIGNALED(o.status)) {
      // Only before the command installed its handlers (process start-up): nothing was made yet.
      EXPECT_TRUE(o.signal_sent) << what;
      EXPECT_EQ(WTERMSIG(o.status), sig) << what;
      return false;
    }
    EXPECT_TRUE(WIFEXITED(o.status)) << what;
    const int code = WEXITSTATUS(o.status);
    if (code == 0) return false;
    EXPECT_TRUE(o.signal_sent) << what << ": " << o.err;
    EXPECT_EQ(code, 128 + sig) << what << ": " << o.err;
    EXPECT_NE(o.err.find(sig == SIGINT ? "interrupted by SIGINT" : "interrupted by SIGTERM"),
              std::string::npos)
        << what << ": " << o.err;
    return code == 128 + sig;
  }

  static std::string describe(const char* cmd, int trial, int sig, double at) {
    std::ostringstream s;
    s << cmd << " trial " << trial << " (" << (sig == SIGINT ? "SIGINT" : "SIGTERM") << " at " << at << " s)";
    return s.str();
  }

  // One uninterrupted run (which must succeed and leave nothing either), then signals at random
  // moments of its duration and one at `mid_work`. Returns how many runs stopped cleanly on a signal.
  int trials(const char* name, const std::vector<std::string>& args, const std::function<bool()>& mid_work,
             const std::function<void(const outcome&, bool stopped, const std::string&)>& check_output,
             const std::string& out = {}) {
    const auto t0 = std::chrono::steady_clock::now();
    outcome o = run(args, 0, [] { return false; });
    const double full = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_TRUE(WIFEXITED(o.status) && WEXITSTATUS(o.status) == 0) << name << ": " << o.err;
    check_output(o, false, std::string(name) + " uninterrupted");
    expect_nothing_left(o, std::string(name) + " uninterrupted", out);
    if (!out.empty()) fs::remove_all(out);

    std::mt19937 rng(15);
    std::uniform_real_distribution<double> moment(0.0, full);
    int stopped = 0;
    for (int trial = 0; trial < 5; ++trial) {
      const int sig = trial % 2 ? SIGTERM : SIGINT;
      const bool at_mid_work = trial == 4;
      const double at = at_mid_work ? -1 : moment(rng);
      const std::string what = describe(name, trial, sig, at);
      o = at_mid_work ? run(args, sig, mid_work) : run_after(args, sig, at);
      const bool clean = check_exit(o, sig, what);
      stopped += clean;
      check_output(o, clean, what);
      expect_nothing_left(o, what, out);
      if (!out.empty()) fs::remove_all(out);
    }
    return stopped;
  }

  std::string tmpdir_;
  std::vector<std::string> mounts_;
};

bool any_below(const std::string& dir, const std::string& prefix, const std::string& inner_prefix) {
  for (const auto& e : entries(dir))
    if (e.rfind(prefix, 0) == 0)
      for (const auto& f : entries(dir + "/" + e))
        if (f.rfind(inner_prefix, 0) == 0) return true;
  return false;
}

TEST_F(Interrupts, EvalLeavesNoWorkspaceProcessOrMount) {
  std::string tasks;
  for (const char* d : {"math", "terminal", "code"}) {
    const auto r = moxi::testing::run_moxi(
        std::string("data --domain ") + d + " --split test --n 3 --seed 5 --out " + path(d) + ".jsonl", "",
        path("logs"));
    ASSERT_EQ(r.code, 0) << r.err;
    tasks += read_file(path(d) + ".jsonl");
  }
  std::ofstream(path("tasks.jsonl")) << tasks;
  const std::vector<std::string> args = {"eval",
                                         "--model",
                                         std::string(MOXI_SOURCE_DIR) + "/models/moxi-tiny",
                                         "--tasks",
                                         path("tasks.jsonl"),
                                         "--max-tokens",
                                         "16",
                                         "--json"};
  // Mid-work: a sandbox workspace exists, i.e. checker runs are under way.
  const int clean_stops = trials(
      "eval", args, [&] { return any_below(tmpdir_, "moxi-eval-", "run-"); },
      [](const outcome& o, bool stopped, const std::string& what) {
        if (WIFEXITED(o.status) && WEXITSTATUS(o.status) == 0) {
          const auto j = nlohmann::json::parse(o.out, nullptr, false);
          ASSERT_FALSE(j.is_discarded()) << what << ": " << o.out;
          EXPECT_EQ(j.at("overall").at("n").get<int>(), 9) << what;
        }
        if (stopped) {
          EXPECT_EQ(o.out, "") << what << ": a stopped eval prints no report";
        }
      });
  EXPECT_GE(clean_stops, 1) << "no run was stopped by a signal mid-work";
}

// An agent run keeps the episodes that finished (results.json says "interrupted") and removes every
// workspace, process and cgroup of the ones under way.
TEST_F(Interrupts, EvalAgentKeepsFinishedEpisodesAndLeavesNoWorkspace) {
  const std::string suite = std::string(MOXI_SOURCE_DIR) + "/tasks/terminal-bench";
  fs::permissions(dir_, fs::perms(0755));  // the sandbox uid reaches the workspaces below it
  for (const char* t : {"work-count-errors", "work-top-ips", "work-dedupe-emails", "coding-palindrome"}) {
    fs::create_directories(path("tasks/") + t);
    fs::copy(suite + "/" + t, path("tasks/") + t, fs::copy_options::recursive);
  }
  const std::string run = path("run");
  const std::vector<std::string> args = {"eval", "agent", "--tasks", path("tasks"), "--agent", "oracle",
                                         "--out", run, "--force", "-q"};
  const int clean_stops = trials(
      "eval agent", args, [&] { return fs::exists(run + "/work") && !fs::is_empty(run + "/work"); },
      [&](const outcome& o, bool stopped, const std::string& what) {
        const bool wrote = fs::exists(run + "/results.json");
        if (WIFEXITED(o.status) && WEXITSTATUS(o.status) == 0) {
          ASSERT_TRUE(wrote) << what;
          const auto j = nlohmann::json::parse(read_file(run + "/results.json"));
          EXPECT_EQ(j.at("overall").at("tasks"), 4) << what;
          EXPECT_FALSE(j.contains("interrupted")) << what;
        }
        if (stopped && wrote) {
          const auto j = nlohmann::json::parse(read_file(run + "/results.json"));
          EXPECT_TRUE(j.value("interrupted", false)) << what;
          EXPECT_LE(j.at("overall").at("tasks").get<int>(), 4) << what;
          for (const auto& t : j.at("tasks")) EXPECT_TRUE(t.at("pass").get<bool>()) << what << ": " << t.dump();
        }
        EXPECT_FALSE(fs::exists(run + "/work")) << what << ": workspaces left";
      },
      run);
  EXPECT_GE(clean_stops, 1) << "no run was stopped by a signal mid-work";
}

// A larger-than-tiny config (more experts) so that writing takes long enough to be interrupted, in BF16
// so that quantize accepts its checkpoint.
std::string write_config(const std::string& path) {
  auto c = nlohmann::json::parse(read_file(std::string(MOXI_SOURCE_DIR) + "/configs/tiny-seed.json"));
  c.erase("quantization_config");
  c["num_experts"] = 64;
  c["moe_intermediate_size"] = 128;
  c["routed_expert_hidden_size"] = 128;
  std::ofstream(path) << c.dump(2);
  return path;
}

void expect_checkpoint(const outcome& o, bool stopped, const std::string& out, const std::string& what) {
  if (WIFEXITED(o.status) && WEXITSTATUS(o.status) == 0) {
    ASSERT_TRUE(fs::exists(out + "/config.json")) << what;
    EXPECT_NO_THROW(moxi::formats::checkpoint::open(out)) << what;  // complete: every shard validates
  } else {
    EXPECT_FALSE(fs::exists(out)) << what << (stopped ? ": stopped, yet the output exists" : "");
  }
}

bool temp_dir_of(const std::string& out) {
  const std::string prefix = fs::path(out).filename().string() + ".tmp-";
  for (const auto& e : entries(fs::path(out).parent_path().string()))
    if (e.rfind(prefix, 0) == 0) return true;
  return false;
}

TEST_F(Interrupts, InitLeavesNoTempDirectory) {
  const std::string config = write_config(path("config.json")), out = path("out/ckpt");
  const std::vector<std::string> args = {"init", "--config", config, "--out", out, "--seed", "3"};
  const int clean_stops = trials(
      "init", args, [&] { return temp_dir_of(out); },
      [&](const outcome& o, bool stopped, const std::string& what) {
        expect_checkpoint(o, stopped, out, what);
      },
      out);
  EXPECT_GE(clean_stops, 1) << "no run was stopped by a signal mid-work";
}

TEST_F(Interrupts, QuantizeLeavesNoTempDirectory) {
  const std::string config = write_config(path("config.json")), in = path("bf16"), out = path("out/mxfp4");
  const auto r =
      moxi::testing::run_moxi("init --config " + config + " --out " + in + " --seed 3", "", path("logs"));
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<std::string> args = {"quantize", in, out};
  const int clean_stops = trials(
      "quantize", args, [&] { return temp_dir_of(out); },
      [&](const outcome& o, bool stopped, const std::string& what) {
        expect_checkpoint(o, stopped, out, what);
      },
      out);
  EXPECT_GE(clean_stops, 1) << "no run was stopped by a signal mid-work";
}

}  // namespace
