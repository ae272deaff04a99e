// server: HTTP handlers (cpp-httplib thread pool) in front of one engine thread. The two sides meet in
// live_request objects (tokens, logprobs and the finish reason under a mutex + condition variable) and in
// the engine's inbox (new requests and cancellations). Detokenization and stop strings run on the handler
// side, so the engine thread only schedules, runs the model and samples.
#include "moxi/serve/server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "moxi/base/error.h"
#include "moxi/memory/cache-spec.h"
#include "moxi/model/model.h"
#include "moxi/serve/api-openai.h"
#include "moxi/serve/connection.h"
#include "moxi/serve/executor.h"
#include "moxi/serve/http-auth.h"

namespace moxi::serve {

using nlohmann::json;
using clock_type = std::chrono::steady_clock;

namespace {

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The engine's side of one request, shared with its HTTP handler.
struct live_request {
  request_id id = 0;
  std::mutex m;
  std::condition_variable cv;
  std::vector<token_id> tokens;     // delivered, not yet consumed by the handler
  std::vector<token_logprobs> lps;  // one per token when logprobs were asked for
  finish_reason fin = finish_reason::NONE;
  bool failed = false;
  std::string error;
  int64_t prompt_tokens = 0, cached_tokens = 0;
  bool scheduled = false;
  clock_type::time_point first_scheduled;
};

// One completion request: its choices (n > 1: the first is computed, the others fork from it after the
// prompt), each with its own sampling seed.
struct pending_add {
  std::vector<std::shared_ptr<live_request>> choices;
  std::vector<runtime::sampling_params> sampling;  // per choice
  request_params params;
  int top_logprobs = -1;
};

}  // namespace

struct server::impl {
  server_config cfg;
  model::model mdl;
  formats::tokenizer tok;
  memory::hybrid_memory memory;
  scheduler sched;
  executor exec;
  metrics mets;
  int64_t max_model_len = 0;
  std::vector<token_id> stop_token_ids;  // end the generation (config eos + generation_config eos ids)
  std::optional<token_id> bos;
  std::optional<formats::chat_template>
      chat_tmpl;  // the model's own (tokenizer_config.json); none: chat is 400

  httplib::Server http;
  std::thread http_thread, engine_thread;
  int bound_port = 0;
  int listen_fd = -1;
  bool started = false, stopped = false;

  // Engine inbox.
  std::mutex in_m;
  std::condition_variable in_cv;
  std::vector<pending_add> adds;
  std::vector<request_id> cancels;
  bool cancel_all = false, stop_engine = false;

  // Engine thread only.
  std::map<request_id, std::shared_ptr<live_request>> live;

  mutable std::mutex snap_m;
  engine_snapshot snap;

  std::atomic<request_id> next_id{1};
  std::atomic<int64_t> active{0};
  std::atomic<bool> shutting_down{false};

  impl(server_config c, model::model m, formats::tokenizer t, const memory::memory_options& mo,
       const scheduler_config& sc)
      : cfg(std::move(c)),
        mdl(std::move(m)),
        tok(std::move(t)),
        memory(memory::cache_spec::from_config(mdl.config()), mo),
        sched(memory, sc),
        exec(mdl, memory, cfg.executor),
        mets(cfg.served_name) {}

  // ---- engine thread ----
  void deliver_error(const std::shared_ptr<live_request>& lr, const std::string& msg) {
    std::lock_guard<std::mutex> l(lr->m);
    lr->failed = true;
    lr->error = msg;
    lr->cv.notify_all();
  }

  void publish() {
    engine_snapshot s;
    const auto& st = sched.stats();
    s.gauges.running = int64_t(sched.num_running());
    s.gauges.waiting = int64_t(sched.num_waiting());
    s.memory = memory.stats();
    s.gauges.kv_cache_usage = s.memory.block_usage();
    s.gauges.prefix_query_tokens = st.prefix_query_tokens;
    s.gauges.prefix_hit_tokens = st.prefix_hit_tokens;
    s.gauges.preemptions = st.preemptions;
    s.live_requests = int64_t(live.size());
    s.computed_tokens = st.scheduled_tokens;
    s.aborted = st.aborted;
    mets.set_engine(s.gauges);
    std::lock_guard<std::mutex> l(snap_m);
    snap = s;
  }

  void engine_loop() {
    publish();  // the idle baseline, before any request
    for (;;) {
      std::vector<pending_add> new_adds;
      std::vector<request_id> new_cancels;
      bool all = false;
      {
        std::unique_lock<std::mutex> l(in_m);
        in_cv.wait(l, [&] {
          return stop_engine || !adds.empty() || !cancels.empty() || cancel_all || sched.has_unfinished();
        });
        if (stop_engine && adds.empty() && !sched.has_unfinished()) break;
        new_adds.swap(adds);
        new_cancels.swap(cancels);
        all = cancel_all;
        cancel_all = false;
      }
      for (auto& a : new_adds) {
        std::vector<request_id> forks;
        for (size_t i = 1; i < a.choices.size(); ++i) forks.push_back(a.choices[i]->id);
        try {
          for (size_t i = 0; i < a.choices.size(); ++i)
            exec.add(a.choices[i]->id, a.sampling[i], a.params.prompt, a.top_logprobs);
          sched.add_request(a.choices[0]->id, std::move(a.params), forks);
          for (const auto& lr : a.choices) live[lr->id] = lr;
        } catch (const std::exception& e) {
          for (const auto& lr : a.choices) {
            exec.remove(lr->id);
            deliver_error(lr, e.what());
          }
        }
      }
      for (request_id id : new_cancels) sched.cancel(id);
      if (all)
        for (const auto& [id, lr] : live) sched.cancel(id);
      if (sched.has_unfinished()) step();
      publish();
    }
    publish();
  }

  void step() {
    const scheduler_output out = sched.schedule();
    const auto now = clock_type::now();
    for (const auto& s : out.scheduled)
      for (size_t k = 0; k <= s.forks.size(); ++k) {  // a request and the forks its step samples for
        auto it = live.find(k == 0 ? s.id : s.forks[k - 1]);
        if (it == live.end()) continue;
        std::lock_guard<std::mutex> l(it->second->m);
        if (!it->second->scheduled) it->second->scheduled = true, it->second->first_scheduled = now;
      }
    std::map<request_id, token_id> sampled;
    try {
      if (!out.scheduled.empty()) sampled = exec.execute(out);
    } catch (const std::exception& e) {
      // A model failure fails the step's requests; their memory is freed by cancelling them, and the
      // update below (which commits nothing for them) is skipped.
      std::fprintf(stderr, "moxi serve: step failed: %s\n", e.what());
      for (const auto& s : out.scheduled)
        for (size_t k = 0; k <= s.forks.size(); ++k) {  // forks waiting for this step fail with it
          const request_id id = k == 0 ? s.id : s.forks[k - 1];
          sched.cancel(id);
          auto it = live.find(id);
          if (it != live.end()) deliver_error(it->second, std::string("the model failed: ") + e.what());
        }
      for (request_id id : out.aborted) finish_live(id);
      return;
    }
    const auto events = sched.update(out, sampled);
    const auto& lps = exec.last_logprobs();
    for (const auto& ev : events) {
      std::vector<token_logprobs> lp;
      if (auto it = lps.find(ev.id); it != lps.end()) lp.push_back(it->second);
      auto it = live.find(ev.id);
      if (it == live.end()) continue;
      {
        auto& lr = *it->second;
        std::lock_guard<std::mutex> l(lr.m);
        lr.tokens.insert(lr.tokens.end(), ev.new_tokens.begin(), ev.new_tokens.end());
        lr.lps.insert(lr.lps.end(), lp.begin(), lp.end());
        lr.prompt_tokens = ev.num_prompt_tokens;
        lr.cached_tokens = ev.num_cached_tokens;
        lr.fin = ev.finished;
        lr.cv.notify_all();
      }
      if (ev.finished != finish_reason::NONE) {
        exec.remove(ev.id);
        live.erase(ev.id);
      }
    }
  }

  void finish_live(request_id id) {
    auto it = live.find(id);
    if (it == live.end()) return;
    {
      std::lock_guard<std::mutex> l(it->second->m);
      it->second->fin = finish_reason::ABORT;
      it->second->cv.notify_all();
    }
    exec.remove(id);
    live.erase(it);
  }

  // ---- handler side ----
  void submit(pending_add a) {
    std::lock_guard<std::mutex> l(in_m);
    adds.push_back(std::move(a));
    in_cv.notify_one();
  }
  void cancel(request_id id) {
    std::lock_guard<std::mutex> l(in_m);
    cancels.push_back(id);
    in_cv.notify_one();
  }

  void send_error(httplib::Response& res, int status, const std::string& msg, const std::string& param = "",
                  const std::string& type = "") {
    res.status = status;
    res.set_content(error_body(status, msg, param, type), "application/json");
  }

  void setup_routes();
  void handle_completion(const httplib::Request& req, httplib::Response& res, bool chat);
};

namespace {

// Counts a completion in flight for the 429 limit and graceful shutdown; released when the response is done.
struct active_guard {
  std::atomic<int64_t>& n;
  explicit active_guard(std::atomic<int64_t>& c) : n(c) {}
  ~active_guard() { n.fetch_sub(1); }
};

// The handler's view of one generation: consumes the engine's tokens, detokenizes, applies stop strings,
// and keeps the counts the response and the metrics need.
struct generation {
  server::impl& s;
  completion_request req;
  std::shared_ptr<live_request> lr;
  formats::stream_decoder dec;
  runtime::stop_checker stop;
  clock_type::time_point arrival;
  clock_type::time_point last_token;
  int64_t completion_tokens = 0, prompt_tokens = 0, cached_tokens = 0;
  std::string finish;  // "", "stop", "length", "abort", "error"
  std::string error;
  bool engine_done = false;

  generation(server::impl& srv, completion_request r, std::shared_ptr<live_request> l,
             clock_type::time_point t0, std::vector<token_id> stop_ids)
      : s(srv),
        req(std::move(r)),
        lr(std::move(l)),
        dec(srv.tok, /*skip_special=*/true),
        stop(req.stop, std::move(stop_ids)),
        arrival(t0) {}

  bool finished() const { return !finish.empty(); }

  // A model may have more ids than its tokenizer (padded embeddings, a random checkpoint): such a token
  // has no text, as in vLLM, instead of failing the request.
  std::string piece(token_id t) {
    if (t < 0 || t >= s.tok.vocab_size()) return "";
    try {
      return dec.push(t);
    } catch (const std::exception&) {
      return "";
    }
  }
  // vLLM's return_tokens_as_token_ids renders logprob tokens as "token_id:N" (exact, whatever the bytes).
  std::string token_text(token_id t) const {
    if (req.tokens_as_ids) return "token_id:" + std::to_string(t);
    return t >= 0 && t < s.tok.vocab_size() ? std::string(s.tok.token_bytes(t)) : std::string();
  }

  // Waits up to `wait` for engine events and turns them into text (and logprob entries). Returns true when
  // something changed (text, a finish).
  bool poll(std::chrono::milliseconds wait, std::string& text, std::vector<logprob_entry>& lps) {
    std::vector<token_id> toks;
    std::vector<token_logprobs> tlp;
    finish_reason fin;
    bool failed;
    clock_type::time_point sched_at;
    bool scheduled;
    {
      std::unique_lock<std::mutex> l(lr->m);
      lr->cv.wait_for(l, wait,
                      [&] { return !lr->tokens.empty() || lr->fin != finish_reason::NONE || lr->failed; });
      toks.swap(lr->tokens);
      tlp.swap(lr->lps);
      fin = lr->fin;
      failed = lr->failed;
      error = lr->error;
      prompt_tokens = lr->prompt_tokens;
      cached_tokens = lr->cached_tokens;
      sched_at = lr->first_scheduled;
      scheduled = lr->scheduled;
    }
    if (failed) {
      finish = "error";
      engine_done = true;
      return true;
    }
    const auto now = clock_type::now();
    if (!toks.empty()) {
      if (completion_tokens == 0)
        s.mets.first_token(seconds_since(arrival),
                           scheduled ? std::chrono::duration<double>(sched_at - arrival).count() : 0.0);
      else
        s.mets.inter_token(std::chrono::duration<double>(now - last_token).count(), int64_t(toks.size()));
      last_token = now;
    }
    for (size_t i = 0; i < toks.size() && !finished(); ++i) {
      ++completion_tokens;
      const auto step = stop.push(toks[i], piece(toks[i]));
      text += step.text;
      if (req.top_logprobs >= 0 && i < tlp.size()) {
        logprob_entry e;
        e.token_text = token_text(toks[i]);
        e.logprob = tlp[i].logprob;
        for (const auto& [t, lp] : tlp[i].top) e.top.emplace_back(token_text(t), lp);
        lps.push_back(std::move(e));
      }
      if (step.stopped) {
        finish = "stop";
        // A stop string (or eos) ended it on this side; the engine may still be generating.
        if (fin == finish_reason::NONE) s.cancel(lr->id);
      }
    }
    if (!finished() && fin != finish_reason::NONE) {
      const std::string tail = dec.flush();
      if (!tail.empty()) {
        const auto st = stop.push(-1, tail);
        text += st.text;
        if (st.stopped) finish = "stop";
      }
      if (!finished()) text += stop.flush();
      if (!finished())
        finish = fin == finish_reason::STOP ? "stop" : fin == finish_reason::LENGTH ? "length" : "abort";
    }
    if (fin != finish_reason::NONE) engine_done = true;
    return !toks.empty() || finished();
  }

  void abandon() {
    if (!engine_done) s.cancel(lr->id);
  }

  void record_finish() {
    s.mets.request_finished(finish, seconds_since(arrival), prompt_tokens, completion_tokens);
  }

  usage_counts usage() const { return {prompt_tokens, completion_tokens, cached_tokens}; }
};

std::string hex_id(request_id id) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(id * 0x9e3779b97f4a7c15ULL));
  return buf;
}

}  // namespace

void server::impl::handle_completion(const httplib::Request& req, httplib::Response& res, bool chat) {
  const auto arrival = clock_type::now();
  if (shutting_down.load()) return send_error(res, 503, "the server is shutting down");
  if (active.fetch_add(1) >= cfg.max_concurrent_requests) {
    active.fetch_sub(1);
    return send_error(res, 429,
                      "too many concurrent requests (limit " + std::to_string(cfg.max_concurrent_requests) +
                          "); retry later");
  }
  auto guard = std::make_shared<active_guard>(active);

  completion_request r;
  std::vector<token_id> prompt;
  try {
    r = parse_completion_request(req.body, chat, cfg.served_name);
    if (chat) {
      // The template's special tokens (<|user|>, <|end|> ...) must encode as specials, so the rendered text
      // is encoded with them on; as in vLLM, special-token text inside a message then is one too.
      prompt = tok.encode(render_chat(chat_tmpl ? &*chat_tmpl : nullptr, r), /*allow_special=*/true);
    } else if (r.prompt_text) {
      prompt = tok.encode(*r.prompt_text, /*allow_special=*/true);
    } else {
      prompt = r.prompt_ids;
    }
  } catch (const api_error& e) {
    return send_error(res, e.status, e.what(), e.param, e.type);
  } catch (const std::exception& e) {
    return send_error(res, 400, std::string("cannot tokenize the prompt: ") + e.what(), "prompt");
  }
  for (token_id t : prompt)
    if (t < 0 || t >= mdl.config().vocab_size)
      return send_error(res, 400, "token id " + std::to_string(t) + " is outside the vocabulary", "prompt");
  if (prompt.empty() && bos) prompt.push_back(*bos);
  if (prompt.empty()) return send_error(res, 400, "the prompt is empty", "prompt");
  const int64_t max_prompt = cfg.max_prompt_tokens > 0 ? cfg.max_prompt_tokens : max_model_len - 1;
  if (int64_t(prompt.size()) > max_prompt)
    return send_error(res, 400,
                      "the prompt has " + std::to_string(prompt.size()) + " tokens; the limit is " +
                          std::to_string(max_prompt),
                      "prompt");
  const int64_t max_limit = cfg.max_tokens_limit > 0 ? cfg.max_tokens_limit : max_model_len - 1;
  const int64_t max_tokens =
      r.max_tokens.value_or(std::min(cfg.default_max_tokens, max_model_len - int64_t(prompt.size())));
  if (max_tokens > max_limit)
    return send_error(
        res, 400,
        "max_tokens " + std::to_string(max_tokens) + " exceeds the limit of " + std::to_string(max_limit),
        "max_tokens");
  if (int64_t(prompt.size()) + max_tokens > max_model_len)
    return send_error(res, 400,
                      "This model's maximum context length is " + std::to_string(max_model_len) +
                          " tokens. However, you requested " + std::to_string(prompt.size() + max_tokens) +
                          " tokens (" + std::to_string(prompt.size()) + " in the messages, " +
                          std::to_string(max_tokens) + " in the completion).",
                      "max_tokens");
  try {
    runtime::validate(r.sampling);
  } catch (const std::exception& e) {
    return send_error(res, 400, e.what());
  }

  // n > 1: parallel sampling. The prompt is computed once; the other choices fork from it (shared blocks,
  // copied KDA state) and sample their first token from the same logits. A seeded request gives choice i
  // the seed + i, so choices differ but repeat, and each equals a single request with that seed.
  std::vector<std::shared_ptr<generation>> gens;
  std::vector<token_id> stop_ids;
  if (!r.ignore_eos) stop_ids = stop_token_ids;
  pending_add a;
  a.params.prompt = prompt;
  a.params.max_tokens = max_tokens;
  a.params.stop_tokens = stop_ids;
  a.top_logprobs = r.top_logprobs;
  for (int i = 0; i < r.n; ++i) {
    auto lr = std::make_shared<live_request>();
    lr->id = next_id.fetch_add(1);
    a.choices.push_back(lr);
    a.sampling.push_back(r.sampling);
    if (r.sampling.seed) a.sampling.back().seed = *r.sampling.seed + uint64_t(i);
    mets.request_started();
    gens.push_back(std::make_shared<generation>(*this, r, lr, arrival, stop_ids));
  }
  submit(std::move(a));
  const std::string id = (chat ? "chatcmpl-" : "cmpl-") + hex_id(gens[0]->lr->id);
  const int64_t created = unix_now();
  const auto deadline = arrival + std::chrono::milliseconds(int64_t(cfg.request_timeout_s * 1000));
  auto all_finished = [gens] {
    for (const auto& g : gens)
      if (!g->finished()) return false;
    return true;
  };
  auto usage = [gens] {
    usage_counts u = gens[0]->usage();
    for (size_t i = 1; i < gens.size(); ++i) u.completion_tokens += gens[i]->completion_tokens;
    return u;
  };
  // Waits on the first unfinished choice, then collects from all without waiting.
  auto poll_all = [gens](std::chrono::milliseconds wait, std::vector<std::string>& texts,
                         std::vector<std::vector<logprob_entry>>& lps) {
    bool waited = false;
    for (size_t i = 0; i < gens.size(); ++i) {
      if (gens[i]->finished()) continue;
      gens[i]->poll(waited ? std::chrono::milliseconds(0) : wait, texts[i], lps[i]);
      waited = true;
    }
  };
  const size_t n = gens.size();

  if (!r.stream) {
    std::vector<std::string> texts(n);
    std::vector<std::vector<logprob_entry>> lps(n);
    // A client that closes the connection while the request runs cancels it (the engine frees its memory
    // at the next step); looked for at every wake-up, at least every 200 ms.
    int fd = -2;  // -2: not looked up yet (short requests finish before the first wake-up)
    while (!all_finished()) {
      poll_all(std::chrono::milliseconds(200), texts, lps);
      if (all_finished()) break;
      if (fd == -2) fd = find_connection_fd(req.remote_addr, req.remote_port, bound_port);
      if (fd >= 0 && peer_closed(fd)) {
        for (auto& g : gens) {
          g->abandon();
          if (!g->finished()) g->finish = "abort";
          g->record_finish();
        }
        return send_error(res, 499, "the client closed the connection");
      }
      if (!all_finished() && clock_type::now() > deadline) {
        for (auto& g : gens) {
          g->abandon();
          if (!g->finished()) g->finish = "abort";
          g->record_finish();
        }
        return send_error(res, 504,
                          "the request timed out after " + std::to_string(cfg.request_timeout_s) + " s");
      }
    }
    json choices = json::array();
    for (size_t i = 0; i < n; ++i) {
      const auto& g = gens[i];
      g->record_finish();
      if (g->finish == "error") return send_error(res, 500, g->error);
      json choice = {{"index", i}, {"finish_reason", g->finish}, {"logprobs", nullptr}};
      if (r.top_logprobs >= 0) choice["logprobs"] = logprobs_json(chat, lps[i]);
      if (chat)
        choice["message"] = {{"role", "assistant"}, {"content", texts[i]}};
      else
        choice["text"] = texts[i];
      choices.push_back(std::move(choice));
    }
    json body = {{"id", id},           {"object", chat ? "chat.completion" : "text_completion"},
                 {"created", created}, {"model", cfg.served_name},
                 {"choices", choices}, {"usage", usage().to_json()}};
    res.set_content(dump(body), "application/json");
    return;
  }

  // Streaming: one SSE event per choice per engine wake-up that produced text, then each choice's final
  // chunk (finish_reason), the usage chunk when asked for, and [DONE]. A failed write means the client
  // left: cancel.
  struct stream_state {
    bool sent_role = false, failed = false;
    std::vector<bool> sent_final;
    clock_type::time_point last_write = clock_type::now();
  };
  auto st = std::make_shared<stream_state>();
  st->sent_final.assign(n, false);
  auto chunk = [this, id, created, chat](size_t index, const std::string& text, const json& logprobs,
                                         const json& finish, bool role) {
    json choice = {{"index", index}, {"logprobs", logprobs}, {"finish_reason", finish}};
    if (chat) {
      json delta = json::object();
      if (role) delta["role"] = "assistant";
      if (!text.empty() || role) delta["content"] = text;
      choice["delta"] = delta;
    } else {
      choice["text"] = text;
    }
    json c = {{"id", id},
              {"object", chat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", cfg.served_name},
              {"choices", json::array({choice})}};
    return "data: " + dump(c) + "\n\n";
  };
  const bool include_usage = r.include_usage, want_logprobs = r.top_logprobs >= 0;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, gens, st, chunk, chat, id, created, deadline, guard, n, include_usage, want_logprobs,
       all_finished, usage, poll_all](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& s) {
          st->last_write = clock_type::now();
          return sink.write(s.data(), s.size());
        };
        if (chat && !st->sent_role) {
          st->sent_role = true;
          for (size_t i = 0; i < n; ++i)
            if (!write(chunk(i, "", nullptr, nullptr, true))) return false;
        }
        std::vector<std::string> texts(n);
        std::vector<std::vector<logprob_entry>> lps(n);
        poll_all(std::chrono::milliseconds(100), texts, lps);
        const bool timed_out = !all_finished() && clock_type::now() > deadline;
        bool wrote = false;
        for (size_t i = 0; i < n; ++i) {
          auto& g = *gens[i];
          if (timed_out && !g.finished()) {
            g.abandon();
            g.finish = "abort";
          }
          if (g.finish == "error") {
            write("data: " + error_body(500, g.error) + "\n\n");
            for (auto& other : gens) {
              other->abandon();
              if (!other->finished()) other->finish = "abort";
            }
            write("data: [DONE]\n\n");
            sink.done();
            return true;
          }
          const json lp = want_logprobs && !lps[i].empty() ? logprobs_json(chat, lps[i]) : json(nullptr);
          if (!texts[i].empty() || !lps[i].empty()) {
            if (!write(chunk(i, texts[i], lp, nullptr, false))) return false;
            wrote = true;
          }
          if (g.finished() && !st->sent_final[i]) {
            st->sent_final[i] = true;
            if (!write(chunk(i, "", nullptr, g.finish, false))) return false;
            wrote = true;
          }
        }
        if (all_finished()) {
          if (include_usage) {
            json u = {{"id", id},
                      {"object", chat ? "chat.completion.chunk" : "text_completion"},
                      {"created", created},
                      {"model", cfg.served_name},
                      {"choices", json::array()},
                      {"usage", usage().to_json()}};
            if (!write("data: " + dump(u) + "\n\n")) return false;
          }
          write("data: [DONE]\n\n");
          sink.done();
        } else if (!wrote && seconds_since(st->last_write) > 1.0) {
          // An SSE comment while nothing is produced (queue, long prefill): clients ignore it, and a
          // client that left is noticed by the failed write.
          if (!write(": keep-alive\n\n")) return false;
        }
        return true;
      },
      [gens](bool) {
        // Runs when the response ends, normally or because the client went away.
        for (auto& g : gens) {
          if (!g->finished()) g->finish = "abort";
          g->abandon();
          g->record_finish();
        }
      });
}

void server::impl::setup_routes() {
  http.set_payload_max_length(cfg.max_body_bytes);
  http.set_read_timeout(cfg.io_timeout_s, 0);
  http.set_write_timeout(cfg.io_timeout_s, 0);
  // An idle keep-alive connection holds a handler thread; it gets no longer than a slow read would.
  http.set_keep_alive_timeout(std::min(5, cfg.io_timeout_s));
  // SSE chunks are small writes: with Nagle's algorithm each waits for the ACK of the previous one, which a
  // client's delayed ACK holds back ~40 ms (tokens then arrive in bursts; TTFT gains 40-80 ms).
  http.set_tcp_nodelay(true);
  const size_t threads = size_t(cfg.max_concurrent_requests) + 32;
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };

  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (cfg.api_keys.empty() || req.path.rfind("/v1/", 0) != 0)
      return httplib::Server::HandlerResponse::Unhandled;
    if (api_key_ok(req.get_header_value("Authorization"), cfg.api_keys))
      return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, 401, "invalid or missing API key (send 'Authorization: Bearer <key>')", "",
               "authentication_error");
    mets.http_error(401);
    return httplib::Server::HandlerResponse::Handled;
  });
  http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    mets.http_error(res.status);
    if (!res.body.empty()) return;
    std::string msg = "error " + std::to_string(res.status);
    if (res.status == 404) msg = "no route for " + req.method + " " + req.path;
    if (res.status == 405) msg = "method " + req.method + " is not allowed on " + req.path;
    if (res.status == 413) msg = "the request body exceeds " + std::to_string(cfg.max_body_bytes) + " bytes";
    if (res.status == 400) msg = "malformed HTTP request";
    res.set_content(error_body(res.status, msg), "application/json");
  });
  http.set_exception_handler([this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string msg = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      msg = std::string("internal error: ") + e.what();
    } catch (...) {
    }
    send_error(res, 500, msg);
  });
  if (cfg.log_requests)
    http.set_logger([](const httplib::Request& req, const httplib::Response& res) {
      std::fprintf(stderr, "%s %s -> %d\n", req.method.c_str(), req.path.c_str(), res.status);
    });

  http.Post("/v1/completions",
            [this](const httplib::Request& q, httplib::Response& r) { handle_completion(q, r, false); });
  http.Post("/v1/chat/completions",
            [this](const httplib::Request& q, httplib::Response& r) { handle_completion(q, r, true); });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    json m = {{"id", cfg.served_name}, {"object", "model"},     {"created", unix_now()},
              {"owned_by", "moxi"},    {"root", cfg.model_dir}, {"max_model_len", max_model_len}};
    res.set_content(dump(json{{"object", "list"}, {"data", json::array({m})}}), "application/json");
  });
  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (shutting_down.load()) return send_error(res, 503, "the server is shutting down");
    res.set_content("{\"status\":\"ok\"}", "application/json");
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(mets.render(), "text/plain; version=0.0.4; charset=utf-8");
  });
}

namespace {

// generation_config.json's eos_token_id (one id or a list, as transformers writes it), e.g. moxi-tiny's
// <|end|> that ends a chat turn; empty without the file.
std::vector<token_id> generation_stop_ids(const std::string& model_dir, int64_t vocab_size) {
  const std::string path = model_dir + "/generation_config.json";
  std::ifstream in(path);
  if (!in) return {};
  const json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw error(path + ": not a JSON object");
  if (!j.contains("eos_token_id") || j["eos_token_id"].is_null()) return {};
  const json& e = j["eos_token_id"];
  std::vector<token_id> ids;
  for (const json& x : e.is_array() ? e : json::array({e})) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= vocab_size)
      throw error(path + ": eos_token_id must be token ids below vocab_size " + std::to_string(vocab_size) +
                  ", got " + e.dump());
    ids.push_back(token_id(x.get<int64_t>()));
  }
  return ids;
}

std::unique_ptr<server::impl> make_impl(server_config cfg) {
  if (cfg.served_name.empty()) {
    cfg.served_name = std::filesystem::path(cfg.model_dir).lexically_normal().filename().string();
    if (cfg.served_name.empty())
      cfg.served_name = std::filesystem::path(cfg.model_dir).parent_path().filename();
    if (cfg.served_name.empty()) cfg.served_name = "moxi";
  }
  auto m = model::model::load(cfg.model_dir);
  auto t = formats::tokenizer::from_hf_json_file(cfg.model_dir + "/tokenizer.json");
  const auto& c = m.config();
  int64_t len = cfg.max_model_len > 0 ? cfg.max_model_len : c.max_position_embeddings;
  if (len <= 1) len = 4096;
  if (cfg.block_size < 1 || cfg.max_running < 1 || cfg.max_batch_tokens < 1)
    throw error("serve: block size, max running requests and max batch tokens must be >= 1");
  memory::memory_options mo;
  mo.block_size = cfg.block_size;
  const int64_t per_seq = (len + cfg.block_size - 1) / cfg.block_size;
  mo.num_blocks = cfg.num_blocks > 0
                      ? cfg.num_blocks
                      : int32_t(std::max<int64_t>(per_seq + 1, std::min<int64_t>(65536, 2048)));
  mo.num_state_slots = cfg.max_running + 1;
  mo.num_snapshot_slots = cfg.num_snapshot_slots >= 0 ? cfg.num_snapshot_slots : 2 * cfg.max_running;
  mo.prefix_caching = cfg.prefix_caching;
  scheduler_config sc;
  sc.max_num_batched_tokens = cfg.max_batch_tokens;
  sc.max_num_running = cfg.max_running;
  sc.max_model_len = std::min<int64_t>(len, int64_t(mo.num_blocks) * mo.block_size);
  auto tmpl = formats::load_chat_template(cfg.model_dir);
  auto p = std::make_unique<server::impl>(std::move(cfg), std::move(m), std::move(t), mo, sc);
  p->chat_tmpl = std::move(tmpl);
  p->max_model_len = p->sched.config().max_model_len;
  if (c.eos_token_id) p->stop_token_ids.push_back(token_id(*c.eos_token_id));
  for (token_id id : generation_stop_ids(p->cfg.model_dir, c.vocab_size))
    if (std::find(p->stop_token_ids.begin(), p->stop_token_ids.end(), id) == p->stop_token_ids.end())
      p->stop_token_ids.push_back(id);
  if (c.bos_token_id) p->bos = token_id(*c.bos_token_id);
  return p;
}

}  // namespace

server::server(server_config config) : impl_(make_impl(std::move(config))) {}

server::~server() {
  shutdown();
}

void server::start() {
  auto& p = *impl_;
  MOXI_ASSERT(!p.started, "server started twice");
  p.setup_routes();
  p.http.set_socket_options([&p](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);  // httplib's default option
    p.listen_fd = sock;
  });
  if (p.cfg.port == 0) {
    p.bound_port = p.http.bind_to_any_port(p.cfg.host);
    if (p.bound_port <= 0) throw error("serve: cannot bind " + p.cfg.host + " to any port");
  } else {
    if (!p.http.bind_to_port(p.cfg.host, p.cfg.port))
      throw error("serve: cannot bind " + p.cfg.host + ":" + std::to_string(p.cfg.port));
    p.bound_port = p.cfg.port;
  }
  // cpp-httplib 0.11 listens with a backlog of 5: a burst of clients (the load test's 64 connecting at
  // once) overflows it and the kernel drops their handshakes. listen() again raises it on Linux.
  if (p.listen_fd >= 0) ::listen(p.listen_fd, 1024);
  p.started = true;
  p.engine_thread = std::thread([&p] { p.engine_loop(); });
  p.http_thread = std::thread([&p] { p.http.listen_after_bind(); });
}

void server::shutdown() {
  auto& p = *impl_;
  if (!p.started || p.stopped) return;
  p.stopped = true;
  p.shutting_down = true;
  // Drain: in-flight requests finish (the listener keeps serving them, new ones get 503) ...
  const auto until = clock_type::now() + std::chrono::milliseconds(int64_t(p.cfg.drain_timeout_s * 1000));
  while (p.active.load() > 0 && clock_type::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  // ... and what is left is cancelled (finish_reason "abort").
  if (p.active.load() > 0) {
    {
      std::lock_guard<std::mutex> l(p.in_m);
      p.cancel_all = true;
      p.in_cv.notify_one();
    }
    const auto hard = clock_type::now() + std::chrono::seconds(5);
    while (p.active.load() > 0 && clock_type::now() < hard)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  p.http.stop();
  if (p.http_thread.joinable()) p.http_thread.join();
  {
    std::lock_guard<std::mutex> l(p.in_m);
    p.stop_engine = true;
    // Requests still in the engine (a client that never read its stream) are cancelled so the loop ends.
    p.cancel_all = true;
    p.in_cv.notify_one();
  }
  if (p.engine_thread.joinable()) p.engine_thread.join();
}

int server::port() const {
  return impl_->bound_port;
}
const server_config& server::config() const {
  return impl_->cfg;
}

engine_snapshot server::snapshot() const {
  std::lock_guard<std::mutex> l(impl_->snap_m);
  engine_snapshot s = impl_->snap;
  s.active_http = impl_->active.load();
  return s;
}

std::string server::metrics_text() const {
  return impl_->mets.render();
}

}  // namespace moxi::serve
