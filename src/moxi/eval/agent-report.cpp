// Agent run reports (agent-report.h).
#include "moxi/eval/agent-report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "moxi/base/error.h"
#include "moxi/eval/evaluate.h"

namespace moxi::eval {
namespace fs = std::filesystem;
using json = nlohmann::json;

agent_run read_agent_run(const std::string& dir) {
  const fs::path file = fs::path(dir) / "results.json";
  std::ifstream in(file);
  if (!in) throw error(file.string() + ": cannot read (is " + dir + " a `moxi eval agent` run directory?)");
  agent_run r;
  r.dir = dir;
  try {
    r.results = json::parse(in);
  } catch (const json::exception& e) {
    throw error(file.string() + ": " + e.what());
  }
  if (!r.results.is_object() || !r.results.contains("tasks") || !r.results["tasks"].is_array())
    throw error(file.string() + ": no \"tasks\" list");
  for (const auto& t : r.results["tasks"]) {
    for (const char* k : {"id", "category", "pass", "error", "turns", "seconds"}) {
      if (!t.is_object() || !t.contains(k)) throw error(file.string() + ": a task record has no \"" + k + "\"");
    }
  }
  return r;
}

std::pair<double, double> wilson95(int64_t passed, int64_t n) {
  if (n <= 0) return {0, 0};
  const double z = 1.959963984540054, p = double(passed) / double(n), z2n = z * z / double(n);
  const double center = (p + z2n / 2) / (1 + z2n);
  const double half = z * std::sqrt(p * (1 - p) / double(n) + z2n / (4 * double(n))) / (1 + z2n);
  return {std::max(0.0, center - half), std::min(1.0, center + half)};
}

std::pair<double, double> paired_outcomes::bootstrap95(int rounds, uint64_t seed) const {
  const int64_t total = n();
  if (total == 0 || rounds < 1) return {0, 0};
  uint64_t s = seed;
  auto next = [&s] {  // SplitMix64: the same intervals on every machine
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  std::vector<double> v(static_cast<size_t>(rounds));
  for (auto& x : v) {
    int64_t d = 0;
    for (int64_t i = 0; i < total; ++i) {
      const int64_t k = int64_t(next() % uint64_t(total));  // bias below 2^-40 for any real task count
      d += k < wins ? 1 : k < wins + losses ? -1 : 0;
    }
    x = double(d) / double(total);
  }
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[size_t(std::clamp(q * double(rounds - 1) + 0.5, 0.0, double(rounds - 1)))]; };
  return {at(0.025), at(0.975)};
}

double paired_outcomes::sign_test_p() const {
  paired_stats p;
  p.fixed = wins;
  p.broken = losses;
  return p.sign_test_p();
}

namespace {

struct tally {
  int64_t n = 0, passed = 0, errors = 0;
  int64_t judged() const { return n - errors; }
};

std::map<std::string, tally> per_category(const agent_run& r) {
  std::map<std::string, tally> m;
  for (const auto& t : r.results["tasks"]) {
    for (const std::string& c : {t["category"].get<std::string>(), std::string("overall")}) {
      auto& x = m[c];
      ++x.n;
      const bool err = !t["error"].get<std::string>().empty();
      x.errors += err;
      x.passed += !err && t["pass"].get<bool>();
    }
  }
  return m;
}

std::map<std::string, paired_outcomes> pair_runs(const agent_run& base, const agent_run& cand) {
  std::map<std::string, const json*> b;
  for (const auto& t : base.results["tasks"]) b[t["id"].get<std::string>()] = &t;
  std::map<std::string, paired_outcomes> m;
  for (const auto& t : cand.results["tasks"]) {
    auto it = b.find(t["id"].get<std::string>());
    if (it == b.end()) continue;
    const json& o = *it->second;
    if (!o["error"].get<std::string>().empty() || !t["error"].get<std::string>().empty()) continue;
    const bool was = o["pass"].get<bool>(), now = t["pass"].get<bool>();
    for (const std::string& c : {t["category"].get<std::string>(), std::string("overall")}) {
      auto& p = m[c];
      (now && !was ? p.wins : was && !now ? p.losses : p.ties) += 1;
    }
  }
  return m;
}

json paired_json(const paired_outcomes& p) {
  const auto ci = p.bootstrap95();
  return {{"paired", p.n()},  {"wins", p.wins},           {"losses", p.losses},
          {"ties", p.ties},   {"net_improvement_rate", p.nir()}, {"ci95", {ci.first, ci.second}},
          {"sign_test_p", p.sign_test_p()}};
}

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string pct(double v) { return fmt("%.1f %%", 100 * v); }

// Colours of runs 1, 2, ... (repeat past eight).
const char* colour(size_t i) {
  static const char* c[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f"};
  return c[i % 8];
}

std::string run_label(const agent_run& r, size_t i) {
  return "run " + std::to_string(i + 1) + " (" + r.results.value("agent", std::string("?")) + ")";
}

// Grouped bars of pass rate per category, one bar per run, with the Wilson interval as a whisker.
std::string pass_rate_svg(const std::vector<agent_run>& runs, const std::vector<std::string>& cats) {
  const int W = 760, H = 280, left = 50, bottom = 40, top = 10;
  const double plot_w = W - left - 10, plot_h = H - bottom - top;
  const double group = plot_w / double(cats.size()), bar = group * 0.8 / double(runs.size());
  std::ostringstream s;
  s << "<svg class=\"chart\" role=\"img\" aria-label=\"pass rate per category\" width=\"" << W << "\" height=\"" << H
    << "\" viewBox=\"0 0 " << W << " " << H << "\" xmlns=\"http://www.w3.org/2000/svg\">\n";
  for (int k = 0; k <= 4; ++k) {
    const double y = top + plot_h * (1 - k / 4.0);
    s << "<line x1=\"" << left << "\" x2=\"" << W - 10 << "\" y1=\"" << y << "\" y2=\"" << y
      << "\" stroke=\"#ddd\"/><text x=\"" << left - 6 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">" << k * 25
      << "%</text>\n";
  }
  std::vector<std::map<std::string, tally>> t;
  for (const auto& r : runs) t.push_back(per_category(r));
  for (size_t c = 0; c < cats.size(); ++c) {
    const double gx = left + group * double(c) + group * 0.1;
    for (size_t i = 0; i < runs.size(); ++i) {
      const tally x = t[i].count(cats[c]) ? t[i].at(cats[c]) : tally{};
      const double rate = x.judged() > 0 ? double(x.passed) / double(x.judged()) : 0;
      const auto [lo, hi] = wilson95(x.passed, x.judged());
      const double bx = gx + bar * double(i), h = plot_h * rate;
      s << "<rect class=\"bar\" x=\"" << bx << "\" y=\"" << top + plot_h - h << "\" width=\"" << bar * 0.9
        << "\" height=\"" << h << "\" fill=\"" << colour(i) << "\"><title>" << esc(run_label(runs[i], i)) << ", "
        << esc(cats[c]) << ": " << x.passed << "/" << x.judged() << " (" << pct(rate) << "), 95 % interval "
        << pct(lo) << " to " << pct(hi) << "</title></rect>\n";
      const double cx = bx + bar * 0.45;
      s << "<line class=\"whisker\" x1=\"" << cx << "\" x2=\"" << cx << "\" y1=\"" << top + plot_h * (1 - hi)
        << "\" y2=\"" << top + plot_h * (1 - lo) << "\" stroke=\"#222\"/>\n";
    }
    s << "<text x=\"" << gx + group * 0.4 << "\" y=\"" << H - bottom + 18 << "\" text-anchor=\"middle\">"
      << esc(cats[c]) << "</text>\n";
  }
  s << "</svg>\n";
  return s.str();
}

// A histogram of one numeric field of the task records, runs side by side in each bin.
std::string histogram_svg(const std::vector<agent_run>& runs, const std::string& field, const std::string& label) {
  double mx = 0;
  for (const auto& r : runs)
    for (const auto& t : r.results["tasks"]) mx = std::max(mx, t.value(field, 0.0));
  const int bins = 10;
  const double width = mx > 0 ? std::ceil((mx + 1) / bins) : 1;
  std::vector<std::vector<int>> counts(runs.size(), std::vector<int>(bins, 0));
  int top_count = 1;
  for (size_t i = 0; i < runs.size(); ++i) {
    for (const auto& t : runs[i].results["tasks"]) {
      const int b = std::min(bins - 1, int(t.value(field, 0.0) / width));
      top_count = std::max(top_count, ++counts[i][size_t(b)]);
    }
  }
  const int W = 370, H = 200, left = 34, bottom = 34, top = 8;
  const double plot_w = W - left - 8, plot_h = H - bottom - top, group = plot_w / bins;
  const double bar = group * 0.85 / double(runs.size());
  std::ostringstream s;
  s << "<svg class=\"chart\" role=\"img\" aria-label=\"" << esc(label) << "\" width=\"" << W << "\" height=\"" << H
    << "\" viewBox=\"0 0 " << W << " " << H << "\" xmlns=\"http://www.w3.org/2000/svg\">\n";
  s << "<text x=\"" << left - 4 << "\" y=\"" << top + 10 << "\" text-anchor=\"end\">" << top_count << "</text>\n";
  s << "<line x1=\"" << left << "\" x2=\"" << W - 8 << "\" y1=\"" << top + plot_h << "\" y2=\"" << top + plot_h
    << "\" stroke=\"#999\"/>\n";
  for (int b = 0; b < bins; ++b) {
    for (size_t i = 0; i < runs.size(); ++i) {
      const double h = plot_h * counts[i][size_t(b)] / top_count;
      s << "<rect class=\"bar\" x=\"" << left + group * b + bar * double(i) << "\" y=\"" << top + plot_h - h
        << "\" width=\"" << bar * 0.9 << "\" height=\"" << h << "\" fill=\"" << colour(i) << "\"><title>"
        << esc(run_label(runs[i], i)) << ": " << counts[i][size_t(b)] << " tasks with " << esc(field) << " "
        << b * width << " to " << (b + 1) * width << "</title></rect>\n";
    }
    if (b % 2 == 0)
      s << "<text x=\"" << left + group * b << "\" y=\"" << H - bottom + 14 << "\">" << b * width << "</text>\n";
  }
  s << "<text x=\"" << left + plot_w / 2 << "\" y=\"" << H - 4 << "\" text-anchor=\"middle\">" << esc(label)
    << "</text>\n</svg>\n";
  return s.str();
}

std::string trajectory_link(const agent_run& r, const std::string& id, const std::string& out_dir) {
  const fs::path file = fs::absolute(fs::path(r.dir) / "trajectories" / (id + ".jsonl"));
  const fs::path rel = file.lexically_relative(fs::absolute(out_dir.empty() ? "." : out_dir));
  return "<a href=\"" + esc(rel.generic_string()) + "\">" + esc(id) + "</a>";
}

}  // namespace

json agent_report_json(const std::vector<agent_run>& runs) {
  if (runs.empty()) throw error("eval report: no runs");
  json out = {{"runs", json::array()}, {"comparisons", json::array()}};
  for (const auto& r : runs) {
    json cats = json::object();
    for (const auto& [c, x] : per_category(r)) {
      const auto [lo, hi] = wilson95(x.passed, x.judged());
      cats[c] = {{"tasks", x.n},
                 {"passed", x.passed},
                 {"errors", x.errors},
                 {"pass_rate", x.judged() > 0 ? double(x.passed) / double(x.judged()) : 0.0},
                 {"ci95", {lo, hi}}};
    }
    out["runs"].push_back({{"dir", r.dir}, {"agent", r.results.value("agent", std::string())}, {"categories", cats}});
  }
  for (size_t i = 1; i < runs.size(); ++i) {
    json cats = json::object();
    for (const auto& [c, p] : pair_runs(runs[0], runs[i])) cats[c] = paired_json(p);
    out["comparisons"].push_back({{"baseline", runs[0].dir}, {"candidate", runs[i].dir}, {"categories", cats}});
  }
  return out;
}

std::string agent_report_html(const std::vector<agent_run>& runs, const std::string& out_dir) {
  const json j = agent_report_json(runs);
  std::set<std::string> cat_set;
  for (const auto& r : runs)
    for (const auto& t : r.results["tasks"]) cat_set.insert(t["category"].get<std::string>());
  std::vector<std::string> cats(cat_set.begin(), cat_set.end());
  cats.push_back("overall");

  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>moxi agent report</title>\n"
       "<style>body{font:14px/1.4 sans-serif;margin:24px;color:#222;max-width:1100px}"
       "table{border-collapse:collapse;margin:8px 0 20px}td,th{border:1px solid #ccc;padding:3px 8px;"
       "text-align:right}th:first-child,td:first-child{text-align:left}svg text{font:11px sans-serif}"
       ".legend span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;vertical-align:middle}"
       ".row{display:flex;gap:16px;flex-wrap:wrap}</style></head><body>\n<h1>moxi agent report</h1>\n";
  h << "<h2>Runs</h2>\n<table><tr><th>run</th><th>directory</th><th>tasks</th><th>passed</th><th>errors</th>"
       "<th>pass rate</th><th>95 % interval</th><th>seconds</th></tr>\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto& o = j["runs"][i]["categories"]["overall"];
    h << "<tr><td><span style=\"color:" << colour(i) << "\">&#9632;</span> " << esc(run_label(runs[i], i))
      << "</td><td>" << esc(runs[i].dir) << "</td><td>" << o["tasks"] << "</td><td>" << o["passed"] << "</td><td>"
      << o["errors"] << "</td><td>" << pct(o["pass_rate"].get<double>()) << "</td><td>"
      << pct(o["ci95"][0].get<double>()) << " to " << pct(o["ci95"][1].get<double>()) << "</td><td>"
      << fmt("%.1f", runs[i].results.value("seconds", 0.0)) << "</td></tr>\n";
  }
  h << "</table>\n<h2>Pass rate per category</h2>\n<p class=\"legend\">";
  for (size_t i = 0; i < runs.size(); ++i)
    h << "<span style=\"background:" << colour(i) << "\"></span>" << esc(run_label(runs[i], i));
  h << " &mdash; whiskers: Wilson 95 % interval</p>\n" << pass_rate_svg(runs, cats);
  h << "<table><tr><th>category</th>";
  for (size_t i = 0; i < runs.size(); ++i) h << "<th>" << esc(run_label(runs[i], i)) << "</th>";
  h << "</tr>\n";
  for (const auto& c : cats) {
    h << "<tr><td>" << esc(c) << "</td>";
    for (size_t i = 0; i < runs.size(); ++i) {
      const auto& cs = j["runs"][i]["categories"];
      if (!cs.contains(c)) {
        h << "<td>-</td>";
        continue;
      }
      h << "<td>" << cs[c]["passed"] << "/" << cs[c]["tasks"] << " (" << pct(cs[c]["pass_rate"].get<double>())
        << ")</td>";
    }
    h << "</tr>\n";
  }
  h << "</table>\n";
  for (size_t k = 0; k < j["comparisons"].size(); ++k) {
    const auto& cmp = j["comparisons"][k];
    h << "<h2>" << esc(run_label(runs[k + 1], k + 1)) << " against " << esc(run_label(runs[0], 0)) << "</h2>\n"
      << "<table><tr><th>category</th><th>paired</th><th>wins</th><th>losses</th><th>ties</th>"
         "<th>net improvement</th><th>bootstrap 95 % interval</th><th>sign test p</th></tr>\n";
    for (const auto& [c, p] : cmp["categories"].items()) {
      h << "<tr><td>" << esc(c) << "</td><td>" << p["paired"] << "</td><td>" << p["wins"] << "</td><td>"
        << p["losses"] << "</td><td>" << p["ties"] << "</td><td>"
        << fmt("%+.1f %%", 100 * p["net_improvement_rate"].get<double>()) << "</td><td>"
        << fmt("%+.1f", 100 * p["ci95"][0].get<double>()) << " to " << fmt("%+.1f %%", 100 * p["ci95"][1].get<double>())
        << "</td><td>" << fmt("%.3g", p["sign_test_p"].get<double>()) << "</td></tr>\n";
    }
    h << "</table>\n";
  }
  h << "<h2>Turns and tokens per episode</h2>\n<div class=\"row\">" << histogram_svg(runs, "turns", "turns")
    << histogram_svg(runs, "reply_tokens", "reply tokens") << "</div>\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    std::vector<const json*> tasks;
    for (const auto& t : runs[i].results["tasks"]) tasks.push_back(&t);
    std::sort(tasks.begin(), tasks.end(), [](const json* a, const json* b) {
      return (*a)["seconds"].get<double>() > (*b)["seconds"].get<double>();
    });
    h << "<h2>" << esc(run_label(runs[i], i)) << ": slowest tasks</h2>\n<table><tr><th>task</th><th>category</th>"
         "<th>seconds</th><th>turns</th><th>result</th></tr>\n";
    for (size_t k = 0; k < std::min<size_t>(10, tasks.size()); ++k) {
      const json& t = *tasks[k];
      h << "<tr><td>" << trajectory_link(runs[i], t["id"], out_dir) << "</td><td>" << esc(t["category"]) << "</td><td>"
        << fmt("%.1f", t["seconds"].get<double>()) << "</td><td>" << t["turns"] << "</td><td>"
        << (t["pass"].get<bool>() ? "pass" : "fail") << "</td></tr>\n";
    }
    h << "</table>\n<h2>" << esc(run_label(runs[i], i)) << ": failed tasks</h2>\n<table><tr><th>task</th>"
         "<th>category</th><th>tests passed</th><th>turns</th><th>stop</th><th>error</th></tr>\n";
    for (const auto& t : runs[i].results["tasks"]) {
      if (t["pass"].get<bool>()) continue;
      h << "<tr><td>" << trajectory_link(runs[i], t["id"], out_dir) << "</td><td>" << esc(t["category"]) << "</td><td>"
        << t.value("tests_passed", 0) << "/" << t.value("tests_total", 0) << "</td><td>" << t["turns"] << "</td><td>"
        << esc(t.value("stop", std::string())) << "</td><td>" << esc(t["error"].get<std::string>()) << "</td></tr>\n";
    }
    h << "</table>\n";
  }
  h << "</body></html>\n";
  return h.str();
}

}  // namespace moxi::eval
