// The dispatched KDA recurrent step and chunked prefill (kernels::kda_recurrent / kda_chunked: the AVX-512
// twins where the CPU has them) against the scalar references ref::kda_recurrent / kda_chunked. The fast
// kernel performs the reference's operations element for element in the same order (no contraction into
// FMAs), so outputs and final states must be bit-identical, for V that is and is not a multiple of the
// 16-lane vector, several tokens and heads, strong and weak decays. On a CPU without AVX-512 the dispatch is
// the reference itself and the test still holds.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "moxi/kernels/kda-dispatch.h"
#include "moxi/kernels/matmul-dispatch.h"
#include "moxi/kernels/ref/basic.h"
#include "moxi/kernels/ref/kda.h"
#include "moxi/kernels/x86/cpu.h"

namespace {

namespace ref = moxi::kernels::ref;
using Vec = std::vector<float>;

Vec uniform(std::mt19937_64& gen, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  Vec v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

TEST(KdaFast, RecurrentIsBitIdenticalToTheReference) {
  std::printf("kda_recurrent dispatch: %s\n",
              moxi::kernels::fast_kernels() && moxi::kernels::x86::cpu().avx512 ? "avx512" : "ref");
  struct shape {
    int64_t T, H, K, V;
  };
  for (const shape s : {shape{1, 1, 16, 16}, shape{3, 4, 128, 128}, shape{2, 3, 20, 37}, shape{5, 2, 64, 8},
                        shape{4, 2, 33, 100}}) {
    SCOPED_TRACE(::testing::Message() << "T=" << s.T << " H=" << s.H << " K=" << s.K << " V=" << s.V);
    std::mt19937_64 gen(uint64_t(s.T * 1000 + s.K + s.V));
    const size_t nk = size_t(s.T * s.H * s.K), nv = size_t(s.T * s.H * s.V);
    Vec q = uniform(gen, nk, -1, 1), k = uniform(gen, nk, -1, 1), v = uniform(gen, nv, -1, 1);
    ref::l2norm(q.data(), q.data(), s.T * s.H, s.K);
    ref::l2norm(k.data(), k.data(), s.T * s.H, s.K);
    // Log-space decays from strong (-8) to weak (-1e-3), beta in (0, 1), a random initial state.
    Vec g = uniform(gen, nk, -8, -1e-3f), beta = uniform(gen, size_t(s.T * s.H), 0.01f, 0.99f);
    const Vec h0 = uniform(gen, size_t(s.H * s.K * s.V), -1, 1);
    const float scale = 1.0f / std::sqrt(float(s.K));

    Vec want_state = h0, got_state = h0, want_o(nv), got_o(nv);
    ref::kda_recurrent(q.data(), k.data(), v.data(), g.data(), beta.data(), scale, want_state.data(),
                       want_o.data(), s.T, s.H, s.K, s.V);
    moxi::kernels::kda_recurrent(q.data(), k.data(), v.data(), g.data(), beta.data(), scale, got_state.data(),
                                 got_o.data(), s.T, s.H, s.K, s.V);
    EXPECT_EQ(0, std::memcmp(want_o.data(), got_o.data(), nv * sizeof(float))) << "outputs differ";
    EXPECT_EQ(0, std::memcmp(want_state.data(), got_state.data(), want_state.size() * sizeof(float)))
        << "final states differ";
    double mag = 0;
    for (float x : want_o) mag = std::max(mag, double(std::fabs(x)));
    EXPECT_GT(mag, 1e-3);  // the outputs are not trivially zero
  }
}

// The chunked prefill twin against ref::kda_chunked: T across the 64-token chunk (1, 5, 64, 65, 130), K and
// V not multiples of 16, strong and weak decays; bit for bit.
TEST(KdaFast, ChunkedIsBitIdenticalToTheReference) {
  struct shape {
    int64_t T, H, K, V;
  };
  for (const shape s : {shape{1, 2, 16, 16}, shape{5, 3, 20, 37}, shape{64, 2, 128, 128},
                        shape{65, 1, 33, 100}, shape{130, 2, 64, 48}}) {
    SCOPED_TRACE(::testing::Message() << "T=" << s.T << " H=" << s.H << " K=" << s.K << " V=" << s.V);
    std::mt19937_64 gen(uint64_t(s.T * 977 + s.K + s.V));
    const size_t nk = size_t(s.T * s.H * s.K), nv = size_t(s.T * s.H * s.V);
    Vec q = uniform(gen, nk, -1, 1), k = uniform(gen, nk, -1, 1), v = uniform(gen, nv, -1, 1);
    ref::l2norm(q.data(), q.data(), s.T * s.H, s.K);
    ref::l2norm(k.data(), k.data(), s.T * s.H, s.K);
    Vec g = uniform(gen, nk, -8, -1e-3f), beta = uniform(gen, size_t(s.T * s.H), 0.01f, 0.99f);
    const Vec h0 = uniform(gen, size_t(s.H * s.K * s.V), -1, 1);
    const float scale = 1.0f / std::sqrt(float(s.K));
    Vec want_state = h0, got_state = h0, want_o(nv), got_o(nv);
    ref::kda_chunked(q.data(), k.data(), v.data(), g.data(), beta.data(), scale, want_state.data(),
                     want_o.data(), s.T, s.H, s.K, s.V);
    moxi::kernels::kda_chunked(q.data(), k.data(), v.data(), g.data(), beta.data(), scale, got_state.data(),
                               got_o.data(), s.T, s.H, s.K, s.V);
    EXPECT_EQ(0, std::memcmp(want_o.data(), got_o.data(), nv * sizeof(float))) << "outputs differ";
    EXPECT_EQ(0, std::memcmp(want_state.data(), got_state.data(), want_state.size() * sizeof(float)))
        << "final states differ";
  }
}

}  // namespace
