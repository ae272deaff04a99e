// Straight-through MX fake-quant (see fake-quant.h); the numerics are entirely moxi::mx's.
#include "moxi/train/fake-quant.h"

#include "moxi/base/error.h"
#include "moxi/kernels/backend.h"

namespace moxi::train {

namespace {

struct mx_fake_quant_fn : torch::autograd::Function<mx_fake_quant_fn> {
  static torch::Tensor forward(torch::autograd::AutogradContext* /*ctx*/, const torch::Tensor& x,
                               int64_t format) {
    const auto xc = x.detach().to(torch::kFloat32).contiguous();
    auto out = torch::empty_like(xc);
    // The active kernel backend's fake-quant: mx::fake_quantize bit for bit (the op table's
    // `fake_quantize` row), on AVX-512 where the CPU has it.
    kernels::active().fake_quantize(static_cast<mx::elem_format>(format), xc.data_ptr<float>(),
                                    size_t(xc.numel()), out.data_ptr<float>());
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* /*ctx*/,
                                                 torch::autograd::variable_list grad) {
    return {grad[0], torch::Tensor()};
  }
};

struct fp8_row_fake_quant_fn : torch::autograd::Function<fp8_row_fake_quant_fn> {
  static torch::Tensor forward(torch::autograd::AutogradContext* /*ctx*/, const torch::Tensor& x) {
    const auto xc = x.detach().to(torch::kFloat32).contiguous();
    auto out = torch::empty_like(xc);
    const int64_t D = xc.size(-1), rows = D > 0 ? xc.numel() / D : 0;
    const float* in = xc.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) mx::fake_quantize_fp8_row(in + r * D, size_t(D), o + r * D);
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* /*ctx*/,
                                                 torch::autograd::variable_list grad) {
    return {grad[0]};
  }
};

}  // namespace

torch::Tensor fp8_row_fake_quant(const torch::Tensor& x) {
  MOXI_ASSERT(x.dim() >= 1 && x.size(-1) >= 1, "FP8 row fake-quant needs rows");
  return fp8_row_fake_quant_fn::apply(x);
}

torch::Tensor mx_fake_quant(const torch::Tensor& x, mx::elem_format format) {
  // Blocks run along the flattened contiguous tensor, so they line up with rows only when K % 32 == 0.
  MOXI_ASSERT(x.dim() >= 1 && x.size(-1) % mx::kBlock == 0, "MX fake-quant needs rows of a multiple of 32");
  return mx_fake_quant_fn::apply(x, static_cast<int64_t>(format));
}

torch::Tensor mxfp4_decode(const uint8_t* blocks, const uint8_t* scales, int64_t N, int64_t K) {
  MOXI_ASSERT(K % mx::kBlock == 0);
  auto out = torch::empty({N, K}, torch::kFloat32);
  float* o = out.data_ptr<float>();
  for (int64_t r = 0; r < N; ++r)
    mx::dequantize_mxfp4(blocks + r * (K / 2), scales + r * (K / mx::kBlock), size_t(K), o + r * K);
  return out;
}

std::pair<torch::Tensor, torch::Tensor> mxfp4_encode(const torch::Tensor& w) {
  MOXI_ASSERT(w.dim() == 2 && w.size(1) % mx::kBlock == 0);
  const auto wc = w.detach().to(torch::kFloat32).contiguous();
  const int64_t N = wc.size(0), K = wc.size(1);
  auto blocks = torch::empty({N, K / mx::kBlock, 16}, torch::kUInt8);
  auto scales = torch::empty({N, K / mx::kBlock}, torch::kUInt8);
  for (int64_t r = 0; r < N; ++r)
    mx::quantize_mxfp4(wc.data_ptr<float>() + r * K, size_t(K), blocks.data_ptr<uint8_t>() + r * (K / 2),
                       scales.data_ptr<uint8_t>() + r * (K / mx::kBlock));
  return {blocks, scales};
}

}  // namespace moxi::train
