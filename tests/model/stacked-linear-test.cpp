// stacked_linear (model/layers/weights.h): projections of the same input stacked into one matrix give, part
// by part, exactly the bits of the separate Linear layers — on the fast kernels (one pool job over rows of
// every part) and on the reference, for decode and prefill row counts, bf16 and f32 storage, mixed.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "moxi/base/half.h"
#include "moxi/kernels/backend.h"
#include "moxi/kernels/ref/basic.h"
#include "moxi/model/layers/weights.h"

namespace {

using moxi::model::linear;
using moxi::model::stacked_linear;

linear random_linear(int64_t out, int64_t in, bool bf16, std::mt19937_64& gen) {
  std::normal_distribution<float> d(0.0f, 0.05f);
  linear l;
  l.out = out;
  l.in = in;
  for (int64_t i = 0; i < out * in; ++i) {
    const uint16_t b = moxi::f32_to_bf16(d(gen));
    if (bf16)
      l.wb.push_back(b);
    else
      l.w.push_back(moxi::bf16_to_f32(b) * 1.5f);  // not bf16-representable in general
  }
  return l;
}

// panels: parts 0, 1 and 3 in the 16-row panel layout (the x86 backends' layout for dense BF16 weights),
// the others as rows; a stack of bf16 parts in both layouts is packed as a whole, and one with an f32 part
// holds f32 rows.
void expect_parts_equal_separate(bool mixed, bool panels = false) {
  std::mt19937_64 gen(mixed ? 7 : 3);
  const int64_t in = 512;  // 300 x 512 MACs per row of x: the fast path splits the rows over the pool
  const std::vector<int64_t> outs{64, 64, 33, 8, 1, 130};
  std::vector<linear> parts, copies;
  for (size_t i = 0; i < outs.size(); ++i)
    parts.push_back(random_linear(outs[i], in, !(mixed && i == 2), gen));
  copies = parts;
  for (size_t i : {0, 1, 3})
    if (panels) parts[i].pack_panels();
  std::vector<linear*> ptrs;
  for (auto& p : parts) ptrs.push_back(&p);
  const stacked_linear s = stacked_linear::stack(ptrs);
  ASSERT_EQ(s.all.out, 300);
  ASSERT_EQ(s.offset.size(), outs.size() + 1);
  EXPECT_TRUE(parts[0].empty()) << "the parts' weights move into the stack";
  EXPECT_EQ(s.all.panels, panels && !mixed) << "a stack of bf16 parts with some packed is packed";
  // The separate layers to compare with, in the stack's layout (a model's bf16 layers share one layout).
  for (auto& c : copies)
    if (s.all.panels) c.pack_panels();
  for (int64_t n : {int64_t(0), int64_t(70), int64_t(299)}) {  // rows read back from either layout
    std::vector<float> got(static_cast<size_t>(in)), want(static_cast<size_t>(in));
    s.all.row(n, got.data());
    size_t i = 0;
    while (n >= s.offset[i + 1]) ++i;
    copies[i].row(n - s.offset[i], want.data());
    EXPECT_EQ(got, want) << "row " << n;
  }
  for (const int64_t T : {1, 2, 3, 7, 13}) {
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> x(size_t(T * in));
    for (auto& v : x) v = d(gen);
    std::vector<float> all(size_t(T * s.all.out));
    s.apply(x.data(), all.data(), T);
    for (size_t i = 0; i < outs.size(); ++i) {
      std::vector<float> want(size_t(T * outs[i])), got(want.size(), -1.0f);
      copies[i].apply(x.data(), want.data(), T);
      s.extract(all.data(), T, i, got.data());
      EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
          << "part " << i << " T=" << T << (mixed ? " mixed storage" : " bf16") << (panels ? " panels" : "");
    }
  }
}

TEST(StackedLinear, PartsAreBitIdenticalToTheSeparateLayers) {
  expect_parts_equal_separate(false);
  expect_parts_equal_separate(true);
}

TEST(StackedLinear, PartsAreBitIdenticalOnTheReferenceKernels) {
  moxi::kernels::backend_scope ref(moxi::kernels::reference());
  expect_parts_equal_separate(false);
  expect_parts_equal_separate(true);
}

// Packed parts on panel boundaries stack without unpacking: the stack holds exactly the panels of the
// parts' rows stacked, and each part's outputs are its own.
TEST(StackedLinear, PackedPartsOfWholePanelsStackAsThePackedRows) {
  std::mt19937_64 gen(11);
  const int64_t in = 40;
  const std::vector<int64_t> outs{64, 32, 48, 7};
  std::vector<linear> parts, copies;
  std::vector<uint16_t> rows;
  for (const int64_t out : outs) {
    parts.push_back(random_linear(out, in, true, gen));
    rows.insert(rows.end(), parts.back().wb.begin(), parts.back().wb.end());
    parts.back().pack_panels();
  }
  copies = parts;
  std::vector<linear*> ptrs;
  for (auto& p : parts) ptrs.push_back(&p);
  const stacked_linear s = stacked_linear::stack(ptrs);
  ASSERT_TRUE(s.all.panels);
  ASSERT_EQ(s.all.out, 151);
  EXPECT_TRUE(parts[0].empty() && !parts[0].panels);
  std::vector<uint16_t> want(size_t(moxi::kernels::ref::bf16_panels_size(151, in)));
  moxi::kernels::ref::pack_bf16_panels(rows.data(), 151, in, want.data());
  EXPECT_EQ(s.all.wb, want);
  const int64_t T = 3;
  std::vector<float> x(size_t(T * in), 0.5f), all(size_t(T * 151));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 7) - 3.0f;
  s.apply(x.data(), all.data(), T);
  for (size_t i = 0; i < outs.size(); ++i) {
    std::vector<float> one(size_t(T * outs[i])), got(one.size());
    copies[i].apply(x.data(), one.data(), T);
    s.extract(all.data(), T, i, got.data());
    EXPECT_EQ(one, got) << "part " << i;
  }
}

TEST(StackedLinear, PanelPartsAreBitIdenticalToTheSeparateLayers) {
  expect_parts_equal_separate(false, true);
  expect_parts_equal_separate(true, true);
  moxi::kernels::backend_scope ref(moxi::kernels::reference());
  expect_parts_equal_separate(false, true);
  expect_parts_equal_separate(true, true);
}

}  // namespace
