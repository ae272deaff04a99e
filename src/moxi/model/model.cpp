// Model loading (through the architecture registry's layout, the only switch on model_type) and the forward
// passes of the main model and the MTP head.
#include "moxi/model/model.h"

#include <cstring>

#include "moxi/base/error.h"
#include "moxi/formats/model-config-validate.h"
#include "moxi/kernels/backend.h"
#include "moxi/model/arch/registry.h"
#include "moxi/model/config.h"
#include "moxi/model/parallel.h"

namespace moxi::model {

namespace {

std::string strip_weight(const std::string& name) {
  const std::string suffix = ".weight";
  MOXI_ASSERT(name.ends_with(suffix), "expected a weight tensor name");
  return name.substr(0, name.size() - suffix.size());
}

// Row `t` of the embedding as f32 (a BF16 row widened: exact).
// Hands each item its rows of logits computed for all items' wanted rows in order (the last one, or all of
// its T with last_only off).
template <class Item>
void split_logits(const std::vector<float>& logits, std::span<const Item> items,
                  const std::vector<seq_rows>& segs, const std::vector<size_t>& seg_item, int64_t V,
                  std::vector<std::vector<float>>& out) {
  int64_t r = 0;
  for (size_t s = 0; s < segs.size(); ++s) {
    const int64_t n = items[seg_item[s]].last_only ? 1 : segs[s].T;
    out[seg_item[s]].assign(logits.begin() + r * V, logits.begin() + (r + n) * V);
    r += n;
  }
}

}  // namespace

model::model(model&&) noexcept = default;
model& model::operator=(model&&) noexcept = default;
model::~model() = default;

model model::load(const std::string& dir, const load_options& opts) {
  auto config = load_model_config(dir);
  formats::validate_model_dir(config, dir);  // token ids of the tokenizer and generation config
  return load(std::move(config), dir, opts);
}

model model::load(formats::model_config config, const std::string& checkpoint_path,
                  const load_options& opts) {
  const auto& arch = arch::find_architecture(config);
  const auto layout = arch.layout(config);
  model m;
  m.config_ = std::move(config);
  const auto& par = opts.parallel;
  if (par) check_layout(m.config_, par->sizes, par->world_size);
  m.layer_config_ = par ? local_config(m.config_, par->sizes.tp) : m.config_;
  m.opts_parallel_ = par;
  m.ckpt_ = std::make_unique<formats::checkpoint>(formats::checkpoint::open(checkpoint_path));
  const auto& c = m.config_;
  weight_loader ld(*m.ckpt_, m.layer_config_, opts);
  // A pipeline stage reads its own layers; the first one the embedding (and the vision encoder), the last
  // one the final norm, the head and the MTP layers (which read the embedding too).
  const bool first = !par || par->first_stage(), last = m.holds_head();
  const auto [lo, hi] = par ? parallel_layout::stage_layers(c.num_layers, par->sizes.pp, par->stage)
                            : std::pair<int64_t, int64_t>{0, c.num_layers - 1};
  if (first || (last && (c.tie_word_embeddings || !layout.mtp_layers.empty())))
    m.embed_ = ld.lin(strip_weight(layout.embed), c.vocab_size, c.hidden_size);
  m.first_layer_ = lo;
  for (int64_t i = lo; i <= hi; ++i)
    m.layers_.push_back(load_decoder_layer(ld, layout.layers[size_t(i)], layout.ffn, i));
  if (last) {
    m.final_norm_ = ld.f32(layout.final_norm, {c.hidden_size});
    // Tied: the head is the embedding itself (head_ stays empty).
    if (!c.tie_word_embeddings) m.head_ = ld.lin(strip_weight(layout.lm_head), c.vocab_size, c.hidden_size);
    for (size_t k = 0; k < layout.mtp_layers.size(); ++k)
      m.mtp_.push_back(load_mtp_layer(ld, layout.mtp_layers[k], layout.ffn, c.num_layers + int64_t(k)));
  }
  if (first && c.vision) m.vision_ = std::make_unique<vision_encoder>(vision_encoder::load(ld, c));
  m.tensors_read_ = ld.names_read();
  m.bytes_read_ = ld.bytes_read();
  // Every weight but the packed MXFP4 experts was converted into memory of its own: the mapping's pages the
  // conversion touched would otherwise stay resident beside the copies (twice the weights). The experts'
  // pages come back as the forward reads them.
  m.ckpt_->release_pages();
  return m;
}

std::vector<bool> model::held_cache_slots() const {
  if (!opts_parallel_) return {};
  std::vector<bool> held(size_t(config_.num_layers + config_.num_mtp_layers), false);
  for (size_t i = 0; i < layers_.size(); ++i) held[size_t(first_layer_) + i] = true;
  for (size_t k = 0; k < mtp_.size(); ++k) held[size_t(config_.num_layers) + k] = true;
  return held;
}

std::unique_ptr<contiguous_cache> model::new_cache() const {
  if (!opts_parallel_) return std::make_unique<contiguous_cache>(layer_config_);
  return std::make_unique<contiguous_cache>(layer_config_, held_cache_slots());
}

void model::share_from_last_stage(std::vector<float>& data, int64_t n) const {
  const parallel_layout* par = opts_parallel_.get();
  if (!par || par->world_size == 1) return;
  data.resize(size_t(n));
  par->world->broadcast(data.data(), n * int64_t(sizeof(float)), par->world_rank_of(par->sizes.pp - 1, 0));
}

void model::check_tokens(std::span<const token_id> tokens) const {
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= config_.vocab_size)
      throw error("token id " + std::to_string(tokens[i]) + " at position " + std::to_string(i) +
                  " is out of range [0, " + std::to_string(config_.vocab_size) + ")");
}

void model::embed(std::span<const token_id> tokens, std::span<const float> media, float* h) const {
  const int64_t d = config_.hidden_size, rows = int64_t(media.size()) / d;
  const auto placeholder = config_.media_placeholder_token_id;
  if (!media.empty() && !placeholder)
    throw error("image features given, but the config has no media_placeholder_token_id");
  int64_t used = 0;
  for (size_t t = 0; t < tokens.size(); ++t) {
    if (used < rows && tokens[t] == *placeholder)
      std::memcpy(h + int64_t(t) * d, media.data() + used++ * d, size_t(d) * sizeof(float));
    else
      embed_.row(tokens[t], h + int64_t(t) * d);
  }
  if (used < rows)
    throw error(std::to_string(rows) + " image feature rows for " + std::to_string(used) +
                " image placeholder tokens");
}

std::vector<float> model::head(const float* h, int64_t T, bool last_only) const {
  const int64_t d = config_.hidden_size, V = config_.vocab_size;
  const int64_t rows = last_only ? 1 : T;
  std::vector<float> logits(size_t(rows * V));  // f32 [rows, vocab]
  // Tied: the head is the embedding itself.
  (head_.empty() ? embed_ : head_).apply(h + (T - rows) * d, logits.data(), rows);
  return logits;
}

std::vector<float> model::forward(std::span<const token_id> tokens, sequence_cache& cache,
                                  const forward_options& opts) const {
  check_tokens(tokens);
  const int64_t T = int64_t(tokens.size()), d = config_.hidden_size;
  if (T == 0) return {};
  std::vector<float> h(size_t(T * d));  // f32 [T, hidden], the residual stream
  const parallel_layout* par = opts_parallel_.get();
  if (!par || par->first_stage()) {
    embed(tokens, opts.media, h.data());
    dump(opts.dump, "embed", {T, d}, h.data());
  }
  // Across pipeline stages the rows go in micro-batches, so that the stages work at once on a long prompt.
  const int64_t mb = par && par->sizes.pp > 1 && par->sizes.pp_microbatch > 0 ? par->sizes.pp_microbatch : T;
  for (int64_t at = 0; at < T; at += mb) {
    const int64_t n = std::min(mb, T - at);
    float* rows = h.data() + at * d;
    if (par && !par->first_stage())
      par->world->recv(rows, n * d * 4, par->world_rank_of(par->stage - 1, par->stage_rank));
    const seq_rows seg{0, n, &cache};
    for (size_t i = 0; i < layers_.size(); ++i)
      decoder_layer_forward_batch(layers_[i], layer_config_, rows, n, std::span(&seg, 1), opts.dump,
                                  "layers." + std::to_string(first_layer_ + int64_t(i)));
    if (par && !par->last_stage())
      par->world->send(rows, n * d * 4, par->world_rank_of(par->stage + 1, par->stage_rank));
    cache.advance(n);
  }
  std::vector<float> logits;
  if (holds_head()) {
    kernels::active().rms_norm(h.data(), final_norm_.data(), h.data(), T, d, float(config_.rms_norm_eps));
    dump(opts.dump, "final_norm", {T, d}, h.data());
    if (opts.hidden) *opts.hidden = h;
    logits = head(h.data(), T, opts.last_only);
    dump(opts.dump, "logits", {opts.last_only ? 1 : T, config_.vocab_size}, logits.data());
  }
  share_from_last_stage(logits, (opts.last_only ? 1 : T) * config_.vocab_size);
  if (opts.hidden) share_from_last_stage(*opts.hidden, T * d);
  return logits;
}

std::vector<std::vector<float>> model::forward_batch(std::span<const batch_item> items) const {
  const int64_t d = config_.hidden_size, V = config_.vocab_size;
  std::vector<seq_rows> segs;
  std::vector<size_t> seg_item;  // item index of each segment (items without tokens have none)
  int64_t R = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].cache) throw error("forward_batch: item " + std::to_string(i) + " has no cache");
    for (size_t j = 0; j < i; ++j)
      if (items[j].cache == items[i].cache)
        throw error("forward_batch: items " + std::to_string(j) + " and " + std::to_string(i) +
                    " share one cache");
    check_tokens(items[i].tokens);
    const int64_t T = int64_t(items[i].tokens.size());
    if (T == 0) continue;
    segs.push_back({R, T, items[i].cache});
    seg_item.push_back(i);
    R += T;
  }
  std::vector<std::vector<float>> out(items.size());
  if (R == 0) return out;

  std::vector<float> h(size_t(R * d));  // f32 [R, hidden], every item's residual stream in order
  const parallel_layout* par = opts_parallel_.get();
  if (!par || par->first_stage()) {
    for (size_t s = 0; s < segs.size(); ++s)
      embed(items[seg_item[s]].tokens, items[seg_item[s]].media, h.data() + segs[s].begin * d);
  } else {
    par->world->recv(h.data(), R * d * 4, par->world_rank_of(par->stage - 1, par->stage_rank));
  }
  for (size_t i = 0; i < layers_.size(); ++i)
    decoder_layer_forward_batch(layers_[i], layer_config_, h.data(), R, segs, nullptr,
                                "layers." + std::to_string(first_layer_ + int64_t(i)));
  if (par && !par->last_stage())
    par->world->send(h.data(), R * d * 4, par->world_rank_of(par->stage + 1, par->stage_rank));
  for (const auto& sg : segs) sg.cache->advance(sg.T);

  // Final norm and lm_head over the rows whose logits are wanted, in one matmul. An item that wants its
  // hidden states has all its rows normed (the norm is per row, so that changes nothing else).
  std::vector<float> hs;  // f32 [rows, hidden]
  bool any_hidden = false;
  for (size_t s = 0; s < segs.size(); ++s) {
    const auto& it = items[seg_item[s]];
    const int64_t first = it.last_only && !it.hidden ? segs[s].begin + segs[s].T - 1 : segs[s].begin;
    hs.insert(hs.end(), h.begin() + first * d, h.begin() + (segs[s].begin + segs[s].T) * d);
    any_hidden = any_hidden || it.hidden;
  }
  int64_t rows = int64_t(hs.size()) / d;
  std::vector<float> logits;
  if (holds_head()) {
    kernels::active().rms_norm(hs.data(), final_norm_.data(), hs.data(), rows, d,
                               float(config_.rms_norm_eps));
    if (any_hidden) {
      std::vector<float> wanted;
      int64_t at = 0;
      for (size_t s = 0; s < segs.size(); ++s) {
        const auto& it = items[seg_item[s]];
        const int64_t n = it.last_only && !it.hidden ? 1 : segs[s].T;
        if (it.hidden) it.hidden->assign(hs.begin() + at * d, hs.begin() + (at + n) * d);
        const int64_t keep = it.last_only ? 1 : n;
        wanted.insert(wanted.end(), hs.begin() + (at + n - keep) * d, hs.begin() + (at + n) * d);
        at += n;
      }
      hs = std::move(wanted);
      rows = int64_t(hs.size()) / d;
    }
    logits = head(hs.data(), rows, false);
  } else if (any_hidden) {
    rows = 0;
    for (size_t s = 0; s < segs.size(); ++s) rows += items[seg_item[s]].last_only ? 1 : segs[s].T;
  }
  share_from_last_stage(logits, rows * V);
  for (size_t s = 0; s < segs.size(); ++s)
    if (auto* out_h = items[seg_item[s]].hidden) share_from_last_stage(*out_h, segs[s].T * d);
  split_logits(logits, items, segs, seg_item, V, out);
  return out;
}

void model::mtp_input(const mtp_layer& m, const float* hidden, std::span<const token_id> next_tokens,
                      float* h) const {
  const int64_t T = int64_t(next_tokens.size()), d = config_.hidden_size;
  const float eps = float(config_.rms_norm_eps);
  std::vector<float> cat(size_t(T * 2 * d));  // f32 [T, 2*hidden] = [enorm(emb(t_{i+1})) ; hnorm(h_i)]
  std::vector<float> emb(static_cast<size_t>(d));
  for (int64_t t = 0; t < T; ++t) {
    float* row = cat.data() + t * 2 * d;
    embed_.row(next_tokens[size_t(t)], emb.data());
    kernels::active().rms_norm(emb.data(), m.enorm.data(), row, 1, d, eps);
    kernels::active().rms_norm(hidden + t * d, m.hnorm.data(), row + d, 1, d, eps);
  }
  m.eh_proj.apply(cat.data(), h, T);
}

std::vector<std::vector<float>> model::mtp_forward_batch(std::span<const mtp_batch_item> items,
                                                         int64_t depth) const {
  if (opts_parallel_) throw error("mtp_forward_batch: runs in one process only");
  if (depth < 0 || depth >= config_.num_mtp_layers)
    throw error(config_.source + ": MTP depth " + std::to_string(depth) + " requested, the model has " +
                std::to_string(config_.num_mtp_layers) + " MTP layer(s) (num_nextn_predict_layers)");
  const int64_t d = config_.hidden_size, V = config_.vocab_size;
  std::vector<seq_rows> segs;
  std::vector<size_t> seg_item;
  int64_t R = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& it = items[i];
    if (!it.cache) throw error("mtp_forward_batch: item " + std::to_string(i) + " has no cache");
    for (size_t j = 0; j < i; ++j)
      if (items[j].cache == it.cache)
        throw error("mtp_forward_batch: items " + std::to_string(j) + " and " + std::to_string(i) +
                    " share one cache");
    check_tokens(it.next_tokens);
    const int64_t T = int64_t(it.next_tokens.size());
    if (int64_t(it.hidden.size()) != T * d)
      throw error("mtp_forward_batch: item " + std::to_string(i) + " has " +
                  std::to_string(it.hidden.size()) + " hidden values, expected " + std::to_string(T) + " x " +
                  std::to_string(d));
    if (T == 0) continue;
    segs.push_back({R, T, it.cache});
    seg_item.push_back(i);
    R += T;
  }
  std::vector<std::vector<float>> out(items.size());
  if (R == 0) return out;
  const auto& m = mtp_[size_t(depth)];
  std::vector<float> h(size_t(R * d));  // f32 [R, hidden], every item's rows in order
  for (size_t s = 0; s < segs.size(); ++s)
    mtp_input(m, items[seg_item[s]].hidden.data(), items[seg_item[s]].next_tokens,
              h.data() + segs[s].begin * d);
  decoder_layer_forward_batch(m.block, layer_config_, h.data(), R, segs, nullptr,
                              "mtp." + std::to_string(depth));
  for (const auto& sg : segs) sg.cache->advance_mtp(sg.T);
  kernels::active().rms_norm(h.data(), m.head_norm.data(), h.data(), R, d, float(config_.rms_norm_eps));
  std::vector<float> hs;  // the rows whose logits are wanted
  for (size_t s = 0; s < segs.size(); ++s) {
    const auto& it = items[seg_item[s]];
    const int64_t first = it.last_only ? segs[s].begin + segs[s].T - 1 : segs[s].begin,
                  end = segs[s].begin + segs[s].T;
    if (it.out_hidden) it.out_hidden->assign(h.begin() + segs[s].begin * d, h.begin() + end * d);
    hs.insert(hs.end(), h.begin() + first * d, h.begin() + end * d);
  }
  const int64_t rows = int64_t(hs.size()) / d;
  const std::vector<float> logits = head(hs.data(), rows, false);
  split_logits(logits, items, segs, seg_item, V, out);
  return out;
}

std::vector<float> model::mtp_forward(std::span<const float> hidden, std::span<const token_id> next_tokens,
                                      sequence_cache& cache, int64_t depth,
                                      const forward_options& opts) const {
  if (depth < 0 || depth >= config_.num_mtp_layers)
    throw error(config_.source + ": MTP depth " + std::to_string(depth) + " requested, the model has " +
                std::to_string(config_.num_mtp_layers) + " MTP layer(s) (num_nextn_predict_layers)");
  check_tokens(next_tokens);
  const int64_t T = int64_t(next_tokens.size()), d = config_.hidden_size;
  if (int64_t(hidden.size()) != T * d)
    throw error("mtp_forward: hidden has " + std::to_string(hidden.size()) + " values, expected " +
                std::to_string(T) + " x " + std::to_string(d));
  if (T == 0) return {};
  std::vector<float> logits;
  if (!holds_head()) {  // the MTP layers live on the last pipeline stage
    cache.advance_mtp(T);
    share_from_last_stage(logits, (opts.last_only ? 1 : T) * config_.vocab_size);
    if (opts.hidden) share_from_last_stage(*opts.hidden, T * d);
    return logits;
  }
  const auto& m = mtp_[size_t(depth)];
  const float eps = float(config_.rms_norm_eps);
  const std::string name = "mtp." + std::to_string(depth);
  std::vector<float> h(size_t(T * d));  // f32 [T, hidden]
  mtp_input(m, hidden.data(), next_tokens, h.data());
  dump(opts.dump, name + ".eh_proj", {T, d}, h.data());
  decoder_layer_forward(m.block, layer_config_, h.data(), T, cache, opts.dump, name);
  cache.advance_mtp(T);
  kernels::active().rms_norm(h.data(), m.head_norm.data(), h.data(), T, d, eps);
  dump(opts.dump, name + ".head_norm", {T, d}, h.data());
  if (opts.hidden) *opts.hidden = h;
  logits = head(h.data(), T, opts.last_only);
  dump(opts.dump, name + ".logits", {opts.last_only ? 1 : T, config_.vocab_size}, logits.data());
  share_from_last_stage(logits, (opts.last_only ? 1 : T) * config_.vocab_size);
  if (opts.hidden) share_from_last_stage(*opts.hidden, T * d);
  return logits;
}

}  // namespace moxi::model
