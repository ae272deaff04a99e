// Decoder layer composition and loading; the attention and FFN variants come from the architecture layout.
#include "moxi/model/layers/decoder.h"

#include "moxi/kernels/backend.h"

namespace moxi::model {

decoder_layer load_decoder_layer(weight_loader& ld, const arch::layer_layout& lay, const arch::ffn_names& ffn,
                                 int64_t slot) {
  const auto& c = ld.config();
  decoder_layer l;
  l.slot = slot;
  l.parallel = ld.options().parallel;
  l.input_norm = ld.f32(lay.prefix + ".input_layernorm.weight", {c.hidden_size});
  l.kind = lay.attn;
  l.attn = attention_kind(lay.attn).load(ld, lay.prefix + ".self_attn");
  l.post_norm = ld.f32(lay.prefix + ".post_attention_layernorm.weight", {c.hidden_size});
  if (lay.moe)
    l.moe = load_moe(ld, lay.prefix + "." + ffn.moe_prefix, ffn);
  else
    l.mlp = load_dense_mlp(ld, lay.prefix + ".mlp");
  return l;
}

void decoder_layer_forward(const decoder_layer& l, const formats::model_config& c, float* h, int64_t T,
                           sequence_cache& cache, const dump_sink* dump_to, const std::string& name) {
  const seq_rows seg{0, T, &cache};
  decoder_layer_forward_batch(l, c, h, T, std::span(&seg, 1), dump_to, name);
}

void decoder_layer_forward_batch(const decoder_layer& l, const formats::model_config& c, float* h, int64_t T,
                                 std::span<const seq_rows> segs, const dump_sink* dump_to,
                                 const std::string& name) {
  const kernels::backend& be = kernels::active();
  const int64_t d = c.hidden_size;
  const float eps = float(c.rms_norm_eps);
  std::vector<float> xn(size_t(T * d)), y(size_t(T * d));  // f32 [T, hidden], T rows of all sequences
  be.rms_norm(h, l.input_norm.data(), xn.data(), T, d, eps);
  dump(dump_to, name + ".attn_norm", {T, d}, xn.data());
  l.attn->forward_batch(c, xn.data(), T, segs, l.slot, y.data(), dump_to,
                        name + "." + attention_kind(l.kind).dump_name);
  const process_group* tp = l.parallel && l.parallel->sizes.tp > 1 ? l.parallel->tp.get() : nullptr;
  if (tp) tp->all_reduce_sum(y.data(), T * d);
  dump(dump_to, name + ".attn_out", {T, d}, y.data());
  for (int64_t i = 0; i < T * d; ++i) h[i] += y[size_t(i)];

  be.rms_norm(h, l.post_norm.data(), xn.data(), T, d, eps);
  dump(dump_to, name + ".ffn_norm", {T, d}, xn.data());
  if (l.moe)
    moe_forward(*l.moe, c, xn.data(), T, y.data(), dump_to, name + ".moe");
  else
    l.mlp->apply(xn.data(), y.data(), T);
  if (tp && !l.moe) tp->all_reduce_sum(y.data(), T * d);  // the MoE reduces its shared experts itself
  dump(dump_to, name + ".ffn_out", {T, d}, y.data());
  for (int64_t i = 0; i < T * d; ++i) h[i] += y[size_t(i)];
  dump(dump_to, name + ".out", {T, d}, h);
}

mtp_layer load_mtp_layer(weight_loader& ld, const arch::layer_layout& lay, const arch::ffn_names& ffn,
                         int64_t slot) {
  const auto& c = ld.config();
  const int64_t d = c.hidden_size;
  mtp_layer m;
  m.enorm = ld.f32(lay.prefix + ".enorm.weight", {d});
  m.hnorm = ld.f32(lay.prefix + ".hnorm.weight", {d});
  m.eh_proj = ld.lin(lay.prefix + ".eh_proj", d, 2 * d);
  m.block = load_decoder_layer(ld, lay, ffn, slot);
  m.head_norm = ld.f32(lay.prefix + ".shared_head.norm.weight", {d});
  return m;
}

}  // namespace moxi::model
