// Scalar reference KDA kernels (see kda.h for layouts and semantics; math per docs/kimi-linear.md §1-2).
// Every exp of the state update (the recurrent decay, the chunked factors) is exp_f32 (ref/exp.h), which the
// AVX-512 twins compute 16 lanes at a time with the same operations; the gates keep libm's exp.
#include "moxi/kernels/ref/kda.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "moxi/base/error.h"
#include "moxi/kernels/ref/basic.h"
#include "moxi/kernels/ref/exp.h"

namespace moxi::kernels::ref {

void causal_conv1d_silu(const float* x, const float* w, float* state, float* y, int64_t T, int64_t C,
                        int64_t W) {
  MOXI_ASSERT(W >= 1);
  const int64_t P = W - 1;  // past inputs kept in the state
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t c = 0; c < C; ++c) {
      float acc = 0.0f;
      for (int64_t j = 0; j < W; ++j) {
        const int64_t src = t - P + j;  // < 0: comes from the state (row P + src), or zero without one
        float xv = 0.0f;
        if (src >= 0) {
          xv = x[src * C + c];
        } else if (state) {
          xv = state[(P + src) * C + c];
        }
        acc += w[j * C + c] * xv;
      }
      y[t * C + c] = silu(acc);
    }
  }
  if (!state) return;
  // New state = the last P rows of [state ; x]. Reading row T+i of that concatenation while writing row i
  // of the state is safe in increasing i, because T+i >= i.
  for (int64_t i = 0; i < P; ++i) {
    const int64_t src = T + i;
    for (int64_t c = 0; c < C; ++c) {
      state[i * C + c] = src < P ? state[src * C + c] : x[(src - P) * C + c];
    }
  }
}

void kda_gate_softplus(const float* graw, const float* A_log, const float* dt_bias, float* g, int64_t T,
                       int64_t H, int64_t K) {
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      const float a = std::exp(A_log[h]);
      for (int64_t d = 0; d < K; ++d) {
        const int64_t i = (t * H + h) * K + d;
        const float z = graw[i] + (dt_bias ? dt_bias[h * K + d] : 0.0f);
        g[i] = -a * softplus(z);
      }
    }
  }
}

void kda_gate_lower_bound(const float* graw, const float* A_log, const float* dt_bias, float lower_bound,
                          float* g, int64_t T, int64_t H, int64_t K) {
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      const float a = A_log ? std::exp(A_log[h]) : 1.0f;
      for (int64_t d = 0; d < K; ++d) {
        const int64_t i = (t * H + h) * K + d;
        const float z = graw[i] + (dt_bias ? dt_bias[h * K + d] : 0.0f);
        g[i] = lower_bound * sigmoid(a * z);
      }
    }
  }
}

void kda_recurrent(const float* q, const float* k, const float* v, const float* g, const float* beta,
                   float scale, float* state, float* o, int64_t T, int64_t H, int64_t K, int64_t V) {
  std::vector<float> delta(static_cast<size_t>(V));  // one per call, reused for every token and head
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      const float* qt = q + (t * H + h) * K;
      const float* kt = k + (t * H + h) * K;
      const float* vt = v + (t * H + h) * V;
      const float* gt = g + (t * H + h) * K;
      const float bt = beta[t * H + h];
      float* S = state + h * K * V;
      float* ot = o + (t * H + h) * V;
      // Decay first: the delta rule's prediction k^T S uses the decayed state (FLA naive_recurrent_kda).
      for (int64_t d = 0; d < K; ++d) {
        const float e = exp_f32(gt[d]);
        for (int64_t j = 0; j < V; ++j) S[d * V + j] *= e;
      }
      std::fill(delta.begin(), delta.end(), 0.0f);
      for (int64_t d = 0; d < K; ++d) {
        for (int64_t j = 0; j < V; ++j) delta[size_t(j)] += kt[d] * S[d * V + j];
      }
      for (int64_t j = 0; j < V; ++j) delta[size_t(j)] = bt * (vt[j] - delta[size_t(j)]);
      for (int64_t d = 0; d < K; ++d) {
        for (int64_t j = 0; j < V; ++j) S[d * V + j] += kt[d] * delta[size_t(j)];
      }
      // Read after the write: o_t includes token t's own contribution.
      std::fill(ot, ot + V, 0.0f);
      for (int64_t d = 0; d < K; ++d) {
        const float qd = scale * qt[d];
        for (int64_t j = 0; j < V; ++j) ot[j] += qd * S[d * V + j];
      }
    }
  }
}

void kda_chunked(const float* q, const float* k, const float* v, const float* g, const float* beta,
                 float scale, float* state, float* o, int64_t T, int64_t H, int64_t K, int64_t V) {
  const int64_t C = kda_chunk_size;
  // Workspace, allocated once per call. The in-chunk cumulative gate G is kept in fp64: exp(G_r - G_c)
  // is a difference of two cumsums, and with strong decays (|G| ~ 1e4 over a chunk) fp32 would lose
  // the small differences that matter. Everything else is fp32, as FLA's naive_chunk_kda.
  std::vector<double> G(size_t(C * K));     // [C, K] inclusive cumsum of g inside the chunk
  std::vector<float> Aqk(size_t(C * C));    // [C, C] scale * q_r . (exp(G_r - G_c) * k_c), c <= r
  std::vector<float> L(size_t(C * C));      // [C, C] beta_r * k_r . (exp(G_r - G_c) * k_c), c < r
  std::vector<float> Wm(size_t(C * K));     // [C, K] W = T diag(beta) (exp(G) * K)
  std::vector<float> U(size_t(C * V));      // [C, V] U = T diag(beta) V, then the pseudo-values U - W S
  std::vector<float> decay(size_t(C * K));  // [C, K] exp(G_last - G_c), the per-key weight into S'
  std::vector<float> KF(size_t(C * K));     // [C, K] exp(G_e - G_c) k_c, e the end of c's sub-chunk
  std::vector<float> QE(size_t(C * K)), KE(size_t(C * K));  // [C / sub-chunk, K] per row: q_r, k_r x exp(G_r - G_e)

  for (int64_t h = 0; h < H; ++h) {
    float* S = state + h * K * V;  // [K, V]
    for (int64_t c0 = 0; c0 < T; c0 += C) {
      const int64_t n = std::min(C, T - c0);
      auto Q = [&](int64_t r) { return q + ((c0 + r) * H + h) * K; };
      auto Kr = [&](int64_t r) { return k + ((c0 + r) * H + h) * K; };
      auto Vr = [&](int64_t r) { return v + ((c0 + r) * H + h) * V; };
      auto B = [&](int64_t r) { return beta[(c0 + r) * H + h]; };

      for (int64_t r = 0; r < n; ++r) {
        const float* gr = g + ((c0 + r) * H + h) * K;
        for (int64_t d = 0; d < K; ++d) G[size_t(r * K + d)] = (r ? G[size_t((r - 1) * K + d)] : 0.0) + gr[d];
      }

      // Aqk and L share the factor exp(G_r - G_c) (<= 1 for g <= 0). Inside a sub-chunk of
      // kda_sub_chunk tokens it is computed per (r, c, d). A column c of an earlier sub-chunk than r's
      // factors through e, the last token of c's sub-chunk (c <= e < r): exp(G_r - G_c) = exp(G_r - G_e)
      // exp(G_e - G_c), both factors <= 1 whatever the decays (nothing overflows; an underflow drops a term
      // below 1e-38), so those pairs take one exp per (r, sub-chunk, d) and one per (c, d) instead of one per
      // (r, c, d), FLA's sub-chunk split of chunk_kda. KF[c] = exp(G_e - G_c) k_c; per row, QE[j] / KE[j] =
      // q_r / k_r times exp(G_r - G_e) for sub-chunk j's e.
      const int64_t SC = kda_sub_chunk;
      for (int64_t c = 0; c < (n - 1) / SC * SC; ++c) {
        const int64_t e = c / SC * SC + SC - 1;
        const float* kc = Kr(c);
        for (int64_t d = 0; d < K; ++d)
          KF[size_t(c * K + d)] = exp_f32(float(G[size_t(e * K + d)] - G[size_t(c * K + d)])) * kc[d];
      }
      for (int64_t r = 0; r < n; ++r) {
        const float* qr = Q(r);
        const float* kr = Kr(r);
        const int64_t r0 = r / SC * SC;  // r's sub-chunk starts here
        for (int64_t j = 0; j < r0 / SC; ++j) {
          const int64_t e = j * SC + SC - 1;
          for (int64_t d = 0; d < K; ++d) {
            const float x = exp_f32(float(G[size_t(r * K + d)] - G[size_t(e * K + d)]));
            QE[size_t(j * K + d)] = qr[d] * x;
            KE[size_t(j * K + d)] = kr[d] * x;
          }
        }
        for (int64_t c = 0; c <= r; ++c) {
          float a = 0.0f, b = 0.0f;
          if (c < r0) {
            const float* kf = &KF[size_t(c * K)];
            const float* qe = &QE[size_t(c / SC * K)];
            const float* ke = &KE[size_t(c / SC * K)];
            for (int64_t d = 0; d < K; ++d) {
              a += ke[d] * kf[d];
              b += qe[d] * kf[d];
            }
          } else {
            const float* kc = Kr(c);
            for (int64_t d = 0; d < K; ++d) {
              const float e = exp_f32(float(G[size_t(r * K + d)] - G[size_t(c * K + d)]));
              const float ek = e * kc[d];
              a += kr[d] * ek;
              b += qr[d] * ek;
            }
          }
          Aqk[size_t(r * C + c)] = scale * b;
          L[size_t(r * C + c)] = c < r ? B(r) * a : 0.0f;
        }
      }

      // UT transform: W = (I+L)^{-1} diag(beta) (exp(G) * K), U = (I+L)^{-1} diag(beta) V, by forward
      // substitution over rows (L is strictly lower triangular) instead of forming the inverse, as
      // naive_chunk_kda's row-wise solve does; the result is the same matrix product.
      for (int64_t r = 0; r < n; ++r) {
        const float br = B(r);
        const float* kr = Kr(r);
        const float* vr = Vr(r);
        float* wr = &Wm[size_t(r * K)];
        float* ur = &U[size_t(r * V)];
        for (int64_t d = 0; d < K; ++d) wr[d] = br * exp_f32(float(G[size_t(r * K + d)])) * kr[d];
        for (int64_t j = 0; j < V; ++j) ur[j] = br * vr[j];
        for (int64_t c = 0; c < r; ++c) {
          const float l = L[size_t(r * C + c)];
          for (int64_t d = 0; d < K; ++d) wr[d] -= l * Wm[size_t(c * K + d)];
          for (int64_t j = 0; j < V; ++j) ur[j] -= l * U[size_t(c * V + j)];
        }
      }

      // Pseudo-values V~ = U - W S (the part of each value the state entering the chunk does not predict).
      for (int64_t r = 0; r < n; ++r) {
        float* ur = &U[size_t(r * V)];
        const float* wr = &Wm[size_t(r * K)];
        for (int64_t d = 0; d < K; ++d) {
          for (int64_t j = 0; j < V; ++j) ur[j] -= wr[d] * S[d * V + j];
        }
      }

      // O = (scale * Q * exp(G)) S + Aqk V~ (inter-chunk part through the old state, intra-chunk part).
      for (int64_t r = 0; r < n; ++r) {
        const float* qr = Q(r);
        float* orow = o + ((c0 + r) * H + h) * V;
        std::fill(orow, orow + V, 0.0f);
        for (int64_t d = 0; d < K; ++d) {
          const float qd = scale * qr[d] * exp_f32(float(G[size_t(r * K + d)]));
          for (int64_t j = 0; j < V; ++j) orow[j] += qd * S[d * V + j];
        }
        for (int64_t c = 0; c <= r; ++c) {
          const float a = Aqk[size_t(r * C + c)];
          for (int64_t j = 0; j < V; ++j) orow[j] += a * U[size_t(c * V + j)];
        }
      }

      // S' = diag(exp(G_last)) S + sum_c (exp(G_last - G_c) * k_c) V~_c^T.
      const double* Glast = &G[size_t((n - 1) * K)];
      for (int64_t c = 0; c < n; ++c) {
        const float* kc = Kr(c);
        for (int64_t d = 0; d < K; ++d) {
          decay[size_t(c * K + d)] = exp_f32(float(Glast[d] - G[size_t(c * K + d)])) * kc[d];
        }
      }
      for (int64_t d = 0; d < K; ++d) {
        const float e = exp_f32(float(Glast[d]));
        float* Sd = S + d * V;
        for (int64_t j = 0; j < V; ++j) Sd[j] *= e;
        for (int64_t c = 0; c < n; ++c) {
          const float kd = decay[size_t(c * K + d)];
          const float* uc = &U[size_t(c * V)];
          for (int64_t j = 0; j < V; ++j) Sd[j] += kd * uc[j];
        }
      }
    }
  }
}

void gated_rms_norm(const float* x, const float* gate, const float* w, float* y, int64_t rows, int64_t D,
                    float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * D;
    const float* gr = gate + r * D;
    float* yr = y + r * D;
    const float ss = sum_of_squares(xr, D);
    const float inv = 1.0f / std::sqrt(ss / float(D) + eps);
    for (int64_t d = 0; d < D; ++d) yr[d] = xr[d] * inv * w[d] * sigmoid(gr[d]);
  }
}

}  // namespace moxi::kernels::ref
