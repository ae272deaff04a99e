// executor: model::model over the hybrid memory. The adapter below is the one docs/serving.md describes:
// the state of a KDA or sliding-window layer is the sequence's slot, used in place; an MLA layer sees its old
// rows gathered from the paged cache followed by a scratch area for the rows of this step, which is scattered
// back into the sequence's blocks after the forward (rows below length() are shared and never written).
#include "moxi/serve/executor.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <memory>
#include <mutex>

#include "moxi/base/error.h"

namespace moxi::serve {
namespace {

class paged_cache final : public model::sequence_cache {
 public:
  paged_cache(memory::hybrid_memory& mem, memory::seq_id s)
      : mem_(mem), seq_(s), start_(mem.length(s)), length_(start_), layers_(mem.spec().layers.size()) {}

  int64_t length() const override { return length_; }
  int64_t mtp_length() const override { return 0; }
  void advance(int64_t n) override { length_ += n; }
  // The serving path does not run the MTP head (no speculative decoding yet).
  void advance_mtp(int64_t) override { throw error("serve: the paged cache does not hold MTP positions"); }

  float* state(int64_t layer) override { return mem_.state(seq_, layer); }
  model::mla_append_ref mla_append(int64_t layer, int64_t T) override {
    auto& b = gathered(layer);
    const auto& sp = mem_.spec();
    b.appended += T;
    b.latent.resize(size_t((start_ + b.appended) * sp.latent_width));
    b.index.resize(size_t((start_ + b.appended) * sp.index_width));
    const int64_t row = start_ + b.appended - T;
    return {b.latent.data() + row * sp.latent_width,
            sp.index_width ? b.index.data() + row * sp.index_width : nullptr};
  }
  model::mla_view mla(int64_t layer) override {
    auto& b = gathered(layer);
    return {b.latent.data(), mem_.spec().index_width ? b.index.data() : nullptr, start_ + b.appended};
  }
  // Writes this step's new rows into the sequence's blocks.
  void flush() {
    const auto& sp = mem_.spec();
    for (size_t l = 0; l < layers_.size(); ++l) {
      const auto& b = layers_[l];
      if (!b.loaded || b.appended == 0) continue;
      mem_.write_latents(seq_, int64_t(l), start_, b.appended, b.latent.data() + start_ * sp.latent_width,
                         sp.index_width ? b.index.data() + start_ * sp.index_width : nullptr);
    }
  }

 private:
  struct layer_rows {
    bool loaded = false;
    int64_t appended = 0;
    std::vector<float> latent, index;  // [start + appended, width]
  };
  layer_rows& gathered(int64_t layer) {
    MOXI_ASSERT(layer >= 0 && size_t(layer) < layers_.size(), "cache slot out of range");
    auto& b = layers_[size_t(layer)];
    if (!b.loaded) {
      const auto& sp = mem_.spec();
      b.latent.resize(size_t(start_ * sp.latent_width));
      b.index.resize(size_t(start_ * sp.index_width));
      if (start_ > 0)
        mem_.read_latents(seq_, layer, 0, start_, b.latent.data(), sp.index_width ? b.index.data() : nullptr);
      b.loaded = true;
    }
    return b;
  }

  memory::hybrid_memory& mem_;
  memory::seq_id seq_;
  int64_t start_, length_;
  std::vector<layer_rows> layers_;
};

token_logprobs logprobs_of(std::span<const float> logits, token_id chosen, int top) {
  // log-softmax in double: max-shifted log-sum-exp, NaN treated as -inf.
  double mx = -INFINITY;
  for (float x : logits)
    if (!std::isnan(x)) mx = std::max(mx, double(x));
  double sum = 0;
  for (float x : logits)
    if (!std::isnan(x)) sum += std::exp(double(x) - mx);
  const double lse = mx + std::log(sum);
  auto lp = [&](token_id t) {
    return std::isnan(logits[size_t(t)]) ? -INFINITY : float(double(logits[size_t(t)]) - lse);
  };
  token_logprobs r;
  r.token = chosen;
  r.logprob = lp(chosen);
  if (top > 0) {
    std::vector<token_id> ids(logits.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = token_id(i);
    const size_t k = std::min(ids.size(), size_t(top));
    std::partial_sort(ids.begin(), ids.begin() + std::ptrdiff_t(k), ids.end(), [&](token_id a, token_id b) {
      const float la = lp(a), lb = lp(b);
      return la != lb ? la > lb : a < b;
    });
    for (size_t i = 0; i < k; ++i) r.top.emplace_back(ids[i], lp(ids[i]));
  }
  return r;
}

}  // namespace

memory::cache_spec cache_spec_of(const model::model& m) {
  auto spec = memory::cache_spec::from_config(m.layer_config());
  spec.held = m.held_cache_slots();
  return spec;
}

executor::executor(const model::model& m, memory::hybrid_memory& memory, executor_mode mode)
    : model_(m), memory_(memory), mode_(mode) {}

void executor::add(request_id id, const runtime::sampling_params& params, std::span<const token_id> prompt,
                   int top_logprobs, std::optional<runtime::json_constraint> constraint,
                   std::shared_ptr<const std::vector<float>> media) {
  auto st = std::unique_ptr<request_state>(
      new request_state{runtime::sampler(params, prompt, std::move(constraint)), top_logprobs, {}, {}});
  if (media && !media->empty()) {
    const auto pad = model_.config().media_placeholder_token_id;
    MOXI_ASSERT(pad, "executor: image rows for a model without a placeholder token");
    for (size_t t = 0; t < prompt.size(); ++t)
      if (prompt[t] == *pad) st->placeholder_at.push_back(int64_t(t));
    MOXI_ASSERT(int64_t(st->placeholder_at.size()) * model_.config().hidden_size == int64_t(media->size()),
                "executor: image rows do not match the prompt's placeholders");
    st->media = std::move(media);
  }
  requests_[id] = std::move(st);
}

std::span<const float> executor::media_of(const scheduled_request& r) const {
  auto it = requests_.find(r.id);
  if (it == requests_.end() || !it->second->media) return {};
  const auto& at = it->second->placeholder_at;
  const auto first = std::lower_bound(at.begin(), at.end(), r.start);
  const auto last = std::lower_bound(at.begin(), at.end(), r.start + r.n_tokens());
  const size_t d = size_t(model_.config().hidden_size);
  return std::span(*it->second->media).subspan(size_t(first - at.begin()) * d, size_t(last - first) * d);
}

void executor::remove(request_id id) {
  requests_.erase(id);
}

std::vector<std::vector<float>> executor::forward(const scheduler_output& step) {
  const auto& reqs = step.scheduled;
  std::vector<std::vector<float>> logits(reqs.size());
  if (mode_ == executor_mode::batched && reqs.size() > 1) {
    // One forward over every request's rows: each weight streams once per step (model::forward_batch).
    std::vector<std::unique_ptr<paged_cache>> caches;
    std::vector<model::batch_item> items;
    for (const auto& r : reqs) {
      caches.push_back(std::make_unique<paged_cache>(memory_, r.seq));
      MOXI_ASSERT(caches.back()->length() == r.start, "scheduled start != computed tokens in memory");
      items.push_back({r.tokens, caches.back().get(), /*last_only=*/true, media_of(r)});
    }
    logits = model_.forward_batch(items);
    for (auto& c : caches) c->flush();
    return logits;
  }
  auto run_one = [&](size_t i) {
    const auto& r = reqs[i];
    paged_cache cache(memory_, r.seq);
    MOXI_ASSERT(cache.length() == r.start, "scheduled start != computed tokens in memory");
    model::forward_options o;
    o.last_only = true;
    o.media = media_of(r);
    logits[i] = model_.forward(r.tokens, cache, o);
    cache.flush();
  };
  if (reqs.size() == 1 || mode_ == executor_mode::sequential) {
    for (size_t i = 0; i < reqs.size(); ++i) run_one(i);
    return logits;
  }
  // Requests are claimed dynamically (their sizes differ: prefill chunks next to single decode tokens);
  // each touches only its own sequence's state slot and blocks, and reads shared blocks read-only.
  std::atomic<size_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  thread_pool::global().run([&](int, int) {
    for (size_t i; (i = next.fetch_add(1)) < reqs.size();) {
      try {
        run_one(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(failure_mutex);
        if (!failure) failure = std::current_exception();
      }
    }
  });
  if (failure) std::rethrow_exception(failure);
  return logits;
}

std::map<request_id, token_id> executor::execute(const scheduler_output& step) {
  const auto& reqs = step.scheduled;
  // One sampler per choice: the request's own, then its forks' (parallel sampling draws every fork's first
  // token from the same logits with the fork's own sampler and seed).
  struct choice {
    request_id id;
    request_state* state;
    token_id token = -1;
    std::optional<token_logprobs> lps;
    bool ended = false;  // the token completed the request's constrained output
  };
  std::vector<std::vector<choice>> choices(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (!reqs[i].sample) continue;
    for (size_t k = 0; k <= reqs[i].forks.size(); ++k) {
      const request_id id = k == 0 ? reqs[i].id : reqs[i].forks[k - 1];
      auto it = requests_.find(id);
      MOXI_ASSERT(it != requests_.end(), "executor: a scheduled request has no sampler");
      choices[i].push_back({id, it->second.get()});
    }
  }
  const auto logits = forward(step);
  for (size_t i = 0; i < reqs.size(); ++i)
    for (auto& c : choices[i]) {
      c.token = c.state->smp.sample(logits[i]);
      c.state->smp.accept(c.token);
      c.ended = c.state->smp.constraint_done();
      if (c.state->top_logprobs >= 0) c.lps = logprobs_of(logits[i], c.token, c.state->top_logprobs);
    }

  std::map<request_id, token_id> next_tokens;
  logprobs_.clear();
  ended_.clear();
  for (auto& cs : choices)
    for (auto& c : cs) {
      next_tokens[c.id] = c.token;
      if (c.ended) ended_.insert(c.id);
      if (c.lps) logprobs_[c.id] = std::move(*c.lps);
    }
  return next_tokens;
}

}  // namespace moxi::serve
