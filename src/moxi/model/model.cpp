// Model loading (through the architecture registry's layout, the only switch on model_type) and the forward
// passes of the main model and the MTP head.
#include "moxi/model/model.h"

#include <cstring>

#include "moxi/base/error.h"
#include "moxi/kernels/matmul-dispatch.h"
#include "moxi/kernels/ref/basic.h"
#include "moxi/model/arch/registry.h"

namespace moxi::model {

namespace ref = kernels::ref;

model::model(model&&) noexcept = default;
model& model::operator=(model&&) noexcept = default;
model::~model() = default;

model model::load(const std::string& dir, const load_options& opts) {
  return load(formats::load_model_config(dir), dir, opts);
}

model model::load(formats::model_config config, const std::string& checkpoint_path,
                  const load_options& opts) {
  const auto& arch = arch::find_architecture(config);
  const auto layout = arch.layout(config);
  model m;
  m.config_ = std::move(config);
  m.ckpt_ = std::make_unique<formats::checkpoint>(formats::checkpoint::open(checkpoint_path));
  const auto& c = m.config_;
  weight_loader ld(*m.ckpt_, c, opts);
  m.embed_ = ld.f32(layout.embed, {c.vocab_size, c.hidden_size});
  for (size_t i = 0; i < layout.layers.size(); ++i)
    m.layers_.push_back(load_decoder_layer(ld, layout.layers[i], layout.ffn, int64_t(i)));
  m.final_norm_ = ld.f32(layout.final_norm, {c.hidden_size});
  if (!c.tie_word_embeddings) m.lm_head_ = ld.f32(layout.lm_head, {c.vocab_size, c.hidden_size});
  for (size_t k = 0; k < layout.mtp_layers.size(); ++k)
    m.mtp_.push_back(load_mtp_layer(ld, layout.mtp_layers[k], layout.ffn, c.num_layers + int64_t(k)));
  m.tensors_read_ = ld.names_read();
  return m;
}

std::unique_ptr<sequence_cache> model::new_cache() const {
  return std::make_unique<contiguous_cache>(config_);
}

void model::check_tokens(std::span<const token_id> tokens) const {
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= config_.vocab_size)
      throw error("token id " + std::to_string(tokens[i]) + " at position " + std::to_string(i) +
                  " is out of range [0, " + std::to_string(config_.vocab_size) + ")");
}

std::vector<float> model::head(const float* h, int64_t T, bool last_only) const {
  const int64_t d = config_.hidden_size, V = config_.vocab_size;
  const float* w = lm_head_.empty() ? embed_.data() : lm_head_.data();
  const int64_t rows = last_only ? 1 : T;
  std::vector<float> logits(size_t(rows * V));  // f32 [rows, vocab]
  kernels::matmul(h + (T - rows) * d, w, nullptr, logits.data(), rows, V, d);
  return logits;
}

std::vector<float> model::forward(std::span<const token_id> tokens, sequence_cache& cache,
                                  const forward_options& opts) const {
  check_tokens(tokens);
  const int64_t T = int64_t(tokens.size()), d = config_.hidden_size;
  if (T == 0) return {};
  std::vector<float> h(size_t(T * d));  // f32 [T, hidden], the residual stream
  for (int64_t t = 0; t < T; ++t)
    std::memcpy(h.data() + t * d, embed_.data() + int64_t(tokens[size_t(t)]) * d, size_t(d) * sizeof(float));
  dump(opts.dump, "embed", {T, d}, h.data());
  for (size_t i = 0; i < layers_.size(); ++i)
    decoder_layer_forward(layers_[i], config_, h.data(), T, cache, opts.dump, "layers." + std::to_string(i));
  cache.advance(T);
  ref::rms_norm(h.data(), final_norm_.data(), h.data(), T, d, float(config_.rms_norm_eps));
  dump(opts.dump, "final_norm", {T, d}, h.data());
  if (opts.hidden) *opts.hidden = h;
  auto logits = head(h.data(), T, opts.last_only);
  dump(opts.dump, "logits", {opts.last_only ? 1 : T, config_.vocab_size}, logits.data());
  return logits;
}

std::vector<float> model::mtp_forward(std::span<const float> hidden, std::span<const token_id> next_tokens,
                                      sequence_cache& cache, int64_t depth,
                                      const forward_options& opts) const {
  if (depth < 0 || size_t(depth) >= mtp_.size())
    throw error(config_.source + ": MTP depth " + std::to_string(depth) + " requested, the model has " +
                std::to_string(mtp_.size()) + " MTP layer(s) (num_nextn_predict_layers)");
  check_tokens(next_tokens);
  const int64_t T = int64_t(next_tokens.size()), d = config_.hidden_size;
  if (int64_t(hidden.size()) != T * d)
    throw error("mtp_forward: hidden has " + std::to_string(hidden.size()) + " values, expected " +
                std::to_string(T) + " x " + std::to_string(d));
  if (T == 0) return {};
  const auto& m = mtp_[size_t(depth)];
  const float eps = float(config_.rms_norm_eps);
  const std::string name = "mtp." + std::to_string(depth);
  std::vector<float> cat(size_t(T * 2 * d));  // f32 [T, 2*hidden] = [enorm(emb(t_{i+1})) ; hnorm(h_i)]
  for (int64_t t = 0; t < T; ++t) {
    float* row = cat.data() + t * 2 * d;
    ref::rms_norm(embed_.data() + int64_t(next_tokens[size_t(t)]) * d, m.enorm.data(), row, 1, d, eps);
    ref::rms_norm(hidden.data() + t * d, m.hnorm.data(), row + d, 1, d, eps);
  }
  std::vector<float> h(size_t(T * d));  // f32 [T, hidden]
  m.eh_proj.apply(cat.data(), h.data(), T);
  dump(opts.dump, name + ".eh_proj", {T, d}, h.data());
  decoder_layer_forward(m.block, config_, h.data(), T, cache, opts.dump, name);
  cache.advance_mtp(T);
  ref::rms_norm(h.data(), m.head_norm.data(), h.data(), T, d, eps);
  dump(opts.dump, name + ".head_norm", {T, d}, h.data());
  if (opts.hidden) *opts.hidden = h;
  auto logits = head(h.data(), T, opts.last_only);
  dump(opts.dump, name + ".logits", {opts.last_only ? 1 : T, config_.vocab_size}, logits.data());
  return logits;
}

}  // namespace moxi::model
