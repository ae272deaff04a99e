// Sampling from logits and stop detection; see sampler.h for the semantics and their sources (vLLM v1
// sampler order: penalties, temperature, min-p, top-k, top-p; OpenAI presence/frequency penalties).
#include "moxi/runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "moxi/base/error.h"

namespace moxi::runtime {
namespace {

// Below this temperature sampling is greedy (vLLM's _SAMPLING_EPS).
constexpr float kGreedyTemperature = 1e-5f;

[[noreturn]] void bad(const std::string& name, const std::string& expected, double got) {
  throw error("sampling: " + name + " must be " + expected + ", got " + std::to_string(got));
}

}  // namespace

void validate(const sampling_params& p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0) bad("temperature", ">= 0", p.temperature);
  if (!(p.top_p > 0 && p.top_p <= 1)) bad("top_p", "in (0, 1]", p.top_p);
  if (!(p.min_p >= 0 && p.min_p <= 1)) bad("min_p", "in [0, 1]", p.min_p);
  if (p.top_k < -1) bad("top_k", ">= -1 (0 or -1 disable it)", p.top_k);
  if (!std::isfinite(p.repetition_penalty) || p.repetition_penalty <= 0) {
    bad("repetition_penalty", "> 0", p.repetition_penalty);
  }
  if (!(p.presence_penalty >= -2 && p.presence_penalty <= 2))
    bad("presence_penalty", "in [-2, 2]", p.presence_penalty);
  if (!(p.frequency_penalty >= -2 && p.frequency_penalty <= 2)) {
    bad("frequency_penalty", "in [-2, 2]", p.frequency_penalty);
  }
}

void apply_penalties(std::span<float> logits, const sampling_params& p, std::span<const token_id> prompt,
                     const std::unordered_map<token_id, int>& output_counts) {
  const auto vocab = token_id(logits.size());
  if (p.repetition_penalty != 1.0f) {
    const float r = p.repetition_penalty;
    std::vector<bool> seen(logits.size(), false);
    for (token_id t : prompt) {
      if (t >= 0 && t < vocab) seen[t] = true;
    }
    for (const auto& [t, n] : output_counts) {
      if (t >= 0 && t < vocab && n > 0) seen[t] = true;
    }
    for (size_t i = 0; i < logits.size(); ++i) {
      if (seen[i]) logits[i] = logits[i] > 0 ? logits[i] / r : logits[i] * r;
    }
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    for (const auto& [t, n] : output_counts) {
      if (t < 0 || t >= vocab || n <= 0) continue;
      logits[t] -= p.frequency_penalty * float(n);
      logits[t] -= p.presence_penalty;
    }
  }
}

token_id argmax(std::span<const float> logits) {
  if (logits.empty()) throw error("sampling: empty logits");
  token_id best = -1;
  float best_value = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] > best_value || (best < 0 && !std::isnan(logits[i]))) {
      best_value = logits[i];
      best = token_id(i);
    }
  }
  if (best < 0) throw error("sampling: every logit is NaN");
  return best;
}

std::vector<double> sampling_distribution(std::span<const float> logits, const sampling_params& p) {
  const size_t n = logits.size();
  if (n == 0) throw error("sampling: empty logits");
  std::vector<double> prob(n, 0.0);
  const double t = std::max(p.temperature, kGreedyTemperature);
  double max_z = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < n; ++i) {
    if (!std::isnan(logits[i])) max_z = std::max(max_z, double(logits[i]) / t);
  }
  if (!std::isfinite(max_z)) throw error("sampling: no token has a finite logit");
  auto normalize = [&] {
    const double sum = std::accumulate(prob.begin(), prob.end(), 0.0);
    for (double& v : prob) v /= sum;
  };
  for (size_t i = 0; i < n; ++i) {
    const double z = double(logits[i]) / t;
    prob[i] = std::isnan(logits[i]) ? 0.0 : std::exp(z - max_z);
  }
  normalize();
  if (p.min_p > 0) {
    const double threshold = double(p.min_p) * *std::max_element(prob.begin(), prob.end());
    for (double& v : prob) {
      if (v < threshold) v = 0;
    }
    normalize();
  }
  if (p.top_k > 0 && size_t(p.top_k) < n) {
    std::vector<double> sorted(prob);
    std::nth_element(sorted.begin(), sorted.begin() + (p.top_k - 1), sorted.end(), std::greater<>());
    const double kth = sorted[p.top_k - 1];
    for (double& v : prob) {
      if (v < kth) v = 0;
    }
    normalize();
  }
  if (p.top_p < 1) {
    std::vector<token_id> order;
    for (size_t i = 0; i < n; ++i) {
      if (prob[i] > 0) order.push_back(token_id(i));
    }
    std::sort(order.begin(), order.end(),
              [&](token_id a, token_id b) { return prob[a] != prob[b] ? prob[a] > prob[b] : a < b; });
    double before = 0;
    size_t keep = 0;
    while (keep < order.size() && before < double(p.top_p)) before += prob[order[keep++]];
    for (size_t i = keep; i < order.size(); ++i) prob[order[i]] = 0;
    normalize();
  }
  return prob;
}

sampler::sampler(sampling_params params, std::span<const token_id> prompt,
                 std::optional<json_constraint> constraint)
    : params_(params), prompt_(prompt.begin(), prompt.end()), constraint_(std::move(constraint)) {
  validate(params_);
  rng_.seed(params_.seed ? *params_.seed : (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}());
}

token_id draw_from(std::span<const double> prob, double u) {
  double cum = 0;
  token_id last = -1;
  for (size_t i = 0; i < prob.size(); ++i) {
    if (prob[i] <= 0) continue;
    cum += prob[i];
    last = token_id(i);
    if (u < cum) return last;
  }
  if (last < 0) throw error("sampling: no token has probability mass");
  return last;  // u landed in the rounding gap below 1.0
}

token_id sampler::sample(std::span<const float> logits) {
  work_.assign(logits.begin(), logits.end());
  apply_penalties(work_, params_, prompt_, output_counts_);
  if (constraint_) constraint_->mask(work_);
  if (params_.temperature < kGreedyTemperature) return argmax(work_);
  const std::vector<double> prob = sampling_distribution(work_, params_);
  // Inverse CDF in id order; one RNG draw per token keeps seeded streams aligned across settings.
  return draw_from(prob, uniform(rng_));
}

namespace {
std::vector<double> one_hot(size_t n, token_id id) {
  std::vector<double> p(n, 0.0);
  p[size_t(id)] = 1.0;
  return p;
}
}  // namespace

std::vector<double> sampler::distribution(std::span<const float> logits) {
  work_.assign(logits.begin(), logits.end());
  apply_penalties(work_, params_, prompt_, output_counts_);
  if (constraint_) constraint_->mask(work_);
  if (params_.temperature < kGreedyTemperature) return one_hot(work_.size(), argmax(work_));
  return sampling_distribution(work_, params_);
}

std::vector<double> sampler::draft_distribution(std::span<const float> logits) const {
  if (params_.temperature < kGreedyTemperature) return one_hot(logits.size(), argmax(logits));
  return sampling_distribution(logits, params_);
}

void sampler::accept(token_id id) {
  ++output_counts_[id];
  if (constraint_) constraint_->accept(id);
}

// ---------------------------------------------------------------------------------------------------------

stop_checker::stop_checker(std::vector<std::string> stop_strings, std::vector<token_id> stop_token_ids)
    : stop_strings_(std::move(stop_strings)), stop_ids_(std::move(stop_token_ids)) {
  for (size_t i = 0; i < stop_strings_.size(); ++i) {
    if (stop_strings_[i].empty()) throw error("sampling: stop[" + std::to_string(i) + "] is empty");
    if (!formats::utf8_valid(stop_strings_[i]))
      throw error("sampling: stop[" + std::to_string(i) + "] is not valid UTF-8");
    longest_ = std::max(longest_, stop_strings_[i].size());
  }
}

stop_checker::step stop_checker::push(token_id id, std::string_view text) {
  step out;
  if (stopped_) {
    out.stopped = true;
    return out;
  }
  if (std::find(stop_ids_.begin(), stop_ids_.end(), id) != stop_ids_.end()) {
    out.text = flush();
    out.stopped = stopped_ = true;
    return out;
  }
  held_.append(text);
  size_t first = std::string::npos;
  for (const auto& s : stop_strings_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    out.text = held_.substr(0, first);
    held_.clear();
    out.stopped = stopped_ = true;
    return out;
  }
  // Hold back the longest tail that is a proper prefix of some stop string; it may complete later.
  size_t hold = 0;
  for (size_t len = std::min(held_.size(), longest_ - (longest_ > 0 ? 1 : 0)); len > 0 && hold == 0; --len) {
    const std::string_view tail = std::string_view(held_).substr(held_.size() - len);
    for (const auto& s : stop_strings_) {
      if (s.size() > len && s.compare(0, len, tail) == 0) {
        hold = len;
        break;
      }
    }
  }
  out.text = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return out;
}

std::string stop_checker::flush() {
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace moxi::runtime
