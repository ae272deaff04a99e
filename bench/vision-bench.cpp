// See vision-bench.h. FLOPs per image count the multiply-adds of every linear layer (patch embedding, wqkv,
// wo, fc0, fc1, projector) and of attention's two products (QK^T and PV) at 2 flop each; norms, GELU,
// softmax and RoPE are left out (a few % of the work).
#include "bench/vision-bench.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "bench/kernels-bench.h"
#include "bench/scratch-dir.h"
#include "moxi/base/clock.h"
#include "moxi/base/error.h"
#include "moxi/base/thread-pool.h"
#include "moxi/formats/checkpoint.h"
#include "moxi/image/preprocess.h"
#include "moxi/kernels/backend.h"
#include "moxi/model/config.h"
#include "moxi/model/init.h"
#include "moxi/model/plan.h"
#include "moxi/model/vision.h"

namespace moxi::bench {

namespace {

double encoder_gflop(const formats::model_config& c, int64_t gh, int64_t gw) {
  const auto& v = *c.vision;
  const double L = double(gh * gw), d = double(v.hidden_size), I = double(v.intermediate_size);
  const double p = double(v.patch_size), m = double(v.merge_kernel * v.merge_kernel);
  const double per_block = L * (3 * d * d + d * d + 2 * d * I) + 2 * L * L * d;  // linears + QK^T, PV
  const double N = L / m;
  const double projector = N * (m * d * m * d + m * d * double(c.hidden_size));
  return 2 * (L * 3 * p * p * d + double(v.num_layers) * per_block + projector) / 1e9;
}

// A deterministic RGB test card of side x side pixels.
image::rgb_image test_image(int64_t side) {
  image::rgb_image im;
  im.width = im.height = side;
  im.rgb.resize(size_t(side * side * 3));
  for (int64_t y = 0; y < side; ++y)
    for (int64_t x = 0; x < side; ++x)
      for (int64_t ch = 0; ch < 3; ++ch)
        im.rgb[size_t((y * side + x) * 3 + ch)] = uint8_t((x * (ch + 1) + y * (3 - ch) + (x ^ y)) & 0xff);
  return im;
}

double time_encode(const model::vision_encoder& enc, const image::patches& p, int reps) {
  const model::image_input in{p.grid_h, p.grid_w, p.pixels};
  std::vector<double> s;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto out = enc.encode(std::span(&in, 1));
    s.push_back(seconds_since(t0));
    if (out.empty()) throw error("bench vision: the encoder returned nothing");
  }
  return median(s);
}

}  // namespace

vision_bench_result run_vision_bench(const vision_bench_options& o) {
  vision_bench_result r;
  r.config = o.config;
  r.threads = thread_pool::global().size();
  r.backend = kernels::default_backend().name();
  const auto config = model::load_model_config(o.config);
  if (!config.vision) throw error(o.config + ": the config has no vision_config");
  model::plan_options po;
  po.num_shards = 1;
  const auto plan = model::make_plan(config, po);
  r.tower_params = plan.vision_tower_params;
  r.projector_params = plan.vision_projector_params;

  // Only the vision tensors, BF16 as a checkpoint stores them.
  scratch_dir tmp;
  const std::string ck = tmp.dir() + "/vision";
  model::init_options io;
  io.show_progress = false;
  io.only_group = model::param_group::VISION;
  auto t0 = std::chrono::steady_clock::now();
  model::init_checkpoint(config, ck, io);
  r.init_s = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  const auto ckpt = formats::checkpoint::open(ck);
  model::weight_loader ld(ckpt, config, {});
  const auto enc = model::vision_encoder::load(ld, config);
  r.load_s = seconds_since(t0);
  std::tie(r.peak_gflops, r.peak_kind) = compute_peak();

  image::preprocess_config pc;
  pc.patch_size = config.vision->patch_size;
  pc.merge_kernel = config.vision->merge_kernel;
  for (size_t i = 0; i < o.sizes.size(); ++i) {
    vision_bench_size s;
    s.pixels = o.sizes[i];
    const auto p = image::preprocess(test_image(s.pixels), pc);
    s.grid_h = p.grid_h;
    s.grid_w = p.grid_w;
    s.tokens = enc.tokens_of(p.grid_h, p.grid_w);
    s.gflop = encoder_gflop(config, p.grid_h, p.grid_w);
    s.seconds = time_encode(enc, p, o.reps);
    s.images_per_s = 1.0 / s.seconds;
    s.gflops = s.gflop / s.seconds;
    s.share_of_peak = r.peak_gflops > 0 ? s.gflops / r.peak_gflops : 0;
    r.sizes.push_back(s);
  }
  if (o.ref_size > 0) {
    // The scalar reference is far slower: it and the fast path run one small image.
    r.ref_pixels = o.ref_size;
    const auto p = image::preprocess(test_image(o.ref_size), pc);
    r.ref_fast_seconds = time_encode(enc, p, o.reps);
    kernels::backend_scope ref(kernels::reference());  // it keeps f32 weights: load again under its scope
    model::weight_loader ref_ld(ckpt, config, {});
    const auto ref_enc = model::vision_encoder::load(ref_ld, config);
    r.ref_seconds = time_encode(ref_enc, p, 1);
    r.speedup_vs_ref = r.ref_seconds / r.ref_fast_seconds;
  }
  return r;
}

void add_vision_bench(CLI::App& bench) {
  auto* cmd = bench.add_subcommand(
      "vision", "Vision encoder images/s and GFLOP/s vs the compute peak measured in the same run");
  auto o = std::make_shared<vision_bench_options>();
  auto json = std::make_shared<bool>(false);
  cmd->add_option("--config", o->config, "model config with a vision_config")->capture_default_str();
  cmd->add_option("--sizes", o->sizes, "square image sides in pixels")->delimiter(',')->capture_default_str();
  cmd->add_option("--reps", o->reps, "timed encodes per size (median)")->check(CLI::Range(1, 100));
  cmd->add_option("--ref-size", o->ref_size, "image side for the reference vs fast comparison (0: skip it)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  cmd->add_flag("--json", *json, "one JSON object");
  cmd->callback([o, json] {
    for (int64_t s : o->sizes)
      if (s < 1 || s > 8192) throw CLI::ValidationError("--sizes", "each side must be in [1, 8192]");
    const auto r = run_vision_bench(*o);
    if (*json) {
      nlohmann::json j = {{"bench", "vision"},         {"config", r.config},
                          {"threads", r.threads},       {"backend", r.backend},
                          {"tower_params", r.tower_params}, {"projector_params", r.projector_params},
                          {"init_s", r.init_s},         {"load_s", r.load_s},
                          {"peak_gflops", r.peak_gflops}, {"peak_kind", r.peak_kind}};
      for (const auto& s : r.sizes)
        j["sizes"].push_back({{"pixels", s.pixels},           {"grid", {s.grid_h, s.grid_w}},
                              {"tokens", s.tokens},           {"gflop", s.gflop},
                              {"seconds", s.seconds},         {"images_per_s", s.images_per_s},
                              {"gflops", s.gflops},           {"share_of_peak", s.share_of_peak}});
      if (r.ref_pixels > 0)
        j["reference"] = {{"pixels", r.ref_pixels},
                          {"seconds", r.ref_seconds},
                          {"fast_seconds", r.ref_fast_seconds},
                          {"speedup_vs_ref", r.speedup_vs_ref}};
      std::printf("%s\n", j.dump().c_str());
      return;
    }
    std::printf("vision bench: %s, tower %.1f M + projector %.1f M params, %d threads, kernels %s\n",
                r.config.c_str(), double(r.tower_params) / 1e6, double(r.projector_params) / 1e6, r.threads,
                r.backend.c_str());
    std::printf("  init %.1f s, load %.1f s; compute peak %.0f GFLOP/s (%s)\n", r.init_s, r.load_s, r.peak_gflops,
                r.peak_kind.c_str());
    for (const auto& s : r.sizes) {
      std::printf("  %lld x %lld px -> %lld x %lld patches, %lld tokens: %.2f s/image (%.3f images/s), %.1f GFLOP, "
                  "%.0f GFLOP/s = %.0f %% of peak",
                  (long long)s.pixels, (long long)s.pixels, (long long)s.grid_h, (long long)s.grid_w,
                  (long long)s.tokens, s.seconds, s.images_per_s, s.gflop, s.gflops, 100 * s.share_of_peak);
      std::printf("\n");
    }
    if (r.ref_pixels > 0)
      std::printf("  %lld x %lld px: reference %.2f s, fast %.3f s -> %.1fx\n", (long long)r.ref_pixels,
                  (long long)r.ref_pixels, r.ref_seconds, r.ref_fast_seconds, r.speedup_vs_ref);
  });
}

}  // namespace moxi::bench
