// executor: model::model over the hybrid memory. The adapter below is the one docs/serving.md describes:
// the state of a KDA or sliding-window layer is the sequence's slot, used in place; an MLA layer sees its old
// rows gathered from the paged cache followed by a scratch area for the rows of this step, which is scattered
// back into the sequence's blocks after the forward (rows below length() are shared and never written). The
// gathered rows stay with the sequence from step to step, so a step copies only the rows it added.
#include "moxi/serve/executor.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <memory>
#include <mutex>

#include "moxi/base/error.h"
#include "moxi/runtime/speculative.h"

namespace moxi::serve {

// An f32 buffer that only grows, keeps its first `keep` elements when it does, and never zero-fills: a long
// sequence's history is gathered into memory that stays mapped from step to step, instead of freshly
// faulted and zeroed pages every step (at a 32K-token context those cost 0.8 s a decode step of the bench
// model; docs/serving.md "Memory").
class row_buffer {
 public:
  float* data() { return p_.get(); }
  void ensure(size_t n, size_t keep) {
    if (n <= cap_) return;
    const size_t cap = std::max(n, cap_ + cap_ / 2);
    std::unique_ptr<float[]> q(new float[cap]);  // default-initialized: not zeroed
    if (keep > 0) std::copy_n(p_.get(), std::min(keep, cap_), q.get());
    p_ = std::move(q);
    cap_ = cap;
  }

 private:
  std::unique_ptr<float[]> p_;
  size_t cap_ = 0;
};

// One sequence's gather buffers: latent and index-key rows per layer slot. Rows [0, valid[l]) of slot l equal
// the sequence's cached rows (they were gathered from its blocks or written to them from here); `owner` is
// the sequence's incarnation (0: none).
struct executor::gather_set {
  uint64_t owner = 0;
  std::vector<row_buffer> latent, index;
  std::vector<int64_t> valid;
};

namespace {

// The index rows are FP8 keys (kernels/ref/dsa.h) that memory/ holds as opaque 4-byte words; the layers
// read and write them as bytes (char access to any object is well defined).
uint8_t* key_bytes(float* words) {
  return reinterpret_cast<uint8_t*>(words);
}

class paged_cache final : public model::sequence_cache {
 public:
  // num_main_layers: slots at and after it are MTP layers. Their rows follow the main model's: with
  // speculative decoding the MTP layer has read every computed position when a step starts (docs/
  // speculative.md, "Serving"), so both start at length(s). The gather buffers are borrowed for the step.
  paged_cache(memory::hybrid_memory& mem, memory::seq_id s, int64_t num_main_layers, executor::gather_set& g)
      : mem_(mem),
        seq_(s),
        start_(mem.length(s)),
        length_(start_),
        mtp_length_(start_),
        main_layers_(num_main_layers),
        layers_(mem.spec().layers.size()),
        g_(g) {
    g_.latent.resize(layers_.size());
    g_.index.resize(layers_.size());
    g_.valid.resize(layers_.size(), 0);
    for (auto& v : g_.valid) v = std::min(v, start_);
  }

  int64_t length() const override { return length_; }
  int64_t mtp_length() const override { return mtp_length_; }
  void advance(int64_t n) override { length_ += n; }
  void advance_mtp(int64_t n) override { mtp_length_ += n; }

  float* state(int64_t layer) override { return mem_.state(seq_, layer); }

  // Speculative decoding: from begin_trace() on, each state layer of the main model records its state
  // after every token it runs; keep_states(n) then puts the state after the n-th back in place (the cache
  // is as if only n tokens had run; the MLA rows beyond them are simply not flushed).
  void begin_trace() { tracing_ = true; }
  float* state_trace(int64_t layer, int64_t T) override {
    if (!tracing_ || layer >= main_layers_) return nullptr;
    auto& b = layers_[size_t(layer)];
    b.trace.resize(size_t(T * mem_.spec().state_floats(mem_.spec().layers[size_t(layer)])));
    b.traced = T;
    return b.trace.data();
  }
  void keep_states(int64_t n) {
    for (size_t l = 0; l < layers_.size(); ++l) {
      auto& b = layers_[l];
      if (b.traced == 0) continue;
      MOXI_ASSERT(n >= 1 && n <= b.traced, "keep_states out of the traced tokens");
      const size_t f = b.trace.size() / size_t(b.traced);
      std::copy_n(b.trace.begin() + std::ptrdiff_t(size_t(n - 1) * f), f, mem_.state(seq_, int64_t(l)));
    }
  }
  // The states of the MTP layers (of a STATE kind), saved before chained drafts and put back after them.
  void save_mtp_states() {
    for (size_t l = size_t(main_layers_); l < layers_.size(); ++l)
      if (memory::cache_kind_of(mem_.spec().layers[l]) == memory::cache_kind::STATE) {
        const float* p = mem_.state(seq_, int64_t(l));
        layers_[l].saved.assign(p, p + mem_.spec().state_floats(mem_.spec().layers[l]));
      }
  }
  void restore_mtp_states() {
    for (size_t l = size_t(main_layers_); l < layers_.size(); ++l)
      if (!layers_[l].saved.empty())
        std::copy(layers_[l].saved.begin(), layers_[l].saved.end(), mem_.state(seq_, int64_t(l)));
  }
  model::mla_append_ref mla_append(int64_t layer, int64_t T) override {
    auto& b = gathered(layer);
    const auto& sp = mem_.spec();
    auto& lat = g_.latent[size_t(layer)];
    auto& idx = g_.index[size_t(layer)];
    const int64_t row = start_ + b.appended;
    lat.ensure(size_t((row + T) * sp.latent_width), size_t(row * sp.latent_width));
    idx.ensure(size_t((row + T) * sp.index_width), size_t(row * sp.index_width));
    b.appended += T;
    return {lat.data() + row * sp.latent_width,
            sp.index_width ? key_bytes(idx.data() + row * sp.index_width) : nullptr};
  }
  model::mla_view mla(int64_t layer) override {
    auto& b = gathered(layer);
    return {g_.latent[size_t(layer)].data(),
            mem_.spec().index_width ? key_bytes(g_.index[size_t(layer)].data()) : nullptr,
            start_ + b.appended};
  }
  // Writes this step's new rows into the sequence's blocks: all of them, or the first `main_rows` of the
  // main model's layers and `mtp_rows` of the MTP layers (speculative decoding keeps only those).
  void flush(int64_t main_rows = -1, int64_t mtp_rows = -1) {
    const auto& sp = mem_.spec();
    for (size_t l = 0; l < layers_.size(); ++l) {
      const auto& b = layers_[l];
      const int64_t want = int64_t(l) < main_layers_ ? main_rows : mtp_rows;
      const int64_t n = want < 0 ? b.appended : std::min(want, b.appended);
      if (!b.loaded) continue;
      g_.valid[l] = start_ + n;  // the rows kept are those written below; any after them are dropped
      if (n == 0) continue;
      mem_.write_latents(seq_, int64_t(l), start_, n, g_.latent[l].data() + start_ * sp.latent_width,
                         sp.index_width ? g_.index[l].data() + start_ * sp.index_width : nullptr);
    }
  }

 private:
  struct layer_rows {
    bool loaded = false;
    int64_t appended = 0;             // rows [start, start + appended) of g_'s buffers are this step's
    int64_t traced = 0;               // tokens recorded in trace
    std::vector<float> trace, saved;   // state after each traced token; an MTP state saved
  };
  layer_rows& gathered(int64_t layer) {
    MOXI_ASSERT(layer >= 0 && size_t(layer) < layers_.size(), "cache slot out of range");
    auto& b = layers_[size_t(layer)];
    if (!b.loaded) {  // the rows below start_ this set does not hold yet
      const auto& sp = mem_.spec();
      auto& lat = g_.latent[size_t(layer)];
      auto& idx = g_.index[size_t(layer)];
      const int64_t have = g_.valid[size_t(layer)];
      lat.ensure(size_t(start_ * sp.latent_width), size_t(have * sp.latent_width));
      idx.ensure(size_t(start_ * sp.index_width), size_t(have * sp.index_width));
      if (start_ > have)
        mem_.read_latents(seq_, layer, have, start_, lat.data() + have * sp.latent_width,
                          sp.index_width ? idx.data() + have * sp.index_width : nullptr);
      g_.valid[size_t(layer)] = start_;
      b.loaded = true;
    }
    return b;
  }

  memory::hybrid_memory& mem_;
  memory::seq_id seq_;
  int64_t start_, length_, mtp_length_, main_layers_;
  bool tracing_ = false;
  std::vector<layer_rows> layers_;
  executor::gather_set& g_;
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

void executor::set_draft_tokens(int64_t k) {
  if (k < 0 || k > 16) throw error("serve: draft tokens must be in [0, 16], got " + std::to_string(k));
  if (k > 0 && model_.config().num_mtp_layers < 1)
    throw error(model_.config().source +
                ": speculative decoding needs an MTP layer (num_nextn_predict_layers is 0)");
  if (k > 0 && model_.parallel())
    throw error("serve: speculative decoding runs in one process only (the model is split across ranks)");
  draft_tokens_ = k;
}

void executor::remove(request_id id) {
  requests_.erase(id);
}

executor::~executor() = default;

std::vector<executor::gather_set*> executor::prepare_gathers(const std::vector<scheduled_request>& reqs) {
  std::vector<gather_set*> out(reqs.size(), nullptr);
  std::map<uint64_t, size_t> by_owner;  // incarnation -> request index
  for (size_t i = 0; i < reqs.size(); ++i) by_owner[memory_.incarnation(reqs[i].seq)] = i;
  std::vector<std::unique_ptr<gather_set>> kept, spare;
  for (auto& g : gather_pool_) {
    auto it = by_owner.find(g->owner);
    if (g->owner != 0 && it != by_owner.end() && !out[it->second]) {
      out[it->second] = g.get();
      kept.push_back(std::move(g));
    } else {
      spare.push_back(std::move(g));
    }
  }
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (out[i]) continue;
    std::unique_ptr<gather_set> g;
    if (!spare.empty()) {  // its buffers stay allocated; none of its rows are this sequence's
      g = std::move(spare.back());
      spare.pop_back();
    } else {
      g = std::make_unique<gather_set>();
    }
    g->owner = memory_.incarnation(reqs[i].seq);
    std::fill(g->valid.begin(), g->valid.end(), 0);
    out[i] = g.get();
    kept.push_back(std::move(g));
  }
  gather_pool_ = std::move(kept);  // the spares left over are released
  return out;
}

std::vector<std::vector<float>> executor::forward(const scheduler_output& step) {
  const auto& reqs = step.scheduled;
  const auto gathers = prepare_gathers(reqs);  // before any thread borrows a set
  std::vector<std::vector<float>> logits(reqs.size());
  if (mode_ == executor_mode::batched && reqs.size() > 1) {
    // One forward over every request's rows: each weight streams once per step (model::forward_batch).
    std::vector<std::unique_ptr<paged_cache>> caches;
    std::vector<model::batch_item> items;
    for (const auto& r : reqs) {
      caches.push_back(std::make_unique<paged_cache>(memory_, r.seq, model_.config().num_layers,
                                                     *gathers[caches.size()]));
      MOXI_ASSERT(caches.back()->length() == r.start, "scheduled start != computed tokens in memory");
      items.push_back({r.tokens, caches.back().get(), /*last_only=*/true, media_of(r)});
    }
    logits = model_.forward_batch(items);
    for (auto& c : caches) c->flush();
    return logits;
  }
  auto run_one = [&](size_t i) {
    const auto& r = reqs[i];
    paged_cache cache(memory_, r.seq, model_.config().num_layers, *gathers[i]);
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

sampled_tokens executor::execute(const scheduler_output& step) {
  if (draft_tokens_ > 0) return execute_speculative(step);
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

  sampled_tokens next_tokens;
  logprobs_.clear();
  ended_.clear();
  for (auto& cs : choices)
    for (auto& c : cs) {
      next_tokens[c.id] = {c.token};
      if (c.ended) ended_.insert(c.id);
      if (c.lps) logprobs_[c.id] = std::move(*c.lps);
    }
  return next_tokens;
}

sampled_tokens executor::execute_speculative(const scheduler_output& step) {
  // One step (docs/speculative.md, "Serving"): (1) one forward_batch over every request's tokens, a
  // decode step with drafts from the last step verifying them at its lookahead positions under a state
  // trace; (2) sampling, and for a verify the acceptance rule left to right; the states roll back to the
  // last kept position; (3) one batched MTP pass over each request's kept positions with the tokens after
  // them, so that the MTP layer has read every computed position; its last row drafts the next step's first
  // token, and k - 1 more batched MTP passes chain the rest (their rows and states are not kept).
  const auto& reqs = step.scheduled;
  const auto gathers = prepare_gathers(reqs);
  const int64_t V = model_.config().vocab_size, d = model_.config().hidden_size;
  struct job {
    const scheduled_request* s = nullptr;
    request_state* st = nullptr;
    std::unique_ptr<paged_cache> cache;
    std::vector<token_id> fed;  // the scheduled tokens, then the drafts verified
    int64_t drafts = 0;
    std::vector<float> hidden;      // post-norm hidden of the fed tokens, f32 [fed, hidden]
    std::vector<token_id> emitted;  // kept drafts, then the sampled token
    int64_t kept = 0;               // fed positions the step keeps
    std::vector<float> mtp_hidden;  // the MTP layer's last hidden row, for chained drafts
  };
  std::vector<job> jobs(reqs.size());
  std::vector<model::batch_item> items;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto& r = reqs[i];
    auto& j = jobs[i];
    j.s = &r;
    auto it = requests_.find(r.id);
    MOXI_ASSERT(it != requests_.end(), "executor: a scheduled request has no sampler");
    j.st = it->second.get();
    j.fed = r.tokens;
    j.cache = std::make_unique<paged_cache>(memory_, r.seq, model_.config().num_layers, *gathers[i]);
    MOXI_ASSERT(j.cache->length() == r.start, "scheduled start != computed tokens in memory");
    if (r.sample && r.n_tokens() == 1 && r.forks.empty() && r.lookahead > 0 && j.st->drafts_at == r.start &&
        j.st->top_logprobs < 0) {
      j.drafts = std::min<int64_t>(r.lookahead, int64_t(j.st->drafts.size()));
      j.fed.insert(j.fed.end(), j.st->drafts.begin(), j.st->drafts.begin() + j.drafts);
      j.cache->begin_trace();
    }
    j.st->drafts_at = -1;
    items.push_back({j.fed, j.cache.get(), /*last_only=*/j.drafts == 0, media_of(r), &j.hidden});
  }
  const auto logits = model_.forward_batch(items);

  logprobs_.clear();
  ended_.clear();
  sampled_tokens out;
  for (size_t i = 0; i < jobs.size(); ++i) {
    auto& j = jobs[i];
    const auto& r = *j.s;
    j.kept = r.n_tokens();
    if (!r.sample) continue;
    auto& smp = j.st->smp;
    if (j.drafts == 0) {
      // A step without drafts samples as the plain executor does, forks included.
      for (size_t k = 0; k <= r.forks.size(); ++k) {
        const request_id id = k == 0 ? r.id : r.forks[k - 1];
        auto& st = *requests_.at(id);
        const token_id t = st.smp.sample(logits[i]);
        st.smp.accept(t);
        out[id] = {t};
        if (st.smp.constraint_done()) ended_.insert(id);
        if (st.top_logprobs >= 0) logprobs_[id] = logprobs_of(logits[i], t, st.top_logprobs);
      }
      j.emitted = out[r.id];
      continue;
    }
    // Row m holds the logits after fed[m]: the target of draft fed[m + 1], then the bonus token.
    ++draft_stats_.steps;
    draft_stats_.drafted += j.drafts;
    if (int64_t(draft_stats_.accepted_at.size()) < draft_tokens_)
      draft_stats_.accepted_at.resize(size_t(draft_tokens_));
    for (int64_t m = 0; m <= j.drafts; ++m) {
      const std::span<const float> row(logits[i].data() + m * V, size_t(V));
      const std::vector<double> p = smp.distribution(row);
      if (m == j.drafts) {
        const token_id t = runtime::draw_from(p, smp.draw());
        smp.accept(t);
        j.emitted.push_back(t);
        break;
      }
      const double ua = smp.draw(), ur = smp.draw();
      const auto v = runtime::accept_draft(p, j.st->q[size_t(m)], j.fed[size_t(m + 1)], ua, ur);
      smp.accept(v.token);
      j.emitted.push_back(v.token);
      if (v.accepted) {
        ++draft_stats_.accepted;
        ++draft_stats_.accepted_at[size_t(m)];
      }
      if (!v.accepted || smp.constraint_done()) break;
    }
    if (smp.constraint_done()) ended_.insert(r.id);
    j.kept = int64_t(j.emitted.size());  // the scheduled token and the kept drafts
    if (j.kept < int64_t(j.fed.size())) j.cache->keep_states(j.kept);
    out[r.id] = j.emitted;
  }

  // The MTP layer reads each kept position i with the token after it.
  std::vector<std::vector<token_id>> next(jobs.size());
  std::vector<model::mtp_batch_item> mtp_items;
  for (size_t i = 0; i < jobs.size(); ++i) {
    auto& j = jobs[i];
    const auto& r = *j.s;
    next[i].assign(j.fed.begin() + 1, j.fed.begin() + j.kept);
    next[i].push_back(r.sample ? j.emitted.back() : r.next);
    MOXI_ASSERT(next[i].back() >= 0, "executor: a prompt chunk without the token after it");
    mtp_items.push_back(
        {std::span(j.hidden).first(size_t(j.kept * d)), next[i], j.cache.get(), true, &j.mtp_hidden});
  }
  auto draft_logits = model_.mtp_forward_batch(mtp_items);
  // Drafts for the requests that go on decoding: the first from the row just computed, then chained on the
  // MTP layer's own hidden state (docs/speculative.md, step 1).
  std::vector<size_t> drafting;
  for (size_t i = 0; i < jobs.size(); ++i) {
    auto& j = jobs[i];
    if (!j.s->sample || j.st->top_logprobs >= 0 || ended_.count(j.s->id)) continue;
    j.st->drafts.clear();
    j.st->q.clear();
    j.st->drafts_at = j.s->start + j.kept;
    j.cache->save_mtp_states();
    drafting.push_back(i);
  }
  for (int64_t k = 0; k < draft_tokens_ && !drafting.empty(); ++k) {
    std::vector<model::mtp_batch_item> chain;
    std::vector<token_id> one(drafting.size());
    std::vector<std::vector<float>> last(drafting.size());
    for (size_t n = 0; n < drafting.size(); ++n) {
      auto& j = jobs[drafting[n]];
      auto& st = *j.st;
      const auto& l = draft_logits[k == 0 ? drafting[n] : n];
      st.q.push_back(st.smp.draft_distribution(l));
      st.drafts.push_back(runtime::draw_from(st.q.back(), st.smp.draw()));
      if (k + 1 == draft_tokens_) continue;
      one[n] = st.drafts.back();
      last[n].assign(j.mtp_hidden.end() - d, j.mtp_hidden.end());
      chain.push_back({last[n], std::span(&one[n], 1), j.cache.get(), true, &j.mtp_hidden});
    }
    if (k + 1 < draft_tokens_) draft_logits = model_.mtp_forward_batch(chain);
  }
  for (size_t i : drafting) jobs[i].cache->restore_mtp_states();
  for (auto& j : jobs) j.cache->flush(j.kept, j.kept);
  return out;
}

}  // namespace moxi::serve
