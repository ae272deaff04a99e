// Scalar reference MLA kernels: RoPE/YaRN, expanded and absorbed attention (see mla.h for layouts).
#include "moxi/kernels/ref/mla.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <vector>

#include "moxi/base/error.h"

namespace moxi::kernels::ref {

double yarn_get_mscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

double yarn_attention_factor(const YarnConfig& cfg) {
  if (cfg.factor <= 1.0) return 1.0;
  return yarn_get_mscale(cfg.factor, cfg.mscale) / yarn_get_mscale(cfg.factor, cfg.mscale_all_dim);
}

double yarn_softmax_mscale(const YarnConfig& cfg) {
  if (cfg.factor <= 1.0) return 1.0;
  return yarn_get_mscale(cfg.factor, cfg.mscale_all_dim);
}

void rope_inv_freq(const YarnConfig& cfg, int64_t rope_dim, double* inv_freq) {
  MOXI_ASSERT(rope_dim % 2 == 0);
  const int64_t half = rope_dim / 2;
  const double R = double(rope_dim);
  // find_correction_dim: the pair index whose wavelength fits `rot` times into the original context.
  auto corr_dim = [&](double rot) {
    return R * std::log(cfg.original_max_position / (rot * 2.0 * std::numbers::pi)) /
           (2.0 * std::log(cfg.theta));
  };
  double low = 0, high = 0;
  if (cfg.factor > 1.0) {
    low = std::max(std::floor(corr_dim(cfg.beta_fast)), 0.0);
    high = std::min(std::ceil(corr_dim(cfg.beta_slow)), R - 1);
    if (low == high) high += 0.001;  // as linear_ramp_factor does, to avoid 0/0
  }
  for (int64_t i = 0; i < half; ++i) {
    const double base = std::pow(cfg.theta, -double(2 * i) / R);
    if (cfg.factor <= 1.0) {
      inv_freq[i] = base;
      continue;
    }
    const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
    const double smooth = 1.0 - ramp;  // 1: keep the original (extrapolated) frequency
    inv_freq[i] = base / cfg.factor * (1.0 - smooth) + base * smooth;
  }
}

void rope_cos_sin(const int64_t* positions, const double* inv_freq, double attention_factor, float* cos,
                  float* sin, int64_t T, int64_t rope_dim) {
  const int64_t half = rope_dim / 2;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      // fp64 angle: at 1M positions an fp32 product would already be off by ~0.06 rad.
      const double a = double(positions[t]) * inv_freq[i];
      cos[t * half + i] = float(std::cos(a) * attention_factor);
      sin[t * half + i] = float(std::sin(a) * attention_factor);
    }
  }
}

void rope_apply(float* x, const float* cos, const float* sin, int64_t T, int64_t n, int64_t token_stride,
                int64_t vec_stride, int64_t rope_dim, RopeLayout layout) {
  const int64_t half = rope_dim / 2;
  for (int64_t t = 0; t < T; ++t) {
    const float* c = cos + t * half;
    const float* s = sin + t * half;
    for (int64_t j = 0; j < n; ++j) {
      float* xv = x + t * token_stride + j * vec_stride;
      for (int64_t i = 0; i < half; ++i) {
        // Pair (a, b) is the complex number a + ib multiplied by e^{i angle}.
        float& a = layout == RopeLayout::kInterleaved ? xv[2 * i] : xv[i];
        float& b = layout == RopeLayout::kInterleaved ? xv[2 * i + 1] : xv[i + half];
        const float a0 = a, b0 = b;
        a = a0 * c[i] - b0 * s[i];
        b = a0 * s[i] + b0 * c[i];
      }
    }
  }
}

void attention_causal(const float* q, const float* k, const float* v, float* o, int64_t T, int64_t S,
                      int64_t H, int64_t Dk, int64_t Dv, float scale) {
  MOXI_ASSERT(S >= T);
  std::vector<float> p(static_cast<size_t>(S));
  for (int64_t t = 0; t < T; ++t) {
    const int64_t n = S - T + t + 1;  // keys visible to query t
    for (int64_t h = 0; h < H; ++h) {
      const float* qh = q + (t * H + h) * Dk;
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t s = 0; s < n; ++s) {
        const float* ks = k + (s * H + h) * Dk;
        float acc = 0.0f;
        for (int64_t d = 0; d < Dk; ++d) acc += qh[d] * ks[d];
        p[size_t(s)] = acc * scale;
        mx = std::max(mx, p[size_t(s)]);
      }
      float sum = 0.0f;
      for (int64_t s = 0; s < n; ++s) {
        p[size_t(s)] = std::exp(p[size_t(s)] - mx);
        sum += p[size_t(s)];
      }
      float* oh = o + (t * H + h) * Dv;
      std::fill(oh, oh + Dv, 0.0f);
      for (int64_t s = 0; s < n; ++s) {
        const float w = p[size_t(s)] / sum;
        const float* vs = v + (s * H + h) * Dv;
        for (int64_t d = 0; d < Dv; ++d) oh[d] += w * vs[d];
      }
    }
  }
}

void mla_expand_kv(const float* latent, const float* wkv_b, float* k, float* v, int64_t S, int64_t H,
                   int64_t Dn, int64_t Dr, int64_t Dv, int64_t L) {
  for (int64_t s = 0; s < S; ++s) {
    const float* c = latent + s * (L + Dr);
    for (int64_t h = 0; h < H; ++h) {
      float* kh = k + (s * H + h) * (Dn + Dr);
      float* vh = v + (s * H + h) * Dv;
      for (int64_t r = 0; r < Dn + Dv; ++r) {
        const float* wr = wkv_b + (h * (Dn + Dv) + r) * L;
        float acc = 0.0f;
        for (int64_t l = 0; l < L; ++l) acc += wr[l] * c[l];
        if (r < Dn) {
          kh[r] = acc;
        } else {
          vh[r - Dn] = acc;
        }
      }
      for (int64_t i = 0; i < Dr; ++i) kh[Dn + i] = c[L + i];
    }
  }
}

void mla_absorb_q(const float* q, const float* wkv_b, float* q_lat, int64_t T, int64_t H, int64_t Dn,
                  int64_t Dr, int64_t Dv, int64_t L) {
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      const float* qh = q + (t * H + h) * (Dn + Dr);
      float* out = q_lat + (t * H + h) * (L + Dr);
      std::fill(out, out + L, 0.0f);
      // q_lat[l] = sum_i q_nope[i] W_UK_h[i][l]: row-wise so W_UK is read contiguously.
      for (int64_t i = 0; i < Dn; ++i) {
        const float* wr = wkv_b + (h * (Dn + Dv) + i) * L;
        for (int64_t l = 0; l < L; ++l) out[l] += qh[i] * wr[l];
      }
      for (int64_t i = 0; i < Dr; ++i) out[L + i] = qh[Dn + i];
    }
  }
}

namespace {

// Softmax attention of one query head over the latent rows listed in idx[0, n).
void attend_latent(const float* qh, const float* latent, const int64_t* idx, int64_t n, int64_t L, int64_t Dr,
                   float scale, float* p, float* oh) {
  std::fill(oh, oh + L, 0.0f);
  if (n == 0) return;
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    const float* row = latent + idx[j] * (L + Dr);
    float acc = 0.0f;
    for (int64_t d = 0; d < L + Dr; ++d) acc += qh[d] * row[d];
    p[j] = acc * scale;
    mx = std::max(mx, p[j]);
  }
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    p[j] = std::exp(p[j] - mx);
    sum += p[j];
  }
  for (int64_t j = 0; j < n; ++j) {
    const float w = p[j] / sum;
    const float* row = latent + idx[j] * (L + Dr);
    for (int64_t d = 0; d < L; ++d) oh[d] += w * row[d];
  }
}

}  // namespace

void mla_attention_absorbed(const float* q_lat, const float* latent, float* o_lat, int64_t T, int64_t S,
                            int64_t H, int64_t L, int64_t Dr, float scale) {
  MOXI_ASSERT(S >= T);
  std::vector<int64_t> idx(static_cast<size_t>(S));
  std::vector<float> p(static_cast<size_t>(S));
  for (int64_t s = 0; s < S; ++s) idx[size_t(s)] = s;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      attend_latent(q_lat + (t * H + h) * (L + Dr), latent, idx.data(), S - T + t + 1, L, Dr, scale, p.data(),
                    o_lat + (t * H + h) * L);
    }
  }
}

void mla_attention_absorbed_sparse(const float* q_lat, const float* latent, const int32_t* indices,
                                   float* o_lat, int64_t T, int64_t S, int64_t H, int64_t L, int64_t Dr,
                                   int64_t topk, float scale) {
  std::vector<int64_t> idx(static_cast<size_t>(topk));
  std::vector<float> p(static_cast<size_t>(topk));
  for (int64_t t = 0; t < T; ++t) {
    int64_t n = 0;
    for (int64_t j = 0; j < topk; ++j) {
      const int32_t s = indices[t * topk + j];
      if (s < 0) continue;
      MOXI_ASSERT(s < S, "sparse attention index past the latent cache");
      idx[size_t(n++)] = s;
    }
    for (int64_t h = 0; h < H; ++h) {
      attend_latent(q_lat + (t * H + h) * (L + Dr), latent, idx.data(), n, L, Dr, scale, p.data(),
                    o_lat + (t * H + h) * L);
    }
  }
}

void mla_unabsorb_o(const float* o_lat, const float* wkv_b, float* o, int64_t T, int64_t H, int64_t Dn,
                    int64_t Dv, int64_t L) {
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      const float* ol = o_lat + (t * H + h) * L;
      float* oh = o + (t * H + h) * Dv;
      for (int64_t j = 0; j < Dv; ++j) {
        const float* wr = wkv_b + (h * (Dn + Dv) + Dn + j) * L;
        float acc = 0.0f;
        for (int64_t l = 0; l < L; ++l) acc += wr[l] * ol[l];
        oh[j] = acc;
      }
    }
  }
}

}  // namespace moxi::kernels::ref
