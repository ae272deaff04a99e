// Weight loading: name and shape checks with messages naming the tensor, dtype conversion to f32 once at
// load (BF16 kept where the kernel backend keeps it), FP8_BLOCK dequantization, MXFP4 expert views and the
// backend's packs.
#include "moxi/model/layers/weights.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "moxi/base/error.h"
#include "moxi/base/half.h"
#include "moxi/base/mx.h"
#include "moxi/formats/convert.h"
#include "moxi/kernels/ref/basic.h"
#include "moxi/model/manifest.h"

namespace moxi::model {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  o << "]";
  return o.str();
}

}  // namespace

void linear::apply(const float* x, float* y, int64_t T, const float* bias) const {
  if (panels)
    kernels::active().matmul_bf16_panels(x, wb.data(), bias, y, T, out, in);
  else if (!wb.empty())
    kernels::active().matmul_bf16(x, wb.data(), bias, y, T, out, in);
  else
    kernels::active().matmul(x, w.data(), bias, y, T, out, in);
}

void linear::row(int64_t n, float* dst) const {
  if (wb.empty()) {
    std::memcpy(dst, w.data() + n * in, size_t(in) * sizeof(float));
    return;
  }
  for (int64_t k = 0; k < in; ++k)
    dst[k] = bf16_to_f32(wb[size_t(panels ? kernels::ref::bf16_panel_index(n, k, in) : n * in + k)]);
}

void linear::pack_panels() {
  if (panels || wb.empty()) return;
  std::vector<uint16_t> p(size_t(kernels::ref::bf16_panels_size(out, in)));
  kernels::ref::pack_bf16_panels(wb.data(), out, in, p.data());
  wb = std::move(p);
  panels = true;
}

stacked_linear stacked_linear::stack(const std::vector<linear*>& parts) {
  MOXI_ASSERT(parts.size() > 0);
  stacked_linear s;
  s.all.in = parts.front()->in;
  bool all_bf16 = true;
  s.offset.push_back(0);
  for (const linear* p : parts) {
    MOXI_ASSERT(p->in == s.all.in && !p->empty());
    all_bf16 = all_bf16 && !p->wb.empty();
    s.offset.push_back(s.offset.back() + p->out);
  }
  s.all.out = s.offset.back();
  // Packed parts that each start on a panel boundary (every part but the last whole panels, as a model's
  // projections are) stack as the concatenation of their panels: no unpacking and repacking at load.
  bool whole_panels = true;
  for (size_t i = 0; i < parts.size(); ++i)
    whole_panels = whole_panels && parts[i]->panels &&
                   (i + 1 == parts.size() || parts[i]->out % kernels::ref::kBf16PanelRows == 0);
  if (whole_panels) {
    for (linear* p : parts) {
      s.all.wb.insert(s.all.wb.end(), p->wb.begin(), p->wb.end());
      *p = linear{};
    }
    s.all.panels = true;
    return s;
  }
  bool any_panels = false;
  std::vector<float> r(size_t(s.all.in));
  for (linear* p : parts) {
    any_panels = any_panels || p->panels;
    if (all_bf16 && !p->panels) {
      s.all.wb.insert(s.all.wb.end(), p->wb.begin(), p->wb.end());
    } else if (all_bf16) {  // back to rows
      for (int64_t n = 0; n < p->out; ++n)
        for (int64_t k = 0; k < p->in; ++k)
          s.all.wb.push_back(p->wb[size_t(kernels::ref::bf16_panel_index(n, k, p->in))]);
    } else {
      for (int64_t n = 0; n < p->out; ++n) {
        p->row(n, r.data());
        s.all.w.insert(s.all.w.end(), r.begin(), r.end());
      }
    }
    p->w = {};
    p->wb = {};
    p->panels = false;
  }
  if (any_panels) s.all.pack_panels();
  return s;
}

void stacked_linear::extract(const float* y, int64_t T, size_t i, float* dst) const {
  const int64_t n = width(i);
  for (int64_t t = 0; t < T; ++t)
    std::memcpy(dst + t * n, y + t * all.out + offset[i], size_t(n) * sizeof(float));
}

act_quant activation_quant(const formats::model_config& c) {
  if (!c.quant || c.quant->method != formats::quant_method::MXFP4) return act_quant::NONE;
  switch (c.quant->activations) {
    case formats::act_format::MXFP8_E4M3:
      return act_quant::MXFP8_E4M3;
    case formats::act_format::MXFP8_E5M2:
      return act_quant::MXFP8_E5M2;
    case formats::act_format::BF16:
      break;
  }
  return act_quant::NONE;
}

std::string weight_loader::where() const {
  return ckpt_.dir().empty() ? std::string("checkpoint") : ckpt_.dir();
}

std::optional<int> weight_loader::find(const std::string& name, const std::vector<int64_t>& shape) const {
  std::optional<int> axis;
  std::vector<int64_t> whole = shape;
  if (tp() > 1) axis = tp_split_axis(name);
  if (axis) {
    MOXI_ASSERT(size_t(*axis) < shape.size(), "tensor-parallel split axis outside the shape");
    whole[size_t(*axis)] *= tp();
  }
  if (!ckpt_.contains(name))
    throw error(where() + ": missing tensor '" + name + "' (expected shape " + shape_str(whole) + ")");
  const auto& e = ckpt_.entry(name);
  if (e.shape != whole)
    throw error(where() + ": tensor '" + name + "' has shape " + shape_str(e.shape) + ", expected " +
                shape_str(whole));
  return axis;
}

std::pair<int64_t, int64_t> weight_loader::experts(int64_t num_experts) const {
  if (!opts_.parallel) return {0, num_experts};
  return parallel_layout::expert_range(num_experts, opts_.parallel->sizes.ep, opts_.parallel->ep_rank);
}

namespace {

// Calls piece(from, to, n) for the contiguous runs (in elements) of tensor-parallel rank `rank`'s slice of
// a row-major tensor `whole` split `parts` ways along `axis`: element `from` of the whole tensor and
// element `to` of the slice start a run of n.
template <class Piece>
void for_each_slice_run(const std::vector<int64_t>& whole, int axis, int parts, int rank, Piece piece) {
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= whole[size_t(i)];
  for (size_t i = size_t(axis) + 1; i < whole.size(); ++i) inner *= whole[i];
  const int64_t part = whole[size_t(axis)] / parts, run = part * inner;
  for (int64_t o = 0; o < outer; ++o) piece((o * whole[size_t(axis)] + rank * part) * inner, o * run, run);
}

}  // namespace

std::vector<float> weight_loader::f32(const std::string& name, const std::vector<int64_t>& shape) {
  const auto axis = find(name, shape);
  read_.insert(name);
  const tensor_view v = ckpt_.view(name);
  if (!formats::convertible_to_f32(v.type))
    throw error(where() + ": tensor '" + name + "' has dtype " + std::string(dtype_name(v.type)) +
                ", expected a float type");
  const bool fp8 = v.type == dtype::F8_E4M3 || v.type == dtype::F8_E5M2;
  const bool fp8_block = fp8 && config_.quant && config_.quant->method == formats::quant_method::FP8_BLOCK;
  const int rank = opts_.parallel ? opts_.parallel->tp_rank : 0;
  if (axis && !fp8_block) {
    // This rank's slice only, converted straight from the mapping.
    std::vector<float> out(size_t(v.numel() / tp()));
    const size_t es = dtype_size(v.type);
    bytes_ += out.size() * es;
    for_each_slice_run(v.shape, *axis, tp(), rank, [&](int64_t from, int64_t to, int64_t n) {
      formats::to_f32(v.type, v.data + size_t(from) * es, size_t(n), out.data() + to);
    });
    return out;
  }
  std::vector<float> out(size_t(v.numel()));
  formats::to_f32(v.type, v.data, out.size(), out.data());
  bytes_ += v.nbytes;
  if (fp8_block) {
    // DeepSeek FP8 checkpoints: one f32 scale_inv per [br, bc] block of the 2-D weight.
    const auto& bs = config_.quant->weight_block_size;
    if (v.shape.size() != 2 || bs.size() != 2)
      throw error(where() + ": FP8 tensor '" + name + "' needs a 2-D shape and weight_block_size [r, c]");
    const int64_t R = v.shape[0], C = v.shape[1], br = bs[0], bc = bs[1];
    const int64_t gr = (R + br - 1) / br, gc = (C + bc - 1) / bc;
    // Scale tensors are never split (tp_split_axis names weights by their module), so this reads it whole.
    const auto scale = f32(name + "_scale_inv", {gr, gc});
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) out[size_t(r * C + c)] *= scale[size_t((r / br) * gc + c / bc)];
    if (axis) {
      std::vector<float> part(out.size() / size_t(tp()));
      for_each_slice_run(v.shape, *axis, tp(), rank, [&](int64_t from, int64_t to, int64_t n) {
        std::copy_n(out.begin() + from, n, part.begin() + to);
      });
      return part;
    }
  }
  return out;
}

linear weight_loader::lin(const std::string& prefix, int64_t out, int64_t in, bool need_f32) {
  linear l;
  const std::string name = prefix + ".weight";
  if (!need_f32 && kernels::active().keeps_bf16_weights() && ckpt_.contains(name) &&
      ckpt_.view(name).type == dtype::BF16) {
    const auto axis = find(name, {out, in});
    read_.insert(name);
    const tensor_view v = ckpt_.view(name);
    l.wb.resize(size_t(out * in));  // memcpy: the mapping does not promise 2-byte alignment
    bytes_ += l.wb.size() * sizeof(uint16_t);
    if (!axis) {
      std::memcpy(l.wb.data(), v.data, l.wb.size() * sizeof(uint16_t));
    } else {
      const int rank = opts_.parallel->tp_rank;
      for_each_slice_run(v.shape, *axis, tp(), rank, [&](int64_t from, int64_t to, int64_t n) {
        std::memcpy(l.wb.data() + to, v.data + size_t(from) * sizeof(uint16_t), size_t(n) * sizeof(uint16_t));
      });
    }
    l.out = out;
    l.in = in;
    if (kernels::active().packs_bf16_panels()) l.pack_panels();
  } else {
    l.w = f32(name, {out, in});
  }
  l.out = out;
  l.in = in;
  return l;
}

expert_matrix weight_loader::expert(const std::string& name, int64_t N, int64_t K) {
  expert_matrix m;
  m.N = N;
  m.K = K;
  const std::string bname = mx_blocks_name(name), sname = mx_scales_name(name);
  if (!ckpt_.contains(bname) && ckpt_.contains(name)) {
    m.f32 = f32(name, {N, K});
    return m;
  }
  if (K % mx::kBlock != 0)
    throw error(where() + ": MXFP4 tensor '" + bname + "': in-features " + std::to_string(K) +
                " are not a multiple of 32");
  const int64_t nb = K / mx::kBlock;
  find(bname, {N, nb, 16});
  find(sname, {N, nb});
  for (const auto* e : {&ckpt_.entry(bname), &ckpt_.entry(sname)})
    if (e->type != dtype::U8)
      throw error(where() + ": MXFP4 tensor '" + e->name + "' has dtype " + std::string(dtype_name(e->type)) +
                  ", expected U8");
  read_.insert(bname);
  read_.insert(sname);
  bytes_ += uint64_t(N * nb * 16 + N * nb);
  const auto bv = ckpt_.view(bname), sv = ckpt_.view(sname);
  const auto* blocks = reinterpret_cast<const uint8_t*>(bv.data);
  const auto* scales = reinterpret_cast<const uint8_t*>(sv.data);
  if (opts_.dequantize_experts) {
    m.f32.resize(size_t(N * K));
    for (int64_t n = 0; n < N; ++n)
      mx::dequantize_mxfp4(blocks + n * nb * 16, scales + n * nb, size_t(K), m.f32.data() + n * K);
  } else {
    m.blocks = blocks;
    m.scales = scales;
    m.packed = kernels::active().pack_mxfp4(blocks, scales, N, K);
  }
  return m;
}

}  // namespace moxi::model
