// Kernel benchmarks. Every figure that matters is a ratio of two measurements taken in this run (the
// machine is shared and noisy): GEMV weight bandwidth over the read bandwidth sampled before each rep,
// GEMM throughput over a register-resident peak, both over the scalar reference.
#include "bench/kernels-bench.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "moxi/base/clock.h"
#include "moxi/base/error.h"
#include "moxi/base/thread-pool.h"
#include "moxi/kernels/backend.h"
#include "moxi/kernels/ref/basic.h"
#include "moxi/kernels/ref/dsa.h"
#include "moxi/kernels/ref/mxfp4.h"
#include "moxi/kernels/x86/backend.h"
#include "moxi/kernels/x86/cpu.h"
#include "moxi/kernels/x86/mxfp4-matmul.h"
#include "moxi/kernels/x86/mxfp4-x86.h"

namespace moxi::bench {
namespace {

namespace k = moxi::kernels;
using clock_type = std::chrono::steady_clock;

// The L3 this VM sees (sysfs, what lscpu prints); glibc's sysconf can report the host's larger figure.
size_t llc_bytes() {
  if (FILE* f = std::fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r")) {
    unsigned long kib = 0;
    const int got = std::fscanf(f, "%luK", &kib);
    std::fclose(f);
    if (got == 1 && kib > 0) return size_t(kib) << 10;
  }
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return l3 > 0 ? size_t(l3) : size_t(32) << 20;
}

// Sums 64-bit words with four independent chains so the loop is load-bound, not add-latency-bound.
uint64_t read_slice(const uint64_t* p, size_t n) {
  uint64_t a = 0, b = 0, c = 0, d = 0;
  for (size_t i = 0; i + 4 <= n; i += 4) {
    a += p[i];
    b += p[i + 1];
    c += p[i + 2];
    d += p[i + 3];
  }
  return a ^ b ^ c ^ d;
}

struct weights {
  std::vector<uint8_t> blocks, scales;
};

weights random_weights(int64_t m, int64_t kk, uint64_t seed) {
  std::mt19937_64 gen(seed);
  weights w;
  w.blocks.resize(size_t(m * kk / 2));
  w.scales.resize(size_t(m * kk / 32));
  for (size_t i = 0; i + 8 <= w.blocks.size(); i += 8) {
    const uint64_t r = gen();
    std::memcpy(&w.blocks[i], &r, 8);
  }
  for (auto& s : w.scales) s = uint8_t(120 + gen() % 8);
  return w;
}

std::vector<float> random_x(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = d(gen);
  return x;
}

void check_shape(int64_t m, int64_t kk, int64_t n) {
  if (m < 1 || n < 1 || kk < 32 || kk % 32 != 0)
    throw error("bench: need --m >= 1, --n >= 1 and --k a positive multiple of 32 (MXFP4 blocks of 32)");
}

void check_format(const std::string& f, bool bf16_ok) {
  if (f != "mxfp4" && !(bf16_ok && f == "bf16"))
    throw error("bench: --format " + f + " is not benchmarked yet (supported: mxfp4" +
                std::string(bf16_ok ? ", bf16" : "") + ")");
}

}  // namespace

// Register-resident compute ceiling of this CPU on all pool threads, in GFLOP/s, and what it measured: the
// ceiling of the instruction the MXFP4 GEMM issues, TDPBF16PS where it runs on AMX tiles, else VDPBF16PS.
std::pair<double, std::string> compute_peak() {
#if !defined(__x86_64__)
  return {0.0, "none (not x86-64)"};
#else
  // The default backend's variant rather than the CPU flag: with MOXI_KERNELS=avx512_bf16 on an AMX CPU the
  // GEMM issues VDPBF16PS, and its share is against that.
  const bool amx = k::x86::mxfp4_variant_of(k::default_backend()) == k::x86::mxfp4_variant::AMX_BF16;
  if (!amx && !k::x86::mxfp4_supported(k::x86::mxfp4_variant::AVX512_BF16))
    return {0.0, "none (no AVX512-BF16)"};
  thread_pool& pool = thread_pool::global();
  // A few milliseconds per rep either way: 6 tile multiplies (98,304 flop) or 24 VDPBF16PS (1,536 flop)
  // per iteration.
  const int64_t iters = amx ? 200'000 : 2'000'000;
  const double flop_per_iter = amx ? 98304.0 : 1536.0;
  std::vector<double> sink(size_t(pool.size()));
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = clock_type::now();
    pool.run([&](int tid, int) {
      sink[size_t(tid)] = amx ? k::x86::amx_bf16_peak_loop(iters) : k::x86::avx512bf16_peak_loop(iters);
    });
    const double s = seconds_since(t0);
    best = std::max(best, double(pool.size()) * double(iters) * flop_per_iter / s / 1e9);
  }
  if (amx) return {best, "amx_bf16 tdpbf16ps (register-resident tiles)"};
  return {best, k::x86::cpu().amx_bf16 ? "avx512_bf16 vdpbf16ps (AMX present, capped off by MOXI_KERNELS)"
                                       : "avx512_bf16 vdpbf16ps (no AMX on this CPU)"};
#endif
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Enough copies of `bytes` of input that a rotation through them spans 4x the LLC: every call then streams
// its input from DRAM, as a decode step does (each layer's weights and keys are different).
int rotation_copies(size_t bytes) {
  return int(std::max<size_t>(1, (4 * llc_bytes() + bytes - 1) / bytes));
}

struct streamed {
  double ms = 0, gbs = 0;     // median time per call; bytes / that time
  double membw_gbs = 0;       // median of the samples taken between the timed reps
  double share_of_membw = 0;  // median over reps of (rep's GB/s / the bandwidth sampled beside it)
};
// `reps` rounds of call(c) over every copy c, each round after a read-bandwidth sample (the first round
// untimed: it faults in and warms every copy).
streamed time_streamed(size_t bytes, int copies, int reps, const std::function<void(int)>& call) {
  membw_probe probe;
  for (int c = 0; c < copies; ++c) call(c);
  std::vector<double> ms, bw, share;
  for (int rep = 0; rep < reps; ++rep) {
    bw.push_back(probe.sample_gbs());
    const auto t0 = clock_type::now();
    for (int c = 0; c < copies; ++c) call(c);
    ms.push_back(seconds_since(t0) * 1e3 / copies);
    share.push_back(double(bytes) / (ms.back() * 1e-3) / 1e9 / bw.back());
  }
  streamed r;
  r.ms = median(ms);
  r.gbs = double(bytes) / (r.ms * 1e-3) / 1e9;
  r.membw_gbs = median(bw);
  r.share_of_membw = median(share);
  return r;
}

struct membw_probe::impl {
  size_t words = 0;
  std::unique_ptr<uint64_t[]> buf;
  std::vector<uint64_t> sink;
};

membw_probe::membw_probe() : membw_probe(std::max(512.0, 8.0 * double(llc_bytes()) / (1 << 20))) {}

membw_probe::membw_probe(double mib) : impl_(std::make_unique<impl>()) {
  thread_pool& pool = thread_pool::global();
  impl_->words = size_t(mib * 1024 * 1024) / 8;
  impl_->buf.reset(new uint64_t[impl_->words]);
  impl_->sink.resize(size_t(pool.size()));
  // Each thread first-touches (faults in) the slice it will read.
  pool.run([&](int tid, int nt) {
    const range r = split_range(int64_t(impl_->words), tid, nt, 8);
    for (int64_t i = r.begin; i < r.end; ++i) impl_->buf[size_t(i)] = uint64_t(i);
  });
  sample_gbs();  // warms the TLBs and the pool
}

membw_probe::~membw_probe() = default;

double membw_probe::mib() const {
  return double(impl_->words) * 8.0 / (1 << 20);
}

double membw_probe::sample_gbs() {
  const auto t0 = clock_type::now();
  thread_pool::global().run([&](int tid, int nt) {
    const range r = split_range(int64_t(impl_->words), tid, nt, 8);
    impl_->sink[size_t(tid)] += read_slice(impl_->buf.get() + r.begin, size_t(r.end - r.begin));
  });
  return double(impl_->words) * 8.0 / seconds_since(t0) / 1e9;
}

membw_result run_membw(double mib, int reps) {
  membw_probe probe(mib);
  std::vector<double> gbs;
  for (int rep = 0; rep < reps; ++rep) gbs.push_back(probe.sample_gbs());
  membw_result r;
  r.threads = thread_pool::global().size();
  r.buffer_mib = mib;
  r.best_gbs = *std::max_element(gbs.begin(), gbs.end());
  r.median_gbs = median(gbs);
  return r;
}

// Random BF16 weights in [2^-7, 2^-6) (finite, no NaN), [m, k] rows.
std::vector<uint16_t> random_bf16(int64_t m, int64_t kk, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<uint16_t> w(size_t(m * kk));
  for (auto& v : w) v = uint16_t(0x3c00 + gen() % 0x0800);
  return w;
}

// The dense layers' weights as the default backend keeps them: 16-row panels where it packs them, else rows.
std::vector<uint16_t> dense_layout(const std::vector<uint16_t>& w, int64_t m, int64_t kk) {
  if (!k::default_backend().packs_bf16_panels()) return w;
  std::vector<uint16_t> p(size_t(k::ref::bf16_panels_size(m, kk)));
  k::ref::pack_bf16_panels(w.data(), m, kk, p.data());
  return p;
}

void dense_matmul(const float* x, const std::vector<uint16_t>& w, float* y, int64_t T, int64_t m,
                  int64_t kk) {
  const k::backend& be = k::default_backend();
  if (be.packs_bf16_panels())
    be.matmul_bf16_panels(x, w.data(), nullptr, y, T, m, kk);
  else
    be.matmul_bf16(x, w.data(), nullptr, y, T, m, kk);
}

// Dense BF16 weights (the engine's Linear layers, attention projections, shared experts, lm_head) in the
// layout and through the kernel the default backend runs them with, timed like the MXFP4 GEMV; on an x86
// backend also the row-layout kernel the panels replaced ("classic"), timed after it.
gemv_result run_gemv_bf16(int64_t m, int64_t kk, int reps, int64_t tokens) {
  gemv_result r;
  r.m = m;
  r.k = kk;
  r.tokens = tokens;
  r.variant = k::default_backend().name();
  const std::vector<uint16_t> w = random_bf16(m, kk, 5), wp = dense_layout(w, m, kk);
  const size_t bytes = w.size() * sizeof(uint16_t);
  r.weight_mib = double(bytes) / (1 << 20);
  r.copies = rotation_copies(bytes);
  const bool rows_too = k::default_backend().packs_bf16_panels() && k::x86::cpu().avx512;
  std::vector<std::vector<uint16_t>> copies(size_t(r.copies), wp),
      row_copies(rows_too ? size_t(r.copies) : 0, w);
  const std::vector<float> x = random_x(size_t(tokens * kk), 2);
  std::vector<float> y(size_t(tokens * m));
  const streamed t = time_streamed(bytes, r.copies, reps, [&](int c) {
    dense_matmul(x.data(), copies[size_t(c)], y.data(), tokens, m, kk);
  });
  r.fast_ms = t.ms;
  r.weight_gbs = t.gbs;
  r.membw_gbs = t.membw_gbs;
  r.share_of_membw = t.share_of_membw;
  if (rows_too)
    r.classic_ms =
        time_streamed(bytes, r.copies, reps, [&](int c) {
          k::x86::matmul_bf16_rows(x.data(), row_copies[size_t(c)].data(), y.data(), tokens, m, kk);
        }).ms;
  const auto t0 = clock_type::now();
  k::ref::matmul_bf16(x.data(), w.data(), nullptr, y.data(), tokens, m, kk);
  r.ref_ms = seconds_since(t0) * 1e3;
  r.speedup_vs_ref = r.ref_ms / r.fast_ms;
  return r;
}

gemv_result run_gemv(int64_t m, int64_t kk, int reps, const std::string& format, int64_t tokens) {
  check_shape(m, kk, 1);
  if (tokens < 1 || tokens > k::x86::kGemvMaxTokens)
    throw error("bench gemv: --tokens must be 1 to " + std::to_string(k::x86::kGemvMaxTokens) + ", got " +
                std::to_string(tokens));
  if (format == "bf16") return run_gemv_bf16(m, kk, reps, tokens);
  gemv_result r;
  r.m = m;
  r.k = kk;
  r.tokens = tokens;
  const k::x86::mxfp4_variant v = k::x86::mxfp4_variant_of(k::default_backend());
  r.variant = k::x86::to_string(v);
  const weights w = random_weights(m, kk, 1);
  const size_t bytes = w.blocks.size() + w.scales.size();
  r.weight_mib = double(bytes) / (1 << 20);
  r.copies = rotation_copies(bytes);
  std::vector<k::x86::packed_mxfp4> packed;
  for (int c = 0; c < r.copies; ++c)
    packed.push_back(k::x86::pack_mxfp4(w.blocks.data(), w.scales.data(), m, kk, v));
  const std::vector<float> x = random_x(size_t(tokens * kk), 2);
  std::vector<float> y(size_t(tokens * m));
  // T <= 4 runs the BF16 GEMV on AMX CPUs too (tiles pay only for a batch of tokens).
  const streamed t = time_streamed(bytes, r.copies, reps, [&](int c) {
    k::x86::matmul_mxfp4(x.data(), packed[size_t(c)], y.data(), tokens, k::act_quant::NONE);
  });
  r.fast_ms = t.ms;
  r.weight_gbs = t.gbs;
  r.membw_gbs = t.membw_gbs;
  r.share_of_membw = t.share_of_membw;
  std::vector<double> ref_ms;
  for (int rep = 0; rep < 2; ++rep) {
    const auto t0 = clock_type::now();
    k::ref::matmul_mxfp4(x.data(), w.blocks.data(), w.scales.data(), y.data(), tokens, m, kk,
                         k::act_quant::NONE);
    ref_ms.push_back(seconds_since(t0) * 1e3);
  }
  r.ref_ms = *std::min_element(ref_ms.begin(), ref_ms.end());
  r.speedup_vs_ref = r.ref_ms / r.fast_ms;
  return r;
}

// Register-resident fp32 FMA ceiling on all pool threads, GFLOP/s: what the dense kernels (f32 FMAs on
// widened BF16 weights) can reach.
double fma_peak() {
  if (!k::x86::cpu().avx512) return 0.0;
  thread_pool& pool = thread_pool::global();
  const int64_t iters = 2'000'000;  // 768 flop each: a few milliseconds per rep
  std::vector<double> sink(size_t(pool.size()));
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = clock_type::now();
    pool.run([&](int tid, int) { sink[size_t(tid)] = k::x86::fma_f32_peak_loop(iters); });
    best = std::max(best, double(pool.size()) * double(iters) * 768.0 / seconds_since(t0) / 1e9);
  }
  return best;
}

// The dense layers' GEMM (BF16 weights in the default backend's layout) against the fp32 FMA peak, or,
// where the backend runs this many tokens on AMX tiles, against the TDPBF16PS peak (useful flops: the tiles
// multiply three bf16 terms of x, docs/kernels.md "Prefill on AMX tiles"); the row-layout kernel beside it
// on an x86 backend.
gemm_result run_gemm_bf16(int64_t m, int64_t kk, int64_t n, int reps) {
  gemm_result r;
  r.m = m;
  r.k = kk;
  r.n = n;
  r.variant = k::default_backend().name();
  const std::vector<uint16_t> w = random_bf16(m, kk, 3), wp = dense_layout(w, m, kk);
  const std::vector<float> x = random_x(size_t(n * kk), 4);
  std::vector<float> y(size_t(n * m));
  if (k::x86::dense_tile_min_tokens(k::default_backend()) <= n && kk % 32 == 0) {
    std::tie(r.peak_gflops, r.peak_kind) = compute_peak();
    r.peak_kind += "; the tiles run 3 bf16 terms of x, so 1/3 is their ceiling";
  } else {
    r.peak_gflops = fma_peak();
    r.peak_kind = "fp32 vfmadd (register-resident)";
  }
  const bool rows_too = k::default_backend().packs_bf16_panels() && k::x86::cpu().avx512;
  dense_matmul(x.data(), wp, y.data(), n, m, kk);
  std::vector<double> ms, rows_ms;
  for (int rep = 0; rep < reps; ++rep) {
    auto t0 = clock_type::now();
    dense_matmul(x.data(), wp, y.data(), n, m, kk);
    ms.push_back(seconds_since(t0) * 1e3);
    if (!rows_too) continue;
    t0 = clock_type::now();
    k::x86::matmul_bf16_rows(x.data(), w.data(), y.data(), n, m, kk);
    rows_ms.push_back(seconds_since(t0) * 1e3);
  }
  r.fast_ms = median(ms);
  r.classic_ms = rows_too ? median(rows_ms) : 0.0;
  r.gflops = 2.0 * double(m) * double(kk) * double(n) / (r.fast_ms * 1e-3) / 1e9;
  r.share_of_peak = r.peak_gflops > 0 ? r.gflops / r.peak_gflops : 0.0;
  r.ref_tokens = std::min<int64_t>(n, 4);
  const auto t0 = clock_type::now();
  k::ref::matmul_bf16(x.data(), w.data(), nullptr, y.data(), r.ref_tokens, m, kk);
  r.ref_ms = seconds_since(t0) * 1e3 * double(n) / double(r.ref_tokens);
  r.speedup_vs_ref = r.ref_ms / r.fast_ms;
  return r;
}

gemm_result run_gemm(int64_t m, int64_t kk, int64_t n, int reps, const std::string& format) {
  check_shape(m, kk, n);
  if (format == "bf16") return run_gemm_bf16(m, kk, n, reps);
  gemm_result r;
  r.m = m;
  r.k = kk;
  r.n = n;
  const k::x86::mxfp4_variant v = k::x86::mxfp4_variant_of(k::default_backend());
  r.variant = k::x86::to_string(v);
  const weights w = random_weights(m, kk, 3);
  const k::x86::packed_mxfp4 packed = k::x86::pack_mxfp4(w.blocks.data(), w.scales.data(), m, kk, v);
  const std::vector<float> x = random_x(size_t(n * kk), 4);
  std::vector<float> y(size_t(n * m));
  std::tie(r.peak_gflops, r.peak_kind) = compute_peak();
  k::x86::matmul_mxfp4(x.data(), packed, y.data(), n, k::act_quant::NONE);
  std::vector<double> ms;
  for (int rep = 0; rep < reps; ++rep) {
    const auto t0 = clock_type::now();
    k::x86::matmul_mxfp4(x.data(), packed, y.data(), n, k::act_quant::NONE);
    ms.push_back(seconds_since(t0) * 1e3);
  }
  r.fast_ms = median(ms);
  r.gflops = 2.0 * double(m) * double(kk) * double(n) / (r.fast_ms * 1e-3) / 1e9;
  r.share_of_peak = r.peak_gflops > 0 ? r.gflops / r.peak_gflops : 0.0;
  // The scalar reference costs the same per token, so a few tokens give its time for all n.
  r.ref_tokens = std::min<int64_t>(n, 4);
  const auto t0 = clock_type::now();
  k::ref::matmul_mxfp4(x.data(), w.blocks.data(), w.scales.data(), y.data(), r.ref_tokens, m, kk,
                       k::act_quant::NONE);
  r.ref_ms = seconds_since(t0) * 1e3 * double(n) / double(r.ref_tokens);
  r.speedup_vs_ref = r.ref_ms / r.fast_ms;
  return r;
}

indexer_result run_indexer(int64_t keys, int64_t heads, int64_t dim, int64_t topk, int reps) {
  if (keys < 1 || heads < 1 || dim < 1 || topk < 1)
    throw error("bench indexer: --keys, --heads, --dim and --topk must be >= 1");
  indexer_result r;
  r.keys = keys;
  r.heads = heads;
  r.dim = dim;
  r.topk = std::min(topk, keys);
  const k::backend& be = k::default_backend();
  // Keys, queries and weights as the model makes them: normal rows quantized to FP8 rows.
  const std::vector<float> kf = random_x(size_t(keys * dim), 3), q = random_x(size_t(heads * dim), 4),
                           w = random_x(size_t(heads), 5);
  const int64_t row = k::ref::index_key_bytes(dim);
  std::vector<uint8_t> rows(size_t(keys * row));
  k::ref::quantize_index_keys(kf.data(), rows.data(), keys, dim);
  const size_t bytes = rows.size();
  r.key_mib = double(bytes) / (1 << 20);
  r.copies = rotation_copies(bytes);
  std::vector<std::vector<uint8_t>> copies(size_t(r.copies), rows);
  std::vector<float> scores(static_cast<size_t>(keys));
  const streamed t = time_streamed(bytes, r.copies, reps, [&](int c) {
    be.indexer_scores(q.data(), copies[size_t(c)].data(), w.data(), scores.data(), 1, keys, heads, dim);
  });
  r.scores_ms = t.ms;
  r.key_gbs = t.gbs;
  r.membw_gbs = t.membw_gbs;
  r.share_of_membw = t.share_of_membw;
  std::vector<int32_t> idx(static_cast<size_t>(r.topk));
  std::vector<double> tk;
  for (int rep = 0; rep < reps; ++rep) {
    const auto t1 = clock_type::now();
    be.indexer_topk(scores.data(), idx.data(), 1, keys, r.topk);
    tk.push_back(seconds_since(t1) * 1e3);
  }
  r.topk_ms = median(tk);
  std::vector<float> want(scores.size());
  const auto t0 = clock_type::now();
  k::ref::indexer_scores(q.data(), rows.data(), w.data(), want.data(), 1, keys, heads, dim);
  r.ref_ms = seconds_since(t0) * 1e3;
  r.speedup_vs_ref = r.ref_ms / r.scores_ms;
  // The backend's contract is the reference's bits; a benchmark of wrong scores would measure nothing.
  be.indexer_scores(q.data(), rows.data(), w.data(), scores.data(), 1, keys, heads, dim);
  if (std::memcmp(want.data(), scores.data(), want.size() * sizeof(float)) != 0)
    throw error("bench indexer: the backend's scores differ from the reference's");
  return r;
}

pool_result run_pool(int64_t jobs) {
  thread_pool& pool = thread_pool::global();
  const int n = pool.size();
  std::vector<std::atomic<uint32_t>> started(static_cast<size_t>(n));
  std::vector<double> us;
  us.reserve(size_t(jobs));
  for (int64_t j = 0; j < jobs + 100; ++j) {  // the first 100 warm up
    const uint32_t mark = uint32_t(j + 1);
    const auto t0 = clock_type::now();
    // Part 0 (the caller) waits until every worker has started its own part, so the round trip is the
    // workers' wake-up and completion, not the caller running the parts itself.
    pool.run([&](int tid, int nt) {
      if (tid != 0) {
        started[size_t(tid)].store(mark, std::memory_order_release);
        return;
      }
      for (int t = 1; t < nt; ++t)
        while (started[size_t(t)].load(std::memory_order_acquire) != mark) {
        }
    });
    if (j >= 100) us.push_back(seconds_since(t0) * 1e6);
  }
  std::sort(us.begin(), us.end());
  pool_result r;
  r.threads = n;
  r.jobs = jobs;
  r.median_us = us[us.size() / 2];
  r.p90_us = us[us.size() * 9 / 10];
  return r;
}

void add_indexer_bench(CLI::App& bench) {
  struct options {
    int64_t keys = 131072, heads = 4, dim = 64, topk = 256;
    int reps = 10;
    bool json = false;
  };
  auto o = std::make_shared<options>();
  auto* cmd = bench.add_subcommand(
      "indexer", "DSA indexer scan of one decode step: FP8 key GB/s as a share of measured read bandwidth");
  cmd->add_option("--keys", o->keys, "Cached keys scanned (the context length)")->capture_default_str();
  cmd->add_option("--heads", o->heads, "Indexer heads (index_n_heads)")->capture_default_str();
  cmd->add_option("--dim", o->dim, "Indexer head dimension (index_head_dim)")->capture_default_str();
  cmd->add_option("--topk", o->topk, "Keys selected (index_topk)")->capture_default_str();
  cmd->add_option("--reps", o->reps, "Measured rounds over all key copies")->capture_default_str();
  cmd->add_flag("--json", o->json, "Print one JSON object instead of text");
  cmd->callback([o] {
    const indexer_result r = run_indexer(o->keys, o->heads, o->dim, o->topk, std::max(1, o->reps));
    if (o->json) {
      const nlohmann::json j = {{"bench", "indexer"},
                                {"keys", r.keys},
                                {"heads", r.heads},
                                {"dim", r.dim},
                                {"variant", k::default_backend().name()},
                                {"threads", thread_pool::global().size()},
                                {"key_mib", r.key_mib},
                                {"copies", r.copies},
                                {"scores_ms", r.scores_ms},
                                {"key_gbs", r.key_gbs},
                                {"membw_gbs", r.membw_gbs},
                                {"share_of_membw", r.share_of_membw},
                                {"topk", r.topk},
                                {"topk_ms", r.topk_ms},
                                {"ref_ms", r.ref_ms},
                                {"speedup_vs_ref", r.speedup_vs_ref}};
      std::printf("%s\n", j.dump().c_str());
      return;
    }
    std::printf("indexer %lld keys x %lld dims FP8, %lld heads, T=1, backend %s, %d threads (%s)\n",
                static_cast<long long>(r.keys), static_cast<long long>(r.dim),
                static_cast<long long>(r.heads), k::default_backend().name(), thread_pool::global().size(),
                k::x86::cpu_features_string());
    std::printf("  keys %.1f MiB x %d copies rotated (> 4x LLC, every scan reads DRAM)\n", r.key_mib,
                r.copies);
    std::printf(
        "  %-10s %9.3f ms  %7.2f GB/s of keys  = %5.1f %% of the read bandwidth sampled beside each rep "
        "(median %.2f GB/s)\n",
        "scores", r.scores_ms, r.key_gbs, 100.0 * r.share_of_membw, r.membw_gbs);
    std::printf("  %-10s %9.3f ms  (top %lld of the scores)\n", "topk", r.topk_ms,
                static_cast<long long>(r.topk));
    std::printf("  %-10s %9.3f ms  (1 thread)  speedup %.1fx\n", "ref", r.ref_ms, r.speedup_vs_ref);
  });
}

void add_pool_bench(CLI::App& bench) {
  struct options {
    int64_t jobs = 20000;
    bool json = false;
  };
  auto o = std::make_shared<options>();
  auto* cmd = bench.add_subcommand(
      "pool",
      "Round-trip time of a thread-pool job in which every worker runs its own part (split overhead)");
  cmd->add_option("--jobs", o->jobs, "Measured jobs")->capture_default_str();
  cmd->add_flag("--json", o->json, "Print one JSON object instead of text");
  cmd->callback([o] {
    const pool_result r = run_pool(std::max<int64_t>(1, o->jobs));
    if (o->json) {
      const nlohmann::json j = {{"bench", "pool"},
                                {"threads", r.threads},
                                {"jobs", r.jobs},
                                {"median_us", r.median_us},
                                {"p90_us", r.p90_us}};
      std::printf("%s\n", j.dump().c_str());
      return;
    }
    std::printf("pool: %d threads, %lld jobs whose parts each run on their own thread\n", r.threads,
                static_cast<long long>(r.jobs));
    std::printf("  hand-off round trip: median %.2f us, p90 %.2f us\n", r.median_us, r.p90_us);
  });
}

void add_membw_bench(CLI::App& bench) {
  struct options {
    double mib = 1024;
    int reps = 5;
    bool json = false;
  };
  auto o = std::make_shared<options>();
  auto* cmd = bench.add_subcommand("membw", "Read bandwidth of all kernel threads streaming a buffer >> LLC");
  cmd->add_option("--mib", o->mib, "Buffer size in MiB")->capture_default_str();
  cmd->add_option("--reps", o->reps, "Measured passes")->capture_default_str();
  cmd->add_flag("--json", o->json, "Print one JSON object instead of text");
  cmd->callback([o] {
    const membw_result r = run_membw(o->mib, std::max(1, o->reps));
    if (o->json) {
      const nlohmann::json j = {{"bench", "membw"},
                                {"threads", r.threads},
                                {"buffer_mib", r.buffer_mib},
                                {"best_gbs", r.best_gbs},
                                {"median_gbs", r.median_gbs}};
      std::printf("%s\n", j.dump().c_str());
      return;
    }
    std::printf("membw: %d threads reading %.0f MiB (LLC %.0f MiB)\n", r.threads, r.buffer_mib,
                double(llc_bytes()) / (1 << 20));
    std::printf("  read bandwidth: best %.2f GB/s, median %.2f GB/s\n", r.best_gbs, r.median_gbs);
  });
}

void add_gemv_bench(CLI::App& bench) {
  struct options {
    int64_t m = 4096, k = 14336, tokens = 1;
    std::string format = "mxfp4";
    int reps = 10;
    bool json = false;
  };
  auto o = std::make_shared<options>();
  auto* cmd = bench.add_subcommand(
      "gemv", "Decode GEMV (1-4 tokens): weight GB/s as a share of measured read bandwidth");
  cmd->add_option("--m", o->m, "Output rows (weight [m, k])")->capture_default_str();
  cmd->add_option("--k", o->k, "Reduction size, a multiple of 32")->capture_default_str();
  cmd->add_option("--format", o->format, "Weight format: mxfp4, or bf16 (dense Linear layers)")
      ->capture_default_str();
  cmd->add_option("--tokens", o->tokens,
                  "Tokens per call, 1-4 (a decode step's rows of one expert or one sequence)")
      ->capture_default_str();
  cmd->add_option("--reps", o->reps, "Measured rounds over all weight copies")->capture_default_str();
  cmd->add_flag("--json", o->json, "Print one JSON object instead of text");
  cmd->callback([o] {
    check_format(o->format, true);
    const gemv_result r = run_gemv(o->m, o->k, std::max(1, o->reps), o->format, o->tokens);
    if (o->json) {
      const nlohmann::json j = {{"bench", "gemv"},
                                {"format", o->format},
                                {"m", r.m},
                                {"k", r.k},
                                {"tokens", r.tokens},
                                {"variant", r.variant},
                                {"threads", thread_pool::global().size()},
                                {"weight_mib", r.weight_mib},
                                {"copies", r.copies},
                                {"ms", r.fast_ms},
                                {"rows_ms", r.classic_ms},
                                {"weight_gbs", r.weight_gbs},
                                {"membw_gbs", r.membw_gbs},
                                {"share_of_membw", r.share_of_membw},
                                {"ref_ms", r.ref_ms},
                                {"speedup_vs_ref", r.speedup_vs_ref}};
      std::printf("%s\n", j.dump().c_str());
      return;
    }
    std::printf("gemv %s %lldx%lld, T=%lld, variant %s, %d threads (%s)\n", o->format.c_str(),
                static_cast<long long>(r.m), static_cast<long long>(r.k), static_cast<long long>(r.tokens),
                r.variant.c_str(), thread_pool::global().size(), k::x86::cpu_features_string());
    std::printf("  weights %.1f MiB x %d copies rotated (> 4x LLC, every call reads DRAM)\n", r.weight_mib,
                r.copies);
    std::printf(
        "  %-10s %9.3f ms  %7.2f GB/s of weights  = %5.1f %% of the read bandwidth sampled beside each "
        "rep (median %.2f GB/s)\n",
        "fast", r.fast_ms, r.weight_gbs, 100.0 * r.share_of_membw, r.membw_gbs);
    if (r.classic_ms > 0)
      std::printf("  %-10s %9.3f ms  %7.2f GB/s (the row-layout kernel, same run)\n", "rows", r.classic_ms,
                  double(r.weight_mib) * (1 << 20) / (r.classic_ms * 1e-3) / 1e9);
    std::printf("  %-10s %9.3f ms  (1 thread)  speedup %.1fx\n", "ref", r.ref_ms, r.speedup_vs_ref);
  });
}

void add_gemm_bench(CLI::App& bench) {
  struct options {
    int64_t m = 4096, k = 14336, n = 512;
    std::string format = "mxfp4";
    int reps = 3;
    bool json = false;
  };
  auto o = std::make_shared<options>();
  auto* cmd =
      bench.add_subcommand("gemm", "Prefill GEMM (n tokens): GFLOP/s as a share of the measured peak");
  cmd->add_option("--m", o->m, "Output rows (weight [m, k])")->capture_default_str();
  cmd->add_option("--k", o->k, "Reduction size, a multiple of 32")->capture_default_str();
  cmd->add_option("--n", o->n, "Tokens")->capture_default_str();
  cmd->add_option("--format", o->format, "Weight format")->capture_default_str();
  cmd->add_option("--reps", o->reps, "Measured calls")->capture_default_str();
  cmd->add_flag("--json", o->json, "Print one JSON object instead of text");
  cmd->callback([o] {
    check_format(o->format, true);
    const gemm_result r = run_gemm(o->m, o->k, o->n, std::max(1, o->reps), o->format);
    if (o->json) {
      const nlohmann::json j = {{"bench", "gemm"},
                                {"format", o->format},
                                {"m", r.m},
                                {"k", r.k},
                                {"n", r.n},
                                {"variant", r.variant},
                                {"threads", thread_pool::global().size()},
                                {"ms", r.fast_ms},
                                {"gflops", r.gflops},
                                {"peak_kind", r.peak_kind},
                                {"peak_gflops", r.peak_gflops},
                                {"share_of_peak", r.share_of_peak},
                                {"ref_ms", r.ref_ms},
                                {"ref_tokens_measured", r.ref_tokens},
                                {"speedup_vs_ref", r.speedup_vs_ref}};
      nlohmann::json out = j;
      if (r.classic_ms > 0) out["rows_ms"] = r.classic_ms;
      std::printf("%s\n", out.dump().c_str());
      return;
    }
    std::printf("gemm %s m=%lld k=%lld n=%lld, variant %s, %d threads (%s)\n", o->format.c_str(),
                static_cast<long long>(r.m), static_cast<long long>(r.k), static_cast<long long>(r.n),
                r.variant.c_str(), thread_pool::global().size(), k::x86::cpu_features_string());
    std::printf("  %-10s %9.2f ms  %8.1f GFLOP/s = %5.1f %% of %.1f GFLOP/s peak (%s, same run)\n", "fast",
                r.fast_ms, r.gflops, 100.0 * r.share_of_peak, r.peak_gflops, r.peak_kind.c_str());
    if (r.classic_ms > 0)
      std::printf("  %-10s %9.2f ms  %8.1f GFLOP/s (the row-layout kernel, same run)\n", "rows", r.classic_ms,
                  2.0 * double(r.m) * double(r.k) * double(r.n) / (r.classic_ms * 1e-3) / 1e9);
    std::printf("  %-10s %9.1f ms  (1 thread, timed on %lld tokens, scaled)  speedup %.1fx\n", "ref",
                r.ref_ms, static_cast<long long>(r.ref_tokens), r.speedup_vs_ref);
  });
}

}  // namespace moxi::bench
