// MLA reference kernels: YaRN against DeepSeek-V3's published numbers, RoPE against complex rotation in
// fp64 and the relative-position property, expanded attention against an fp64 loop, absorbed == expanded
// (with and without YaRN, with past context), and sparse absorbed attention against dense (k >= context)
// and against a masked dense fp64 reference (small k). Tolerance: relative RMSE (FLA's metric) 1e-5 between
// fp32 paths, which differ only in summation order and in the association (W_UK q) . c vs q . (W_UK c).
#include "moxi/kernels/ref/mla.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "moxi/kernels/ref/dsa.h"

namespace {

namespace ref = moxi::kernels::ref;
using Vec = std::vector<float>;

template <typename R, typename G>
void expect_close(const std::string& what, const R& want, const G& got, double ratio) {
  ASSERT_EQ(want.size(), got.size()) << what;
  double num = 0, den = 0, max_abs = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = double(want[i]) - double(got[i]);
    num += d * d;
    den += double(want[i]) * double(want[i]);
    max_abs = std::max(max_abs, std::abs(d));
  }
  ASSERT_FALSE(std::isnan(num)) << what;
  if (max_abs > 1e-6) {
    EXPECT_LT(std::sqrt(num) / std::sqrt(den), ratio) << what << " max_abs=" << max_abs;
  }
}

Vec normal(size_t n, std::mt19937_64& gen, float sd = 1.0f) {
  std::normal_distribution<float> d(0.0f, sd);
  Vec v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

ref::YarnConfig deepseek_v3_yarn() {
  ref::YarnConfig c;
  c.theta = 10000;
  c.factor = 40;
  c.original_max_position = 4096;
  c.beta_fast = 32;
  c.beta_slow = 1;
  c.mscale = 1.0;
  c.mscale_all_dim = 1.0;
  return c;
}

TEST(Yarn, DeepSeekV3Numbers) {
  const ref::YarnConfig c = deepseek_v3_yarn();
  // docs/deepseek.md §B.5-B.6: m = 1.36889, scale = 192^-0.5 * m^2 = 0.1352338, cos/sin factor 1.
  EXPECT_NEAR(ref::yarn_softmax_mscale(c), 1.36889, 1e-5);
  EXPECT_NEAR(std::pow(192.0, -0.5) * std::pow(ref::yarn_softmax_mscale(c), 2), 0.1352338, 1e-6);
  EXPECT_DOUBLE_EQ(ref::yarn_attention_factor(c), 1.0);
  // Pairs below low = 10 keep theta^(-2i/64); pairs from high = 23 on are divided by 40; a ramp between.
  std::vector<double> f(32);
  ref::rope_inv_freq(c, 64, f.data());
  for (int i = 0; i < 32; ++i) {
    const double base = std::pow(10000.0, -2.0 * i / 64);
    const double ramp = std::clamp((i - 10.0) / 13.0, 0.0, 1.0);
    EXPECT_NEAR(f[size_t(i)], base * (1 - ramp) + base / 40 * ramp, 1e-14 * base) << i;
  }
  // Without YaRN: plain frequencies and no extra scaling.
  ref::YarnConfig plain;
  ref::rope_inv_freq(plain, 64, f.data());
  for (int i = 0; i < 32; ++i) EXPECT_NEAR(f[size_t(i)], std::pow(10000.0, -2.0 * i / 64), 1e-15);
  EXPECT_EQ(ref::yarn_softmax_mscale(plain), 1.0);
  // V2-Lite style: mscale 0.707 on both sides keeps cos/sin unscaled; only mscale without
  // mscale_all_dim scales cos/sin by 0.1 ln f + 1 and leaves the softmax alone (vLLM/HF).
  ref::YarnConfig only_mscale = c;
  only_mscale.mscale_all_dim = 0;
  EXPECT_NEAR(ref::yarn_attention_factor(only_mscale), 0.1 * std::log(40.0) + 1, 1e-12);
  EXPECT_EQ(ref::yarn_softmax_mscale(only_mscale), 1.0);
}

TEST(Rope, LayoutsMatchComplexRotationAndAreRelative) {
  const int64_t R = 16, T = 3, n = 2, D = 24;  // rope slice at offset 8 of 24-wide vectors
  const std::vector<int64_t> pos = {0, 5, 1000};
  ref::YarnConfig cfg = deepseek_v3_yarn();
  cfg.original_max_position = 64;  // small context so the ramp falls inside 8 pairs
  std::vector<double> inv(size_t(R / 2));
  Vec cs(size_t(T * R / 2)), sn(cs.size());
  ref::rope_inv_freq(cfg, R, inv.data());
  const double af = 1.25;
  ref::rope_cos_sin(pos.data(), inv.data(), af, cs.data(), sn.data(), T, R);
  std::mt19937_64 gen(1);
  const Vec x = normal(size_t(T * n * D), gen);
  for (ref::RopeLayout layout : {ref::RopeLayout::kInterleaved, ref::RopeLayout::kHalfSplit}) {
    Vec y = x;
    ref::rope_apply(y.data() + 8, cs.data(), sn.data(), T, n, n * D, D, R, layout);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t j = 0; j < n; ++j) {
        const size_t base = size_t(t * n * D + j * D);
        for (int64_t d = 0; d < D; ++d) {
          if (d < 8) {
            EXPECT_EQ(y[base + size_t(d)], x[base + size_t(d)]);  // outside the slice: untouched
          }
        }
        for (int64_t i = 0; i < R / 2; ++i) {
          const size_t ia = base + 8 + size_t(layout == ref::RopeLayout::kInterleaved ? 2 * i : i);
          const size_t ib =
              base + 8 + size_t(layout == ref::RopeLayout::kInterleaved ? 2 * i + 1 : i + R / 2);
          const std::complex<double> z =
              std::complex<double>(x[ia], x[ib]) * std::polar(af, double(pos[size_t(t)]) * inv[size_t(i)]);
          EXPECT_NEAR(y[ia], z.real(), 1e-5);
          EXPECT_NEAR(y[ib], z.imag(), 1e-5);
        }
      }
    }
  }
  // Relative position: <rope(q, m), rope(k, n)> depends on m - n only (af = 1 here).
  for (ref::RopeLayout layout : {ref::RopeLayout::kInterleaved, ref::RopeLayout::kHalfSplit}) {
    const Vec q = normal(size_t(R), gen), k = normal(size_t(R), gen);
    auto dot_at = [&](int64_t m, int64_t nn) {
      const std::vector<int64_t> p = {m, nn};
      Vec c2(static_cast<size_t>(R)), s2(static_cast<size_t>(R));
      ref::rope_cos_sin(p.data(), inv.data(), 1.0, c2.data(), s2.data(), 2, R);
      Vec qa = q, ka = k;
      ref::rope_apply(qa.data(), c2.data(), s2.data(), 1, 1, R, R, R, layout);
      ref::rope_apply(ka.data(), c2.data() + R / 2, s2.data() + R / 2, 1, 1, R, R, R, layout);
      double acc = 0;
      for (int64_t d = 0; d < R; ++d) acc += double(qa[size_t(d)]) * ka[size_t(d)];
      return acc;
    };
    EXPECT_NEAR(dot_at(7, 3), dot_at(104, 100), 1e-4);
  }
}

// Plain fp64 causal attention over expanded heads (queries are the last T of S positions).
std::vector<double> attention_fp64(const Vec& q, const Vec& k, const Vec& v, int64_t T, int64_t S, int64_t H,
                                   int64_t Dk, int64_t Dv, double scale) {
  std::vector<double> o(size_t(T * H * Dv), 0.0);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      std::vector<double> p;
      for (int64_t s = 0; s <= S - T + t; ++s) {
        double acc = 0;
        for (int64_t d = 0; d < Dk; ++d)
          acc += double(q[size_t((t * H + h) * Dk + d)]) * k[size_t((s * H + h) * Dk + d)];
        p.push_back(acc * scale);
      }
      const double mx = *std::max_element(p.begin(), p.end());
      double sum = 0;
      for (double& x : p) sum += (x = std::exp(x - mx));
      for (size_t s = 0; s < p.size(); ++s)
        for (int64_t d = 0; d < Dv; ++d)
          o[size_t((t * H + h) * Dv + d)] +=
              p[s] / sum * v[(s * size_t(H) + size_t(h)) * size_t(Dv) + size_t(d)];
    }
  }
  return o;
}

struct MlaCase {
  int64_t T, S, H = 4, Dn = 16, Dr, Dv = 12, L = 32;
  bool yarn;
};

// Random q (rope applied), latent cache (c_kv | rotated k_pe) and kv_b weight for one case.
struct MlaData {
  Vec q, latent, wkv_b;
  float scale;
};

MlaData make_mla(const MlaCase& c, uint64_t seed) {
  std::mt19937_64 gen(seed);
  MlaData m;
  m.q = normal(size_t(c.T * c.H * (c.Dn + c.Dr)), gen);
  m.latent = normal(size_t(c.S * (c.L + c.Dr)), gen);
  m.wkv_b = normal(size_t(c.H * (c.Dn + c.Dv) * c.L), gen, 1.0f / std::sqrt(float(c.L)));
  ref::YarnConfig y = deepseek_v3_yarn();
  if (!c.yarn) y = ref::YarnConfig{};
  y.original_max_position = 32;
  std::vector<double> inv(size_t(c.Dr / 2));
  Vec cs(size_t(c.S * c.Dr / 2)), sn(cs.size());
  ref::rope_inv_freq(y, c.Dr, inv.data());
  std::vector<int64_t> pos(size_t(c.S));
  for (int64_t s = 0; s < c.S; ++s) pos[size_t(s)] = s;
  ref::rope_cos_sin(pos.data(), inv.data(), ref::yarn_attention_factor(y), cs.data(), sn.data(), c.S, c.Dr);
  // k_pe at positions [0, S), q_pe at [S-T, S).
  ref::rope_apply(m.latent.data() + c.L, cs.data(), sn.data(), c.S, 1, c.L + c.Dr, 0, c.Dr,
                  ref::RopeLayout::kInterleaved);
  const int64_t off = (c.S - c.T) * c.Dr / 2;
  ref::rope_apply(m.q.data() + c.Dn, cs.data() + off, sn.data() + off, c.T, c.H, c.H * (c.Dn + c.Dr),
                  c.Dn + c.Dr, c.Dr, ref::RopeLayout::kInterleaved);
  const double ms = ref::yarn_softmax_mscale(y);
  m.scale = float(std::pow(double(c.Dn + c.Dr), -0.5) * ms * ms);
  return m;
}

Vec run_expanded(const MlaCase& c, const MlaData& m) {
  Vec k(size_t(c.S * c.H * (c.Dn + c.Dr))), v(size_t(c.S * c.H * c.Dv)), o(size_t(c.T * c.H * c.Dv));
  ref::mla_expand_kv(m.latent.data(), m.wkv_b.data(), k.data(), v.data(), c.S, c.H, c.Dn, c.Dr, c.Dv, c.L);
  ref::attention_causal(m.q.data(), k.data(), v.data(), o.data(), c.T, c.S, c.H, c.Dn + c.Dr, c.Dv, m.scale);
  return o;
}

Vec run_absorbed(const MlaCase& c, const MlaData& m, const std::vector<int32_t>* indices = nullptr,
                 int64_t topk = 0) {
  Vec ql(size_t(c.T * c.H * (c.L + c.Dr))), ol(size_t(c.T * c.H * c.L)), o(size_t(c.T * c.H * c.Dv));
  ref::mla_absorb_q(m.q.data(), m.wkv_b.data(), ql.data(), c.T, c.H, c.Dn, c.Dr, c.Dv, c.L);
  if (indices) {
    ref::mla_attention_absorbed_sparse(ql.data(), m.latent.data(), indices->data(), ol.data(), c.T, c.S, c.H,
                                       c.L, c.Dr, topk, m.scale);
  } else {
    ref::mla_attention_absorbed(ql.data(), m.latent.data(), ol.data(), c.T, c.S, c.H, c.L, c.Dr, m.scale);
  }
  ref::mla_unabsorb_o(ol.data(), m.wkv_b.data(), o.data(), c.T, c.H, c.Dn, c.Dv, c.L);
  return o;
}

std::vector<MlaCase> cases() {
  std::vector<MlaCase> out;
  for (int64_t T : {1, 7, 40})
    for (int64_t past : {0, 5})
      for (int64_t Dr : {8, 16})
        for (bool yarn : {false, true}) {
          MlaCase c;
          c.T = T;
          c.S = T + past;
          c.Dr = Dr;
          c.yarn = yarn;
          out.push_back(c);
        }
  return out;
}

std::string name(const MlaCase& c) {
  return "T=" + std::to_string(c.T) + " S=" + std::to_string(c.S) + " Dr=" + std::to_string(c.Dr) +
         (c.yarn ? " yarn" : "");
}

TEST(Mla, ExpandedMatchesFp64AndAbsorbedMatchesExpanded) {
  uint64_t seed = 1;
  for (const MlaCase& c : cases()) {
    const MlaData m = make_mla(c, seed++);
    // fp64 reference from the same rotated inputs: expand with kv_b in fp64, then plain attention.
    Vec k(size_t(c.S * c.H * (c.Dn + c.Dr))), v(size_t(c.S * c.H * c.Dv));
    for (int64_t s = 0; s < c.S; ++s)
      for (int64_t h = 0; h < c.H; ++h) {
        for (int64_t r = 0; r < c.Dn + c.Dv; ++r) {
          double acc = 0;
          for (int64_t l = 0; l < c.L; ++l)
            acc += double(m.wkv_b[size_t((h * (c.Dn + c.Dv) + r) * c.L + l)]) *
                   m.latent[size_t(s * (c.L + c.Dr) + l)];
          if (r < c.Dn)
            k[size_t((s * c.H + h) * (c.Dn + c.Dr) + r)] = float(acc);
          else
            v[size_t((s * c.H + h) * c.Dv + r - c.Dn)] = float(acc);
        }
        for (int64_t i = 0; i < c.Dr; ++i)
          k[size_t((s * c.H + h) * (c.Dn + c.Dr) + c.Dn + i)] = m.latent[size_t(s * (c.L + c.Dr) + c.L + i)];
      }
    const std::vector<double> want = attention_fp64(m.q, k, v, c.T, c.S, c.H, c.Dn + c.Dr, c.Dv, m.scale);
    const Vec expanded = run_expanded(c, m);
    expect_close("expanded vs fp64 " + name(c), want, expanded, 1e-5);
    expect_close("absorbed vs expanded " + name(c), expanded, run_absorbed(c, m), 1e-5);
  }
}

TEST(Mla, SparseWithLargeKEqualsDense) {
  uint64_t seed = 100;
  for (const MlaCase& c : cases()) {
    const MlaData m = make_mla(c, seed++);
    // Index scores are arbitrary here; with k >= S every causal position is selected whatever they are.
    std::mt19937_64 gen(seed);
    const Vec scores = normal(size_t(c.T * c.S), gen);
    for (int64_t topk : {c.S, c.S + 3}) {
      std::vector<int32_t> idx(size_t(c.T * topk));
      ref::indexer_topk(scores.data(), idx.data(), c.T, c.S, topk);
      expect_close("sparse k>=S " + name(c), run_absorbed(c, m), run_absorbed(c, m, &idx, topk), 1e-5);
    }
  }
}

TEST(Mla, SparseWithSmallKEqualsMaskedDenseReference) {
  uint64_t seed = 200;
  for (const MlaCase& c : cases()) {
    const MlaData m = make_mla(c, seed++);
    std::mt19937_64 gen(seed);
    const Vec scores = normal(size_t(c.T * c.S), gen);
    const int64_t topk = 4;
    std::vector<int32_t> idx(size_t(c.T * topk));
    ref::indexer_topk(scores.data(), idx.data(), c.T, c.S, topk);
    // Masked dense reference in fp64, in the expanded form: every causal key, -inf unless selected.
    std::vector<double> want(size_t(c.T * c.H * c.Dv), 0.0);
    for (int64_t t = 0; t < c.T; ++t) {
      std::vector<char> sel(size_t(c.S), 0);
      for (int64_t j = 0; j < topk; ++j) {
        const int32_t s = idx[size_t(t * topk + j)];
        if (s >= 0) {
          ASSERT_LE(s, c.S - c.T + t) << "selection must be causal";
          sel[size_t(s)] = 1;
        }
      }
      for (int64_t h = 0; h < c.H; ++h) {
        const float* qh = m.q.data() + (t * c.H + h) * (c.Dn + c.Dr);
        std::vector<double> logit(size_t(c.S), -INFINITY);
        std::vector<std::vector<double>> vs(size_t(c.S));
        for (int64_t s = 0; s <= c.S - c.T + t; ++s) {
          const float* lat = m.latent.data() + s * (c.L + c.Dr);
          double acc = 0;
          vs[size_t(s)].assign(size_t(c.Dv), 0.0);
          for (int64_t r = 0; r < c.Dn + c.Dv; ++r) {
            double kv = 0;
            for (int64_t l = 0; l < c.L; ++l)
              kv += double(m.wkv_b[size_t((h * (c.Dn + c.Dv) + r) * c.L + l)]) * lat[l];
            if (r < c.Dn)
              acc += qh[r] * kv;
            else
              vs[size_t(s)][size_t(r - c.Dn)] = kv;
          }
          for (int64_t i = 0; i < c.Dr; ++i) acc += double(qh[c.Dn + i]) * lat[c.L + i];
          if (sel[size_t(s)]) logit[size_t(s)] = acc * m.scale;
        }
        const double mx = *std::max_element(logit.begin(), logit.end());
        double sum = 0;
        for (double& x : logit) sum += (x = std::exp(x - mx));
        for (int64_t s = 0; s < c.S; ++s)
          for (int64_t d = 0; d < c.Dv && sel[size_t(s)]; ++d)
            want[size_t((t * c.H + h) * c.Dv + d)] += logit[size_t(s)] / sum * vs[size_t(s)][size_t(d)];
      }
    }
    expect_close("sparse k=4 " + name(c), want, run_absorbed(c, m, &idx, topk), 1e-5);
  }
}

TEST(Mla, SparseRowWithOnlyPaddingIsZero) {
  const int64_t T = 1, S = 3, H = 2, L = 4, Dr = 2, topk = 3;
  Vec ql(size_t(T * H * (L + Dr)), 1.0f), lat(size_t(S * (L + Dr)), 2.0f), ol(size_t(T * H * L), 7.0f);
  const std::vector<int32_t> idx = {-1, -1, -1};
  ref::mla_attention_absorbed_sparse(ql.data(), lat.data(), idx.data(), ol.data(), T, S, H, L, Dr, topk,
                                     0.5f);
  for (float x : ol) EXPECT_EQ(x, 0.0f);
}

}  // namespace
