// KDA core forms (see kda-core.h).
#include "moxi/train/kda-core.h"

#include <limits>
#include <vector>

#include "moxi/base/error.h"

namespace moxi::train {

namespace {
// The factored intra-chunk form runs while -min(g) (C - 1) stays below this: exp(80) < FLT_MAX ~ exp(88.7).
constexpr double kFactoredSpan = 80.0;
}  // namespace

torch::Tensor kda_recurrent(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            const torch::Tensor& g, const torch::Tensor& beta, double scale) {
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3), V = v.size(3);
  auto S = torch::zeros({B, H, K, V}, torch::kFloat32);
  std::vector<torch::Tensor> outs;
  outs.reserve(size_t(T));
  for (int64_t t = 0; t < T; ++t) {
    const auto kt = k.select(1, t), qt = q.select(1, t), vt = v.select(1, t);  // [B, H, K|V]
    S = S * torch::exp(g.select(1, t)).unsqueeze(-1);                          // decay first
    const auto pred = torch::matmul(kt.unsqueeze(-2), S).squeeze(-2);          // [B, H, V]
    const auto delta = beta.select(1, t).unsqueeze(-1) * (vt - pred);
    S = S + kt.unsqueeze(-1) * delta.unsqueeze(-2);
    outs.push_back(torch::matmul((qt * scale).unsqueeze(-2), S).squeeze(-2));  // o_t reads the new state
  }
  return torch::stack(outs, 1);
}

torch::Tensor kda_chunked(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                          const torch::Tensor& g, const torch::Tensor& beta, double scale, int64_t chunk) {
  if (chunk < 1) throw error("kda_chunked: chunk must be >= 1");
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3), V = v.size(3);
  const int64_t C = chunk, N = (T + C - 1) / C, pad = N * C - T;
  // [B, T, H, X] -> [B, H, N, C, X], zero-padded at the end: a padded token has k = 0 and beta = 0 (no
  // update) and g = 0 (no decay), so it changes nothing, and its output is dropped.
  auto blocks = [&](const torch::Tensor& x) {
    auto y = x.transpose(1, 2);  // [B, H, T, X]
    if (pad) y = torch::constant_pad_nd(y, {0, 0, 0, pad});
    return y.reshape({B, H, N, C, y.size(-1)});
  };
  const auto qc = blocks(q), kc = blocks(k), vc = blocks(v), gc = blocks(g);
  const auto bc = blocks(beta.unsqueeze(-1)).squeeze(-1);  // [B, H, N, C]
  const auto G = gc.cumsum(3);                             // inclusive, [B, H, N, C, K]

  // The intra-chunk products A_qk[r,c] = q_r . (exp(G_r - G_c) k_c) and K_kk[r,c] = k_r . (exp(G_r - G_c) k_c).
  const auto causal = torch::ones({C, C}, torch::kBool).tril();  // [r, c], c <= r
  const auto strict = torch::ones({C, C}, torch::kBool).tril(-1);
  torch::Tensor Aqk, Kkk;
  const double gmin = g.numel() ? g.min().item<double>() : 0.0;
  if (-gmin * double(C - 1) <= kFactoredSpan) {
    // Factored about the chunk's middle row m: exp(G_r - G_c) = exp(G_r - G_m) exp(G_m - G_c), so both are
    // one batched C x K by K x C product per chunk (FLA's chunk_kda splits it likewise). With every decay
    // >= gmin a factor is at most exp(-gmin ceil((C - 1) / 2)), about exp(43), and a masked entry (c > r) at
    // most exp(-gmin (C - 1)) <= exp(80) times |q_r| |k_c|: finite in fp32, and replaced by 0 anyway. Each
    // kept term is a product of two rounded factors, as accurate as exp of the difference.
    const auto Gm = G.select(3, (C - 1) / 2).unsqueeze(3);  // [B, H, N, 1, K]
    const auto up = torch::exp(G - Gm), down = torch::exp(Gm - G);
    const auto Kc = (kc * down).transpose(-1, -2);  // [B, H, N, K, C]
    Aqk = torch::matmul(qc * up, Kc).masked_fill(causal.logical_not(), 0.0f) * scale;
    Kkk = torch::matmul(kc * up, Kc);
  } else {
    // Decays too strong for the factors: exp of each difference, above the diagonal masked to exp(-inf) = 0
    // before the exp, so that a large positive difference never overflows.
    const auto diff = G.unsqueeze(4) - G.unsqueeze(3);  // [B,H,N,r,c,K]
    const auto E = torch::exp(diff.masked_fill(causal.logical_not().view({1, 1, 1, C, C, 1}),
                                               -std::numeric_limits<float>::infinity()));
    const auto Ek = E * kc.unsqueeze(3);  // exp(G_r-G_c) k_c
    // As a product and a sum, not an einsum: libtorch runs that einsum as one tiny bmm per (row, chunk).
    Aqk = (Ek * qc.unsqueeze(4)).sum(-1) * scale;  // c <= r
    Kkk = (Ek * kc.unsqueeze(4)).sum(-1);
  }
  const auto L = (Kkk * bc.unsqueeze(-1)).masked_fill(strict.logical_not(), 0.0f);  // strictly lower
  const auto I = torch::eye(C, torch::kFloat32);
  const auto A = I + L;  // unit lower triangular
  const auto W = torch::linalg_solve_triangular(A, bc.unsqueeze(-1) * torch::exp(G) * kc, /*upper=*/false,
                                                /*left=*/true, /*unitriangular=*/true);        // [B,H,N,C,K]
  const auto U = torch::linalg_solve_triangular(A, bc.unsqueeze(-1) * vc, false, true, true);  // [.., V]
  const auto Qg = qc * torch::exp(G) * scale;                                                  // [.., K]
  const auto Glast = G.select(3, C - 1);                                                       // [B,H,N,K]
  const auto Kd = torch::exp(Glast.unsqueeze(3) - G) * kc;                                     // [.., C, K]

  auto S = torch::zeros({B, H, K, V}, torch::kFloat32);
  std::vector<torch::Tensor> outs;
  outs.reserve(size_t(N));
  for (int64_t n = 0; n < N; ++n) {
    const auto Vt = U.select(2, n) - torch::matmul(W.select(2, n), S);  // pseudo-values [B, H, C, V]
    outs.push_back(torch::matmul(Qg.select(2, n), S) + torch::matmul(Aqk.select(2, n), Vt));
    S = torch::exp(Glast.select(2, n)).unsqueeze(-1) * S +
        torch::matmul(Kd.select(2, n).transpose(-1, -2), Vt);
  }
  auto o = torch::stack(outs, 2).reshape({B, H, N * C, V});  // [B, H, T', V]
  return o.slice(2, 0, T).transpose(1, 2);                   // [B, T, H, V]
}

}  // namespace moxi::train
