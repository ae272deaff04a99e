// `moxi eval report RUN_DIR...`: the numbers and the self-contained HTML page of one or more agent runs
// (results.json of `moxi eval agent`): pass rate per category with Wilson intervals, and against the first
// run each other run's paired comparison (win/loss/tie, net improvement rate with a bootstrap 95 %
// interval, sign test), per category and overall. docs/agent-eval.md "Reports".
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace moxi::eval {

struct agent_run {
  std::string dir;  // the run directory (its trajectories/ are linked from the page)
  nlohmann::json results;  // results.json
};

// Reads DIR/results.json and checks the fields the report uses; throws moxi::error naming the problem.
agent_run read_agent_run(const std::string& dir);

// Wilson score interval of `passed` out of `n` at 95 %; {0, 0} when n = 0.
std::pair<double, double> wilson95(int64_t passed, int64_t n);

// Paired outcomes of two runs on the same tasks.
struct paired_outcomes {
  int64_t wins = 0, losses = 0, ties = 0;  // candidate passes where the baseline failed, the reverse, same
  int64_t n() const { return wins + losses + ties; }
  double nir() const { return n() > 0 ? double(wins - losses) / double(n()) : 0.0; }
  // Percentile bootstrap over the paired tasks (resampled with replacement, `rounds` times, a fixed seed
  // so the page is reproducible): the 2.5 and 97.5 percentiles of the resampled NIR.
  std::pair<double, double> bootstrap95(int rounds = 4000, uint64_t seed = 1) const;
  // Two-sided exact sign test on the changed tasks (wins vs losses, p = 1/2); 1 when none changed.
  double sign_test_p() const;
};

// The report's numbers (what --json prints): runs with their per-category pass rates and intervals, and
// each later run against the first, per category and overall. Tasks with an error in either run are left
// out of the pairing.
nlohmann::json agent_report_json(const std::vector<agent_run>& runs);

// The page: inline SVG and CSS, no script and nothing fetched; links to trajectories are relative to
// `out_dir`, where the page is written.
std::string agent_report_html(const std::vector<agent_run>& runs, const std::string& out_dir);

}  // namespace moxi::eval
