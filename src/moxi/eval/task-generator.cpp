// Task generator (see task-generator.h and docs/tasks.md): one portable RNG stream per item, templates per
// domain with their train and held-out test parameter ranges.
#include "moxi/eval/task-generator.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <set>

#include "moxi/base/error.h"
#include "moxi/eval/task-generator-detail.h"

namespace moxi::eval {
namespace {

using namespace detail;

// ---------------------------------------------------------------------------------------------------------
// phrasing families, typos and parameter ranges shared by the terminal and code domains

// Phrasings are grouped into families (a way of asking: question, terse request, ...); a held-out family
// is used only by the test split, so test prompts are worded in ways train never shows.
const std::vector<family_info>& terminal_families() {
  static const std::vector<family_info> f = {
      {"imperative", false}, {"question", false}, {"terse", false},  {"polite", false},
      {"context", false},    {"indirect", true},  {"casual", true},
  };
  return f;
}

const std::vector<family_info>& code_families() {
  static const std::vector<family_info> f = {
      {"formal", false},   {"imperative", false}, {"terse", false},
      {"question", false}, {"story", true},       {"casual", true},
  };
  return f;
}

const std::string& pick_family(rng& r, const std::vector<family_info>& all, split s) {
  std::vector<const std::string*> names;
  for (const auto& f : all) {
    if (f.test_only == (s == split::test)) names.push_back(&f.name);
  }
  return *r.pick(names);
}

// Words that name commands or units stay intact: a typo there changes what is asked.
bool typo_candidate(const std::string& w) {
  static const std::set<std::string> keep = {"grep", "sort",  "head",   "tail",
                                             "find", "mkdir", "rename", "sed"};
  if (w.size() < 5 || keep.count(w)) return false;
  return std::all_of(w.begin(), w.end(), [](char c) { return c >= 'a' && c <= 'z'; });
}

// With probability 1/10, one typo (two letters swapped, one dropped or one doubled) in one word of the
// phrasing's own text: placeholders, quoted text, names and numbers are never touched.
std::string maybe_typo(rng& r, const std::string& text) {
  if (r.range(0, 9) != 0) return text;
  std::vector<std::pair<size_t, size_t>> words;  // [begin, end) of candidate words
  for (size_t i = 0; i < text.size();) {
    const size_t end = text.find(' ', i);
    const size_t e = end == std::string::npos ? text.size() : end;
    size_t we = e;
    while (we > i && std::string(",.?!:;").find(text[we - 1]) != std::string::npos) --we;
    if (typo_candidate(text.substr(i, we - i))) words.emplace_back(i, we);
    i = e + 1;
  }
  if (words.empty()) return text;
  const auto [b, e] = words[size_t(r.range(0, int64_t(words.size()) - 1))];
  std::string w = text.substr(b, e - b);
  const size_t at = size_t(r.range(1, int64_t(w.size()) - 2));  // the first and last letters stay
  switch (r.range(0, 2)) {
    case 0:
      std::swap(w[at], w[at + 1]);
      break;
    case 1:
      w.erase(at, 1);
      break;
    default:
      w.insert(at, 1, w[at]);
      break;
  }
  return text.substr(0, b) + w + text.substr(e);
}

// ---------------------------------------------------------------------------------------------------------
// terminal

const std::vector<template_info>& terminal_templates() {
  static const std::vector<template_info> t = {
      {"count_lines", false, "lines of the file: train 3..40 and 71..99, test 41..70"},
      {"word_count", false, "lines of the file: train 3..40 and 71..99, test 41..70"},
      {"head_n", false, "k: train 1..5 and 11..20, test 6..10"},
      {"tail_n", false, "k: train 1..5 and 11..20, test 6..10"},
      {"grep_lines", false, "matching lines: train 1..2 and 5..6, test 3..4"},
      {"find_larger", false, "threshold in KB: train 1, 2 and 5, test 3..4"},
      {"count_ext", false,
       "matching files: train 1..2 and 5..6, test 3..4; extension: train txt/log/md/csv/py/sh/dat/xml, test "
       "json/ini/yaml/conf"},
      {"sort_lines", false, "lines of the file: train 3..10 and 21..30, test 11..20"},
      {"mkdir_copy", false, ".txt files to copy: train 1..2 and 5, test 3..4"},
      {"rename", false, "characters of the new name's stem: train 3..6 and 10..12, test 7..9"},
      {"append", false, "words in the appended line: train 1..2 and 5..6, test 3..4"},
      {"unique_count", false, "distinct lines: train 2..3 and 7..8, test 4..6"},
      {"delete_ext", false, "files to delete: train 1..2 and 5..6, test 3..4"},
      {"replace_word", false, "lines with the word: train 1..2 and 5..6, test 3..4"},
      {"show_file", false, "lines of the file: train 3..10 and 21..30, test 11..20"},
      {"list_by_size", false, "files in the directory: train 2..3 and 6..7, test 4..5"},
      {"followup", false, "phrasing family only (a second request about the first one's tree)"},
      {"largest_file", true, "test only"},
      {"total_lines", true, "test only"},
      // Train only: the test split keeps its composition; the user prompt set measures these.
      {"line_n", false, "train only", true},
      {"skip_header", false, "train only", true},
      {"count_matching", false, "train only", true},
      {"touch_file", false, "train only", true},
      {"copy_file", false, "train only", true},
      {"reverse_lines", false, "train only", true},
      {"char_count", false, "train only", true},
      {"delete_file", false, "train only", true},
      {"sort_unique", false, "train only", true},
      {"uppercase", false, "train only", true},
      {"mkdir_nested", false, "train only", true},
      {"move_into", false, "train only", true},
  };
  return t;
}

// What follows a terminal request; "" = nothing. Drawn as the item's last step, so it does not change
// which command is asked for.
const std::vector<std::string> kCommandSuffixes = {
    "Reply with one shell command.",
    "Reply with one shell command.",
    "Just the command.",
    "one command please",
    "Answer with a single shell command.",
    "Give me the shell command.",
    "(one command)",
    "",
    "",
};

// Name pools differ by split, so no test file tree reuses a train file or directory name: every stem and
// directory is built from its split's words (disjoint lists), with digits, dashes, underscores and dots.
struct name_pools {
  std::vector<std::string> stems, dirs, words, new_dirs;
};

const name_pools& pools(split s) {
  static const name_pools train = {
      {"notes",  "todo",  "report", "data",    "ideas",  "draft", "summary", "plan",  "budget", "results",
       "config", "setup", "readme", "changes", "output", "input", "users",   "sales", "server", "client"},
      {"docs", "src", "app", "archive", "build", "assets", "lib", "scripts", "logs", "home"},
      {"error", "warning", "ticket", "status", "result", "update"},
      {"backup", "copies", "saved", "export", "bundle"},
  };
  static const name_pools test = {
      {"journal", "events", "inventory", "letters",  "minutes",  "tasks",    "memo",
       "records", "ledger", "roster",    "agenda",   "metrics",  "schedule", "catalog",
       "digest",  "sketch", "orders",    "contacts", "invoices", "routes"},
      {"misc", "work", "old", "inbox", "shared", "tools", "media", "extra", "temp", "vendor"},
      {"failure", "urgent", "pending", "invoice", "delay", "notice"},
      {"stash", "keep", "hoard", "spare", "cache"},
  };
  return s == split::train ? train : test;
}

// Filler words; no pool word above is a substring of one, so grep and sed counts stay exact.
const std::vector<std::string> kFiller = {
    "apple", "river", "stone", "cloud", "green", "quick", "table", "light",  "music", "paper",
    "north", "smile", "water", "happy", "bread", "chair", "dream", "field",  "house", "lemon",
    "metal", "ocean", "plant", "sound", "tiger", "voice", "wheat", "yellow", "zebra", "orange"};

bool overlaps(const std::string& a, const std::string& b) {
  return a.find(b) != std::string::npos || b.find(a) != std::string::npos;
}


// A made-up word (`tavoku`, `shemblor`, `yardweak`, `valuenderel`). Five sixths of train's names and words are
// these, so the model sees thousands of names once each and has to copy the one it is given instead of
// recalling one of a few. A third are 2-3 syllables over every letter and the common English onsets, vowel
// pairs and codas; two thirds join 2-3 pieces of english_words() (the first often a word's start), so the
// pieces a BPE tokenizer learns from English text (`ord`, `cont`, `ers`, `gest`), which real test names split
// into, are written in training replies too, not only read in prompts (docs/tasks.md "File names"). A quarter
// start with a vowel (no first onset, or a first piece from a vowel-initial word's start), as many real names
// do (`inventory`, `orders`). None overlaps a test word or a filler word (either way round), so no test name
// is ever a train name and grep/sed counts stay exact.
std::string pseudo_word(rng& r) {
  static const std::vector<std::string> onsets = {
      "b",  "c",  "d",  "f",  "g",  "h",  "j",  "k",  "l",  "m",  "n",  "p",  "qu", "r",  "s",  "t",
      "v",  "w",  "x",  "y",  "z",  "b",  "d",  "k",  "l",  "m",  "n",  "p",  "r",  "s",  "t",  "bl",
      "br", "ch", "cl", "cr", "dr", "fl", "fr", "gl", "gr", "pl", "pr", "sc", "sh", "sk", "sl", "sm",
      "sn", "sp", "st", "sw", "th", "tr", "wh"};
  static const std::vector<std::string> vowels = {"a", "e", "i", "o", "u", "a", "e", "i", "o",
                                                  "u", "y", "ai", "au", "ea", "ee", "ei", "ia", "ie", "io", "oi", "oo", "ou", "ua"};
  static const std::vector<std::string> codas = {"l",  "n",  "r",  "s",  "t",  "m",  "k",  "x",  "ck",
                                                 "ct", "ft", "ld", "mp", "nd", "ng", "nk", "nt", "rd",
                                                 "rk", "rm", "rn", "rt", "sh", "sk", "st", "th"};
  // English words that start with a vowel: a quarter of the made-up words start like one of them.
  static const std::vector<std::string> vowel_words = [] {
    std::vector<std::string> v;
    for (const auto& w : english_words()) {
      if (std::string("aeiou").find(w[0]) != std::string::npos) v.push_back(w);
    }
    return v;
  }();
  for (;;) {
    std::string w;
    const bool vowel_first = r.range(0, 3) == 0;
    if (r.range(0, 2) == 0) {
      const int64_t syllables = r.range(2, 3);
      for (int64_t i = 0; i < syllables; ++i) {
        if (i > 0 || !vowel_first) w += r.pick(onsets);
        w += r.pick(vowels);
        if (r.range(0, 2) == 0) w += r.pick(codas);
      }
    } else {
      const int64_t pieces = r.range(2, 3);
      for (int64_t i = 0; i < pieces; ++i) {
        const bool from_start = i == 0 && (vowel_first || r.range(0, 1) == 0);
        const std::string& from = r.pick(i == 0 && vowel_first ? vowel_words : english_words());
        const int64_t len = r.range(2, std::min<int64_t>(5, int64_t(from.size())));
        const int64_t start = from_start ? 0 : r.range(0, int64_t(from.size()) - len);
        w += from.substr(size_t(start), size_t(len));
      }
      if (w.size() < 5) continue;
    }
    const name_pools& test = pools(split::test);
    bool ok = true;
    for (const auto* list : {&test.stems, &test.dirs, &test.words, &test.new_dirs, &kFiller}) {
      for (const auto& x : *list) ok = ok && !overlaps(w, x);
    }
    if (ok) return w;
  }
}

// A pool entry for the split: test draws from its word list; train a sixth of the time from its list and
// otherwise makes up a word (a larger share of list words taught the model to recall them, `work/` written
// as `logs/`, instead of copying the name it was given).
// With `capitals` (generate_options::capitals) one made-up word in five is then written in capitals or
// capitalized; the draw for it is made only then, so without it the stream is what it always was.
std::string pool_pick(rng& r, split s, const std::vector<std::string> name_pools::*list,
                      bool capitals = false) {
  if (s == split::train && r.range(0, 5) != 0) {
    std::string w = pseudo_word(r);
    if (!capitals) return w;
    const int64_t k = r.range(0, 9);  // 0: all capitals, 1: capitalized, else as drawn
    if (k == 0) {
      for (char& c : w) c = char(std::toupper(uint8_t(c)));
    } else if (k == 1) {
      w[0] = char(std::toupper(uint8_t(w[0])));
    }
    return w;
  }
  return r.pick(pools(s).*list);
}
const std::vector<std::string> kExts = {"txt", "log",  "md",  "csv", "json", "yaml", "py",
                                        "sh",  "conf", "dat", "ini", "xml",  "tsv",  "cfg"};
// Extensions that only delete_ext's files have.
const std::vector<std::string> kScratchExts = {"tmp", "bak", "swp", "old"};

std::vector<std::string> exts_except(const std::vector<std::string>& drop) {
  std::vector<std::string> v;
  for (const auto& e : kExts) {
    if (std::find(drop.begin(), drop.end(), e) == drop.end()) v.push_back(e);
  }
  return v;
}

// A file stem from the split's words: `notes`, `notes2`, `sales-plan`, `data_2024`, `report-2024.v2`, and,
// when `spaced`, `my notes` style names with a space.
std::string make_stem(rng& r, split s, bool spaced, bool capitals = false) {
  const std::string a = pool_pick(r, s, &name_pools::stems, capitals),
                    b = pool_pick(r, s, &name_pools::stems, capitals);
  if (spaced) return r.range(0, 1) ? a + " " + b : a + " " + S(r.range(1, 9));
  switch (r.range(0, 9)) {
    case 0:
      return a + S(r.range(1, 99));
    case 1:
      return a + "-" + b;
    case 2:
      return a + "_" + b;
    case 3:
      return a + "-" + S(r.range(2015, 2026));
    case 4:
      return a + "_" + S(r.range(2015, 2026)) + ".v" + S(r.range(1, 9));
    case 5:
      return a + "." + b;
    default:
      return a;
  }
}

// The path as a shell word: single-quoted when it has anything but letters, digits and ._/-.
std::string shell_quote(const std::string& path) {
  const bool plain = std::all_of(path.begin(), path.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '/' || c == '-';
  });
  return plain ? path : "'" + path + "'";
}

std::string filler_line(rng& r) {
  std::string line;
  const int64_t n = r.range(3, 7);
  for (int64_t i = 0; i < n; ++i) {
    if (i) line += ' ';
    line += r.pick(kFiller);
  }
  return line;
}

std::string lines_text(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

std::vector<std::string> filler_lines(rng& r, int64_t n) {
  std::vector<std::string> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(filler_line(r));
  return v;
}

struct tree_builder {
  rng& r;
  split s;
  bool capitals = false;  // generate_options::capitals
  std::vector<file_entry> files;
  std::string subdir;

  // A name word from the split's pool (pool_pick).
  std::string pick(const std::vector<std::string> name_pools::*list) {
    return pool_pick(r, s, list, capitals);
  }

  bool exists(const std::string& path) const {
    return std::any_of(files.begin(), files.end(), [&](const file_entry& f) { return f.path == path; });
  }
  // A fresh name `stem.ext` in dir ("" = top level) from the split's pool.
  std::string fresh(const std::string& dir, const std::vector<std::string>& exts, bool spaced = false) {
    for (;;) {
      const std::string name = make_stem(r, s, spaced, capitals) + "." + r.pick(exts);
      const std::string path = dir.empty() ? name : dir + "/" + name;
      if (!exists(path)) return path;
    }
  }
  std::string add(const std::string& dir, const std::vector<std::string>& exts, std::string content,
                  bool spaced = false) {
    const std::string path = fresh(dir, exts, spaced);
    files.push_back({path, std::move(content)});
    return path;
  }
  // The file a single-file request is about: mostly at the top level, sometimes in the subdirectory or one
  // level below it, and now and then with a space in its name.
  std::string add_target(const std::vector<std::string>& exts, std::string content) {
    const int64_t where = r.range(0, 19);
    const std::string dir = where < 14 ? "" : where < 17 ? subdir : subdir + "/" + pick(&name_pools::dirs);
    return add(dir, exts, std::move(content), r.range(0, 11) == 0);
  }
  // 2..4 top-level files and one subdirectory with 1..2 files, all of 3..20 filler lines.
  void base(const std::vector<std::string>& exts, int top_min = 2, int top_max = 4) {
    subdir = pick(&name_pools::dirs);
    const int64_t top = r.range(top_min, top_max), sub = r.range(1, 2);
    for (int64_t i = 0; i < top; ++i) add("", exts, lines_text(filler_lines(r, r.range(3, 20))));
    for (int64_t i = 0; i < sub; ++i) add(subdir, exts, lines_text(filler_lines(r, r.range(3, 20))));
  }
  file_entry& get(const std::string& path) {
    for (auto& f : files) {
      if (f.path == path) return f;
    }
    MOXI_ASSERT(false, "no such file");
  }
};

// Sizes within a band around k*1000..k*1024 bytes (k = 1..6) are avoided so that "larger than k KB" has
// one answer whether KB means 1000 or 1024 bytes and however find rounds.
bool ambiguous_size(size_t n) {
  for (size_t k = 1; k <= 7; ++k) {
    if (n + 80 >= k * 1000 && n <= k * 1024 + 100) return true;
  }
  return false;
}

std::string content_of_size(rng& r, size_t target) {
  std::string s;
  while (s.size() < target || ambiguous_size(s.size())) s += filler_line(r) + "\n";
  return s;
}

// Filler of lo..hi bytes whose size is in none of `sizes` (then added to it), so that `ls -S` has one order.
std::string content_of_new_size(rng& r, int64_t lo, int64_t hi, std::set<size_t>& sizes) {
  std::string c;
  do {
    c = content_of_size(r, size_t(r.range(lo, hi)));
  } while (sizes.count(c.size()));
  sizes.insert(c.size());
  return c;
}

// n filler lines, m of them (at random places) ending in " w": the files of grep_lines and count_matching.
std::vector<std::string> lines_with_word(rng& r, const std::string& w, int64_t m, int64_t n) {
  auto lines = filler_lines(r, n);
  std::vector<size_t> idx(lines.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  r.shuffle(idx);
  for (int64_t i = 0; i < m; ++i) lines[idx[size_t(i)]] += " " + w;
  return lines;
}

// A terminal request before it is worded: the values its phrasings name, the reference command, and how
// outcomes are compared. params["file"] is the file a single-file request is about.
struct terminal_parts {
  std::map<std::string, std::string> vars;
  std::string reference;
  compare_mode compare;
  json params;
};

// The command of a request about one file (the templates a follow-up can continue).
std::string single_file_command(const std::string& tmpl, const std::string& file, int64_t k) {
  const std::string f = shell_quote(file);
  // `wc -l 'a b.txt'` prints "12 a b.txt", which is not one count and one word; `wc -l < F` prints the count.
  const std::string wc_arg = file.find(' ') == std::string::npos ? f : "< " + f;
  if (tmpl == "count_lines") return "wc -l " + wc_arg;
  if (tmpl == "word_count") return "wc -w " + wc_arg;
  if (tmpl == "show_file") return "cat " + f;
  if (tmpl == "head_n") return "head -n " + S(k) + " " + f;
  if (tmpl == "tail_n") return "tail -n " + S(k) + " " + f;
  if (tmpl == "sort_lines") return "sort " + f;
  if (tmpl == "unique_count") return "sort -u " + f + " | wc -l";
  MOXI_ASSERT(false, "not a single-file template");
}

compare_mode single_file_compare(const std::string& tmpl) {
  return tmpl == "count_lines" || tmpl == "word_count" || tmpl == "unique_count" ? compare_mode::count
                                                                                 : compare_mode::stdout_text;
}

// A file name as the prompt shows it: names with a space are quoted, as people write them.
std::string shown(const std::string& path) {
  return path.find(' ') == std::string::npos ? path : "'" + path + "'";
}

terminal_parts make_terminal(rng& r, split s, bool test_range, const std::string& tmpl, tree_builder& tb) {
  auto rg = [&](const ranges& train, const ranges& test) { return draw(r, test_range ? test : train); };
  terminal_parts p;
  if (tmpl == "count_lines" || tmpl == "word_count" || tmpl == "head_n" || tmpl == "tail_n" ||
      tmpl == "sort_lines" || tmpl == "show_file") {
    tb.base(kExts);
    int64_t n = 0, k = 0;
    if (tmpl == "head_n" || tmpl == "tail_n") {
      k = rg({{1, 5}, {11, 20}}, {{6, 10}});
      n = k + r.range(2, 10);
      p.params = {{"k", k}};
    } else if (tmpl == "sort_lines" || tmpl == "show_file") {
      n = rg({{3, 10}, {21, 30}}, {{11, 20}});
      p.params = {{"lines", n}};
    } else {
      n = rg({{3, 40}, {71, 99}}, {{41, 70}});
      p.params = {{"lines", n}};
    }
    const std::string f = tb.add_target(kExts, lines_text(filler_lines(r, n)));
    p.params["file"] = f;
    p.vars = {{"f", shown(f)}, {"k", S(k)}};
    p.compare = single_file_compare(tmpl);
    p.reference = single_file_command(tmpl, f, k);
  } else if (tmpl == "grep_lines") {
    tb.base(kExts);
    const int64_t m = rg({{1, 2}, {5, 6}}, {{3, 4}});
    const std::string w = tb.pick(&name_pools::words);
    const std::string f = tb.add_target(kExts, lines_text(lines_with_word(r, w, m, m + r.range(3, 10))));
    p.params = {{"matches", m}, {"word", w}, {"file", f}};
    p.compare = compare_mode::stdout_text;
    p.vars = {{"f", shown(f)}, {"w", w}};
    p.reference = "grep " + w + " " + shell_quote(f);
  } else if (tmpl == "find_larger") {
    const int64_t kb = rg({{1, 2}, {5, 5}}, {{3, 4}});
    tb.subdir = tb.pick(&name_pools::dirs);
    const size_t limit = size_t(kb) * 1024;
    // At least one file on each side of the threshold, in both directories.
    const int64_t n = r.range(3, 5);
    for (int64_t i = 0; i < n; ++i) {
      const bool big = i == 0 || (i > 1 && r.range(0, 1) == 1);
      const size_t target = big ? size_t(r.range(int64_t(limit) + 150, int64_t(limit) + 3000))
                                : size_t(r.range(60, int64_t(limit) - 200));
      tb.add(i % 2 ? tb.subdir : "", kExts, content_of_size(r, target));
    }
    p.params = {{"kb", kb}};
    p.compare = compare_mode::lines;
    p.vars = {{"k", S(kb)}};
    p.reference = "find . -type f -size +" + S(kb) + "k";
  } else if (tmpl == "count_ext") {
    // The extension is named in the prompt, so the test split asks about extensions train never does.
    const std::string e = r.pick(
        s == split::train ? std::vector<std::string>{"txt", "log", "md", "csv", "py", "sh", "dat", "xml"}
                          : std::vector<std::string>{"json", "ini", "yaml", "conf"});
    tb.base(exts_except({e}));
    const int64_t m = rg({{1, 2}, {5, 6}}, {{3, 4}});
    for (int64_t i = 0; i < m; ++i)
      tb.add(i % 2 ? tb.subdir : "", {e}, lines_text(filler_lines(r, r.range(1, 5))));
    p.params = {{"matches", m}, {"ext", e}};
    p.compare = compare_mode::count;
    p.vars = {{"e", e}};
    p.reference = "find . -type f -name '*." + e + "' | wc -l";
  } else if (tmpl == "mkdir_copy") {
    const auto others = exts_except({"txt"});
    tb.base(others);
    const int64_t n = rg({{1, 2}, {5, 5}}, {{3, 4}});
    for (int64_t i = 0; i < n; ++i)
      tb.add("", {"txt"}, lines_text(filler_lines(r, r.range(1, 6))), r.range(0, 9) == 0);
    tb.add(tb.subdir, {"txt"}, lines_text(filler_lines(r, r.range(1, 6))));  // must not be copied
    const std::string d = tb.pick(&name_pools::new_dirs) + (r.range(0, 3) == 0 ? S(r.range(1, 9)) : "");
    p.params = {{"files", n}, {"dir", d}};
    p.compare = compare_mode::files;
    p.vars = {{"d", d}};
    p.reference = "mkdir " + d + " && cp *.txt " + d + "/";
  } else if (tmpl == "rename") {
    tb.base(kExts);
    const std::string f = tb.files[0].path;
    const int64_t len = rg({{3, 6}, {10, 12}}, {{7, 9}});
    std::string stem;
    for (int64_t i = 0; i < len; ++i) stem += char('a' + r.range(0, 25));
    const std::string g = stem + "." + r.pick(kExts);
    p.params = {{"stem_length", len}, {"file", f}, {"to", g}};
    p.compare = compare_mode::files;
    p.vars = {{"f", shown(f)}, {"g", g}};
    p.reference = "mv " + shell_quote(f) + " " + g;
  } else if (tmpl == "append") {
    tb.base(kExts);
    const std::string f = tb.files[size_t(r.range(0, 1))].path;
    const int64_t m = rg({{1, 2}, {5, 6}}, {{3, 4}});
    std::string text;
    for (int64_t i = 0; i < m; ++i)
      text += (i ? " " : "") + (i == 0 ? tb.pick(&name_pools::words) : r.pick(kFiller));
    p.params = {{"words", m}, {"file", f}};
    p.compare = compare_mode::files;
    p.vars = {{"f", shown(f)}, {"t", text}};
    p.reference = "echo '" + text + "' >> " + shell_quote(f);
  } else if (tmpl == "unique_count") {
    tb.base(kExts);
    const int64_t distinct = rg({{2, 3}, {7, 8}}, {{4, 6}});
    const auto pool = filler_lines(r, distinct);
    std::vector<std::string> lines = pool;  // every distinct line at least once
    const int64_t extra = r.range(2, 12);
    for (int64_t i = 0; i < extra; ++i) lines.push_back(r.pick(pool));
    r.shuffle(lines);
    const std::string f = tb.add_target(kExts, lines_text(lines));
    p.params = {{"distinct", distinct}, {"file", f}};
    p.compare = compare_mode::count;
    p.vars = {{"f", shown(f)}};
    p.reference = single_file_command(tmpl, f, 0);
  } else if (tmpl == "delete_ext") {
    tb.base(kExts);
    const std::string e = r.pick(kScratchExts);
    const int64_t n = rg({{1, 2}, {5, 6}}, {{3, 4}});
    for (int64_t i = 0; i < n; ++i) tb.add("", {e}, lines_text(filler_lines(r, 2)), r.range(0, 9) == 0);
    tb.add(tb.subdir, {e}, lines_text(filler_lines(r, 2)));  // must survive
    p.params = {{"files", n}, {"ext", e}};
    p.compare = compare_mode::files;
    p.vars = {{"e", e}};
    p.reference = "rm -f *." + e;
  } else if (tmpl == "replace_word") {
    tb.base(kExts);
    const std::string a = tb.pick(&name_pools::words);
    std::string b = tb.pick(&name_pools::words);
    while (b == a) b = tb.pick(&name_pools::words);
    auto lines = filler_lines(r, r.range(6, 10));
    const int64_t m = rg({{1, 2}, {5, 6}}, {{3, 4}});
    std::vector<size_t> idx(lines.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    r.shuffle(idx);
    for (int64_t i = 0; i < m; ++i) lines[idx[size_t(i)]] += " " + a;
    const std::string f = tb.add_target(kExts, lines_text(lines));
    p.params = {{"from", a}, {"to", b}, {"matches", m}, {"file", f}};
    p.compare = compare_mode::files;
    p.vars = {{"f", shown(f)}, {"a", a}, {"b", b}};
    p.reference = "sed -i 's/" + a + "/" + b + "/g' " + shell_quote(f);
  } else if (tmpl == "list_by_size") {
    // Top-level files only, of distinct sizes: a directory's size (4096 bytes on ext4, a few dozen on tmpfs)
    // would otherwise take a place in the order that depends on the file system.
    const int64_t n = rg({{2, 3}, {6, 7}}, {{4, 5}});
    std::set<size_t> sizes;
    for (int64_t i = 0; i < n; ++i) tb.add("", kExts, content_of_new_size(r, 50, 6000, sizes));
    p.params = {{"files", n}};
    p.compare = compare_mode::stdout_text;
    p.reference = "ls -S";
  } else if (tmpl == "largest_file") {
    // Composed from what train teaches: ls -S (list_by_size) and head -n (head_n).
    tb.subdir = tb.pick(&name_pools::dirs);
    // The largest file is over 6000 bytes so that directories (4096 bytes on most file systems) never
    // compete in `ls -S`; the others are distinct and smaller.
    const std::string big = tb.add("", kExts, content_of_size(r, size_t(r.range(6200, 9000))));
    const int64_t n = r.range(2, 4);
    std::set<size_t> sizes = {tb.get(big).content.size()};
    for (int64_t i = 0; i < n; ++i) tb.add(i == 0 ? tb.subdir : "", kExts, content_of_new_size(r, 50, 5000, sizes));
    p.params = json::object();
    p.compare = compare_mode::lines;
    p.reference = "ls -S | head -n 1";
  } else if (tmpl == "total_lines") {
    // Composed from what train teaches: cat (show_file), a glob (mkdir_copy, delete_ext) and a pipe into
    // wc -l (count_ext, unique_count).
    const std::string e = r.pick(kExts);
    tb.base(exts_except({e}));
    const int64_t n = r.range(2, 4);
    int64_t total = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t lines = r.range(2, 15);
      total += lines;
      tb.add("", {e}, lines_text(filler_lines(r, lines)));
    }
    tb.add(tb.subdir, {e}, lines_text(filler_lines(r, r.range(2, 6))));  // not counted
    p.params = {{"files", n}, {"ext", e}, {"lines", total}};
    p.compare = compare_mode::count;
    p.vars = {{"e", e}};
    p.reference = "cat *." + e + " | wc -l";
  } else if (tmpl == "line_n" || tmpl == "skip_header" || tmpl == "reverse_lines" || tmpl == "char_count" ||
             tmpl == "uppercase") {
    tb.base(kExts);
    const int64_t k = tmpl == "line_n" ? r.range(1, 12) : 0;
    const int64_t n = std::max<int64_t>(k, 1) + r.range(2, 10);
    const std::string f = tb.add_target(kExts, lines_text(filler_lines(r, n)));
    const std::string q = shell_quote(f);
    p.params = {{"lines", n}, {"file", f}};
    if (k) p.params["k"] = k;
    p.vars = {{"f", shown(f)}, {"k", S(k)}};
    p.compare = tmpl == "char_count" ? compare_mode::count : compare_mode::stdout_text;
    if (tmpl == "line_n") p.reference = "sed -n '" + S(k) + "p' " + q;
    if (tmpl == "skip_header") p.reference = "tail -n +2 " + q;
    if (tmpl == "reverse_lines") p.reference = "tac " + q;
    if (tmpl == "char_count") p.reference = "wc -c " + (f.find(' ') == std::string::npos ? q : "< " + q);
    if (tmpl == "uppercase") p.reference = "tr a-z A-Z < " + q;
  } else if (tmpl == "count_matching") {
    tb.base(kExts);
    const int64_t m = r.range(1, 6);
    const std::string w = tb.pick(&name_pools::words);
    const std::string f = tb.add_target(kExts, lines_text(lines_with_word(r, w, m, m + r.range(2, 10))));
    p.params = {{"matches", m}, {"word", w}, {"file", f}};
    p.compare = compare_mode::count;
    p.vars = {{"f", shown(f)}, {"w", w}};
    p.reference = "grep -c " + w + " " + shell_quote(f);
  } else if (tmpl == "touch_file") {
    tb.base(kExts);
    const std::string g = tb.fresh("", kExts);
    p.params = {{"to", g}};
    p.compare = compare_mode::files;
    p.vars = {{"g", g}};
    p.reference = "touch " + g;
  } else if (tmpl == "copy_file" || tmpl == "delete_file") {
    tb.base(kExts);
    const std::string f = tb.files[size_t(r.range(0, 1))].path;
    p.params = {{"file", f}};
    p.compare = compare_mode::files;
    p.vars = {{"f", shown(f)}};
    if (tmpl == "delete_file") {
      p.reference = "rm " + shell_quote(f);
    } else {
      const std::string g = r.range(0, 1) ? f + ".bak" : tb.fresh("", kExts);
      p.params["to"] = g;
      p.vars["g"] = g;
      p.reference = "cp " + shell_quote(f) + " " + g;
    }
  } else if (tmpl == "sort_unique") {
    tb.base(kExts);
    const auto pool = filler_lines(r, r.range(2, 8));
    std::vector<std::string> lines = pool;
    for (int64_t i = r.range(2, 8); i > 0; --i) lines.push_back(r.pick(pool));
    r.shuffle(lines);
    const std::string f = tb.add_target(kExts, lines_text(lines));
    p.params = {{"distinct", int64_t(pool.size())}, {"file", f}};
    p.compare = compare_mode::stdout_text;
    p.vars = {{"f", shown(f)}};
    p.reference = "sort -u " + shell_quote(f);
  } else if (tmpl == "mkdir_nested") {
    tb.base(kExts);
    std::string d = tb.pick(&name_pools::new_dirs);
    for (int64_t i = r.range(1, 2); i > 0; --i) {
      d += "/" + (r.range(0, 2) == 0 ? S(r.range(2015, 2026)) : tb.pick(&name_pools::new_dirs));
    }
    p.params = {{"dir", d}};
    p.compare = compare_mode::files;
    p.vars = {{"d", d}};
    p.reference = "mkdir -p " + d;
  } else if (tmpl == "move_into") {
    tb.base(kExts);
    const std::string f = tb.files[size_t(r.range(0, 1))].path;
    p.params = {{"file", f}, {"dir", tb.subdir}};
    p.compare = compare_mode::files;
    p.vars = {{"f", shown(f)}, {"d", tb.subdir}};
    p.reference = "mv " + shell_quote(f) + " " + tb.subdir + "/";
  } else {
    MOXI_ASSERT(false, "unknown terminal template");
  }
  return p;
}

// Words one terminal request: a phrasing of the family (maybe with a typo), its values, and a suffix.
std::string word_request(rng& r, const phrasing_table& table, const std::string& key,
                         const std::string& family, const std::map<std::string, std::string>& vars) {
  std::string text = fill(maybe_typo(r, r.pick(table.at(key).at(family))), vars);
  std::string suffix = r.pick(kCommandSuffixes);
  if (suffix.empty()) return text;
  if (std::string(".?!)").find(text.back()) != std::string::npos) return text + " " + suffix;
  // After a request without final punctuation: "count lines in a.txt, just the command".
  if (suffix[0] >= 'A' && suffix[0] <= 'Z') suffix[0] = char(suffix[0] - 'A' + 'a');
  return text + ", " + suffix;
}

// The templates a follow-up can continue: requests about one file that leave the tree as it is.
const std::vector<std::string> kFollowable = {"count_lines", "word_count", "head_n",
                                              "tail_n",      "sort_lines", "unique_count"};

// A follow-up item: a first request on the tree and its reference command become the history; the prompt
// asks for something more about the same tree, and only that is checked.
void make_followup(rng& r, split s, bool test_range, const std::string& family, task& t, tree_builder& tb) {
  const std::string first = r.pick(kFollowable);
  auto p = make_terminal(r, s, test_range, first, tb);
  t.history = {{"user", word_request(r, terminal_phrasings(), first, family, p.vars)},
               {"assistant", p.reference}};
  const std::string file = p.params["file"].get<std::string>();
  std::vector<std::string> kinds = {"other_file", "part_of_it"};
  if (first == "count_lines" || first == "word_count") kinds.push_back("other_count");
  const std::string kind = r.pick(kinds);
  std::map<std::string, std::string> vars;
  std::string op = first, target = file;
  int64_t k = p.params.value("k", int64_t(0));
  if (kind == "other_file") {
    std::vector<std::string> others;
    for (const auto& f : tb.files) {
      if (f.path != file) others.push_back(f.path);
    }
    target = r.pick(others);
    vars["g"] = shown(target);
  } else if (kind == "other_count") {
    op = first == "count_lines" ? "word_count" : "count_lines";
    vars["x"] = op == "count_lines" ? "lines" : "words";
  } else {
    op = r.range(0, 1) ? "head_n" : "tail_n";
    k = draw(r, test_range ? ranges{{6, 10}} : ranges{{1, 5}, {11, 20}});
    vars["p"] = op == "head_n" ? "first" : "last";
    vars["k"] = S(k);
  }
  t.prompt = word_request(r, followup_phrasings(), kind, family, vars);
  t.reference = single_file_command(op, target, k);
  t.compare = single_file_compare(op);
  t.params = {{"followup", kind}, {"first", first}, {"op", op}, {"file", target}};
  if (op == "head_n" || op == "tail_n") t.params["k"] = k;
}

// The text of a "repeat after me" item: 1-4 words, file names, paths, letter strings or numbers, from the
// split's pools (train mostly made-up words), so test text never repeats a train name.
std::string repeat_text(rng& r, split s) {
  const int64_t n = r.range(1, 4);
  std::string text;
  for (int64_t i = 0; i < n; ++i) {
    std::string item;
    switch (r.range(0, 5)) {
      case 0:
        item = pool_pick(r, s, &name_pools::words);
        break;
      case 1:
        item = pool_pick(r, s, &name_pools::stems);
        break;
      case 2:
        item = make_stem(r, s, false) + "." + r.pick(kExts);
        break;
      case 3:
        item = pool_pick(r, s, &name_pools::dirs) + "/" + make_stem(r, s, false) + "." + r.pick(kExts);
        break;
      case 4:
        for (int64_t k = r.range(3, 10); k > 0; --k) item += char('a' + r.range(0, 25));
        break;
      default:
        item = S(r.range(1, 9999));
    }
    text += (i ? " " : "") + item;
  }
  return text;
}

std::vector<std::string> names_for(const std::vector<template_info>& all, split s) {
  std::vector<std::string> v;
  for (const auto& t : all) {
    // The length split draws the shared templates only, with longer operands.
    const bool in = s == split::test    ? !t.train_only
                    : s == split::train ? !t.test_only
                                        : !t.test_only && !t.train_only;
    if (in) v.push_back(t.name);
  }
  return v;
}

const std::vector<template_info>& all_templates(domain d) {
  switch (d) {
    case domain::math:
      return math_templates();
    case domain::terminal:
      return terminal_templates();
    case domain::code:
      return code_templates();
    case domain::chat:
      return chat_templates();
    case domain::vision:
      return vision_templates();
  }
  return math_templates();
}

const std::vector<family_info>& all_families(domain d) {
  static const std::vector<family_info> none;
  switch (d) {
    case domain::terminal:
      return terminal_families();
    case domain::code:
      return code_families();
    default:
      return none;
  }
}

// Train items only, from a stream of their own (so the rest of the item is drawn as without it): a third
// of the requests get a casual rewrite (docs/tasks.md "Casual rewrites"), and a third of the code programs
// come without their docstring, as users paste code, so a fix is read from the program, not recalled.
void roughen(uint64_t item_seed, domain d, task& t) {
  rng c(mix(item_seed, 0xCA5Aull));
  if (c.range(0, 2) == 0) {
    // The request only (a code item's program follows it); what the reply copies stays as it is: the
    // files, the reference, a code item's tested calls.
    const size_t code_at = d == domain::code ? t.prompt.find("\n\n") : std::string::npos;
    std::string keep = t.reference + "\n" + t.test;
    for (const auto& f : t.files) keep += "\n" + f.path;
    const std::string rest = code_at == std::string::npos ? "" : t.prompt.substr(code_at);
    t.prompt = casualize(c, t.prompt.substr(0, code_at), keep) + rest;
    t.params["rewritten"] = true;
  }
  if (d != domain::code || c.range(0, 2) != 0) return;
  // The docstring is the program's second line; the fix never touches it.
  const size_t b = t.program.find("\n    \"\"\"");
  if (b == std::string::npos) return;
  const size_t e = t.program.find('\n', b + 1);
  const std::string doc = t.program.substr(b, e - b);
  MOXI_ASSERT(t.reference.find(doc) != std::string::npos, "the docstring differs in the fixed program");
  auto drop = [&](std::string& text) { text.erase(text.find(doc), doc.size()); };
  drop(t.program);
  drop(t.reference);
  drop(t.prompt);
  t.params["docstring"] = false;
}

}  // namespace

std::vector<template_info> templates(domain d) {
  return all_templates(d);
}

std::vector<family_info> families(domain d) {
  return all_families(d);
}

// The share of terminal items that continue a conversation (docs/tasks.md "Follow-ups").
constexpr int64_t kFollowupPercent = 15;

namespace {

// `only` with the group name "shared" replaced by the templates both splits draw (neither test-only nor
// train-only), in table order.
std::vector<std::string> expand_groups(const std::vector<template_info>& all, const std::vector<std::string>& only) {
  std::vector<std::string> out;
  for (const auto& o : only) {
    if (o != kSharedTemplates) {
      out.push_back(o);
      continue;
    }
    for (const auto& t : all) {
      if (!t.test_only && !t.train_only) out.push_back(t.name);
    }
  }
  return out;
}

}  // namespace

division_format parse_division_format(const std::string& name) {
  if (name == "plain") return division_format::plain;
  if (name == "multiples") return division_format::multiples;
  throw error("unknown division format '" + name + "' (plain or multiples)");
}

std::string to_string(division_format f) {
  return f == division_format::multiples ? "multiples" : "plain";
}

std::vector<task> generate_tasks(domain d, split s, size_t n, uint64_t seed, std::vector<std::string> only,
                                 const generate_options& options) {
  if (s == split::length && d != domain::math) throw error("the length split exists for math only");
  const auto& all = all_templates(d);
  auto names = names_for(all, s);
  bool followups = d == domain::terminal;
  if (!only.empty()) {
    only = expand_groups(all, only);
    for (const auto& o : only) {
      if (std::find(names.begin(), names.end(), o) == names.end()) {
        std::string valid;
        for (const auto& x : names) valid += (valid.empty() ? "" : ", ") + x;
        throw error("no template '" + o + "' in " + to_string(d) + "/" + to_string(s) + " (it has " + valid + "; \"" +
                    kSharedTemplates + "\" names those both splits draw)");
      }
    }
    std::vector<std::string> kept;
    for (const auto& x : names) {
      if (std::find(only.begin(), only.end(), x) != only.end()) kept.push_back(x);
    }
    names = kept;
    followups = followups && std::find(only.begin(), only.end(), "followup") != only.end();
  }
  // Follow-ups are drawn at their own rate, not as one template among many.
  names.erase(std::remove(names.begin(), names.end(), "followup"), names.end());
  std::vector<task> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    rng r(mix(mix(mix(seed, uint64_t(d) + 1), uint64_t(s) + 7), i));
    const bool roll = d == domain::terminal && r.range(0, 99) < kFollowupPercent;
    const bool followup = followups && (roll || names.empty());
    const std::string tmpl = followup ? "followup" : r.pick(names);
    const bool test_only = std::any_of(all.begin(), all.end(),
                                       [&](const template_info& t) { return t.name == tmpl && t.test_only; });
    // Shared templates draw their parameters from the held-out range in the test split; test-only
    // templates use the train range (the template is what is held out).
    const bool test_range = s == split::test && !test_only;
    task t;
    std::string code_fn;  // a code item's function (for a bare request)
    switch (d) {
      case domain::math: {
        t = make_math(r, tmpl, s, test_only, options.division);
        break;
      }
      case domain::terminal: {
        tree_builder tb{r, s, options.capitals, {}, {}};
        const std::string family = pick_family(r, terminal_families(), s);
        if (followup) {
          make_followup(r, s, test_range, family, t, tb);
        } else {
          auto p = make_terminal(r, s, test_range, tmpl, tb);
          t.prompt = word_request(r, terminal_phrasings(), tmpl, family, p.vars);
          t.reference = p.reference;
          t.compare = p.compare;
          t.params = p.params;
        }
        t.params["family"] = family;
        t.files = std::move(tb.files);
        std::sort(t.files.begin(), t.files.end(),
                  [](const file_entry& a, const file_entry& b) { return a.path < b.path; });
        break;
      }
      case domain::code: {
        auto c = make_code(r, test_range, tmpl);
        const std::string family = pick_family(r, code_families(), s);
        const std::string request =
            fill(maybe_typo(r, r.pick(code_phrasings().at(family))),
                 {{"desc", c.describe}, {"ex", c.asserts[0].first}, {"want", c.asserts[0].second}});
        t.prompt = request + "\n\n" + c.buggy;
        t.reference = c.fixed;
        t.program = c.buggy;
        t.test = python_test(c);
        t.params = c.params;
        t.params["family"] = family;
        code_fn = c.fn;
        break;
      }
      case domain::chat: {
        const bool repeat = tmpl == "repeat";
        auto c = repeat ? make_repeat(r, s, repeat_text(r, s)) : make_chat(r, s, tmpl);
        t.prompt = c.prompt;
        t.reference = c.reply;
        t.params = {{"intent", tmpl}, {"family", c.family}};
        if (repeat) t.params["text"] = c.reply;
        break;
      }
      case domain::vision:
        t = make_vision(r, s, tmpl);
        break;
    }
    if (s == split::train && d != domain::chat && d != domain::vision) roughen(mix(seed, i), d, t);
    // A bare request replaces the (roughened) request last, from a stream of its own, so the rest of the
    // item is what it is without the option.
    if (s == split::train && d == domain::code && options.bare_requests) {
      rng b(mix(mix(seed, i), 0xBA4Eull));
      if (b.range(0, 3) == 0) {
        t.prompt =
            fill(b.pick(bare_code_phrasings()), {{"fn", code_fn}}) + t.prompt.substr(t.prompt.find("\n\n"));
        t.params.erase("rewritten");
        t.params["bare"] = true;
      }
    }
    char num[32];
    std::snprintf(num, sizeof num, "%05zu", i);
    t.id = std::string(to_string(d)) + "-" + to_string(s) + "-s" + std::to_string(seed) + "-" + num;
    t.domain = d;
    t.split = s;
    t.template_name = tmpl;
    out.push_back(std::move(t));
  }
  return out;
}

namespace detail {
std::string made_up_word(rng& r) {
  return pseudo_word(r);
}
}  // namespace detail

}  // namespace moxi::eval
