// Every `moxi <command> [<subcommand>] ... --flag` that README.md and docs/*.md name exists: the command
// line is taken from the docs' code (fenced blocks and `inline` spans), and the flag must be listed by
// `moxi <command> [<subcommand>] --help` (the binary's own parser, not a list kept here). The same check runs
// on the EXAMPLES section that every --help ends with. A doc that names a flag or command that does not
// exist fails the test; DetectsAMissingFlag shows that it does.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/read-file.h"
#include "common/run-moxi.h"
#include "common/temp-dir.h"

namespace fs = std::filesystem;

namespace {

using moxi::testing::read_file;  // common/read-file.h

// The code of a markdown text: each line of a fenced block (indented lines joined to the line before, a
// trailing backslash joined to the next), and each inline code span (which may wrap across lines).
std::vector<std::string> code_of(const std::string& md) {
  std::vector<std::string> code;
  std::string prose;
  std::istringstream in(md);
  std::string line;
  bool fence = false;
  std::string pending;
  auto flush = [&] {
    if (!pending.empty()) code.push_back(pending);
    pending.clear();
  };
  while (std::getline(in, line)) {
    if (line.rfind("```", 0) == 0) {
      flush();
      fence = !fence;
      prose += "\n";
      continue;
    }
    if (!fence) {
      prose += line + "\n";
      continue;
    }
    const bool continuation = !line.empty() && (line[0] == ' ' || line[0] == '\t') && !pending.empty();
    if (!continuation) flush();
    if (!pending.empty() && pending.back() == '\\') pending.pop_back();
    pending += (pending.empty() ? "" : " ") + line;
    if (!line.empty() && line.back() == '\\') continue;
  }
  flush();
  // Inline spans: a run of n backticks up to the next run of exactly n.
  for (size_t i = 0; i < prose.size();) {
    if (prose[i] != '`') {
      ++i;
      continue;
    }
    size_t n = 0;
    while (i + n < prose.size() && prose[i + n] == '`') ++n;
    const std::string tick(n, '`');
    size_t end = prose.find(tick, i + n);
    while (end != std::string::npos && end + n < prose.size() && prose[end + n] == '`')
      end = prose.find(tick, end + n + 1);
    if (end == std::string::npos) break;
    std::string span = prose.substr(i + n, end - i - n);
    for (auto& c : span)
      if (c == '\n') c = ' ';
    code.push_back(span);
    i = end + n;
  }
  // Markdown tables escape a pipe inside code as \|.
  for (auto& c : code)
    for (size_t p; (p = c.find("\\|")) != std::string::npos;) c.replace(p, 2, "|");
  return code;
}

// Shell words, quotes kept out of the way (a quoted string is one word that never ends a command).
std::vector<std::string> words_of(const std::string& s) {
  std::vector<std::string> out;
  std::string w;
  bool any = false;
  char quote = 0;
  for (char c : s) {
    if (quote) {
      if (c == quote)
        quote = 0;
      else
        w += c == '|' || c == ';' || c == '>' ? '_' : c;  // inside quotes nothing ends a command
      continue;
    }
    if (c == '\'' || c == '"') {
      quote = c;
      any = true;
      continue;
    }
    if (c == ' ' || c == '\t') {
      if (any || !w.empty()) out.push_back(w);
      w.clear();
      any = false;
      continue;
    }
    w += c;
  }
  if (any || !w.empty()) out.push_back(w);
  return out;
}

bool ends_command(const std::string& w) {
  static const std::set<std::string> stops = {"|",  "||",   "&&", ";",  ">", ">>", "<",
                                              "2>", "2>&1", "&",  "--", "#", "$(", ")"};
  return stops.count(w) > 0 || w[0] == '>' || w[0] == '<' || w[0] == '#';
}

bool is_moxi(const std::string& w) {
  return w == "moxi" || (w.size() > 5 && w.compare(w.size() - 5, 5, "/moxi") == 0);
}

// A documented command line: the command path ("serve", "tokenizer train") and the flags it names.
struct usage {
  std::string where;
  std::vector<std::string> path;  // alternatives of a word (plan|init) are split into separate usages
  std::vector<std::string> flags;
  bool alternatives = false;  // `moxi bench pool|membw`: only the names are checked
};

// "--tp" from "[--tp", "--out=FILE" and "--json]"; empty when the word is not a flag.
std::string flag_of(std::string w) {
  while (!w.empty() && (w[0] == '[' || w[0] == '(')) w.erase(0, 1);
  if (w.size() < 2 || w[0] != '-' || !(std::isalpha(static_cast<unsigned char>(w[1])) || w[1] == '-'))
    return {};
  if (w[1] == '-' && (w.size() < 3 || !std::isalpha(static_cast<unsigned char>(w[2])))) return {};
  if (const auto eq = w.find('='); eq != std::string::npos) w.resize(eq);
  while (!w.empty() && !(std::isalnum(static_cast<unsigned char>(w.back())) || w.back() == '-')) w.pop_back();
  return w;
}

bool is_word(const std::string& w) {
  if (w.empty()) return false;
  for (char c : w)
    if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) ||
          c == '-'))
      return false;
  return true;
}

class help_cache {
 public:
  explicit help_cache(std::string dir) : dir_(std::move(dir)) {}
  // `moxi PATH --help`, or nullptr when it fails (no such command).
  const std::string* help(const std::vector<std::string>& path) {
    std::string args;
    for (const auto& p : path) args += p + " ";
    auto it = cache_.find(args);
    if (it == cache_.end()) {
      const auto r = moxi::testing::run_moxi(args + "--help", "", dir_);
      it = cache_.emplace(args, r.code == 0 ? std::optional<std::string>(r.out) : std::nullopt).first;
    }
    return it->second ? &*it->second : nullptr;
  }
  // The subcommand names `moxi PATH --help` lists; empty when it has none.
  std::set<std::string> subcommands(const std::vector<std::string>& path) {
    std::set<std::string> out;
    const std::string* h = help(path);
    if (!h) return out;
    const auto at = h->find("\nSubcommands:\n");
    if (at == std::string::npos) return out;
    std::istringstream in(h->substr(at + 14));
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      if (line[0] != ' ') break;
      std::istringstream words(line);
      std::string name;
      words >> name;
      if (!name.empty()) out.insert(name);
    }
    return out;
  }
  bool trainer_missing() {
    const auto r = moxi::testing::run_moxi("train --help", "", dir_);
    return r.code != 0 && r.err.find("moxi-train") != std::string::npos;
  }

 private:
  std::string dir_;
  std::map<std::string, std::optional<std::string>> cache_;
};

bool help_lists(const std::string& help, const std::string& flag) {
  for (size_t at = help.find(flag); at != std::string::npos; at = help.find(flag, at + 1)) {
    const char before = at == 0 ? '\n' : help[at - 1];
    const size_t end = at + flag.size();
    const char after = end < help.size() ? help[end] : '\n';
    if ((before == ' ' || before == ',' || before == '\n') &&
        (after == ' ' || after == ',' || after == '=' || after == '\n'))
      return true;
  }
  return false;
}

// Problems with the moxi command lines in `code` (one string per command line or code span).
std::vector<std::string> check_code(const std::vector<std::string>& code, const std::string& where,
                                    help_cache& helps, bool skip_train) {
  std::vector<std::string> problems;
  for (const auto& text : code) {
    const auto words = words_of(text);
    for (size_t i = 0; i < words.size(); ++i) {
      if (!is_moxi(words[i])) continue;
      size_t k = i + 1;
      std::vector<std::string> path;
      // The command and its subcommands, as far as the words name them.
      while (k < words.size() && !ends_command(words[k]) && flag_of(words[k]).empty()) {
        const std::string& w = words[k];
        const auto subs = helps.subcommands(path);
        if (subs.empty()) break;
        if (w.find('|') != std::string::npos) {  // `moxi bench pool|membw`: each name must exist
          std::stringstream alts(w);
          std::string a;
          while (std::getline(alts, a, '|'))
            if (is_word(a) && !subs.count(a))
              problems.push_back(where + ": `" + text + "`: no command 'moxi " + [&] {
                std::string p;
                for (const auto& x : path) p += x + " ";
                return p;
              }() + a + "'");
          path.clear();
          break;
        }
        if (!is_word(w)) {  // a placeholder (`moxi bench NAME`)
          path.clear();
          break;
        }
        if (!subs.count(w)) {
          std::string p;
          for (const auto& x : path) p += x + " ";
          problems.push_back(where + ": `" + text + "`: no command 'moxi " + p + w + "'");
          path.clear();
          break;
        }
        path.push_back(w);
        ++k;
      }
      if (path.empty() || (skip_train && path[0] == "train")) continue;
      const std::string* help = helps.help(path);
      std::string name = "moxi";
      for (const auto& x : path) name += " " + x;
      if (!help) {
        problems.push_back(where + ": `" + text + "`: '" + name + " --help' fails");
        continue;
      }
      for (; k < words.size() && !ends_command(words[k]) && !is_moxi(words[k]); ++k) {
        const std::string f = flag_of(words[k]);
        if (!f.empty() && f != "--help" && !help_lists(*help, f))
          problems.push_back(where + ": `" + text + "`: '" + name + "' has no flag " + f);
      }
    }
  }
  return problems;
}

class DocsFlags : public moxi::testing::temp_dir_test {};

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += "  " + x + "\n";
  return s;
}

TEST_F(DocsFlags, EveryCommandAndFlagTheDocsNameExists) {
  help_cache helps(dir_);
  const bool skip_train = helps.trainer_missing();
  std::vector<std::string> files = {std::string(MOXI_SOURCE_DIR) + "/README.md"};
  for (const auto& e : fs::directory_iterator(std::string(MOXI_SOURCE_DIR) + "/docs"))
    if (e.path().extension() == ".md") files.push_back(e.path().string());
  std::vector<std::string> problems;
  size_t checked = 0;
  for (const auto& f : files) {
    const auto code = code_of(read_file(f));
    for (const auto& c : code)
      for (const auto& w : words_of(c)) checked += is_moxi(w);
    const auto p = check_code(code, fs::path(f).filename().string(), helps, skip_train);
    problems.insert(problems.end(), p.begin(), p.end());
  }
  EXPECT_GT(checked, 50u) << "the docs name far more moxi command lines than this";
  EXPECT_TRUE(problems.empty()) << problems.size() << " problem(s):\n" << join(problems);
  if (skip_train) std::printf("moxi-train is not built: `moxi train` lines were not checked\n");
}

// Each command's --help ends with EXAMPLES whose command lines use only flags it has.
TEST_F(DocsFlags, EveryHelpHasExamplesThatParse) {
  help_cache helps(dir_);
  const bool skip_train = helps.trainer_missing();
  std::vector<std::vector<std::string>> todo = {{}};
  std::vector<std::string> problems;
  size_t commands = 0;
  while (!todo.empty()) {
    const auto path = todo.back();
    todo.pop_back();
    if (skip_train && !path.empty() && path[0] == "train") continue;
    for (const auto& s : helps.subcommands(path)) {
      auto p = path;
      p.push_back(s);
      todo.push_back(p);
    }
    commands += !path.empty();
    std::string name = "moxi";
    for (const auto& x : path) name += " " + x;
    const std::string* help = helps.help(path);
    ASSERT_NE(help, nullptr) << name;
    const auto at = help->find("EXAMPLES:");
    if (at == std::string::npos) {
      problems.push_back(name + " --help has no EXAMPLES section");
      continue;
    }
    std::vector<std::string> lines;
    std::istringstream in(help->substr(at + 10));
    std::string line;
    while (std::getline(in, line) && !line.empty()) lines.push_back(line);
    if (lines.empty()) problems.push_back(name + " --help has an empty EXAMPLES section");
    const auto p = check_code(lines, name + " --help", helps, skip_train);
    problems.insert(problems.end(), p.begin(), p.end());
  }
  EXPECT_GT(commands, 20u);
  EXPECT_TRUE(problems.empty()) << join(problems);
  const std::string* root = helps.help({});
  ASSERT_NE(root, nullptr);
  EXPECT_NE(root->find("docs"), std::string::npos) << "moxi --help points to the documentation:\n" << *root;
}

// The check itself: a doc naming a flag or a command that does not exist is reported, one that names only
// real ones is not.
TEST_F(DocsFlags, DetectsAMissingFlagAndCommand) {
  help_cache helps(dir_);
  const std::string md =
      "Run `moxi plan --config c.json --tp 8 --no-such-flag` or\n\n"
      "```\nmoxi serve models/moxi-tiny --port 8000 \\\n  --not-a-serve-flag 3\nmoxi frobnicate --x\n"
      "moxi tokenizer encode --tokenizer t.json --txt hi\n```\n"
      "and `moxi bench gemv|warp` but `moxi data --domain math --n 3 --out x.jsonl | wc -l --lines` is "
      "fine.\n";
  const auto problems = check_code(code_of(md), "fake.md", helps, true);
  ASSERT_EQ(problems.size(), 5u) << join(problems);
  const std::string all = join(problems);
  for (const char* expected : {"'moxi plan' has no flag --no-such-flag",
                               "'moxi serve' has no flag --not-a-serve-flag", "no command 'moxi frobnicate'",
                               "'moxi tokenizer encode' has no flag --txt", "no command 'moxi bench warp'"})
    EXPECT_NE(all.find(expected), std::string::npos) << expected << " not in:\n" << all;
}

}  // namespace
