// The shared command-line pieces (see options.h).
#include "moxi/cli/options.h"

#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "moxi/base/error.h"

namespace moxi::cli {
namespace {

namespace fs = std::filesystem;

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// A checkpoint directory (what init and quantize write), or an empty one: the only directories --force may
// replace, so that a mistyped `--out ~ --force` cannot delete a home directory.
bool replaceable_directory(const fs::path& dir) {
  std::error_code ec;
  if (fs::is_empty(dir, ec) && !ec) return true;
  if (fs::is_regular_file(dir / "config.json", ec)) return true;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".safetensors") return true;
  return false;
}

std::string staging_path(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p + ".new-" + std::to_string(::getpid());
}

}  // namespace

CLI::Validator integer_in(int64_t lo, int64_t hi) {
  const std::string range = std::to_string(lo) + ".." + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, range](std::string& s) -> std::string {
        int64_t v = 0;
        const char* b = s.data() + (!s.empty() && s[0] == '+');
        const auto [end, ec] = std::from_chars(b, s.data() + s.size(), v);
        if (ec == std::errc::result_out_of_range ||
            (ec == std::errc() && end == s.data() + s.size() && (v < lo || v > hi)))
          return "'" + s + "' is out of range: expected an integer in " + range;
        if (ec != std::errc() || end != s.data() + s.size() || b == s.data() + s.size())
          return "'" + s + "' is not an integer (expected " + range + ")";
        return {};
      },
      "INT in " + range, "integer_in");
}

CLI::Validator unsigned_integer() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        uint64_t v = 0;
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (s.empty() || ec != std::errc() || end != s.data() + s.size())
          return "'" + s + "' is not an integer in 0..18446744073709551615";
        return {};
      },
      "UINT", "unsigned_integer");
}

CLI::Validator number_in(double lo, double hi, bool lo_open) {
  const std::string range = (lo_open ? "(" : "[") + number_text(lo) + ", " + number_text(hi) + "]";
  return CLI::Validator(
      [lo, hi, lo_open, range](std::string& s) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double v = s.empty() ? NAN : std::strtod(s.c_str(), &end);
        if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v))
          return "'" + s + "' is not a number (expected one in " + range + ")";
        if (v > hi || v < lo || (lo_open && v == lo))
          return "'" + s + "' is out of range: expected a number in " + range;
        return {};
      },
      "NUMBER in " + range, "number_in");
}

CLI::Validator tcp_port() {
  return integer_in(0, 65535).name("tcp_port");
}

CLI::Option* add_model_option(CLI::App* cmd, std::string& dir, bool required) {
  auto* o = cmd->add_option("-m,--model", dir,
                            required ? "model directory (config.json, safetensors, tokenizer.json)"
                                     : "model directory (config.json, safetensors, tokenizer.json; default: "
                                       "$MOXI_MODEL, else the bundled models/moxi-small)");
  if (required) o->required();
  return o;
}

CLI::Option* add_sampling_options(CLI::App* cmd, runtime::sampling_params& s, uint64_t& seed) {
  s.temperature = 0;
  cmd->add_option("--temperature", s.temperature, "0 = greedy (the default of moxi's command line)")
      ->check(number_in(0, 100))
      ->capture_default_str();
  cmd->add_option("--top-p", s.top_p, "nucleus sampling mass")
      ->check(number_in(0, 1, true))
      ->capture_default_str();
  cmd->add_option("--top-k", s.top_k, "keep the k most likely tokens (0: all)")
      ->check(integer_in(0, 1 << 30))
      ->capture_default_str();
  cmd->add_option("--min-p", s.min_p, "drop tokens below min_p * p_max")
      ->check(number_in(0, 1))
      ->capture_default_str();
  cmd->add_option("--repetition-penalty", s.repetition_penalty, "1 = off")
      ->check(number_in(0, 100, true))
      ->capture_default_str();
  return cmd->add_option("--seed", seed, "random seed (default: nondeterministic)")
      ->check(unsigned_integer());
}

void add_draft_option(CLI::App* cmd, int64_t& draft_tokens) {
  cmd->add_option("--draft-tokens", draft_tokens,
                  "speculative decoding: tokens the MTP head drafts per step, verified in one forward (0: off)")
      ->check(integer_in(0, 16))
      ->capture_default_str();
}

void check_draft_option(int64_t draft_tokens, const runtime::causal_lm& lm, const std::string& model_dir) {
  if (draft_tokens > 0 && !lm.can_draft())
    throw error("--draft-tokens needs a model with an MTP layer (num_nextn_predict_layers); " + model_dir +
                " has none");
}

std::string draft_summary(const runtime::generate_result& r) {
  if (r.verify_steps == 0) return "";
  char buf[160];
  const int64_t emitted_by_steps = r.accepted + r.verify_steps;
  std::snprintf(buf, sizeof buf, "drafted %lld, accepted %lld (%.1f %%), %.2f tokens per verify step",
                static_cast<long long>(r.drafted), static_cast<long long>(r.accepted),
                r.drafted ? 100.0 * double(r.accepted) / double(r.drafted) : 0.0,
                double(emitted_by_steps) / double(r.verify_steps));
  return buf;
}

void set_examples(CLI::App* cmd, std::initializer_list<std::string> examples, const std::string& doc) {
  std::string footer = "EXAMPLES:\n";
  for (const auto& e : examples) footer += "  " + e + "\n";
  footer += "\nDocumentation: " + doc + " in the moxi source tree.";
  cmd->footer(footer);
}

CLI::Option* output_paths::add(const std::string& name, std::string& path, const std::string& description,
                               kind k) {
  if (entries_.empty())
    cmd_->add_flag("--force", force_, "replace an existing output (a checkpoint directory or a file)");
  auto* o = cmd_->add_option(name, path, description);
  if (k == kind::file) {
    o->check(CLI::Validator(
        [](std::string& s) -> std::string {
          const fs::path p(s);
          if (s.empty() || s.back() == '/') return "'" + s + "' names a directory, not a file";
          const fs::path parent = p.parent_path().empty() ? fs::path(".") : p.parent_path();
          std::error_code ec;
          if (!fs::is_directory(parent, ec)) return "directory '" + parent.string() + "' does not exist";
          if (fs::is_directory(p, ec)) return "'" + s + "' is a directory, not a file";
          return {};
        },
        "", "output_file"));
  }
  entries_.push_back({&path, k, o});
  return o;
}

void output_paths::check() {
  for (const auto& e : entries_) {
    if (e.path->empty()) continue;
    const fs::path p(*e.path);
    std::error_code ec;
    const auto st = fs::symlink_status(p, ec);
    if (ec || !fs::exists(st)) continue;
    const std::string flag = e.option->get_name();
    if (e.k == kind::file && fs::is_directory(p, ec))
      throw usage_error(flag + ": '" + *e.path + "' is a directory, not a file");
    if (e.k == kind::directory && !fs::is_directory(p, ec))
      throw usage_error(flag + ": '" + *e.path + "' exists and is not a directory");
    if (!force_) throw usage_error(flag + ": '" + *e.path + "' already exists (--force replaces it)");
    if (e.k == kind::directory && !replaceable_directory(p))
      throw usage_error(flag + ": '" + *e.path +
                        "' is not a checkpoint directory (no config.json or .safetensors file); refusing to "
                        "replace it, even with --force");
  }
}

std::string output_paths::write_path(const std::string& path) const {
  std::error_code ec;
  if (!force_ || !fs::exists(fs::symlink_status(path, ec))) return path;
  return staging_path(path);
}

void output_paths::publish(const std::string& path) const {
  const std::string staged = write_path(path);
  if (staged == path) return;
  // Old out of the way, new in its place, then the old one deleted: a failure in between leaves both
  // named on disk, never neither.
  const std::string old = staging_path(path) + ".old";
  if (::rename(path.c_str(), old.c_str()) != 0) throw io_error("rename " + path + " to", old, errno);
  if (::rename(staged.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::rename(old.c_str(), path.c_str());
    throw io_error("rename " + staged + " to", path, e);
  }
  std::error_code ec;
  fs::remove_all(old, ec);
  if (ec) throw io_error("remove the replaced", old, ec.value());
}

}  // namespace moxi::cli
