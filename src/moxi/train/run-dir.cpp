// Run-directory plumbing shared by the SFT and RL drivers (see run-dir.h).
#include "moxi/train/run-dir.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fcntl.h>
#include <unistd.h>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "moxi/base/error.h"
#include "moxi/eval/task.h"

namespace moxi::train {

namespace fs = std::filesystem;
using nlohmann::json;

std::string read_text(const std::string& path, const std::string& what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw error(what + " " + path + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), O_RDONLY | (directory ? O_DIRECTORY : 0));
  if (fd < 0) throw io_error("open", path, errno);
  const int rc = ::fsync(fd);
  const int e = errno;
  ::close(fd);
  if (rc != 0) throw io_error("fsync", path, e);
}

// fsyncs every file of a directory and the directory itself.
void fsync_tree(const std::string& dir) {
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) fsync_path(e.path().string(), false);
  fsync_path(dir, true);
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  if (!f) throw error("cannot write " + path);
}

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08" PRId64, step);
  return buf;
}

std::string format_duration(double s) {
  if (s < 0 || !std::isfinite(s)) return "?";
  const int64_t t = int64_t(s + 0.5);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%" PRId64 "h%02" PRId64 "m", t / 3600, (t / 60) % 60);
  else
    std::snprintf(buf, sizeof buf, "%" PRId64 "m%02" PRId64 "s", t / 60, t % 60);
  return buf;
}

// A deep copy (the pre-QAT export must not round the weights training continues from).
train_model clone(const train_model& m) {
  train_model c(m.config(), m.options());
  for (const auto& [name, p] : m.params()) c.params()[name] = p.detach().clone().requires_grad_(true);
  return c;
}

void commit_checkpoint(const std::string& out, int64_t step,
                       const std::function<void(const std::string& dir)>& fill) {
  const std::string root = out + "/checkpoints", name = step_name(step), final_dir = root + "/" + name;
  const std::string tmp = root + "/.tmp-" + name + "-" + std::to_string(::getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  fill(tmp);
  fsync_tree(tmp);
  if (fs::exists(final_dir)) fs::remove_all(final_dir);  // a previous run died between rename and `latest`
  fs::rename(tmp, final_dir);
  fsync_path(root, true);
  eval::write_file_atomic(root + "/latest", name + "\n");
  // Older checkpoints are no longer needed once `latest` names the new one.
  for (const auto& e : fs::directory_iterator(root)) {
    const auto n = e.path().filename().string();
    if (e.is_directory() && n.rfind("step-", 0) == 0 && n != name) fs::remove_all(e.path());
  }
}

void save_rng(const std::string& path) {
  auto gen = at::detail::getDefaultCPUGenerator();
  torch::Tensor rng;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    rng = gen.get_state();
  }
  torch::save(rng, path);
}

void load_rng(const std::string& path) {
  torch::Tensor rng;
  torch::load(rng, path);
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(rng);
}

std::string latest_checkpoint(const std::string& out) {
  const std::string p = out + "/checkpoints/latest";
  if (!fs::exists(p)) return {};
  auto name = read_text(p, "checkpoint pointer");
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  const std::string dir = out + "/checkpoints/" + name;
  if (!fs::is_directory(dir)) throw error(p + ": names " + name + ", which does not exist");
  return dir;
}

void log_pass_rates(const std::string& out, const char* tag, const char* key, const std::string& dir,
                    const std::string& name, int64_t step, const std::vector<eval::task>& tasks,
                    const eval::evaluate_options& options) {
  if (tasks.empty()) return;
  const auto rep = eval::evaluate(dir, tasks, options);
  std::string line;
  json by = json::object();
  for (const auto& [d, s] : rep.by_domain) {
    char buf[96];
    std::snprintf(buf, sizeof buf, " %s %" PRId64 "/%" PRId64 " (%.1f%%)", eval::to_string(d), s.passed,
                  s.judged(), 100 * s.pass_rate());
    line += buf;
    by[eval::to_string(d)] = s.pass_rate();
  }
  std::fprintf(stderr, "%s: step %" PRId64 " pass rate (%s):%s\n", tag, step, name.c_str(), line.c_str());
  append_log(out, {{"step", step}, {key, by}, {"model", name}});
  eval::write_file_atomic(out + "/eval-" + name + ".json", eval::to_json(rep).dump(2) + "\n");
}

interrupted interrupted_after(int sig, const std::string& out, int64_t step) {
  return interrupted(sig, "interrupted after step " + std::to_string(step) + "; checkpoint " + out +
                              "/checkpoints/" + step_name(step) +
                              " written; the same command resumes the run from it:\n  " + resume_command());
}

void remove_checkpoint_leftovers(const std::string& out) {
  for (const auto& e : fs::directory_iterator(out + "/checkpoints"))
    if (e.path().filename().string().rfind(".tmp-", 0) == 0) fs::remove_all(e.path());
}

void adopt_recipe(const std::string& out, const json& now, bool override_recipe, const char* tag,
                  const std::function<std::vector<std::string>(const json& saved)>& differences) {
  const std::string path = out + "/recipe.json";
  if (!fs::exists(path)) {
    eval::write_file_atomic(path, now.dump(2) + "\n");
    return;
  }
  std::vector<std::string> diffs;
  try {
    diffs = differences(json::parse(read_text(path, "saved recipe")));
  } catch (const std::exception& e) {
    if (!override_recipe)
      throw error(std::string("cannot compare with the run's saved recipe: ") + e.what() +
                  "; pass --override to continue with the new recipe");
    diffs = {std::string("(unreadable saved recipe: ") + e.what() + ")"};
  }
  if (diffs.empty()) return;
  std::string list;
  for (const auto& d : diffs) list += "\n  " + d;
  if (!override_recipe)
    throw error(
        "run directory " + out + " was started with another recipe (" + path +
        "); resuming with these values would change the training:" + list +
        "\nrun the same command as before to resume, pass --override to continue with the new values, "
        "or pass another --out to start a new run");
  std::fprintf(stderr, "%s: --override: continuing the run with the new values:%s\n", tag, list.c_str());
  append_log(out, {{"override", diffs}});
  eval::write_file_atomic(path, now.dump(2) + "\n");
}

void append_log(const std::string& out, const json& line) {
  std::ofstream f(out + "/log.jsonl", std::ios::app);
  f << line.dump() << "\n";
}

// The files an export writes into its directory (and those of a sharded checkpoint its config.json would
// orphan): a directory holding any of them holds a model.
static constexpr const char* kModelFiles[] = {
    "config.json",    "model.safetensors",     "model.safetensors.index.json",
    "tokenizer.json", "tokenizer_config.json", "generation_config.json"};

// The name of the file in the run directory that records an export target outside it, written before the
// first file goes there, so that the run may later re-export there (after a resume or a crash mid-export).
std::string claim_file(const std::string& out) {
  return out + "/export-target";
}

bool inside(const std::string& dir, const std::string& path) {
  const auto rel = fs::path(path).lexically_normal().lexically_relative(fs::path(dir).lexically_normal());
  return !rel.empty() && *rel.begin() != "..";
}

void check_init_model(const std::string& source, const std::string& init) {
  if (!init.empty() && !fs::exists(fs::path(init) / "config.json"))
    throw error(source + ": model.init '" + init +
                "' is not a model directory (no config.json): train the run that exports it first, or point "
                "model.init (--init) at a model");
}

// An export may write into a directory that holds no model, into the run's own directory, or into the one
// this run recorded as its export target; anything else needs force (--force). Called before training, so a
// refused run wastes no time, and again right before the export.
void check_export_target(const std::string& out, const std::string& target, bool force) {
  if (fs::exists(target) && !fs::is_directory(target))
    throw error("export target " + target + " exists and is not a directory");
  if (force || inside(out, target)) return;
  std::vector<std::string> held;
  for (const char* f : kModelFiles)
    if (fs::exists(fs::path(target) / f)) held.push_back(f);
  if (held.empty()) return;
  if (fs::exists(claim_file(out))) {
    auto claimed = read_text(claim_file(out), "export record");
    while (!claimed.empty() && claimed.back() == '\n') claimed.pop_back();
    if (fs::path(claimed).lexically_normal() == fs::path(target).lexically_normal()) return;
  }
  std::string files;
  for (const auto& f : held) files += (files.empty() ? "" : ", ") + f;
  throw error(
      "export target " + target + " already holds a model (" + files +
      ") that this run did not write; pass --force to replace its model files (other files there stay), "
      "or --export another directory (the default is the run directory's model/)");
}

void claim_export_target(const std::string& out, const std::string& target) {
  if (!inside(out, target)) eval::write_file_atomic(claim_file(out), target + "\n");
}

}  // namespace moxi::train
