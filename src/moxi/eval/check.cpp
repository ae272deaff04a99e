// Checkers (see check.h): numeric comparison for math; for terminal and code tasks, workspaces populated
// on the host, runs through sandbox::pool, and comparisons of what the runs produced.
#include "moxi/eval/check.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "moxi/base/error.h"
#include "moxi/base/interrupt.h"
#include "moxi/sandbox/pool.h"

namespace moxi::eval {

namespace fs = std::filesystem;

struct checker::outcome {
  bool started = false;
  std::string error;  // sandbox setup failure
  int exit_code = -1;
  sandbox::limit_kind fired = sandbox::limit_kind::none;
  std::string out, err;
  bool out_truncated = false;
  // files mode: relative path -> "d", "f:<content>" or "l:<link target>"; tree_error when unreadable.
  std::map<std::string, std::string> tree;
  std::string tree_error;

  bool ok() const { return started && exit_code == 0 && fired == sandbox::limit_kind::none; }
};

namespace {

using outcome = checker::outcome;

constexpr size_t kChunk = 64;             // items per batch: bounds the workspaces on disk at once
constexpr size_t kMaxTreeEntries = 4096;  // a candidate that makes more files fails
constexpr uint64_t kMaxTreeBytes = 8 << 20;

std::vector<std::string> split_lines(std::string_view s) {
  std::vector<std::string> v;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t nl = s.find('\n', pos);
    if (nl == std::string_view::npos) {
      if (pos < s.size()) v.emplace_back(s.substr(pos));
      break;
    }
    v.emplace_back(s.substr(pos, nl - pos));
    pos = nl + 1;
  }
  return v;
}

std::string fenced_block(std::string_view reply) {
  const size_t open = reply.find("```");
  if (open == std::string_view::npos) return std::string(reply);
  size_t body = reply.find('\n', open);
  if (body == std::string_view::npos) return std::string(reply.substr(open + 3));
  ++body;  // skip the language tag line
  const size_t close = reply.find("```", body);
  return std::string(
      reply.substr(body, close == std::string_view::npos ? std::string_view::npos : close - body));
}

std::string last_line(const std::string& s) {
  const auto lines = split_lines(s);
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    const auto t = trim_space(*it);
    if (!t.empty()) return t.size() > 300 ? t.substr(0, 300) + "..." : t;
  }
  return {};
}

std::string make_workspace(const std::string& dir) {
  std::string tmpl = dir + "/run-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) throw io_error("mkdtemp", tmpl, errno);
  return tmpl;
}

void write_file(const fs::path& path, const std::string& content) {
  fs::create_directories(path.parent_path());
  std::ofstream f(path, std::ios::binary);
  f.write(content.data(), std::streamsize(content.size()));
  if (!f) throw io_error("write", path.string(), errno);
}

// The workspace as it is after the run; links are recorded, never followed, and only regular files are
// opened (a FIFO the candidate made would block a read).
void snapshot(const std::string& root, outcome& o) {
  std::error_code ec;
  uint64_t bytes = 0;
  fs::recursive_directory_iterator it(root, fs::directory_options::none, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (o.tree.size() >= kMaxTreeEntries) {
      o.tree_error = "more than " + std::to_string(kMaxTreeEntries) + " files";
      return;
    }
    const std::string rel = fs::relative(it->path(), root, ec).generic_string();
    const auto st = it->symlink_status(ec);
    if (ec) break;
    if (fs::is_symlink(st)) {
      o.tree[rel] = "l:" + fs::read_symlink(it->path(), ec).string();
    } else if (fs::is_directory(st)) {
      o.tree[rel] = "d";
    } else if (fs::is_regular_file(st)) {
      std::ifstream f(it->path(), std::ios::binary);
      std::string content((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      bytes += content.size();
      if (bytes > kMaxTreeBytes) {
        o.tree_error = "more than " + std::to_string(kMaxTreeBytes) + " bytes of files";
        return;
      }
      o.tree[rel] = "f:" + content;
    } else {
      o.tree[rel] = "o";  // FIFO, socket, device: compared by kind only
    }
  }
  if (ec) o.tree_error = "cannot read the workspace: " + ec.message();
}

std::string normalize_stdout(const std::string& s) {
  auto lines = split_lines(s);
  for (auto& l : lines) {
    const size_t e = l.find_last_not_of(" \t\r");
    l = e == std::string::npos ? "" : l.substr(0, e + 1);
  }
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

std::vector<std::string> normalize_lines(const std::string& s) {
  std::vector<std::string> v;
  for (const auto& l : split_lines(s)) {
    std::string t = trim_space(l);
    while (t.rfind("./", 0) == 0) t = t.substr(2);
    if (!t.empty()) v.push_back(std::move(t));
  }
  std::sort(v.begin(), v.end());
  return v;
}

// "12", "12 notes.txt" or "12 my notes.txt" (wc naming a file whose name has spaces) -> 12; anything else
// (a file's contents, several lines, several numbers as `wc F` prints) -> nullopt.
std::optional<std::string> count_of(const std::string& s) {
  const auto is_number = [](const std::string& t) {
    return !t.empty() && std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  const std::string text = trim_space(s);
  if (text.empty() || text.find('\n') != std::string::npos) return std::nullopt;
  std::istringstream in(text);
  std::vector<std::string> tokens;
  for (std::string tok; in >> tok;) tokens.push_back(tok);
  if (!is_number(tokens[0])) return std::nullopt;
  if (std::any_of(tokens.begin() + 1, tokens.end(), is_number)) return std::nullopt;
  const auto& n = tokens[0];
  const size_t nz = n.find_first_not_of('0');
  return nz == std::string::npos ? "0" : n.substr(nz);
}

std::string quote_short(const std::string& s, size_t max = 120) {
  std::string t = s.size() > max ? s.substr(0, max) + "..." : s;
  for (auto& c : t) {
    if (c == '\n') c = '|';
  }
  return "'" + t + "'";
}

std::string first_tree_difference(const outcome& want, const outcome& got) {
  for (const auto& [path, v] : want.tree) {
    auto it = got.tree.find(path);
    if (it == got.tree.end()) return path + " is missing";
    if (it->second != v) {
      if (v[0] != it->second[0]) return path + " has the wrong kind";
      return path + " differs";
    }
  }
  for (const auto& [path, v] : got.tree) {
    if (!want.tree.count(path)) return path + " should not exist";
  }
  return {};
}

const char* limit_name(sandbox::limit_kind k) {
  return sandbox::to_string(k);
}

std::string run_failure(const outcome& o) {
  if (!o.started) return "sandbox: " + o.error;
  if (o.fired != sandbox::limit_kind::none)
    return std::string("killed by the ") + limit_name(o.fired) + " limit";
  std::string d = "exit status " + std::to_string(o.exit_code);
  const auto l = last_line(o.err);
  if (!l.empty()) d += ": " + l;
  return d;
}

check_result compare_terminal(const task& t, const outcome& ref, const outcome& cand) {
  check_result r;
  if (!ref.ok()) {
    r.error = true;
    r.detail = "the reference command failed (" + run_failure(ref) + ")";
    return r;
  }
  if (!cand.started) {
    r.error = true;
    r.detail = run_failure(cand);
    return r;
  }
  if (!cand.ok()) {
    r.detail = run_failure(cand);
    return r;
  }
  r.completed = true;
  switch (t.compare) {
    case compare_mode::stdout_text: {
      const auto want = normalize_stdout(ref.out), got = normalize_stdout(cand.out);
      r.pass = want == got && !cand.out_truncated;
      r.detail = r.pass ? "output matches" : "output " + quote_short(got) + ", expected " + quote_short(want);
      break;
    }
    case compare_mode::lines: {
      const auto want = normalize_lines(ref.out), got = normalize_lines(cand.out);
      r.pass = want == got && !cand.out_truncated;
      std::string w, g;
      for (const auto& l : want) w += l + "\n";
      for (const auto& l : got) g += l + "\n";
      r.detail = r.pass ? "lines match" : "lines " + quote_short(g) + ", expected " + quote_short(w);
      break;
    }
    case compare_mode::count: {
      const auto want = count_of(ref.out), got = count_of(cand.out);
      if (!want) {
        r.error = true;
        r.detail = "the reference printed no count: " + quote_short(ref.out);
      } else if (!got) {
        r.detail = "expected a count, got " + quote_short(cand.out);
      } else {
        r.pass = *want == *got;
        r.detail = *got + (r.pass ? " == " : " != ") + *want;
      }
      break;
    }
    case compare_mode::files: {
      if (!ref.tree_error.empty()) {
        r.error = true;
        r.detail = "reference tree: " + ref.tree_error;
      } else if (!cand.tree_error.empty()) {
        r.detail = cand.tree_error;
      } else {
        const auto diff = first_tree_difference(ref, cand);
        r.pass = diff.empty();
        r.detail = r.pass ? "files match" : diff;
      }
      break;
    }
  }
  return r;
}

// The final answer is the number on the last non-empty line ("Answer: 42", "= 42", "42", "The answer is
// 42."): a worked reply whose last line is wrong fails even if the right number appears earlier.
check_result check_math(const task& t, std::string_view candidate) {
  check_result r;
  const auto lines = split_lines(candidate);
  std::string last;
  for (auto it = lines.rbegin(); it != lines.rend() && last.empty(); ++it) last = trim_space(*it);
  const auto got = extract_number(last);
  if (!got) {
    r.detail = last.empty() ? "no number in the answer" : "no number on the last line";
    return r;
  }
  r.completed = true;
  const long double want = std::strtold(t.answer.c_str(), nullptr);
  const long double have = std::strtold(got->c_str(), nullptr);
  r.pass = std::fabs(double(have - want)) <= 1e-9 * std::max(1.0, std::fabs(double(want)));
  r.detail = *got + (r.pass ? " == " : " != ") + t.answer;
  return r;
}

// The reply is one word (a number or a colour name), case and a final full stop aside: "3", "Red.", "red".
check_result check_vision(const task& t, std::string_view candidate) {
  check_result r;
  std::string got = trim_space(candidate);
  if (!got.empty() && got.back() == '.') got.pop_back();
  for (char& c : got) c = char(std::tolower(static_cast<unsigned char>(c)));
  r.completed = !got.empty();
  r.pass = got == t.answer;
  r.detail = "'" + got.substr(0, 40) + (r.pass ? "' == '" : "' != '") + t.answer + "'";
  return r;
}

// Words a command or a program starts with: a chat reply that starts with one is not prose.
const std::set<std::string>& command_words() {
  static const std::set<std::string> w = {
      "ls",      "cd",    "cat",    "echo", "grep",    "find",  "wc",     "head",  "tail",  "sort",
      "uniq",    "mkdir", "cp",     "mv",   "rm",      "sed",   "awk",    "touch", "chmod", "chown",
      "pwd",     "du",    "df",     "cut",  "tr",      "xargs", "sudo",   "git",   "pip",   "python",
      "python3", "bash",  "sh",     "curl", "wget",    "tar",   "printf", "ln",    "diff",  "def",
      "import",  "print", "export", "apt",  "apt-get", "rmdir", "nano",   "vim",   "kill",  "ps"};
  return w;
}

// What the reply to each intent must say: any one of the words (lowercase, matched as whole words).
const std::map<std::string, std::vector<std::string>>& chat_key_words() {
  static const std::vector<std::string> can = {"shell",      "command", "commands", "terminal",
                                               "python",     "program", "programs", "code",
                                               "arithmetic", "math",    "sums",     "numbers"};
  static const std::map<std::string, std::vector<std::string>> k = {
      {"greeting", {"hello", "hi", "hey", "greetings", "morning", "evening", "afternoon", "welcome"}},
      {"capabilities", can},
      {"identity", {"moxi", "assistant", "model"}},
      {"help", can},
      {"usage", can},
      {"thanks", {"welcome", "glad", "problem", "pleasure", "anytime"}},
      {"how_are_you", {"fine", "well", "good", "great", "ok", "okay"}},
      {"goodbye", {"bye", "goodbye", "later", "care", "soon"}},
  };
  return k;
}

// A chat reply passes when it is prose, not a command or code (no fence, no shell operators or prompt,
// no leading command word), has at least 3 words, ends a sentence, and says the intent's key point.
check_result check_chat(const task& t, std::string_view candidate) {
  check_result r;
  const std::string text = trim_space(candidate);
  r.completed = !text.empty();
  const std::string intent = t.params.is_object() ? t.params.value("intent", "") : "";
  if (intent == "repeat") {  // the given text, exactly (surrounding white space aside)
    const std::string want = trim_space(t.params.value("text", ""));
    r.pass = !want.empty() && text == want;
    r.detail = r.pass ? "repeated exactly" : "'" + text.substr(0, 80) + "' != '" + want + "'";
    return r;
  }
  std::vector<std::string> words;  // lowercase, letters, digits and ' - _ only
  {
    std::istringstream in(text);
    for (std::string w; in >> w;) {
      std::string clean;
      for (char c : w) {
        const auto u = static_cast<unsigned char>(c);
        if (std::isalnum(u) || c == '\'' || c == '-' || c == '_') clean += char(std::tolower(u));
      }
      if (!clean.empty()) words.push_back(clean);
    }
  }
  for (const char* marker :
       {"```", "$ ", "&&", "||", " | ", ">>", " > ", "();", "def ", "import ", "#!", "\t"}) {
    if (text.find(marker) != std::string::npos) {
      r.detail = std::string("looks like code or a command ('") + marker + "')";
      return r;
    }
  }
  if (text.rfind("./", 0) == 0 || text.rfind("/", 0) == 0 ||
      (!text.empty() && command_words().count(text.substr(0, text.find_first_of(" \n"))))) {
    r.detail = "starts with a command: " + text.substr(0, text.find_first_of(" \n"));
    return r;
  }
  if (words.size() < 3) {
    r.detail = "fewer than 3 words";
    return r;
  }
  if (std::string(".!?").find(text.back()) == std::string::npos) {
    r.detail = "does not end a sentence";
    return r;
  }
  auto it = chat_key_words().find(intent);
  if (it == chat_key_words().end()) {
    r.error = true;
    r.detail = "unknown chat intent '" + intent + "'";
    return r;
  }
  for (const auto& w : words) {
    if (std::find(it->second.begin(), it->second.end(), w) != it->second.end()) {
      r.pass = true;
      r.detail = "prose, says '" + w + "' (" + intent + ")";
      return r;
    }
  }
  r.detail = "prose, but misses the point of '" + intent + "'";
  return r;
}

std::string nonce() {
  static thread_local std::mt19937_64 gen(std::random_device{}() ^ (uint64_t(::getpid()) << 32));
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(gen()));
  return buf;
}

std::string files_key(const task& t) {
  std::string k = t.id + '\0' + t.reference + '\0' + to_string(t.compare);
  size_t h = 0;
  for (const auto& f : t.files) h = h * 1000003u ^ std::hash<std::string>()(f.path + '\0' + f.content);
  return k + '\0' + std::to_string(h);
}

}  // namespace

sandbox::limits default_check_limits() {
  sandbox::limits l;
  l.timeout_s = 5;
  l.cpu_s = 5;
  l.memory_bytes = 256ull << 20;
  l.pids = 32;
  l.file_size_bytes = 1ull << 20;
  l.output_bytes = 64ull << 10;
  l.tmp_bytes = 16ull << 20;
  return l;
}

std::string extract_command(std::string_view reply) {
  std::string s = trim_space(fenced_block(reply));
  if (s.rfind("$ ", 0) == 0) s = s.substr(2);
  return s;
}

std::string extract_program(std::string_view reply) {
  std::string s = fenced_block(reply);
  // Keep indentation; drop surrounding blank lines only.
  const size_t b = s.find_first_not_of("\r\n");
  if (b == std::string::npos) return {};
  s = s.substr(b);
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(0, e + 1) + "\n";
}

std::optional<std::string> extract_number(std::string_view s) {
  std::optional<std::string> last;
  auto digit = [&](size_t i) { return i < s.size() && s[i] >= '0' && s[i] <= '9'; };
  for (size_t i = 0; i < s.size();) {
    const bool neg = s[i] == '-' && digit(i + 1) &&
                     (i == 0 || !(std::isalnum(static_cast<unsigned char>(s[i - 1])) || s[i - 1] == '-'));
    if (!digit(i) && !neg) {
      ++i;
      continue;
    }
    std::string num;
    if (neg) {
      num = "-";
      ++i;
    }
    // Thousands separators: a comma followed by exactly three digits.
    while (digit(i) ||
           (i < s.size() && s[i] == ',' && digit(i + 1) && digit(i + 2) && digit(i + 3) && !digit(i + 4))) {
      if (s[i] != ',') num += s[i];
      ++i;
    }
    if (i < s.size() && s[i] == '.' && digit(i + 1)) {
      num += '.';
      ++i;
      while (digit(i)) num += s[i++];
    }
    last = num;
  }
  return last;
}

checker::checker(check_options options) : options_(std::move(options)) {
  size_t workers = options_.workers;
  if (workers == 0) workers = std::max<size_t>(2, 2 * std::thread::hardware_concurrency());
  pool_ = std::make_unique<sandbox::pool>(workers, 2 * kChunk, options_.audit_log);
}

checker::~checker() {
  pool_.reset();  // every run is over (killed and reaped when interrupted) before its workspace goes
  if (!dir_.empty()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

const std::string& checker::directory() {
  std::lock_guard lock(dir_mutex_);
  if (dir_.empty()) {
    std::string base = options_.work_dir;
    if (base.empty()) {
      const char* tmp = std::getenv("TMPDIR");
      base = tmp && *tmp ? tmp : "/tmp";
    }
    std::string tmpl = base + "/moxi-eval-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) throw io_error("mkdtemp", tmpl, errno);
    // Searchable by the sandbox uid, which must reach the workspaces below (docs/sandbox.md#workspace).
    if (::chmod(tmpl.c_str(), 0711) != 0) {
      const int e = errno;
      ::rmdir(tmpl.c_str());
      throw io_error("chmod", tmpl, e);
    }
    dir_ = tmpl;
  }
  return dir_;
}

check_result checker::check(const task& t, std::string_view candidate) {
  return check_all({{&t, std::string(candidate)}}).at(0);
}

std::vector<check_result> checker::check_all(const std::vector<std::pair<const task*, std::string>>& items) {
  std::vector<check_result> out;
  out.reserve(items.size());
  for (size_t i = 0; i < items.size(); i += kChunk) {
    std::vector<std::pair<const task*, std::string>> chunk(
        items.begin() + i, items.begin() + std::min(items.size(), i + kChunk));
    auto part = check_chunk(chunk);
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

std::vector<check_result> checker::check_chunk(
    const std::vector<std::pair<const task*, std::string>>& items) {
  struct run {
    std::string workspace;
    bool snapshot = false;
    std::future<sandbox::run_result> result;
    std::shared_ptr<outcome> out;
  };
  std::vector<run> runs;
  std::vector<check_result> results(items.size());
  std::vector<int> cand_run(items.size(), -1), ref_run(items.size(), -1);
  std::vector<std::shared_ptr<const outcome>> ref_cached(items.size());
  std::vector<std::string> nonces(items.size());
  std::map<std::string, int> ref_pending;  // cache key -> run index

  auto cleanup = [&] {
    std::error_code ec;
    for (auto& r : runs) {
      if (r.result.valid()) r.result.wait();
      if (!r.workspace.empty()) fs::remove_all(r.workspace, ec);
    }
  };
  auto start = [&](const std::vector<file_entry>& files, std::vector<std::string> argv,
                   std::string stdin_data, bool snap) {
    run r;
    r.workspace = make_workspace(directory());
    r.snapshot = snap;
    runs.push_back(std::move(r));  // registered first so that cleanup removes it on any error
    for (const auto& f : files) write_file(fs::path(runs.back().workspace) / f.path, f.content);
    sandbox::run_spec spec;
    spec.argv = std::move(argv);
    spec.workspace = runs.back().workspace;
    spec.keep_workspace = true;  // removed here after the snapshot
    spec.stdin_data = std::move(stdin_data);
    spec.limits = options_.limits;
    spec.env["PYTHONDONTWRITEBYTECODE"] = "1";
    spec.id = "eval";
    runs.back().result = pool_->submit(std::move(spec));
    return int(runs.size() - 1);
  };

  try {
    for (size_t i = 0; i < items.size(); ++i) {
      check_interrupt();
      const task& t = *items[i].first;
      const std::string& cand = items[i].second;
      switch (t.domain) {
        case domain::math:
          results[i] = check_math(t, cand);
          break;
        case domain::chat:
          results[i] = check_chat(t, cand);
          break;
        case domain::vision:
          results[i] = check_vision(t, cand);
          break;
        case domain::terminal: {
          const bool snap = t.compare == compare_mode::files;
          const std::string key = files_key(t);
          {
            std::lock_guard lock(cache_mutex_);
            auto it = reference_cache_.find(key);
            if (it != reference_cache_.end()) ref_cached[i] = it->second;
          }
          if (!ref_cached[i]) {
            auto pend = ref_pending.find(key);
            if (pend != ref_pending.end()) {
              ref_run[i] = pend->second;
            } else {
              ref_run[i] = start(t.files, {"sh", "-c", t.reference}, "", snap);
              ref_pending.emplace(key, ref_run[i]);
            }
          }
          const std::string cmd = extract_command(cand);
          if (cmd.empty()) {
            results[i].detail = "empty command";
          } else {
            cand_run[i] = start(t.files, {"sh", "-c", cmd}, "", snap);
          }
          break;
        }
        case domain::code: {
          const std::string prog = extract_program(cand);
          if (prog.empty()) {
            results[i].detail = "empty program";
            break;
          }
          std::vector<file_entry> files = {{"solution.py", prog}, {"test_solution.py", t.test}};
          nonces[i] = nonce();
          cand_run[i] = start(files, {"python3", "test_solution.py"}, nonces[i] + "\n", false);
          break;
        }
      }
    }
    // Collect in order; the pool runs them concurrently meanwhile.
    std::error_code ec;
    for (auto& r : runs) {
      r.out = std::make_shared<outcome>();
      try {
        sandbox::run_result res = r.result.get();
        r.out->started = res.started;
        r.out->error = res.error;
        r.out->exit_code = res.exit_code;
        r.out->fired = res.fired;
        r.out->out = std::move(res.out.data);
        r.out->out_truncated = res.out.truncated;
        r.out->err = std::move(res.err.data);
      } catch (const std::exception& e) {
        r.out->started = false;
        r.out->error = e.what();
      }
      if (r.snapshot && r.out->started) snapshot(r.workspace, *r.out);
      fs::remove_all(r.workspace, ec);
      r.workspace.clear();
    }
  } catch (...) {
    cleanup();
    throw;
  }

  {
    std::lock_guard lock(cache_mutex_);
    if (reference_cache_.size() > 100000) reference_cache_.clear();  // bounded for endless RL runs
    for (const auto& [key, index] : ref_pending) {
      if (runs[size_t(index)].out->ok()) reference_cache_[key] = runs[size_t(index)].out;
    }
  }

  for (size_t i = 0; i < items.size(); ++i) {
    const task& t = *items[i].first;
    if (t.domain == domain::math || cand_run[i] < 0) continue;
    const outcome& cand = *runs[size_t(cand_run[i])].out;
    if (t.domain == domain::terminal) {
      const outcome& ref = ref_cached[i] ? *ref_cached[i] : *runs[size_t(ref_run[i])].out;
      results[i] = compare_terminal(t, ref, cand);
    } else {
      check_result& r = results[i];
      if (!cand.started) {
        r.error = true;
        r.detail = run_failure(cand);
      } else if (cand.ok() && cand.out.find("MOXI-TESTS-PASSED " + nonces[i]) != std::string::npos) {
        r.pass = r.completed = true;
        r.detail = "tests passed";
      } else if (cand.ok()) {
        r.detail = "the test did not finish (exited early?)";
      } else {
        r.detail = run_failure(cand);
        // The function returned and the test's assertion judged the value: the program ran.
        r.completed =
            cand.fired == sandbox::limit_kind::none && last_line(cand.err).rfind("AssertionError", 0) == 0;
      }
    }
  }
  return results;
}

check_result check(const task& t, std::string_view candidate) {
  static checker shared;
  return shared.check(t, candidate);
}

}  // namespace moxi::eval
