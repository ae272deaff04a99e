// moxi bench context: prefill cost per token along one long prompt, decode speed and memory at several
// contexts of it (bench/context-bench.h).
#include "bench/context-bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "bench/kernels-bench.h"
#include "bench/scratch-dir.h"
#include "moxi/base/clock.h"
#include "moxi/base/error.h"
#include "moxi/base/progress.h"
#include "moxi/base/thread-pool.h"
#include "moxi/dist/flags.h"
#include "moxi/kernels/backend.h"
#include "moxi/kernels/x86/backend.h"
#include "moxi/model/config.h"
#include "moxi/model/init.h"
#include "moxi/model/model.h"
#include "moxi/model/plan.h"

namespace moxi::bench {
namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

// VmHWM of this process (peak resident bytes since start or the last reset).
uint64_t peak_resident_bytes() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("VmHWM:")) return uint64_t(std::stoull(line.substr(6))) * 1024;
  return 0;
}

// Resets VmHWM to the current VmRSS (Linux: "5" to /proc/self/clear_refs); false where that is refused.
bool reset_peak_resident() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return bool(out);
}

}  // namespace

context_bench_result run_context_bench(const context_bench_options& o) {
  auto contexts = o.contexts;
  std::sort(contexts.begin(), contexts.end());
  contexts.erase(std::unique(contexts.begin(), contexts.end()), contexts.end());
  if (contexts.empty() || contexts.front() < 1) throw error("bench context: --contexts must be >= 1");
  if (o.chunk < 1 || o.tokens < 1) throw error("bench context: --chunk and --tokens must be >= 1");
  if (o.rounds < 0) throw error("bench context: --rounds must be >= 0");
  const auto config = model::load_model_config(o.config);
  context_bench_result r;
  r.config = o.config;
  r.threads = thread_pool::global().size();
  r.backend = kernels::default_backend().name();
  r.chunk = o.chunk;
  r.tokens = o.tokens;

  // The bandwidth probe's buffer first, so that what follows is measured on top of it.
  membw_probe probe = o.probe_mib > 0 ? membw_probe(o.probe_mib) : membw_probe();
  std::unique_ptr<scratch_dir> tmp;
  std::string ck = o.keep_dir;
  if (ck.empty()) {
    tmp = std::make_unique<scratch_dir>();
    ck = tmp->dir() + "/model";
  }
  if (!fs::exists(ck)) {
    model::init_options io;
    io.show_progress = false;
    const auto t0 = clock_type::now();
    model::init_checkpoint(config, ck, io);
    r.init_s = seconds_since(t0);
  }
  const uint64_t base = dist::resident_bytes();
  if (!reset_peak_resident())
    std::fprintf(stderr, "bench context: cannot reset VmHWM; peaks include setup\n");
  const auto t0 = clock_type::now();
  const auto m = model::model::load(config, ck);
  r.load_s = seconds_since(t0);
  // Loading holds some tensors twice for a moment (mapped and converted); that peak is its own figure, and
  // the peaks at each context count from here.
  r.load_peak_mb = double(peak_resident_bytes() - base) / 1e6;
  r.loaded_mb = double(dist::resident_bytes() - base) / 1e6;
  reset_peak_resident();

  const int64_t longest = contexts.back();
  // Every token the long cache will hold: the prompt, each context's decode steps and each paired round's,
  // so that no timed step regrows it (a regrow copies the whole cache).
  const int64_t total = longest + (o.tokens + 2) * int64_t(contexts.size()) + (o.tokens + 1) * o.rounds;
  auto cache = m.new_cache();
  cache->reserve(total);
  std::mt19937_64 gen(1);
  std::vector<token_id> prompt(static_cast<size_t>(longest));
  for (auto& t : prompt) t = token_id(gen() % uint64_t(config.vocab_size));
  model::forward_options fo;
  fo.last_only = true;
  // Tokens per second of o.tokens decode steps of random tokens on cache c, after `untimed` steps.
  auto decode_rate = [&](model::contiguous_cache& c, int64_t untimed) {
    auto step = [&] {
      const token_id t = token_id(gen() % uint64_t(config.vocab_size));
      m.forward(std::span(&t, 1), c, fo);
    };
    for (int64_t i = 0; i < untimed; ++i) step();
    const auto d0 = clock_type::now();
    for (int64_t i = 0; i < o.tokens; ++i) step();
    return double(o.tokens) / seconds_since(d0);
  };

  progress bar("prefill", uint64_t(longest), false);
  int64_t fed = 0;  // prompt tokens run so far
  for (const int64_t target : contexts) {
    while (fed < target) {
      const int64_t n = std::min(o.chunk, target - fed);
      const auto c0 = clock_type::now();
      m.forward(std::span(prompt).subspan(size_t(fed), size_t(n)), *cache, fo);
      const double s = seconds_since(c0);
      r.prefill_s += s;
      fed += n;
      r.prefill_curve.emplace_back(cache->length(), s * 1e3 / double(n));
      bar.advance(uint64_t(n));
    }
    context_point p;
    p.context = cache->length();
    p.prefill_ms_per_token = r.prefill_curve.back().second;
    // Decode steps of random tokens, after two untimed ones (the first step after a prefill chunk resizes
    // scratch buffers and finds cold caches); bandwidth sampled before and after.
    const double bw0 = probe.sample_gbs();
    p.decode_tokens_per_s = decode_rate(*cache, 2);
    p.membw_gbs = median({bw0, probe.sample_gbs()});
    p.resident_mb = double(dist::resident_bytes() - base) / 1e6;
    p.peak_mb = double(peak_resident_bytes() - base) / 1e6;

    model::plan_options po;
    po.context = cache->length();
    po.num_shards = 1;
    po.gpus_per_node = 1;
    po.cache = model::cache_format::F32;
    po.prefill_chunk = o.chunk;  // the activations of this run's prefill chunks
    po.dense_tiles = kernels::x86::dense_tile_min_tokens(kernels::active()) <= o.chunk;
    const auto plan = model::make_plan(config, po);
    p.plan_mb = double(plan.device_bytes_max) / 1e6;
    p.bytes_per_token = plan.bytes_per_token_batch1;
    p.share_of_roofline = p.decode_tokens_per_s * p.bytes_per_token / (p.membw_gbs * 1e9);
    r.points.push_back(p);
  }
  bar.finish();
  for (auto& p : r.points) p.decode_vs_first = p.decode_tokens_per_s / r.points.front().decode_tokens_per_s;

  if (o.rounds > 0) {
    // The first context's prompt again in a cache of its own (after every peak above was read), then
    // rounds that alternate between it and the long cache.
    auto first = m.new_cache();
    first->reserve(contexts.front() + (o.tokens + 1) * o.rounds);
    for (int64_t done = 0; done < contexts.front();) {
      const int64_t n = std::min(o.chunk, contexts.front() - done);
      m.forward(std::span(prompt).subspan(size_t(done), size_t(n)), *first, fo);
      done += n;
    }
    auto& pr = r.paired;
    pr.first_context = first->length();
    pr.last_context = cache->length();
    std::vector<double> ratios;
    for (int64_t i = 0; i < o.rounds; ++i) {
      const double bw0 = probe.sample_gbs();
      // One untimed step after each switch: it finds the other cache cold.
      pr.first_tokens_per_s.push_back(decode_rate(*first, 1));
      pr.last_tokens_per_s.push_back(decode_rate(*cache, 1));
      pr.membw_gbs.push_back(median({bw0, probe.sample_gbs()}));
      ratios.push_back(pr.last_tokens_per_s.back() / pr.first_tokens_per_s.back());
    }
    pr.ratio_median = median(ratios);
    pr.ratio_min = *std::min_element(ratios.begin(), ratios.end());
    pr.ratio_max = *std::max_element(ratios.begin(), ratios.end());
  }

  // Least-squares line through the chunk costs (the first chunk is left out: it warms scratch buffers).
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 1; i < r.prefill_curve.size(); ++i) {
    const double x = double(r.prefill_curve[i].first) / 1000, y = r.prefill_curve[i].second;
    n += 1, sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  if (n >= 2 && n * sxx - sx * sx > 0) {
    r.fit_ms_per_k = (n * sxy - sx * sy) / (n * sxx - sx * sx);
    r.fit_ms = (sy - r.fit_ms_per_k * sx) / n;
  }
  return r;
}

namespace {

void print(const context_bench_result& r, bool json) {
  if (json) {
    nlohmann::json j = {{"bench", "context"},
                        {"config", r.config},
                        {"backend", r.backend},
                        {"threads", r.threads},
                        {"init_s", r.init_s},
                        {"load_s", r.load_s},
                        {"loaded_mb", r.loaded_mb},
                        {"load_peak_mb", r.load_peak_mb},
                        {"chunk", r.chunk},
                        {"decode_tokens", r.tokens},
                        {"prefill_s", r.prefill_s},
                        {"prefill_fit_ms", r.fit_ms},
                        {"prefill_fit_ms_per_1k_positions", r.fit_ms_per_k}};
    j["prefill_curve"] = nlohmann::json::array();
    for (const auto& [pos, ms] : r.prefill_curve) j["prefill_curve"].push_back({pos, ms});
    j["contexts"] = nlohmann::json::array();
    for (const auto& p : r.points)
      j["contexts"].push_back({{"context", p.context},
                               {"prefill_ms_per_token", p.prefill_ms_per_token},
                               {"decode_tokens_per_s", p.decode_tokens_per_s},
                               {"decode_vs_first", p.decode_vs_first},
                               {"membw_gbs", p.membw_gbs},
                               {"bytes_per_token", p.bytes_per_token},
                               {"share_of_roofline", p.share_of_roofline},
                               {"resident_mb", p.resident_mb},
                               {"peak_mb", p.peak_mb},
                               {"plan_mb", p.plan_mb},
                               {"peak_vs_plan", p.plan_mb > 0 ? p.peak_mb / p.plan_mb : 0.0}});
    if (!r.paired.empty())
      j["paired"] = {{"first_context", r.paired.first_context},
                     {"last_context", r.paired.last_context},
                     {"first_tokens_per_s", r.paired.first_tokens_per_s},
                     {"last_tokens_per_s", r.paired.last_tokens_per_s},
                     {"membw_gbs", r.paired.membw_gbs},
                     {"ratio_median", r.paired.ratio_median},
                     {"ratio_min", r.paired.ratio_min},
                     {"ratio_max", r.paired.ratio_max}};
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("context bench: %s, %d threads, kernels %s; prefill chunks of %lld tokens, %lld decode steps\n",
              r.config.c_str(), r.threads, r.backend.c_str(), (long long)r.chunk, (long long)r.tokens);
  std::printf(
      "  init %.1f s, load %.1f s (resident %.0f MB after, peak %.0f MB while loading), prefill %.1f s in "
      "all\n",
      r.init_s, r.load_s, r.loaded_mb, r.load_peak_mb, r.prefill_s);
  std::printf(
      "  prefill cost per token: %.3f ms + %.4f ms per 1K positions (least squares over %zu chunks)\n",
      r.fit_ms, r.fit_ms_per_k, r.prefill_curve.size() - 1);
  std::printf("  %9s %12s %11s %8s %8s %9s %10s %9s %9s %6s\n", "context", "prefill/tok", "decode",
              "vs first", "GB/s", "roofline", "resident", "peak", "plan", "peak/plan");
  for (const auto& p : r.points)
    std::printf("  %9lld %9.3f ms %7.1f t/s %7.2fx %8.1f %8.0f %% %7.0f MB %6.0f MB %6.0f MB %6.2fx\n",
                (long long)p.context, p.prefill_ms_per_token, p.decode_tokens_per_s, p.decode_vs_first,
                p.membw_gbs, 100 * p.share_of_roofline, p.resident_mb, p.peak_mb, p.plan_mb,
                p.plan_mb > 0 ? p.peak_mb / p.plan_mb : 0.0);
  const auto& pr = r.paired;
  if (pr.empty()) return;
  std::printf("  paired rounds, decode at %lld vs %lld tokens (t/s, GB/s):", (long long)pr.last_context,
              (long long)pr.first_context);
  for (size_t i = 0; i < pr.first_tokens_per_s.size(); ++i)
    std::printf(" %.1f/%.1f @%.0f", pr.last_tokens_per_s[i], pr.first_tokens_per_s[i], pr.membw_gbs[i]);
  std::printf("\n  paired ratio: median %.3fx (min %.3f, max %.3f)\n", pr.ratio_median, pr.ratio_min,
              pr.ratio_max);
}

}  // namespace

void add_context_bench(CLI::App& bench) {
  struct options {
    context_bench_options b;
    bool json = false;
  };
  auto o = std::make_shared<options>();
  auto* cmd = bench.add_subcommand(
      "context", "Prefill cost along one long prompt, decode speed and memory at several contexts of it");
  cmd->add_option("--config", o->b.config, "Model config JSON (e.g. configs/bench-1.5b.json)")->required();
  cmd->add_option("--contexts", o->b.contexts, "Contexts at which decode and memory are measured")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--chunk", o->b.chunk, "Prefill tokens per forward")->capture_default_str();
  cmd->add_option("--tokens", o->b.tokens, "Timed decode steps at each context")->capture_default_str();
  cmd->add_option("--keep-dir", o->b.keep_dir, "Generate the checkpoint here (reused when it exists)");
  cmd->add_option("--probe-mib", o->b.probe_mib, "Bandwidth probe buffer in MiB (0: max(512, 8x LLC))");
  cmd->add_option("--rounds", o->b.rounds,
                  "Then decode at the first and the longest context in this many alternating rounds")
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "Print one JSON object instead of text");
  cmd->callback([o] { print(run_context_bench(o->b), o->json); });
}

}  // namespace moxi::bench
