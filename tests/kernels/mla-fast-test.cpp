// The dispatched MLA absorbed attention (kernels::mla_attention_absorbed / _sparse) and absorption steps
// (kernels::mla_absorb_q / mla_unabsorb_o), AVX-512 twins where the CPU has them, against the scalar
// references in ref/mla.h. The twins perform the reference's operations
// element for element in the same order (no FMA contraction, same libm exp, std::max's comparison), so the
// outputs must be bit-identical: head counts below, at and above the 16-lane vector, latent widths that are
// not multiples of 16, DSA index lists with -1 padding, an all-padding query and repeated rows.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "moxi/kernels/matmul-dispatch.h"
#include "moxi/kernels/mla-dispatch.h"
#include "moxi/kernels/ref/mla.h"
#include "moxi/kernels/x86/cpu.h"

namespace {

namespace ref = moxi::kernels::ref;
using Vec = std::vector<float>;

Vec normal(std::mt19937_64& gen, size_t n) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  Vec v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

struct shape {
  int64_t T, S, H, L, Dr;
};
constexpr shape kShapes[] = {{1, 1, 1, 16, 0},  {3, 40, 4, 32, 8},  {5, 70, 8, 256, 32},
                             {2, 9, 20, 40, 8}, {7, 7, 16, 24, 16}, {1, 300, 8, 64, 32}};

TEST(MlaFast, DenseAbsorbedAttentionIsBitIdenticalToTheReference) {
  std::printf("mla attention dispatch: %s\n",
              moxi::kernels::fast_kernels() && moxi::kernels::x86::cpu().avx512 ? "avx512" : "ref");
  for (const shape s : kShapes) {
    SCOPED_TRACE(::testing::Message()
                 << "T=" << s.T << " S=" << s.S << " H=" << s.H << " L=" << s.L << " Dr=" << s.Dr);
    std::mt19937_64 gen(uint64_t(s.S * 31 + s.H));
    const int64_t Wl = s.L + s.Dr;
    const Vec q = normal(gen, size_t(s.T * s.H * Wl)), lat = normal(gen, size_t(s.S * Wl));
    Vec want(size_t(s.T * s.H * s.L)), got(want.size(), -1.0f);
    const float scale = 0.17f;
    ref::mla_attention_absorbed(q.data(), lat.data(), want.data(), s.T, s.S, s.H, s.L, s.Dr, scale);
    moxi::kernels::mla_attention_absorbed(q.data(), lat.data(), got.data(), s.T, s.S, s.H, s.L, s.Dr, scale);
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)));
  }
}

TEST(MlaFast, SparseAbsorbedAttentionIsBitIdenticalToTheReference) {
  for (const shape s : kShapes) {
    SCOPED_TRACE(::testing::Message()
                 << "T=" << s.T << " S=" << s.S << " H=" << s.H << " L=" << s.L << " Dr=" << s.Dr);
    std::mt19937_64 gen(uint64_t(s.S * 17 + s.H));
    const int64_t Wl = s.L + s.Dr, topk = 12;
    const Vec q = normal(gen, size_t(s.T * s.H * Wl)), lat = normal(gen, size_t(s.S * Wl));
    std::vector<int32_t> idx(size_t(s.T * topk));
    for (auto& i : idx) i = gen() % 4 == 0 ? -1 : int32_t(gen() % uint64_t(s.S));  // padding and repeats
    for (int64_t j = 0; j < topk; ++j) idx[size_t(j)] = -1;  // query 0: nothing selected
    Vec want(size_t(s.T * s.H * s.L)), got(want.size(), -1.0f);
    const float scale = 0.09f;
    ref::mla_attention_absorbed_sparse(q.data(), lat.data(), idx.data(), want.data(), s.T, s.S, s.H, s.L,
                                       s.Dr, topk, scale);
    moxi::kernels::mla_attention_absorbed_sparse(q.data(), lat.data(), idx.data(), got.data(), s.T, s.S, s.H,
                                                 s.L, s.Dr, topk, scale);
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)));
  }
}

TEST(MlaFast, AbsorbAndUnabsorbAreBitIdenticalToTheReference) {
  struct dims {
    int64_t T, H, Dn, Dr, Dv, L;
  };
  for (const dims s : {dims{1, 4, 16, 8, 16, 32}, dims{3, 8, 64, 32, 64, 256}, dims{2, 3, 10, 0, 20, 40},
                       dims{5, 2, 7, 4, 33, 17}, dims{2, 2, 8, 0, 130, 24}}) {
    SCOPED_TRACE(::testing::Message() << "T=" << s.T << " H=" << s.H << " Dn=" << s.Dn << " Dr=" << s.Dr
                                      << " Dv=" << s.Dv << " L=" << s.L);
    std::mt19937_64 gen(uint64_t(s.L * 13 + s.Dv));
    const Vec q = normal(gen, size_t(s.T * s.H * (s.Dn + s.Dr))),
              w = normal(gen, size_t(s.H * (s.Dn + s.Dv) * s.L));
    Vec want(size_t(s.T * s.H * (s.L + s.Dr))), got(want.size(), -1.0f);
    ref::mla_absorb_q(q.data(), w.data(), want.data(), s.T, s.H, s.Dn, s.Dr, s.Dv, s.L);
    moxi::kernels::mla_absorb_q(q.data(), w.data(), got.data(), s.T, s.H, s.Dn, s.Dr, s.Dv, s.L);
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float))) << "absorb";
    const Vec ol = normal(gen, size_t(s.T * s.H * s.L));
    Vec want_o(size_t(s.T * s.H * s.Dv)), got_o(want_o.size(), -1.0f);
    ref::mla_unabsorb_o(ol.data(), w.data(), want_o.data(), s.T, s.H, s.Dn, s.Dv, s.L);
    // Without W_UV^T the dispatch runs the reference.
    moxi::kernels::mla_unabsorb_o(ol.data(), w.data(), nullptr, got_o.data(), s.T, s.H, s.Dn, s.Dv, s.L);
    EXPECT_EQ(0, std::memcmp(want_o.data(), got_o.data(), want_o.size() * sizeof(float))) << "unabsorb";
    // From W_UV transposed at load: checked against the transpose's definition, then the same bits.
    const Vec wt = moxi::kernels::mla_transpose_uv(w.data(), s.H, s.Dn, s.Dv, s.L);
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t j = 0; j < s.Dv; ++j)
        for (int64_t l = 0; l < s.L; ++l)
          ASSERT_EQ(wt[size_t((h * s.L + l) * s.Dv + j)],
                    w[size_t((h * (s.Dn + s.Dv) + s.Dn + j) * s.L + l)]);
    std::fill(got_o.begin(), got_o.end(), -1.0f);
    moxi::kernels::mla_unabsorb_o(ol.data(), w.data(), wt.data(), got_o.data(), s.T, s.H, s.Dn, s.Dv, s.L);
    EXPECT_EQ(0, std::memcmp(want_o.data(), got_o.data(), want_o.size() * sizeof(float)))
        << "unabsorb, W_UV^T";
  }
}

}  // namespace
