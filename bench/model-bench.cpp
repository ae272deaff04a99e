// End-to-end model benchmarks. The model is generated from the config with init_checkpoint (random
// weights, BF16 floats, MXFP4 experts as configured), loaded once with the fast kernels; the reference
// rate is measured on the same loaded model under a kernels::backend_scope of the reference, and the roofline
// from the bandwidth measured in this run, so every reported ratio comes from one run on one (noisy) machine.
#include "bench/model-bench.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <vector>

#include "bench/kernels-bench.h"
#include "bench/scratch-dir.h"
#include "moxi/base/clock.h"
#include "moxi/base/error.h"
#include "moxi/base/thread-pool.h"
#include "moxi/dist/mpi.h"
#include "moxi/formats/model-config.h"
#include "moxi/kernels/backend.h"
#include "moxi/model/cache.h"
#include "moxi/model/config.h"
#include "moxi/model/init.h"
#include "moxi/model/model.h"
#include "moxi/model/plan.h"

namespace moxi::bench {
namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

std::vector<token_id> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<token_id> t(static_cast<size_t>(n));
  for (auto& v : t) v = token_id(gen() % uint64_t(vocab));
  return t;
}

// Seconds per decoded token: prefill `prompt` tokens, then `steps` single-token forwards (last_only, as
// generation runs them), timing only the steps. ref_steps: the steps run on the reference kernels (the
// prefill still runs on the fast ones: at long context a reference prefill would take minutes and is not
// what is measured).
double decode_seconds_per_token(const model::model& m, const std::vector<token_id>& prompt,
                                const std::vector<token_id>& steps, bool ref_steps = false) {
  auto cache = m.new_cache();
  model::forward_options fo;
  fo.last_only = true;
  m.forward(prompt, *cache, fo);
  std::optional<kernels::backend_scope> ref;
  if (ref_steps) ref.emplace(kernels::reference());
  const auto t0 = clock_type::now();
  for (const auto tok : steps) m.forward(std::span(&tok, 1), *cache, fo);
  return seconds_since(t0) / double(steps.size());
}

struct paired_decode {
  double seconds_per_token = 0;
  double membw_gbs = 0;          // median of the bandwidth samples
  double share_of_roofline = 0;  // median over segments
};

// Decode timed in up to 8 segments with a read-bandwidth sample before each segment and after the last:
// each segment's tokens/s is set against the roofline from the mean of the two samples around it, so the
// share does not move with the host's bandwidth drifting during the run (seconds-scale, up to 1.7x here).
paired_decode decode_against_bandwidth(const model::model& m, const std::vector<token_id>& prompt,
                                       const std::vector<token_id>& steps, double bytes_per_token,
                                       membw_probe& probe) {
  auto cache = m.new_cache();
  model::forward_options fo;
  fo.last_only = true;
  m.forward(prompt, *cache, fo);
  const size_t segments = std::min<size_t>(8, steps.size());
  std::vector<double> bw{probe.sample_gbs()}, seconds;
  size_t done = 0;
  for (size_t sgm = 0; sgm < segments; ++sgm) {
    const size_t end = steps.size() * (sgm + 1) / segments;
    const auto t0 = clock_type::now();
    for (; done < end; ++done) m.forward(std::span(&steps[done], 1), *cache, fo);
    seconds.push_back(seconds_since(t0));
    bw.push_back(probe.sample_gbs());
  }
  paired_decode r;
  double total = 0;
  std::vector<double> shares;
  for (size_t sgm = 0; sgm < segments; ++sgm) {
    total += seconds[sgm];
    const double n = double(steps.size() * (sgm + 1) / segments - steps.size() * sgm / segments);
    const double roofline = 0.5 * (bw[sgm] + bw[sgm + 1]) * 1e9 / bytes_per_token;
    shares.push_back(n / seconds[sgm] / roofline);
  }
  r.seconds_per_token = total / double(steps.size());
  r.membw_gbs = median(bw);
  r.share_of_roofline = median(shares);
  return r;
}

// Seconds per decoded token (all sequences together) of `batch` sequences stepped together through
// forward_batch: each prefilled with `prompt` (one batched call), then `steps` single-token steps.
double batched_decode_seconds_per_token(const model::model& m, const std::vector<token_id>& prompt,
                                        const std::vector<token_id>& steps, int64_t batch) {
  std::vector<std::unique_ptr<model::sequence_cache>> caches;
  std::vector<model::batch_item> items(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    caches.push_back(m.new_cache());
    items[size_t(b)] = {prompt, caches.back().get(), true};
  }
  m.forward_batch(items);
  // Sequence b decodes the step tokens rotated by b, so the sequences route to different experts.
  std::vector<token_id> step_tokens(static_cast<size_t>(batch));
  const auto t0 = clock_type::now();
  for (size_t i = 0; i < steps.size(); ++i) {
    for (int64_t b = 0; b < batch; ++b) {
      step_tokens[size_t(b)] = steps[(i + size_t(b)) % steps.size()];
      items[size_t(b)].tokens = std::span(&step_tokens[size_t(b)], 1);
    }
    m.forward_batch(items);
  }
  return seconds_since(t0) / double(steps.size() * size_t(batch));
}

// A speculative step's two costs, after `prompt`: seconds of one verify forward over K + 1 tokens under a
// cache trace, rewound to one kept token as a rejected step would (median of `reps`), and of one MTP draft
// forward (T = 1, the chained draft; also rewound).
std::pair<double, double> speculative_step_seconds(const model::model& m, const std::vector<token_id>& prompt,
                                                   const std::vector<token_id>& steps, int64_t K, int reps) {
  model::contiguous_cache cache(m.config());
  std::vector<float> hidden;
  model::forward_options fo;
  fo.hidden = &hidden;
  m.forward(prompt, cache, fo);
  const std::vector<float> h(hidden.end() - m.config().hidden_size, hidden.end());
  std::vector<double> verify, draft;
  for (int r = 0; r < reps; ++r) {
    const size_t at = size_t(r) % (steps.size() - size_t(K));
    const std::vector<token_id> seq(steps.begin() + at, steps.begin() + at + size_t(K) + 1);
    const int64_t L = cache.length(), M = cache.mtp_length();
    cache.begin_trace();
    auto t0 = clock_type::now();
    m.mtp_forward(h, std::span(seq.data(), 1), cache, 0);
    draft.push_back(seconds_since(t0));
    model::forward_options vo;
    vo.hidden = &hidden;
    t0 = clock_type::now();
    m.forward(seq, cache, vo);
    cache.rewind(L + 1, M);
    verify.push_back(seconds_since(t0));
    cache.end_trace();
  }
  return {median(verify), median(draft)};
}

// Seconds per prompt token of one prefill forward (the first call is a warm-up of scratch buffers).
double prefill_seconds_per_token(const model::model& m, const std::vector<token_id>& prompt, int reps) {
  model::forward_options fo;
  fo.last_only = true;
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    auto cache = m.new_cache();
    const auto t0 = clock_type::now();
    m.forward(prompt, *cache, fo);
    best = std::min(best, seconds_since(t0));
  }
  return best / double(prompt.size());
}

// Every rank's figures (all ranks call it; the timed part is one more decode of `steps`, or one prefill of
// `prompt` when steps is empty).
// `loaded`: resident growth across the load; `plan_weights`: the planner's weights per device of each stage.
std::vector<rank_figures> rank_traffic(const model::model& m, const std::vector<token_id>& prompt,
                                       const std::vector<token_id>& steps, uint64_t resident_after_load,
                                       uint64_t loaded, const std::vector<uint64_t>& plan_weights) {
  const model::parallel_layout& par = *m.parallel();
  auto cache = m.new_cache();
  model::forward_options fo;
  fo.last_only = true;
  if (!steps.empty()) m.forward(prompt, *cache, fo);
  const auto t0 = dist::traffic_so_far();
  const auto w0 = clock_type::now();
  if (steps.empty())
    m.forward(prompt, *cache, fo);
  else
    for (const auto tok : steps) m.forward(std::span(&tok, 1), *cache, fo);
  const double wall = seconds_since(w0);
  const auto t1 = dist::traffic_so_far();
  const double n = double(steps.empty() ? prompt.size() : steps.size());
  const std::vector<float> mine = {float(double(m.checkpoint_bytes_read()) / 1e6),
                                   float(double(resident_after_load) / 1e6),
                                   float(double(t1.bytes_sent - t0.bytes_sent) / n),
                                   float((t1.seconds - t0.seconds) / wall),
                                   float(double(loaded) / 1e6),
                                   float(double(plan_weights.at(size_t(par.stage))) / 1e6)};
  constexpr int64_t kFigures = 6;
  std::vector<float> all(size_t(kFigures * par.world_size));
  const std::vector<int64_t> counts(size_t(par.world_size), kFigures);
  par.world->all_gather_v(mine.data(), counts, all.data());
  std::vector<rank_figures> out;
  for (int r = 0; r < par.world_size; ++r) {
    const float* f = all.data() + kFigures * r;
    out.push_back({f[0], f[1], f[4], f[5], f[2], f[3]});  // rank_figures order
  }
  return out;
}

}  // namespace

model_bench_result run_model_bench(const std::string& mode, const model_bench_options& o) {
  if (o.prompt < 1 || o.tokens < 1 || o.ref_tokens < 1 || o.batch < 1)
    throw error("bench: --prompt, --tokens, --ref-tokens, --batch >= 1");
  auto config = model::load_model_config(o.config);
  if (o.mtp_layers >= 0) config.num_mtp_layers = o.mtp_layers;
  model_bench_result r;
  r.mode = mode;
  r.config = o.config;
  r.threads = thread_pool::global().size();
  r.backend = kernels::default_backend().name();
  r.prompt = o.prompt;
  r.tokens = mode == "decode" ? o.tokens : o.prompt;

  // Across processes every rank loads its share of one checkpoint that rank 0 generates (ranks on other
  // machines need --keep-dir on storage they all see).
  const auto lo = o.parallel.load_options();
  const model::parallel_layout* par = lo.parallel.get();
  const bool root = !par || par->world_rank == 0;
  if (par) r.layout = par->sizes.to_string() + " on " + std::to_string(par->world_size) + " ranks";

  // The checkpoint: generated once (kept in --keep-dir when given, reused if already there).
  std::unique_ptr<scratch_dir> tmp;
  std::string ck;
  if (!o.keep_dir.empty()) {
    ck = o.keep_dir;
  } else if (root) {
    tmp = std::make_unique<scratch_dir>();
    ck = tmp->dir() + "/model";
  }
  if (root && !fs::exists(ck)) {
    model::init_options io;
    io.show_progress = false;
    const auto t0 = clock_type::now();
    model::init_checkpoint(config, ck, io);
    r.init_s = seconds_since(t0);
  }
  if (par) {
    std::string path(4096, '\0');
    if (ck.size() >= path.size()) throw error("bench: checkpoint path too long to share: " + ck);
    std::copy(ck.begin(), ck.end(), path.begin());
    par->world->broadcast(path.data(), int64_t(path.size()), 0);
    ck = path.c_str();
    dist::barrier();
  }
  const uint64_t resident_before = dist::resident_bytes();
  const auto t0 = clock_type::now();
  const auto m = model::model::load(config, ck, lo);
  r.load_s = seconds_since(t0);
  const uint64_t resident = dist::resident_bytes();  // before the bandwidth probe's buffers
  o.parallel.loaded();

  model::plan_options po;
  po.context = o.prompt + o.tokens;
  po.num_shards = 1;
  po.gpus_per_node = 1;
  const auto plan = model::make_plan(config, po);
  // The planner's weights per device for this run's layout, one figure per stage.
  std::vector<uint64_t> plan_weights;
  if (par) {
    model::plan_options pl = po;
    pl.tp = par->sizes.tp, pl.ep = par->sizes.ep, pl.pp = par->sizes.pp;
    pl.gpus_per_node = par->world_size;
    for (const auto& st : model::make_plan(config, pl).stages) plan_weights.push_back(st.weight_bytes);
  }
  r.total_params = double(plan.total_params);
  r.active_params = plan.active_params;

  const auto prompt = random_tokens(o.prompt, config.vocab_size, 1);
  if (mode == "decode") {
    const auto steps = random_tokens(o.tokens, config.vocab_size, 2);
    decode_seconds_per_token(m, prompt,
                             std::vector(steps.begin(), steps.begin() + std::min<int64_t>(2, o.tokens)));
    r.bytes_per_token = plan.bytes_per_token_batch1;
    membw_probe probe;
    const paired_decode d = decode_against_bandwidth(m, prompt, steps, r.bytes_per_token, probe);
    const double s = d.seconds_per_token;
    r.ref_tokens = std::min(o.ref_tokens, o.tokens);
    const double ref_s =
        decode_seconds_per_token(m, prompt, std::vector(steps.begin(), steps.begin() + r.ref_tokens), true);
    r.tokens_per_s = 1.0 / s;
    r.ms_per_token = s * 1e3;
    r.ref_tokens_per_s = 1.0 / ref_s;
    r.speedup_vs_ref = ref_s / s;
    r.membw_gbs = d.membw_gbs;
    r.roofline_tokens_per_s = r.membw_gbs * 1e9 / r.bytes_per_token;
    r.share_of_roofline = d.share_of_roofline;
    r.batch = o.batch;
    if (o.draft_tokens > 0) {
      if (config.num_mtp_layers < 1)
        throw error("bench: --draft-tokens needs a config with an MTP layer (or --mtp-layers 1)");
      if (o.tokens <= o.draft_tokens) throw error("bench: --tokens must exceed --draft-tokens");
      const int64_t K = o.draft_tokens;
      const double a = o.acceptance;
      const auto [verify_s, draft_s] = speculative_step_seconds(m, prompt, steps, K, 9);
      r.draft_tokens = K;
      r.acceptance = a;
      r.verify_ms = verify_s * 1e3;
      r.draft_ms = draft_s * 1e3;
      r.extra_token_cost = (verify_s - s) / double(K) / s;
      double emitted = 0;
      for (int64_t i = 0; i <= K; ++i) emitted += std::pow(a, double(i));
      r.tokens_per_step = emitted;
      r.speculative_speedup = emitted * s / (verify_s + double(K) * draft_s);
    }
    if (o.batch > 1) {
      r.batch_tokens_per_s = 1.0 / batched_decode_seconds_per_token(m, prompt, steps, o.batch);
      r.batch_speedup = r.batch_tokens_per_s / r.tokens_per_s;
    }
    if (par) r.ranks = rank_traffic(m, prompt, steps, resident, resident - resident_before, plan_weights);
  } else {
    const double s = prefill_seconds_per_token(m, prompt, 3);
    r.ref_tokens = std::min(o.ref_tokens, o.prompt);
    double ref_s;
    {
      kernels::backend_scope ref(kernels::reference());
      ref_s = prefill_seconds_per_token(m, std::vector(prompt.begin(), prompt.begin() + r.ref_tokens), 1);
    }
    r.tokens_per_s = 1.0 / s;
    r.ms_per_token = s * 1e3;
    r.ref_tokens_per_s = 1.0 / ref_s;
    r.speedup_vs_ref = ref_s / s;
    r.gflops = 2.0 * r.active_params * r.tokens_per_s / 1e9;
    std::tie(r.peak_gflops, r.peak_kind) = compute_peak();
    r.share_of_peak = r.peak_gflops > 0 ? r.gflops / r.peak_gflops : 0.0;
    if (par) r.ranks = rank_traffic(m, prompt, {}, resident, resident - resident_before, plan_weights);
  }
  // Rank 0 removes a generated checkpoint only once every rank is done with it.
  if (par) dist::barrier();
  r.output = root;
  return r;
}

namespace {

void print(const model_bench_result& r, bool json) {
  if (json) {
    nlohmann::json j = {{"bench", r.mode},
                        {"config", r.config},
                        {"threads", r.threads},
                        {"backend", r.backend},
                        {"total_params", r.total_params},
                        {"active_params", r.active_params},
                        {"init_s", r.init_s},
                        {"load_s", r.load_s},
                        {"prompt", r.prompt},
                        {"tokens", r.tokens},
                        {"tokens_per_s", r.tokens_per_s},
                        {"ms_per_token", r.ms_per_token},
                        {"ref_tokens", r.ref_tokens},
                        {"ref_tokens_per_s", r.ref_tokens_per_s},
                        {"speedup_vs_ref", r.speedup_vs_ref}};
    if (r.mode == "prefill") {
      j["gflops"] = r.gflops;
      j["peak_gflops"] = r.peak_gflops;
      j["peak_kind"] = r.peak_kind;
      j["share_of_peak"] = r.share_of_peak;
    }
    if (r.mode == "decode") {
      j["bytes_per_token"] = r.bytes_per_token;
      j["membw_gbs"] = r.membw_gbs;
      j["roofline_tokens_per_s"] = r.roofline_tokens_per_s;
      j["share_of_roofline"] = r.share_of_roofline;
      j["batch"] = r.batch;
      if (r.batch > 1) {
        j["batch_tokens_per_s"] = r.batch_tokens_per_s;
        j["batch_speedup"] = r.batch_speedup;
      }
      if (r.draft_tokens > 0) {
        j["draft_tokens"] = r.draft_tokens;
        j["acceptance"] = r.acceptance;
        j["verify_ms"] = r.verify_ms;
        j["draft_ms"] = r.draft_ms;
        j["extra_token_cost"] = r.extra_token_cost;
        j["tokens_per_step"] = r.tokens_per_step;
        j["speculative_speedup"] = r.speculative_speedup;
      }
    }
    if (!r.ranks.empty()) {
      j["layout"] = r.layout;
      nlohmann::json ranks = nlohmann::json::array();
      for (const auto& f : r.ranks)
        ranks.push_back({{"checkpoint_mb", f.checkpoint_mb},
                         {"resident_mb", f.resident_mb},
                         {"loaded_mb", f.loaded_mb},
                         {"plan_weights_mb", f.plan_mb},
                         {"comm_bytes_per_token", f.comm_bytes_per_token},
                         {"comm_share", f.comm_share}});
      j["ranks"] = ranks;
    }
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("%s bench: %s, %.3g B params (%.3g B active), %d threads, kernels %s\n", r.mode.c_str(),
              r.config.c_str(), r.total_params / 1e9, r.active_params / 1e9, r.threads, r.backend.c_str());
  std::printf("  init %.1f s, load %.1f s\n", r.init_s, r.load_s);
  if (r.mode == "decode") {
    std::printf("  decode after %lld-token prompt: %.2f tok/s (%.1f ms/token) over %lld steps\n",
                (long long)r.prompt, r.tokens_per_s, r.ms_per_token, (long long)r.tokens);
    std::printf(
        "  roofline: %.2f GB/s (median of samples between segments) / %.1f MB per token = %.2f tok/s\n",
        r.membw_gbs, r.bytes_per_token / 1e6, r.roofline_tokens_per_s);
    std::printf(
        "  -> %.0f %% of roofline (median over segments, each against the bandwidth sampled beside it)\n",
        100 * r.share_of_roofline);
    if (r.batch > 1)
      std::printf("  batch %lld (forward_batch): %.2f tok/s over all sequences = %.2fx batch 1\n",
                  (long long)r.batch, r.batch_tokens_per_s, r.batch_speedup);
    if (r.draft_tokens > 0)
      std::printf(
          "  speculative, %lld drafts: verify %.2f ms (+%.0f %% of a step per extra token), draft %.2f ms; at "
          "acceptance %.2f: %.2f tokens per step = %.2fx plain decode\n",
          (long long)r.draft_tokens, r.verify_ms, 100 * r.extra_token_cost, r.draft_ms, r.acceptance,
          r.tokens_per_step, r.speculative_speedup);
  } else {
    std::printf("  prefill of %lld tokens: %.1f tok/s (%.2f ms/token)\n", (long long)r.prompt, r.tokens_per_s,
                r.ms_per_token);
    if (r.peak_gflops > 0)
      std::printf("  = %.1f GFLOP/s (2 x active params per token) = %.1f %% of %.1f GFLOP/s peak (%s, same run)\n",
                  r.gflops, 100 * r.share_of_peak, r.peak_gflops, r.peak_kind.c_str());
  }
  std::printf("  ref (%lld tokens): %.3f tok/s -> fast is %.1fx ref\n", (long long)r.ref_tokens,
              r.ref_tokens_per_s, r.speedup_vs_ref);
  if (!r.ranks.empty()) {
    std::printf(
        "  %s; per rank: checkpoint read, resident (its growth at load vs moxi plan's weights per device), MPI "
        "payload sent per %s token, time in MPI:\n",
        r.layout.c_str(), r.mode == "decode" ? "decoded" : "prefilled");
    for (size_t i = 0; i < r.ranks.size(); ++i) {
      const auto& f = r.ranks[i];
      std::printf("    rank %zu: %.2f MB, %.1f MB (+%.1f MB at load vs plan %.1f MB: %.2fx), %.0f B/token, %.0f %% of "
                  "the step\n",
                  i, f.checkpoint_mb, f.resident_mb, f.loaded_mb, f.plan_mb, f.plan_mb > 0 ? f.loaded_mb / f.plan_mb : 0.0,
                  f.comm_bytes_per_token, 100 * f.comm_share);
    }
  }
}

void add_model_bench(CLI::App& bench, const std::string& mode, const char* help) {
  struct options {
    model_bench_options b;
    bool json = false;
  };
  auto o = std::make_shared<options>();
  if (mode == "prefill") o->b.prompt = 128;
  auto* cmd = bench.add_subcommand(mode, help);
  cmd->add_option("--config", o->b.config, "Model config JSON (e.g. configs/bench-1.5b.json)")->required();
  cmd->add_option("--prompt", o->b.prompt,
                  mode == "decode" ? "Context tokens before the timed steps" : "Tokens in the timed prefill")
      ->capture_default_str();
  if (mode == "decode") {
    cmd->add_option("--tokens", o->b.tokens, "Timed decode steps")->capture_default_str();
    cmd->add_option("--batch", o->b.batch, "Also time this many sequences decoding together (forward_batch)")
        ->capture_default_str();
    cmd->add_option("--draft-tokens", o->b.draft_tokens,
                    "Also time a speculative step with this many MTP drafts (docs/speculative.md)")
        ->check(CLI::Range(0, 16))
        ->capture_default_str();
    cmd->add_option("--acceptance", o->b.acceptance,
                    "Draft acceptance rate the speculative speedup is computed at (measure it with moxi "
                    "generate --draft-tokens)")
        ->check(CLI::Range(0.0, 0.999))
        ->capture_default_str();
    cmd->add_option("--mtp-layers", o->b.mtp_layers,
                    "MTP layers of the generated checkpoint instead of the config's (-1: the config's), to time "
                    "--draft-tokens on a config without one; use its own --keep-dir")
        ->check(CLI::Range(-1, 8))
        ->capture_default_str();
  }
  cmd->add_option("--ref-tokens", o->b.ref_tokens, "Tokens the scalar reference runs")->capture_default_str();
  cmd->add_option("--keep-dir", o->b.keep_dir, "Generate the checkpoint here (reused when it exists)");
  cmd->add_flag("--json", o->json, "Print one JSON object instead of text");
  o->b.parallel.add(cmd);
  cmd->callback([o, mode] {
    const auto r = run_model_bench(mode, o->b);
    if (r.output) print(r, o->json);
  });
}

}  // namespace

void add_decode_bench(CLI::App& bench) {
  add_model_bench(bench, "decode", "Decode tokens/s of a generated model and its share of the roofline");
}
void add_prefill_bench(CLI::App& bench) {
  add_model_bench(bench, "prefill", "Prefill tokens/s of a generated model, against the reference");
}

}  // namespace moxi::bench
