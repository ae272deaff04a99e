// server: HTTP handlers in front of one engine thread. The transport (http-transport.h) answers cheap routes
// on its event loop and hands each completion to a thread of its own; the two sides meet in live_request
// objects (tokens, logprobs and the finish reason under a mutex + condition variable) and in the engine's
// inbox (new requests and cancellations). Detokenization and stop strings run on the handler side, so the
// engine thread only runs engine_core::step (schedule, the model, sampling).
#include "moxi/serve/server.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <list>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>

#include "moxi/base/error.h"
#include "moxi/memory/cache-spec.h"
#include "moxi/model/model.h"
#include "moxi/serve/api-openai.h"
#include "moxi/serve/clock.h"
#include "moxi/serve/engine-core.h"
#include "moxi/serve/executor.h"
#include "moxi/serve/http-auth.h"
#include "moxi/serve/http-transport.h"

namespace moxi::serve {

using nlohmann::json;

namespace {

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
  std::shared_ptr<const runtime::json_grammar> grammar;  // response_format; null: text
  std::shared_ptr<const std::vector<float>> media;      // image rows of the prompt's placeholders
};

using header_list = std::vector<std::pair<std::string, std::string>>;

}  // namespace

struct server::impl {
  server_config cfg;
  model::model mdl;
  formats::tokenizer tok;
  memory::hybrid_memory memory;
  scheduler sched;
  executor exec;
  std::unique_ptr<model_runner> group_runner;  // a serving group's leader: exec, then the broadcast of samples
  engine_core engine;
  metrics mets;
  int64_t max_model_len = 0;
  std::vector<token_id> stop_token_ids;  // end the generation (config eos + generation_config eos ids)
  std::optional<token_id> bos;
  // Every token's bytes, for response_format's constrained decoding; built on the first such request.
  std::once_flag token_table_once;
  std::shared_ptr<const runtime::token_table> token_table;
  std::optional<formats::chat_template>
      chat_tmpl;  // the model's own (tokenizer_config.json); none: chat is 400
  std::vector<std::string>
      private_paths;  // the model directory as given and resolved: never shown to clients

  std::unique_ptr<http_server> http;
  std::thread engine_thread;
  int bound_port = 0;
  bool started = false, stopped = false;

  // Completion handler threads (one per request in flight, at most max_concurrent_requests).
  std::mutex workers_m;
  std::list<std::pair<std::thread, std::shared_ptr<std::atomic<bool>>>> workers;

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
  // Set once by fail_group: the message every request gets from then on.
  std::atomic<bool> group_failed{false};
  std::mutex group_error_m;
  std::string group_error;
  std::string group_failure() {
    std::lock_guard<std::mutex> l(group_error_m);
    return group_error;
  }

  impl(server_config c, model::model m, formats::tokenizer t, const memory::memory_options& mo,
       const scheduler_config& sc)
      : cfg(std::move(c)),
        mdl(std::move(m)),
        tok(std::move(t)),
        memory(cache_spec_of(mdl), mo),
        sched(memory, sc),
        exec(mdl, memory, cfg.executor),
        group_runner(cfg.group ? std::make_unique<group_leader_runner>(exec, *cfg.group) : nullptr),
        engine(sched, group_runner ? *group_runner : static_cast<model_runner&>(exec)),
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
    s.gauges.prefill_tokens_pending = sched.prefill_tokens_pending();
    s.gauges.prefill_tokens = st.prefill_tokens;
    s.gauges.draft_tokens = exec.draft_tokens();
    s.gauges.drafts = exec.drafts();
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
        auto work = [&] {
          return stop_engine || !adds.empty() || !cancels.empty() || cancel_all || sched.has_unfinished();
        };
        // A serving group hears from rank 0 at least once a second (a heartbeat when idle).
        if (cfg.group)
          in_cv.wait_for(l, std::chrono::seconds(1), work);
        else
          in_cv.wait(l, work);
        if (stop_engine && adds.empty() && !sched.has_unfinished()) break;
        new_adds.swap(adds);
        new_cancels.swap(cancels);
        all = cancel_all;
        cancel_all = false;
      }
      group_events events;  // what the other ranks of a group apply before this step, in this order
      for (auto& a : new_adds) {
        std::vector<request_id> forks;
        for (size_t i = 1; i < a.choices.size(); ++i) forks.push_back(a.choices[i]->id);
        try {
          for (size_t i = 0; i < a.choices.size(); ++i) {
            std::optional<runtime::json_constraint> constraint;
            if (a.grammar) constraint.emplace(a.grammar, token_table, a.params.stop_tokens);
            exec.add(a.choices[i]->id, a.sampling[i], a.params.prompt, a.top_logprobs, std::move(constraint),
                     a.media);
          }
          std::optional<group_add> shared;  // copied before the scheduler takes the params
          if (cfg.group) shared = group_add{a.choices[0]->id, forks, a.params, a.media};
          sched.add_request(a.choices[0]->id, std::move(a.params), forks);
          if (shared) events.adds.push_back(std::move(*shared));
          for (const auto& lr : a.choices) live[lr->id] = lr;
        } catch (const std::exception& e) {
          for (const auto& lr : a.choices) {
            exec.remove(lr->id);
            deliver_error(lr, e.what());
          }
        }
      }
      if (all)
        for (const auto& [id, lr] : live) new_cancels.push_back(id);
      for (request_id id : new_cancels) sched.cancel(id);
      if (cfg.group) {
        events.cancels = new_cancels;
        cfg.group->send_events(events);
      }
      if (sched.has_unfinished()) step();
      publish();
    }
    if (cfg.group) cfg.group->send_stop();
    publish();
  }

  // engine_core::step, and its results handed to the requests' handlers.
  void step() {
    const auto t0 = clock_type::now();  // when the step's batch is scheduled (queue time ends)
    const step_result res = engine.step();
    for (const auto& s : res.scheduled.scheduled)
      for (size_t k = 0; k <= s.forks.size(); ++k) {  // a request and the forks its step samples for
        auto it = live.find(k == 0 ? s.id : s.forks[k - 1]);
        if (it == live.end()) continue;
        std::lock_guard<std::mutex> l(it->second->m);
        if (!it->second->scheduled) it->second->scheduled = true, it->second->first_scheduled = t0;
      }
    if (!res.failed.empty()) {
      // A model failure fails the step's requests (the engine cancelled them; the next step frees them).
      std::fprintf(stderr, "moxi serve: step failed: %s\n", res.error.c_str());
      for (request_id id : res.failed)
        if (auto it = live.find(id); it != live.end())
          deliver_error(it->second, "the model failed: " + res.error);
    }
    const auto& lps = exec.last_logprobs();
    for (const auto& ev : res.outputs) {
      auto it = live.find(ev.id);
      if (it == live.end()) continue;
      {
        auto& lr = *it->second;
        std::lock_guard<std::mutex> l(lr.m);
        lr.tokens.insert(lr.tokens.end(), ev.new_tokens.begin(), ev.new_tokens.end());
        // The step's logprobs belong to the token it sampled (an abort-only event has none).
        if (auto lp = lps.find(ev.id); lp != lps.end() && !ev.new_tokens.empty() && res.failed.empty())
          lr.lps.push_back(lp->second);
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

  // What a client may read of a message: the model's filesystem location becomes its served name.
  std::string redact(std::string msg) const {
    for (const auto& p : private_paths)
      for (size_t at; !p.empty() && (at = msg.find(p)) != std::string::npos;)
        msg.replace(at, p.size(), cfg.served_name);
    return msg;
  }
  std::string error_json(int status, const std::string& msg, const std::string& param = "",
                         const std::string& type = "") const {
    return error_body(status, redact(msg), param, type);
  }
  void send_error(http_exchange& ex, int status, const std::string& msg, const std::string& param = "",
                  const std::string& type = "") {
    ex.reply(status, "application/json", error_json(status, msg, param, type));
  }

  void spawn(std::function<void()> fn) {
    std::lock_guard<std::mutex> l(workers_m);
    for (auto it = workers.begin(); it != workers.end();) {
      if (it->second->load()) {
        it->first.join();
        it = workers.erase(it);
      } else {
        ++it;
      }
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    workers.emplace_back(std::thread([fn = std::move(fn), done] {
                           fn();
                           done->store(true);
                         }),
                         done);
  }
  void join_workers() {
    std::list<std::pair<std::thread, std::shared_ptr<std::atomic<bool>>>> all;
    {
      std::lock_guard<std::mutex> l(workers_m);
      all.swap(workers);
    }
    for (auto& [t, done] : all)
      if (t.joinable()) t.join();
  }

  http_limits limits() const;
  void route(http_request req, std::shared_ptr<http_exchange> ex);  // on the event loop: must not block
  void handle_completion(const http_request& req, http_exchange& ex, bool chat);  // on a handler thread
};

namespace {

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
  int64_t image_tokens = 0;  // of the prompt's tokens, the image placeholders'
  std::string finish;  // "", "stop", "length", "abort", "error"
  std::string error;
  int error_status = 500;  // of an "error" finish: 503 when the serving group lost a rank
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
    if (!failed && s.group_failed.load()) {
      // The engine may be stuck in a collective with a lost rank: the request ends here, not there.
      failed = true;
      error = s.group_failure();
      error_status = 503;
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

  usage_counts usage() const { return {prompt_tokens, completion_tokens, cached_tokens, image_tokens}; }
};

std::string hex_id(request_id id) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(id * 0x9e3779b97f4a7c15ULL));
  return buf;
}

// The JSON and SSE bodies of one completion (all its choices), with the id and timestamps they share.
struct completion_writer {
  server::impl& s;
  http_exchange& ex;
  bool chat = false;
  std::string id;
  int64_t created = 0;
  clock_type::time_point deadline;
  std::vector<std::shared_ptr<generation>> gens;
  bool want_logprobs = false, include_usage = false;
  std::string forced_tool;  // a forced call: the output is its arguments (api-openai.h)
  bool parse_calls = false;  // tool_choice auto: the reply is parsed for call lines (api-openai.h)
  nlohmann::ordered_json tools;

  json calls_json(size_t i, const parsed_reply& p, bool with_index) const {
    json calls = json::array();
    for (size_t k = 0; k < p.calls.size(); ++k) {
      json c = {{"id", call_id(i) + "_" + std::to_string(k)},
                {"type", "function"},
                {"function", {{"name", p.calls[k].first}, {"arguments", p.calls[k].second}}}};
      if (with_index) c["index"] = k;
      calls.push_back(std::move(c));
    }
    return calls;
  }

  std::string call_id(size_t i) const { return "call_" + id.substr(id.find('-') + 1) + "_" + std::to_string(i); }
  // A forced call's finish: "tool_calls" when the arguments are complete.
  json finish_of(const std::string& f) const { return !forced_tool.empty() && f == "stop" ? json("tool_calls") : json(f); }

  bool all_finished() const {
    for (const auto& g : gens)
      if (!g->finished()) return false;
    return true;
  }
  usage_counts usage() const {
    usage_counts u = gens[0]->usage();
    for (size_t i = 1; i < gens.size(); ++i) u.completion_tokens += gens[i]->completion_tokens;
    return u;
  }
  // Waits on the first unfinished choice, then collects from all without waiting.
  void poll_all(std::chrono::milliseconds wait, std::vector<std::string>& texts,
                std::vector<std::vector<logprob_entry>>& lps) {
    bool waited = false;
    for (size_t i = 0; i < gens.size(); ++i) {
      if (gens[i]->finished()) continue;
      gens[i]->poll(waited ? std::chrono::milliseconds(0) : wait, texts[i], lps[i]);
      waited = true;
    }
  }
  // Every unfinished choice ends as "abort" (its engine request cancelled).
  void abandon_all() {
    for (auto& g : gens) {
      g->abandon();
      if (!g->finished()) g->finish = "abort";
    }
  }
  void record_all() {
    for (auto& g : gens) g->record_finish();
  }

  // One JSON body once every choice finished. A client that closes the connection meanwhile cancels the
  // request (the engine frees its memory at the next step); looked for at every wake-up, at least every
  // 200 ms.
  void respond_json() {
    const size_t n = gens.size();
    std::vector<std::string> texts(n);
    std::vector<std::vector<logprob_entry>> lps(n);
    while (!all_finished()) {
      poll_all(std::chrono::milliseconds(200), texts, lps);
      if (all_finished()) break;
      if (ex.client_gone()) {
        abandon_all();
        record_all();
        return s.send_error(ex, 499, "the client closed the connection");
      }
      if (clock_type::now() > deadline) {
        abandon_all();
        record_all();
        return s.send_error(ex, 504,
                            "the request timed out after " + std::to_string(s.cfg.request_timeout_s) + " s");
      }
    }
    record_all();
    json choices = json::array();
    for (size_t i = 0; i < n; ++i) {
      const auto& g = gens[i];
      if (g->finish == "error") return s.send_error(ex, g->error_status, g->error);
      json choice = {{"index", i}, {"finish_reason", finish_of(g->finish)}, {"logprobs", nullptr}};
      if (want_logprobs) choice["logprobs"] = logprobs_json(chat, lps[i]);
      if (chat && !forced_tool.empty())
        choice["message"] = {{"role", "assistant"},
                             {"content", nullptr},
                             {"tool_calls",
                              {{{"id", call_id(i)},
                                {"type", "function"},
                                {"function", {{"name", forced_tool}, {"arguments", texts[i]}}}}}}};
      else if (chat && parse_calls) {
        const auto p = parse_tool_calls(texts[i], tools);
        choice["message"] = {{"role", "assistant"}, {"content", p.content}};
        if (!p.calls.empty()) {
          choice["message"]["tool_calls"] = calls_json(i, p, false);
          if (g->finish == "stop") choice["finish_reason"] = "tool_calls";
        }
      } else if (chat)
        choice["message"] = {{"role", "assistant"}, {"content", texts[i]}};
      else
        choice["text"] = texts[i];
      choices.push_back(std::move(choice));
    }
    json body = {{"id", id},           {"object", chat ? "chat.completion" : "text_completion"},
                 {"created", created}, {"model", s.cfg.served_name},
                 {"choices", choices}, {"usage", usage().to_json()}};
    ex.reply(200, "application/json", dump(body));
  }

  std::string chunk(size_t index, const std::string& text, const json& logprobs, const json& finish,
                    bool role) const {
    json choice = {{"index", index}, {"logprobs", logprobs}, {"finish_reason", finish}};
    if (chat && !forced_tool.empty()) {
      // The call's id, type and name come with the role; its arguments follow in pieces (OpenAI's shape).
      json delta = json::object();
      json call = {{"index", 0}, {"function", {{"arguments", text}}}};
      if (role) {
        delta["role"] = "assistant";
        delta["content"] = nullptr;
        call = {{"index", 0}, {"id", call_id(index)}, {"type", "function"},
                {"function", {{"name", forced_tool}, {"arguments", ""}}}};
      }
      if (role || !text.empty()) delta["tool_calls"] = json::array({call});
      choice["delta"] = delta;
    } else if (chat) {
      json delta = json::object();
      if (role) delta["role"] = "assistant";
      if (!text.empty() || role) delta["content"] = text;
      choice["delta"] = delta;
    } else {
      choice["text"] = text;
    }
    return event(choice);
  }

  // One SSE event carrying `choice`.
  std::string event(const json& choice) const {
    json c = {{"id", id},
              {"object", chat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", s.cfg.served_name},
              {"choices", json::array({choice})}};
    return "data: " + dump(c) + "\n\n";
  }

  // SSE: one event per choice per engine wake-up that produced text, then each choice's final chunk
  // (finish_reason), the usage chunk when asked for, and [DONE]. A failed write means the client left:
  // cancel.
  void respond_stream() {
    const size_t n = gens.size();
    bool ok = ex.start_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
    auto last_write = clock_type::now();
    auto write = [&](const std::string& data) {
      last_write = clock_type::now();
      return ok = ok && ex.write(data);
    };
    if (chat)
      for (size_t i = 0; i < n && ok; ++i) write(chunk(i, "", nullptr, nullptr, true));
    std::vector<bool> sent_final(n, false);
    std::vector<std::string> held(n);  // parse_calls: a choice's text, parsed once it is complete
    while (ok) {
      std::vector<std::string> texts(n);
      std::vector<std::vector<logprob_entry>> lps(n);
      poll_all(std::chrono::milliseconds(100), texts, lps);
      const bool timed_out = !all_finished() && clock_type::now() > deadline;
      bool wrote = false, failed = false;
      for (size_t i = 0; i < n && ok && !failed; ++i) {
        auto& g = *gens[i];
        if (timed_out && !g.finished()) {
          g.abandon();
          g.finish = "abort";
        }
        if (g.finish == "error") {
          write("data: " + s.error_json(g.error_status, g.error) + "\n\n");
          abandon_all();
          write("data: [DONE]\n\n");
          failed = true;
          break;
        }
        const json lp = want_logprobs && !lps[i].empty() ? logprobs_json(chat, lps[i]) : json(nullptr);
        if (parse_calls) {
          // Whether the text is a call is known only at its end: held, then sent as content or as calls.
          held[i] += texts[i];
          if (!lps[i].empty()) wrote = write(chunk(i, "", lp, nullptr, false));
          if (ok && g.finished() && !sent_final[i]) {
            sent_final[i] = true;
            const auto p = parse_tool_calls(held[i], tools);
            json finish = finish_of(g.finish);
            if (p.calls.empty()) {
              if (!held[i].empty()) write(chunk(i, held[i], nullptr, nullptr, false));
            } else {
              json delta = {{"tool_calls", calls_json(i, p, true)}};
              if (p.content.is_string()) delta["content"] = p.content;
              write(event({{"index", i}, {"logprobs", nullptr}, {"finish_reason", nullptr}, {"delta", delta}}));
              if (g.finish == "stop") finish = "tool_calls";
            }
            wrote = write(chunk(i, "", nullptr, finish, false));
          }
          continue;
        }
        if (!texts[i].empty() || !lps[i].empty()) wrote = write(chunk(i, texts[i], lp, nullptr, false));
        if (ok && g.finished() && !sent_final[i]) {
          sent_final[i] = true;
          wrote = write(chunk(i, "", nullptr, finish_of(g.finish), false));
        }
      }
      if (failed) break;
      if (!ok) break;
      if (all_finished()) {
        if (include_usage) {
          json u = {{"id", id},
                    {"object", chat ? "chat.completion.chunk" : "text_completion"},
                    {"created", created},
                    {"model", s.cfg.served_name},
                    {"choices", json::array()},
                    {"usage", usage().to_json()}};
          write("data: " + dump(u) + "\n\n");
        }
        write("data: [DONE]\n\n");
        break;
      }
      // An SSE comment while nothing is produced (queue, long prefill): clients ignore it, and a client
      // that left is noticed by the failed write.
      if (!wrote && seconds_since(last_write) > 1.0) write(": keep-alive\n\n");
    }
    if (ok) ex.end_stream();
    abandon_all();  // the client went away (or the stream ended early): nothing may keep generating
    record_all();
  }
};

}  // namespace

void server::impl::handle_completion(const http_request& req, http_exchange& ex, bool chat) {
  const auto arrival = clock_type::now();
  request_context ctx;
  ctx.served_model = cfg.served_name;
  ctx.tok = &tok;
  ctx.tmpl = chat_tmpl ? &*chat_tmpl : nullptr;
  ctx.bos = bos;
  ctx.vocab_size = int32_t(mdl.config().vocab_size);
  ctx.max_model_len = max_model_len;
  ctx.max_prompt_tokens = cfg.max_prompt_tokens;
  ctx.max_tokens_limit = cfg.max_tokens_limit;
  ctx.default_max_tokens = cfg.default_max_tokens;
  ctx.model = &mdl;
  ctx.max_images = cfg.max_images_per_request;
  ctx.allowed_media_domains = cfg.allowed_media_domains;
  validated_request v;
  try {
    v = validate_request(req.body, chat, ctx);
  } catch (const api_error& e) {
    return send_error(ex, e.status, e.what(), e.param, e.type);
  }
  const completion_request& r = v.request;

  // Submission. n > 1: parallel sampling. The prompt is computed once; the other choices fork from it
  // (shared blocks, copied KDA state) and sample their first token from the same logits. A seeded request
  // gives choice i the seed + i, so choices differ but repeat, and each equals a single request with that
  // seed.
  completion_writer w{*this, ex};
  std::vector<token_id> stop_ids;
  if (!r.ignore_eos) stop_ids = stop_token_ids;
  pending_add a;
  a.params.prompt = v.prompt;
  a.params.cache_key = v.cache_key;
  a.media = v.media;
  a.params.max_tokens = v.max_tokens;
  a.params.stop_tokens = stop_ids;
  a.top_logprobs = r.top_logprobs;
  if (r.response_grammar) {
    std::call_once(token_table_once, [&] {
      token_table = std::make_shared<const runtime::token_table>(tok, int64_t(mdl.config().vocab_size));
    });
    a.grammar = r.response_grammar;
  }
  for (int i = 0; i < r.n; ++i) {
    auto lr = std::make_shared<live_request>();
    lr->id = next_id.fetch_add(1);
    a.choices.push_back(lr);
    a.sampling.push_back(r.sampling);
    if (r.sampling.seed) a.sampling.back().seed = *r.sampling.seed + uint64_t(i);
    mets.request_started();
    w.gens.push_back(std::make_shared<generation>(*this, r, lr, arrival, stop_ids));
    w.gens.back()->image_tokens = v.image_tokens;
  }
  submit(std::move(a));

  w.chat = chat;
  w.id = (chat ? "chatcmpl-" : "cmpl-") + hex_id(w.gens[0]->lr->id);
  w.created = unix_now();
  w.deadline = arrival + std::chrono::milliseconds(int64_t(cfg.request_timeout_s * 1000));
  w.want_logprobs = r.top_logprobs >= 0;
  w.include_usage = r.include_usage;
  if (r.forced_tool) w.forced_tool = *r.forced_tool;
  w.parse_calls = chat && r.parse_calls;
  if (r.tools) w.tools = *r.tools;
  if (r.stream)
    w.respond_stream();
  else
    w.respond_json();
}

http_limits server::impl::limits() const {
  http_limits l;
  l.max_body_bytes = cfg.max_body_bytes;
  l.max_header_bytes = cfg.max_header_bytes;
  l.max_header_count = cfg.max_header_count;
  l.max_connections = cfg.max_connections;
  l.header_timeout_s = std::min<double>(cfg.header_timeout_s, cfg.io_timeout_s);
  l.body_timeout_s = cfg.io_timeout_s;
  l.write_timeout_s = cfg.io_timeout_s;
  l.idle_timeout_s = std::min<double>(cfg.keep_alive_timeout_s, cfg.io_timeout_s);
  l.io_threads = cfg.io_threads;
  return l;
}

void server::impl::route(http_request req, std::shared_ptr<http_exchange> ex) {
  const std::string& path = req.path;
  const bool get = req.method == "GET" || req.method == "HEAD", post = req.method == "POST";
  if (!cfg.api_keys.empty() && path.rfind("/v1/", 0) == 0 &&
      !api_key_ok(req.header("Authorization"), cfg.api_keys))
    return send_error(*ex, 401, "invalid or missing API key (send 'Authorization: Bearer <key>')", "",
                      "authentication_error");
  auto not_allowed = [&] { send_error(*ex, 405, "method " + req.method + " is not allowed on " + path); };
  if (path == "/v1/completions" || path == "/v1/chat/completions") {
    if (!post) return not_allowed();
    if (group_failed.load()) return send_error(*ex, 503, group_failure());
    if (shutting_down.load()) return send_error(*ex, 503, "the server is shutting down");
    if (active.fetch_add(1) >= cfg.max_concurrent_requests) {
      active.fetch_sub(1);
      return send_error(*ex, 429,
                        "too many concurrent requests (limit " + std::to_string(cfg.max_concurrent_requests) +
                            "); retry later");
    }
    const bool chat = path == "/v1/chat/completions";
    // Tokenizing, waiting for the engine and streaming block: off the event loop.
    try {
      spawn([this, req = std::move(req), ex = std::move(ex), chat]() mutable {
        try {
          handle_completion(req, *ex, chat);
        } catch (const std::exception& e) {
          send_error(*ex, 500, std::string("internal error: ") + e.what());
        }
        ex.reset();  // the response is complete (or the connection closed) before the request stops counting
        active.fetch_sub(1);
      });
    } catch (const std::system_error&) {  // no thread to be had: the exchange, dropped, answers 500
      active.fetch_sub(1);
    }
    return;
  }
  if (path == "/v1/models") {
    if (!get) return not_allowed();
    json m = {{"id", cfg.served_name}, {"object", "model"},       {"created", unix_now()},
              {"owned_by", "moxi"},    {"root", cfg.served_name}, {"max_model_len", max_model_len}};
    return ex->reply(200, "application/json", dump(json{{"object", "list"}, {"data", json::array({m})}}));
  }
  if (path == "/health") {
    if (!get) return not_allowed();
    if (group_failed.load()) return send_error(*ex, 503, group_failure());
    if (shutting_down.load()) return send_error(*ex, 503, "the server is shutting down");
    return ex->reply(200, "application/json", "{\"status\":\"ok\"}");
  }
  if (path == "/metrics") {
    if (!get) return not_allowed();
    mets.set_connections(int64_t(http->connections()));
    return ex->reply(200, "text/plain; version=0.0.4; charset=utf-8", mets.render());
  }
  send_error(*ex, 404, "no route for " + req.method + " " + path);
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

}  // namespace

serving_plan plan_serving(const server_config& cfg, int64_t max_position_embeddings) {
  if (cfg.block_size < 1 || cfg.max_running < 1 || cfg.max_batch_tokens < 1)
    throw error("serve: block size, max running requests and max batch tokens must be >= 1");
  if (cfg.block_size > 4096) throw error("serve: --block-size must be at most 4096");
  if (cfg.max_model_len < 0 || cfg.num_blocks < 0)
    throw error("serve: --max-model-len and --num-blocks must not be negative");
  if (max_position_embeddings < 2)
    throw error("serve: the model's max_position_embeddings (" + std::to_string(max_position_embeddings) +
                ") leaves no room for a prompt and a token");
  serving_plan p;
  if (cfg.max_model_len > 0) {
    if (cfg.max_model_len > max_position_embeddings)
      throw error("serve: --max-model-len " + std::to_string(cfg.max_model_len) +
                  " exceeds the model's max_position_embeddings " + std::to_string(max_position_embeddings));
    if (cfg.max_model_len > kMaxServingLen)
      throw error("serve: --max-model-len " + std::to_string(cfg.max_model_len) +
                  " exceeds the server's limit " + std::to_string(kMaxServingLen));
    if (cfg.max_model_len < 2) throw error("serve: --max-model-len must be at least 2");
    p.max_model_len = cfg.max_model_len;
  } else if (max_position_embeddings > kDefaultServingLen) {
    p.max_model_len = kDefaultServingLen;
    p.note = "max_model_len " + std::to_string(kDefaultServingLen) + " (the model allows " +
             std::to_string(max_position_embeddings) + "; --max-model-len raises it, up to " +
             std::to_string(std::min(max_position_embeddings, kMaxServingLen)) + ")";
  } else {
    p.max_model_len = max_position_embeddings;
  }
  // The block pool is sized from the serving limit: one longest sequence at least, 2048 blocks by default.
  const int64_t per_seq = (p.max_model_len + cfg.block_size - 1) / cfg.block_size;
  const int64_t blocks = cfg.num_blocks > 0 ? cfg.num_blocks : std::max<int64_t>(per_seq + 1, 2048);
  if (blocks > kMaxBlocks)
    throw error("serve: " + std::to_string(blocks) + " KV-cache blocks exceed the limit of " +
                std::to_string(kMaxBlocks) +
                " (lower --max-model-len or --num-blocks, or raise --block-size)");
  p.num_blocks = int32_t(blocks);
  p.max_model_len = std::min<int64_t>(p.max_model_len, blocks * cfg.block_size);
  return p;
}

namespace {

std::unique_ptr<server::impl> make_impl(server_config cfg) {
  if (cfg.served_name.empty()) {
    cfg.served_name = std::filesystem::path(cfg.model_dir).lexically_normal().filename().string();
    if (cfg.served_name.empty())
      cfg.served_name = std::filesystem::path(cfg.model_dir).parent_path().filename();
    if (cfg.served_name.empty()) cfg.served_name = "moxi";
  }
  for (const auto& k : cfg.api_keys)
    if (k.empty())
      throw error("serve: an API key must not be empty (an empty key would turn authentication off)");
  if (cfg.max_header_bytes < 1024 || cfg.max_header_count < 8 || cfg.max_connections < 1 ||
      cfg.io_threads < 1)
    throw error("serve: header limits below 1 KiB / 8 fields, or no connection or event-loop thread allowed");
  if (cfg.group && cfg.draft_tokens > 0)
    throw error("serve: speculative decoding (--draft-tokens) runs in one process only, not in a serving group");
  if (cfg.group && cfg.executor == executor_mode::parallel)
    throw error("serve: --executor parallel runs requests on several threads; a serving group needs one "
                "thread in the model (batched or sequential)");
  auto m = model::model::load(cfg.model_dir, cfg.load);
  auto t = formats::tokenizer::from_hf_json_file(cfg.model_dir + "/tokenizer.json");
  const auto& c = m.config();
  const serving_plan plan = plan_serving(cfg, c.max_position_embeddings);
  if (!plan.note.empty()) std::fprintf(stderr, "moxi serve: %s\n", plan.note.c_str());
  memory::memory_options mo;
  mo.block_size = cfg.block_size;
  mo.num_blocks = plan.num_blocks;
  mo.num_state_slots = cfg.max_running + 1;
  mo.num_snapshot_slots = cfg.num_snapshot_slots >= 0 ? cfg.num_snapshot_slots : 2 * cfg.max_running;
  mo.prefix_caching = cfg.prefix_caching;
  scheduler_config sc;
  sc.max_num_batched_tokens = cfg.max_batch_tokens;
  sc.max_num_running = cfg.max_running;
  sc.max_model_len = plan.max_model_len;
  sc.num_speculative_tokens = cfg.draft_tokens;
  auto tmpl = formats::load_chat_template(cfg.model_dir);
  auto p = std::make_unique<server::impl>(std::move(cfg), std::move(m), std::move(t), mo, sc);
  p->chat_tmpl = std::move(tmpl);
  p->exec.set_draft_tokens(p->cfg.draft_tokens);
  p->max_model_len = p->sched.config().max_model_len;
  if (c.eos_token_id) p->stop_token_ids.push_back(token_id(*c.eos_token_id));
  for (token_id id : generation_stop_ids(p->cfg.model_dir, c.vocab_size))
    if (std::find(p->stop_token_ids.begin(), p->stop_token_ids.end(), id) == p->stop_token_ids.end())
      p->stop_token_ids.push_back(id);
  if (c.bos_token_id) p->bos = token_id(*c.bos_token_id);
  // Longest first, so that a path containing another is replaced whole.
  std::error_code ec;
  for (const std::string& path : {p->cfg.model_dir, std::filesystem::absolute(p->cfg.model_dir, ec).string(),
                                  std::filesystem::weakly_canonical(p->cfg.model_dir, ec).string()}) {
    std::string q = path;
    while (q.size() > 1 && q.back() == '/') q.pop_back();
    if (q.size() > 1 &&
        std::find(p->private_paths.begin(), p->private_paths.end(), q) == p->private_paths.end())
      p->private_paths.push_back(q);
  }
  std::sort(p->private_paths.begin(), p->private_paths.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  return p;
}

// Thousands of idle connections need as many descriptors: the soft limit is raised to the hard one.
void raise_descriptor_limit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &r);
  }
}

}  // namespace

server::server(server_config config) : impl_(make_impl(std::move(config))) {}

server::~server() {
  shutdown();
}

void server::start() {
  auto& p = *impl_;
  MOXI_ASSERT(!p.started, "server started twice");
  raise_descriptor_limit();
  http_observer obs;
  obs.on_error = [&p](int status) { p.mets.http_error(status); };
  obs.error_body = [&p](int status, const std::string& msg) { return p.error_json(status, msg); };
  obs.on_response = [&p](const http_request& req, int status) {
    if (status >= 400) p.mets.http_error(status);
    if (p.cfg.log_requests)
      std::fprintf(stderr, "%s %s -> %d\n", req.method.c_str(), req.path.c_str(), status);
  };
  p.http = std::make_unique<http_server>(
      p.limits(),
      [&p](http_request req, std::shared_ptr<http_exchange> ex) { p.route(std::move(req), std::move(ex)); },
      std::move(obs));
  if (p.cfg.group)
    p.cfg.group->send_engine({p.memory.options(), p.sched.config(), p.cfg.executor});
  p.bound_port = p.http->start(p.cfg.host, p.cfg.port);
  p.started = true;
  p.engine_thread = std::thread([&p] { p.engine_loop(); });
}

void server::shutdown() {
  auto& p = *impl_;
  if (!p.started || p.stopped) return;
  p.stopped = true;
  p.shutting_down = true;
  // Drain: in-flight requests finish (new ones get 503) ...
  const auto until = clock_type::now() + std::chrono::milliseconds(int64_t(p.cfg.drain_timeout_s * 1000));
  while (p.active.load() > 0 && clock_type::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  // ... what is left is cancelled (finish_reason "abort") and gets a moment to tell its client ...
  if (p.active.load() > 0) {
    {
      std::lock_guard<std::mutex> l(p.in_m);
      p.cancel_all = true;
      p.in_cv.notify_one();
    }
    const auto grace = clock_type::now() + std::chrono::seconds(1);
    while (p.active.load() > 0 && clock_type::now() < grace)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // ... then every connection is closed, whatever it is doing (a client that does not read its stream, an
  // idle keep-alive, a header trickling in): the drain timeout is a deadline, not a hint.
  p.http->close_connections();
  p.join_workers();
  p.http->stop();
  {
    std::lock_guard<std::mutex> l(p.in_m);
    p.stop_engine = true;
    // Requests still in the engine are cancelled so the loop ends.
    p.cancel_all = true;
    p.in_cv.notify_one();
  }
  if (p.engine_thread.joinable()) p.engine_thread.join();
}

void server::fail_group(const std::string& why, double grace_s) {
  auto& p = *impl_;
  {
    std::lock_guard<std::mutex> l(p.group_error_m);
    if (p.group_error.empty()) p.group_error = why;
  }
  p.group_failed = true;
  const auto until = clock_type::now() + std::chrono::milliseconds(int64_t(grace_s * 1000));
  while (p.active.load() > 0 && clock_type::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

int server::port() const {
  return impl_->bound_port;
}
const model::model& server::model() const {
  return impl_->mdl;
}
const server_config& server::config() const {
  return impl_->cfg;
}

engine_snapshot server::snapshot() const {
  std::lock_guard<std::mutex> l(impl_->snap_m);
  engine_snapshot s = impl_->snap;
  s.active_http = impl_->active.load();
  s.connections = impl_->http ? int64_t(impl_->http->connections()) : 0;
  return s;
}

std::string server::metrics_text() const {
  return impl_->mets.render();
}

}  // namespace moxi::serve
