// fake_model (tests only): a deterministic stand-in for the model that uses the hybrid memory exactly as the
// real executor must (KDA state updated in place, latent rows written for new positions, all rows read back
// for attention), so that any paging, prefix-cache, snapshot or scheduling bug changes the tokens it returns.
// Its next token is a function of the whole token history; reference_next() computes the same function
// from scratch with plain vectors and no cache: the independent oracle of the serve tests. The k-th fork
// (1-based) of a request gets reference_next(prompt) + k (mod vocab) as its first token.
// How it computes: per token, an embedding of (token, position), then every cache layer in order: KDA layers
// run a short convolution and a decaying outer-product state read by a query (the shape of the real
// recurrence, not its values); MLA layers write a latent row and an indexer row, and attend to the mean of
// all rows so far; sliding-window layers write a key and a value row into their ring (the layer's state,
// row pos % window) and mix in the value rows of the last `window` positions, weighted by their keys.
// Floating-point work is done token by token in one fixed order, so the result is
// bit-identical however the tokens are split into steps, as long as the caches hold the right values.
#pragma once

#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <vector>

#include "moxi/base/error.h"
#include "moxi/base/splitmix.h"
#include "moxi/memory/hybrid-memory.h"
#include "moxi/serve/model-runner.h"

namespace moxi::serve {

class fake_model final : public model_runner {
 public:
  fake_model(memory::hybrid_memory& memory, int32_t vocab_size);

  sampled_tokens execute(const scheduler_output& step) override;
  // Speculative decoding, as a real runner's outcome: of a decode step's `lookahead` draft positions, the
  // first keep(id, lookahead) are kept (drafts equal to the tokens the model goes on to produce: they are
  // computed one after another, as the kept positions of a verify forward are). Unset: none.
  std::function<int64_t(request_id, int64_t)> keep_drafts;
  // The token after `history`, computed token by token from zero state without any cache.
  token_id reference_next(std::span<const token_id> history) const;
  int64_t tokens_computed() const { return tokens_computed_; }

  static constexpr int kHidden = 8;  // width of the fake hidden state

 private:
  memory::hybrid_memory& memory_;
  int32_t vocab_;
  int64_t tokens_computed_ = 0;
};

namespace fake_model_detail {

inline constexpr int D = fake_model::kHidden;
using hidden = std::array<float, D>;
using formats::attn_kind;
using memory::cache_spec;

inline float unit(uint64_t x) {
  return float(int64_t(moxi::splitmix64(x) >> 40) - (int64_t(1) << 23)) / float(1 << 23);
}

inline hidden embed(token_id t, int64_t pos) {
  hidden h;
  for (int i = 0; i < D; ++i)
    h[size_t(i)] = unit(uint64_t(uint32_t(t)) * 131 + uint64_t(i)) + 0.001f * float(pos % 97);
  return h;
}

// Shifts `in` into a [W-1, P] window (oldest row first) and returns in + a weighted sum of the window.
inline void conv(float* window, int64_t rows, int64_t P, const std::vector<float>& in,
                 std::vector<float>& out) {
  out.assign(in.begin(), in.end());
  for (int64_t j = 0; j < P; ++j) {
    for (int64_t r = 0; r < rows; ++r) out[size_t(j)] += window[r * P + j] * (0.5f / float(r + 1));
    for (int64_t r = 0; r + 1 < rows; ++r) window[r * P + j] = window[(r + 1) * P + j];
    if (rows > 0) window[(rows - 1) * P + j] = in[size_t(j)];
  }
}

inline void kda_token(const cache_spec& s, int64_t layer, const memory::kda_state_view& st, hidden& h) {
  const int64_t P = s.kda_proj_dim(), H = s.kda_heads, K = s.kda_head_dim, W1 = s.kda_conv_kernel - 1;
  std::vector<float> xq(static_cast<size_t>(P)), xk(xq), xv(xq), q, k, v;
  for (int64_t j = 0; j < P; ++j) {
    const float x = h[size_t(j % D)] * (1.0f + 0.1f * float((j + layer) % 5));
    xq[size_t(j)] = x;
    xk[size_t(j)] = 0.5f * x;
    xv[size_t(j)] = -0.25f * x + 0.1f;
  }
  conv(st.conv_q, W1, P, xq, q);
  conv(st.conv_k, W1, P, xk, k);
  conv(st.conv_v, W1, P, xv, v);
  std::vector<float> o(size_t(P), 0.0f);
  for (int64_t hh = 0; hh < H; ++hh)
    for (int64_t a = 0; a < K; ++a)
      for (int64_t b = 0; b < K; ++b) {
        float& S = st.recurrent[(hh * K + a) * K + b];
        S = 0.9f * S + 0.1f * k[size_t(hh * K + a)] * v[size_t(hh * K + b)];
        o[size_t(hh * K + b)] += S * q[size_t(hh * K + a)];
      }
  for (int i = 0; i < D; ++i) h[size_t(i)] = 0.5f * h[size_t(i)] + 0.5f * o[size_t(i % P)];
}

// Fills this token's rows, adds them to the running sums of all rows so far (count of them) and mixes the
// means into h.
inline void mla_token(const cache_spec& s, int64_t layer, hidden& h, float* row, float* index_row, float* sum,
                      float* index_sum, int64_t count) {
  for (int64_t j = 0; j < s.latent_width; ++j) {
    row[j] = h[size_t(j % D)] * (1.0f + 0.05f * float((j + layer) % 7));
    sum[j] += row[j];
  }
  for (int64_t j = 0; j < s.index_width; ++j) {
    index_row[j] = h[size_t((j + 3) % D)] - 0.25f;
    index_sum[j] += index_row[j];
  }
  for (int i = 0; i < D; ++i) {
    float x = 0.5f * h[size_t(i)] + 0.5f * sum[i % s.latent_width] / float(count);
    if (s.index_width) x += 0.1f * index_sum[i % s.index_width] / float(count);
    h[size_t(i)] = x;
  }
}

// Writes this token's key and value rows into ring row pos % window (keys first, then values, as the real
// ring) and mixes into h the value rows of the last min(pos + 1, window) positions, each weighted by how its
// key agrees with this token's query.
inline void swa_token(const cache_spec& s, int64_t layer, float* ring, int64_t pos, hidden& h) {
  const int64_t W = s.swa_window, E = s.swa_kv_dim;
  float* keys = ring;
  float* values = ring + W * E;
  const int64_t row = pos % W;
  for (int64_t j = 0; j < E; ++j) {
    keys[row * E + j] = h[size_t(j % D)] * (1.0f + 0.03f * float((j + layer) % 5));
    values[row * E + j] = 0.5f * h[size_t((j + 1) % D)] - 0.1f;
  }
  const int64_t n = std::min(pos + 1, W);
  std::vector<float> o(size_t(E), 0.0f);
  for (int64_t r = 0; r < n; ++r) {
    float dot = 0.0f;
    for (int64_t j = 0; j < E; ++j) dot += keys[r * E + j] * h[size_t((j + 2) % D)];
    const float w = 1.0f / (1.0f + dot * dot);
    for (int64_t j = 0; j < E; ++j) o[size_t(j)] += w * values[r * E + j];
  }
  for (int i = 0; i < D; ++i) h[size_t(i)] = 0.5f * h[size_t(i)] + 0.5f * o[size_t(i % E)] / float(n);
}

inline token_id readout(const hidden& h, int32_t vocab) {
  return token_id(XXH3_64bits(h.data(), sizeof(float) * D) % uint64_t(vocab));
}

}  // namespace fake_model_detail

using namespace fake_model_detail;  // NOLINT: the helpers above, for the members below

inline fake_model::fake_model(memory::hybrid_memory& memory, int32_t vocab_size)
    : memory_(memory), vocab_(vocab_size) {
  const auto& s = memory.spec();
  MOXI_ASSERT(vocab_size > 0 && (s.num_mla_layers() == 0 || s.latent_width > 0));
}

inline sampled_tokens fake_model::execute(const scheduler_output& step) {
  const cache_spec& s = memory_.spec();
  sampled_tokens next;
  std::vector<float> row(size_t(s.latent_width)), index_row(size_t(s.index_width));
  for (const auto& r : step.scheduled) {
    MOXI_ASSERT(memory_.length(r.seq) == r.start, "scheduled start != computed tokens in memory");
    // Attention state of each MLA layer rebuilt from the cache: rows written by earlier steps, or by
    // other sequences when they came from the prefix cache.
    std::vector<std::vector<float>> sums(s.layers.size()), index_sums(s.layers.size());
    for (size_t l = 0; l < s.layers.size(); ++l) {
      if (s.layers[l] != attn_kind::MLA) continue;
      sums[l].assign(size_t(s.latent_width), 0.0f);
      index_sums[l].assign(size_t(s.index_width), 0.0f);
      std::vector<float> lat(size_t(r.start * s.latent_width)), idx(size_t(r.start * s.index_width));
      memory_.read_latents(r.seq, int64_t(l), 0, r.start, lat.data(), idx.data());
      for (int64_t p = 0; p < r.start; ++p) {
        for (int64_t j = 0; j < s.latent_width; ++j)
          sums[l][size_t(j)] += lat[size_t(p * s.latent_width + j)];
        for (int64_t j = 0; j < s.index_width; ++j)
          index_sums[l][size_t(j)] += idx[size_t(p * s.index_width + j)];
      }
    }
    hidden h{};
    std::vector<token_id> fed = r.tokens;
    const int64_t kept = r.sample && keep_drafts && r.lookahead > 0 ? keep_drafts(r.id, r.lookahead) : 0;
    MOXI_ASSERT(kept >= 0 && kept <= r.lookahead);
    for (int64_t i = 0; i < r.n_tokens() + kept; ++i) {
      const int64_t pos = r.start + i;
      if (i >= r.n_tokens()) {  // a kept draft: the token the last position produced
        fed.push_back(readout(h, vocab_));
        next[r.id].push_back(fed.back());
      }
      h = embed(fed[size_t(i)], pos);
      for (size_t l = 0; l < s.layers.size(); ++l) {
        switch (s.layers[l]) {
          case attn_kind::KDA:
            kda_token(s, int64_t(l), memory_.kda(r.seq, int64_t(l)), h);
            break;
          case attn_kind::SWA:
            swa_token(s, int64_t(l), memory_.state(r.seq, int64_t(l)), pos, h);
            break;
          case attn_kind::MLA:
            mla_token(s, int64_t(l), h, row.data(), index_row.data(), sums[l].data(), index_sums[l].data(),
                      pos + 1);
            memory_.write_latents(r.seq, int64_t(l), pos, 1, row.data(),
                                  s.index_width ? index_row.data() : nullptr);
            break;
        }
      }
    }
    tokens_computed_ += int64_t(fed.size());
    if (!r.sample) continue;
    const token_id t = readout(h, vocab_);
    next[r.id].push_back(t);
    // Forks "sample" the k-th next candidate, so that their histories diverge from the parent's.
    for (size_t k = 0; k < r.forks.size(); ++k) next[r.forks[k]] = {token_id((t + k + 1) % vocab_)};
  }
  return next;
}

inline token_id fake_model::reference_next(std::span<const token_id> history) const {
  const cache_spec& s = memory_.spec();
  MOXI_ASSERT(!history.empty());
  // Plain per-layer state: no slots, no blocks, no prefix cache.
  struct layer_state {
    std::vector<float> conv_q, conv_k, conv_v, recurrent, sum, index_sum, ring;
  };
  std::vector<layer_state> st(s.layers.size());
  for (auto& x : st) {
    x.conv_q.assign(size_t(s.conv_floats()), 0.0f);
    x.conv_k = x.conv_v = x.conv_q;
    x.recurrent.assign(size_t(s.recurrent_floats()), 0.0f);
    x.sum.assign(size_t(s.latent_width), 0.0f);
    x.index_sum.assign(size_t(s.index_width), 0.0f);
    x.ring.assign(size_t(s.swa_layer_floats()), 0.0f);
  }
  std::vector<float> row(size_t(s.latent_width)), index_row(size_t(s.index_width));
  hidden h{};
  for (size_t p = 0; p < history.size(); ++p) {
    h = embed(history[p], int64_t(p));
    for (size_t l = 0; l < s.layers.size(); ++l) {
      auto& x = st[l];
      switch (s.layers[l]) {
        case attn_kind::KDA:
          kda_token(s, int64_t(l), {x.conv_q.data(), x.conv_k.data(), x.conv_v.data(), x.recurrent.data()},
                    h);
          break;
        case attn_kind::SWA:
          swa_token(s, int64_t(l), x.ring.data(), int64_t(p), h);
          break;
        case attn_kind::MLA:
          mla_token(s, int64_t(l), h, row.data(), index_row.data(), x.sum.data(), x.index_sum.data(),
                    int64_t(p) + 1);
          break;
      }
    }
  }
  return readout(h, vocab_);
}

}  // namespace moxi::serve
