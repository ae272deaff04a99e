// Serving benchmark client. Every request streams /v1/completions with a token-id prompt, ignore_eos and
// max_tokens = output length, logprobs 0 and return_tokens_as_token_ids, so that every engine step that
// produced tokens arrives as one SSE chunk even when the tokens have no text (a random checkpoint), and the
// generated ids can be fed back as the next turn of a conversation. Definitions are vLLM's (bench serve):
// TTFT = send -> first chunk with tokens; ITL = gaps between consecutive chunks with tokens; TPOT =
// (e2e - TTFT) / (output tokens - 1); percentiles interpolate linearly (numpy's default).
#include "bench/serve-bench.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netdb.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "moxi/base/error.h"
#include "moxi/serve/clock.h"
#include "moxi/serve/server.h"

namespace moxi::bench {
namespace {

using nlohmann::json;
using serve::clock_type;
using serve::seconds_between;

// Where requests go: a URL, or a server started in this process.
struct target {
  std::string url;
  std::string api_key;
  std::string model;

  std::unique_ptr<httplib::Client> client() const {
    auto c = std::make_unique<httplib::Client>(url);
    c->set_read_timeout(600, 0);
    c->set_write_timeout(60, 0);
    c->set_keep_alive(true);
    c->set_tcp_nodelay(true);  // the request goes out as several small writes
    if (!api_key.empty()) c->set_bearer_token_auth(api_key);
    return c;
  }
};

struct request_result {
  bool ok = false;
  std::string error;
  double ttft_s = 0, e2e_s = 0;
  std::vector<double> event_s;  // arrival of every chunk with tokens, from the send
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  std::vector<int64_t> output_ids;
};

// Handles one SSE event of a completion stream; false on an error event or a malformed chunk.
bool on_event(const std::string& ev, double t, request_result& r, bool& done) {
  if (ev.empty() || ev[0] == ':') return true;  // keep-alive comment
  if (ev.rfind("data: ", 0) != 0) {
    r.error = "not an SSE data event: " + ev.substr(0, 200);
    return false;
  }
  const std::string data = ev.substr(6);
  if (data == "[DONE]") {
    done = true;
    return true;
  }
  const json j = json::parse(data, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.contains("error")) {
    r.error = "error or malformed chunk: " + data.substr(0, 300);
    return false;
  }
  if (j.contains("usage") && j["usage"].is_object()) {
    const json& u = j["usage"];
    r.prompt_tokens = u.value("prompt_tokens", int64_t(0));
    r.completion_tokens = u.value("completion_tokens", int64_t(0));
    if (u.contains("prompt_tokens_details") && u["prompt_tokens_details"].is_object())
      r.cached_tokens = u["prompt_tokens_details"].value("cached_tokens", int64_t(0));
  }
  bool tokens = false;
  for (const json& c : j.value("choices", json::array())) {
    if (c.contains("logprobs") && c["logprobs"].is_object())
      for (const json& tok : c["logprobs"].value("tokens", json::array())) {
        tokens = true;
        const std::string s = tok.is_string() ? tok.get<std::string>() : "";
        if (s.rfind("token_id:", 0) == 0) r.output_ids.push_back(std::stoll(s.substr(9)));
      }
    if (c.value("text", std::string()).size() > 0) tokens = true;
  }
  if (tokens) r.event_s.push_back(t);
  return true;
}

request_result stream_completion(httplib::Client& client, const target& tgt,
                                 const std::vector<int64_t>& prompt, int max_tokens) {
  request_result r;
  const json body = {{"model", tgt.model},
                     {"prompt", prompt},
                     {"max_tokens", max_tokens},
                     {"temperature", 0},
                     {"ignore_eos", true},
                     {"logprobs", 0},
                     {"return_tokens_as_token_ids", true},
                     {"stream", true},
                     {"stream_options", {{"include_usage", true}}}};
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  std::string buffer;
  bool done = false, bad = false;
  int status = 0;
  const auto t0 = clock_type::now();
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    const double t = seconds_between(t0, clock_type::now());
    buffer.append(data, n);
    if (status != 200) return true;  // an error body: read it whole
    for (size_t end; !bad && (end = buffer.find("\n\n")) != std::string::npos;) {
      const std::string ev = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      bad = !on_event(ev, t, r, done);
    }
    return !bad;
  };
  auto res = client.send(req);
  r.e2e_s = seconds_between(t0, clock_type::now());
  if (bad) return r;
  if (!res) {
    r.error = "no response: " + httplib::to_string(res.error());
    return r;
  }
  if (res->status != 200) {
    r.error = "HTTP " + std::to_string(res->status) + ": " + buffer.substr(0, 300);
    return r;
  }
  if (!done) {
    r.error = "the stream ended without [DONE]";
    return r;
  }
  if (r.event_s.empty() || r.completion_tokens < 1) {
    r.error = "no tokens or no usage chunk in the stream";
    return r;
  }
  r.ttft_s = r.event_s.front();
  r.ok = true;
  return r;
}

// numpy.percentile's default (linear interpolation between closest ranks), of samples in seconds, in
// milliseconds.
latency_stats stats_ms(std::vector<double> s) {
  latency_stats l;
  l.count = s.size();
  if (s.empty()) return l;
  std::sort(s.begin(), s.end());
  double sum = 0;
  for (double x : s) sum += x;
  auto pct = [&](double p) {
    const double k = p / 100 * double(s.size() - 1);
    const size_t lo = size_t(k), hi = std::min(lo + 1, s.size() - 1);
    return s[lo] + (s[hi] - s[lo]) * (k - double(lo));
  };
  l.mean = 1000 * sum / double(s.size());
  l.p50 = 1000 * pct(50);
  l.p99 = 1000 * pct(99);
  return l;
}

std::vector<int64_t> random_ids(std::mt19937_64& gen, int n) {
  // Ids 10..249 exist in any real vocabulary (and in a random checkpoint's byte-level one).
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = 10 + int64_t(gen() % 240);
  return v;
}

void note(std::FILE* progress, const std::string& line) {
  if (!progress) return;
  std::fprintf(progress, "bench serve: %s\n", line.c_str());
  std::fflush(progress);
}

level_result run_level(const target& tgt, const serve_bench_options& o, int concurrency,
                       uint64_t level_seed) {
  // Distinct random prompts per level and request: no prefix-cache hits between them.
  std::vector<std::vector<int64_t>> prompts;
  std::mt19937_64 gen(o.seed * 0x9e3779b97f4a7c15ULL + level_seed);
  for (int i = 0; i < o.prompts; ++i) prompts.push_back(random_ids(gen, o.input_len));
  // Arrival times: all at once, or a Poisson process (exponential gaps) at request_rate.
  std::vector<double> arrival(prompts.size(), 0.0);
  if (o.request_rate > 0) {
    std::exponential_distribution<double> gap(o.request_rate);
    for (size_t i = 1; i < arrival.size(); ++i) arrival[i] = arrival[i - 1] + gap(gen);
  }
  std::vector<request_result> results(prompts.size());
  std::atomic<size_t> next{0};
  const auto t0 = clock_type::now();
  std::vector<std::thread> workers;
  for (int w = 0; w < concurrency; ++w)
    workers.emplace_back([&] {
      auto client = tgt.client();
      for (size_t i; (i = next.fetch_add(1)) < prompts.size();) {
        std::this_thread::sleep_until(
            t0 + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(arrival[i])));
        results[i] = stream_completion(*client, tgt, prompts[i], o.output_len);
      }
    });
  for (auto& w : workers) w.join();
  level_result l;
  l.concurrency = concurrency;
  l.duration_s = seconds_between(t0, clock_type::now());
  std::vector<double> ttft, tpot, itl, e2el;
  for (const auto& r : results) {
    if (!r.ok) {
      if (l.failed++ == 0) l.first_error = r.error;
      continue;
    }
    ++l.completed;
    l.input_tokens += r.prompt_tokens;
    l.output_tokens += r.completion_tokens;
    l.output_events += int64_t(r.event_s.size());
    ttft.push_back(r.ttft_s);
    e2el.push_back(r.e2e_s);
    const double tpot_s =
        r.completion_tokens > 1 ? (r.e2e_s - r.ttft_s) / double(r.completion_tokens - 1) : 0;
    if (r.completion_tokens > 1) tpot.push_back(tpot_s);
    auto within = [](double s, double slo_ms) { return slo_ms <= 0 || 1000 * s <= slo_ms; };
    l.good +=
        within(r.ttft_s, o.slo_ttft_ms) && within(tpot_s, o.slo_tpot_ms) && within(r.e2e_s, o.slo_e2el_ms);
    for (size_t k = 1; k < r.event_s.size(); ++k) itl.push_back(r.event_s[k] - r.event_s[k - 1]);
  }
  l.request_throughput = l.completed / l.duration_s;
  l.output_throughput = double(l.output_tokens) / l.duration_s;
  l.total_token_throughput = double(l.input_tokens + l.output_tokens) / l.duration_s;
  l.ttft = stats_ms(ttft);
  l.tpot = stats_ms(tpot);
  l.itl = stats_ms(itl);
  l.e2el = stats_ms(e2el);
  l.request_goodput = l.good / l.duration_s;
  return l;
}

// Conversations one after another; turn k's prompt is turn k-1's prompt + its answer + a new user message.
multi_turn_result run_multi_turn(const target& tgt, const serve_bench_options& o, const std::string& name) {
  multi_turn_result m;
  m.server = name;
  m.turns.resize(size_t(o.turns));
  std::vector<int> counted(size_t(o.turns), 0);
  auto client = tgt.client();
  std::mt19937_64 gen(o.seed * 0x9e3779b97f4a7c15ULL + 0x6d756c7469ULL);
  double later_sum = 0;
  int later_n = 0;
  for (int c = 0; c < o.conversations; ++c) {
    std::vector<int64_t> prompt = random_ids(gen, o.input_len);
    for (int k = 0; k < o.turns; ++k) {
      if (k > 0) {
        const auto user = random_ids(gen, o.turn_len);
        prompt.insert(prompt.end(), user.begin(), user.end());
      }
      const auto r = stream_completion(*client, tgt, prompt, o.output_len);
      if (!r.ok) {
        if (m.failed++ == 0) m.first_error = r.error;
        break;  // the rest of this conversation has no answer to build on
      }
      ++m.completed;
      auto& t = m.turns[size_t(k)];
      t.ttft_mean_ms += 1000 * r.ttft_s;
      t.prompt_tokens_mean += double(r.prompt_tokens);
      t.cached_tokens_mean += double(r.cached_tokens);
      ++counted[size_t(k)];
      if (k > 0) later_sum += 1000 * r.ttft_s, ++later_n;
      prompt.insert(prompt.end(), r.output_ids.begin(), r.output_ids.end());
    }
  }
  for (size_t k = 0; k < m.turns.size(); ++k)
    if (counted[k]) {
      m.turns[k].ttft_mean_ms /= counted[k];
      m.turns[k].prompt_tokens_mean /= counted[k];
      m.turns[k].cached_tokens_mean /= counted[k];
    }
  m.ttft_later_turns_ms = later_n ? later_sum / later_n : 0;
  return m;
}

std::string served_model(const target& tgt) {
  auto c = tgt.client();
  auto res = c->Get("/v1/models");
  if (!res) throw error("bench serve: cannot reach " + tgt.url + ": " + httplib::to_string(res.error()));
  if (res->status != 200)
    throw error("bench serve: GET " + tgt.url + "/v1/models returned " + std::to_string(res->status) + ": " +
                res->body.substr(0, 200));
  const json j = json::parse(res->body, nullptr, false);
  if (j.is_discarded() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
      !j["data"][0].contains("id") || !j["data"][0]["id"].is_string())
    throw error("bench serve: " + tgt.url + "/v1/models has no model id: " + res->body.substr(0, 200));
  return j["data"][0]["id"].get<std::string>();
}

serve::executor_mode executor_mode_of(const std::string& name) {
  if (name == "batched") return serve::executor_mode::batched;
  if (name == "parallel") return serve::executor_mode::parallel;
  if (name == "sequential") return serve::executor_mode::sequential;
  throw error("bench serve: --executor must be batched, parallel or sequential, got '" + name + "'");
}

std::unique_ptr<serve::server> start_in_process(const serve_bench_options& o, bool prefix_cache) {
  serve::server_config c;
  c.model_dir = o.model_dir;
  c.port = 0;
  int most = 1;
  for (int x : o.concurrency) most = std::max(most, x);
  c.max_running = std::max(64, most);
  c.max_concurrent_requests = std::max(256, 2 * most);
  c.prefix_caching = prefix_cache;
  c.executor = executor_mode_of(o.executor);
  auto s = std::make_unique<serve::server>(c);
  s->start();
  return s;
}

// host and port of an http:// URL.
std::pair<std::string, int> host_port(const std::string& url) {
  std::string rest = url.rfind("http://", 0) == 0 ? url.substr(7) : url;
  rest = rest.substr(0, rest.find('/'));
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos) return {rest, 80};
  return {rest.substr(0, colon), std::stoi(rest.substr(colon + 1))};
}

// A connection that made one keep-alive GET /health and now sits idle; -1 when it could not.
int open_idle_connection(const addrinfo& ai, const std::string& host) {
  const int fd = ::socket(ai.ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  const std::string req = "GET /health HTTP/1.1\r\nHost: " + host + "\r\n\r\n";
  std::string got;
  char buf[1024];
  if (::connect(fd, ai.ai_addr, ai.ai_addrlen) == 0 &&
      ::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == ssize_t(req.size())) {
    // The response is one small read or two: header and {"status":"ok"}.
    while (got.find("\r\n\r\n") == std::string::npos || got.find('}') == std::string::npos) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      got.append(buf, size_t(n));
    }
  }
  if (got.rfind("HTTP/1.1 200", 0) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// GET /health on a fresh connection each time, as a load balancer's probe, over a raw socket (connect,
// request, whole response) so that only the server's part and the loopback are timed.
latency_stats health_latency(const addrinfo& ai, const std::string& host, int probes, idle_result& r) {
  std::vector<double> seconds;
  for (int i = 0; i < probes; ++i) {
    const auto t0 = clock_type::now();
    const int fd = open_idle_connection(ai, host);
    const auto t1 = clock_type::now();
    if (fd < 0) {
      if (r.failed++ == 0) r.first_error = "GET /health got no 200 within 5 s";
      continue;
    }
    ::close(fd);
    seconds.push_back(seconds_between(t0, t1));
  }
  return stats_ms(std::move(seconds));
}

idle_result run_idle(const target& tgt, const serve_bench_options& o) {
  idle_result r;
  r.requested = o.idle_connections;
  // The connections need descriptors of this process: the soft limit goes up to the hard one.
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
  const auto [host, port] = host_port(tgt.url);
  addrinfo hints{}, *ai = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &ai) != 0 || !ai)
    throw error("bench serve: cannot resolve " + host);
  r.health_alone = health_latency(*ai, host, o.health_probes, r);
  std::vector<int> fds;
  for (int i = 0; i < o.idle_connections; ++i) {
    const int fd = open_idle_connection(*ai, host);
    if (fd < 0) break;
    fds.push_back(fd);
  }
  r.opened = int(fds.size());
  r.health_idle = health_latency(*ai, host, o.health_probes, r);
  ::freeaddrinfo(ai);
  for (int fd : fds) ::close(fd);
  return r;
}

void validate(const serve_bench_options& o) {
  if (o.url.empty() == o.model_dir.empty()) throw error("bench serve: give exactly one of --url and --model");
  if (o.concurrency.empty()) throw error("bench serve: --concurrency needs at least one level");
  for (int c : o.concurrency)
    if (c < 1) throw error("bench serve: concurrency levels must be >= 1, got " + std::to_string(c));
  if (o.prompts < 1 || o.input_len < 1 || o.output_len < 1)
    throw error("bench serve: --prompts, --input-len and --output-len must be >= 1");
  if (!(o.request_rate >= 0)) throw error("bench serve: --request-rate must be >= 0 (0: all at once)");
  if (o.slo_ttft_ms < 0 || o.slo_tpot_ms < 0 || o.slo_e2el_ms < 0)
    throw error("bench serve: goodput SLOs must be >= 0 ms");
  executor_mode_of(o.executor);
  if (o.idle_connections < 0 || o.health_probes < 1)
    throw error("bench serve: --idle-connections must be >= 0 and --health-probes >= 1");
  if (o.multi_turn && (o.conversations < 1 || o.turns < 2 || o.turn_len < 1))
    throw error("bench serve: --multi-turn needs --conversations >= 1, --turns >= 2, --turn-len >= 1");
}

}  // namespace

serve_bench_report run_serve_bench(const serve_bench_options& o, std::FILE* progress) {
  validate(o);
  serve_bench_report rep;
  rep.options = o;
  std::unique_ptr<serve::server> local;
  target tgt;
  tgt.api_key = o.api_key;
  if (o.url.empty()) {
    note(progress, "starting a server on " + o.model_dir);
    local = start_in_process(o, /*prefix_cache=*/true);
    tgt.url = "http://127.0.0.1:" + std::to_string(local->port());
  } else {
    tgt.url = o.url;
  }
  tgt.model = rep.model = served_model(tgt);
  {
    auto c = tgt.client();
    std::mt19937_64 gen(~o.seed);
    stream_completion(*c, tgt, random_ids(gen, std::min(o.input_len, 16)), 2);  // warm-up
  }
  for (size_t i = 0; i < o.concurrency.size(); ++i) {
    note(progress,
         "concurrency " + std::to_string(o.concurrency[i]) + ", " + std::to_string(o.prompts) + " requests");
    rep.levels.push_back(run_level(tgt, o, o.concurrency[i], i + 1));
  }
  if (o.idle_connections > 0) {
    note(progress,
         "/health latency alone and with " + std::to_string(o.idle_connections) + " idle connections");
    rep.idle = run_idle(tgt, o);
  }
  if (o.multi_turn) {
    note(progress, "multi-turn conversations on " + (local ? std::string("prefix cache on") : tgt.url));
    rep.multi_turn.push_back(run_multi_turn(tgt, o, local ? "prefix cache on" : tgt.url));
    if (local) {
      local.reset();  // the same conversations on a server without prefix caching
      note(progress, "multi-turn conversations on prefix cache off");
      local = start_in_process(o, /*prefix_cache=*/false);
      tgt.url = "http://127.0.0.1:" + std::to_string(local->port());
      rep.multi_turn.push_back(run_multi_turn(tgt, o, "prefix cache off"));
    }
  }
  return rep;
}

namespace {

json latency_json(const latency_stats& l) {
  return {{"mean", l.mean}, {"p50", l.p50}, {"p99", l.p99}, {"count", l.count}};
}

bool has_slo(const serve_bench_options& o) {
  return o.slo_ttft_ms > 0 || o.slo_tpot_ms > 0 || o.slo_e2el_ms > 0;
}

// Output throughput of each level as a multiple of concurrency 1 (absent without a level 1).
std::optional<double> speedup(const serve_bench_report& r, const level_result& l) {
  for (const auto& b : r.levels)
    if (b.concurrency == 1 && b.output_throughput > 0) return l.output_throughput / b.output_throughput;
  return std::nullopt;
}

}  // namespace

json serve_bench_report::to_json() const {
  json levels_j = json::array();
  for (const auto& l : levels) {
    json j = {{"concurrency", l.concurrency},
              {"completed", l.completed},
              {"failed", l.failed},
              {"duration_s", l.duration_s},
              {"input_tokens", l.input_tokens},
              {"output_tokens", l.output_tokens},
              {"output_events", l.output_events},
              {"request_throughput", l.request_throughput},
              {"output_throughput", l.output_throughput},
              {"total_token_throughput", l.total_token_throughput},
              {"ttft_ms", latency_json(l.ttft)},
              {"tpot_ms", latency_json(l.tpot)},
              {"itl_ms", latency_json(l.itl)},
              {"e2el_ms", latency_json(l.e2el)}};
    if (auto s = speedup(*this, l)) j["output_throughput_vs_concurrency_1"] = *s;
    if (has_slo(options)) {
      j["request_goodput"] = l.request_goodput;
      j["good_requests"] = l.good;
    }
    if (l.failed) j["first_error"] = l.first_error;
    levels_j.push_back(std::move(j));
  }
  json mt = json::array();
  for (const auto& m : multi_turn) {
    json turns_j = json::array();
    for (const auto& t : m.turns)
      turns_j.push_back({{"ttft_mean_ms", t.ttft_mean_ms},
                         {"prompt_tokens_mean", t.prompt_tokens_mean},
                         {"cached_tokens_mean", t.cached_tokens_mean}});
    json j = {{"server", m.server},
              {"completed", m.completed},
              {"failed", m.failed},
              {"turns", turns_j},
              {"ttft_later_turns_ms", m.ttft_later_turns_ms}};
    if (m.failed) j["first_error"] = m.first_error;
    mt.push_back(std::move(j));
  }
  json out = {{"model", model},
              {"executor", options.url.empty() ? options.executor : ""},
              {"url", options.url},
              {"model_dir", options.model_dir},
              {"prompts", options.prompts},
              {"request_rate", options.request_rate},
              {"input_len", options.input_len},
              {"output_len", options.output_len},
              {"levels", levels_j}};
  if (idle) {
    json j = {{"requested", idle->requested},
              {"opened", idle->opened},
              {"failed", idle->failed},
              {"health_ms_alone", latency_json(idle->health_alone)},
              {"health_ms_idle", latency_json(idle->health_idle)}};
    if (idle->failed) j["first_error"] = idle->first_error;
    out["idle_connections"] = j;
  }
  if (!multi_turn.empty()) {
    out["multi_turn"] = mt;
    if (multi_turn.size() == 2 && multi_turn[0].ttft_later_turns_ms > 0)
      out["multi_turn_ttft_off_over_on"] =
          multi_turn[1].ttft_later_turns_ms / multi_turn[0].ttft_later_turns_ms;
  }
  return out;
}

std::string serve_bench_report::table() const {
  std::ostringstream s;
  char line[512];
  char rate[64] = "";
  if (options.request_rate > 0) std::snprintf(rate, sizeof rate, ", %g req/s", options.request_rate);
  std::snprintf(line, sizeof line, "serve bench: %s, %d prompts per level, %d input + %d output tokens%s%s\n",
                model.c_str(), options.prompts, options.input_len, options.output_len, rate,
                options.url.empty() ? (", " + options.executor + " executor").c_str() : "");
  s << line;
  s << "  conc  done fail    req/s    out tok/s  total tok/s  x conc1 | TTFT ms mean/p50/p99  "
       "| TPOT ms mean/p50/p99 | ITL ms mean/p50/p99  | E2E ms mean/p50/p99\n";
  for (const auto& l : levels) {
    const auto sp = speedup(*this, l);
    std::snprintf(line, sizeof line,
                  "  %4d %5d %4d %8.2f %12.1f %12.1f %7s | %6.1f %6.1f %7.1f | %6.2f %6.2f %6.2f | %6.2f "
                  "%6.2f %6.2f | %7.1f %7.1f %7.1f\n",
                  l.concurrency, l.completed, l.failed, l.request_throughput, l.output_throughput,
                  l.total_token_throughput, sp ? (std::to_string(*sp).substr(0, 5) + "x").c_str() : "-",
                  l.ttft.mean, l.ttft.p50, l.ttft.p99, l.tpot.mean, l.tpot.p50, l.tpot.p99, l.itl.mean,
                  l.itl.p50, l.itl.p99, l.e2el.mean, l.e2el.p50, l.e2el.p99);
    s << line;
    if (has_slo(options)) {
      std::snprintf(line, sizeof line, "    goodput: %d of %d requests within the SLOs, %.2f req/s\n", l.good,
                    l.completed, l.request_goodput);
      s << line;
    }
    if (l.failed) s << "    first error: " << l.first_error << "\n";
  }
  if (idle) {
    std::snprintf(
        line, sizeof line,
        "  /health ms mean/p50/p99: %.2f/%.2f/%.2f alone, %.2f/%.2f/%.2f with %d idle keep-alive "
        "connections open%s\n",
        idle->health_alone.mean, idle->health_alone.p50, idle->health_alone.p99, idle->health_idle.mean,
        idle->health_idle.p50, idle->health_idle.p99, idle->opened,
        idle->opened < idle->requested ? " (fewer than asked: the server or the host refused more)" : "");
    s << line;
    if (idle->failed) s << "    first error: " << idle->first_error << "\n";
  }
  for (const auto& m : multi_turn) {
    s << "  multi-turn, " << m.server << ": " << m.completed << " turns done, " << m.failed << " failed\n";
    for (size_t k = 0; k < m.turns.size(); ++k) {
      std::snprintf(line, sizeof line, "    turn %zu: TTFT %.1f ms, prompt %.0f tokens, %.0f cached\n", k + 1,
                    m.turns[k].ttft_mean_ms, m.turns[k].prompt_tokens_mean, m.turns[k].cached_tokens_mean);
      s << line;
    }
    if (m.failed) s << "    first error: " << m.first_error << "\n";
  }
  if (multi_turn.size() == 2 && multi_turn[0].ttft_later_turns_ms > 0) {
    std::snprintf(line, sizeof line,
                  "  TTFT of turns 2..%d: %.1f ms with the prefix cache, %.1f ms without (%.2fx)\n",
                  options.turns, multi_turn[0].ttft_later_turns_ms, multi_turn[1].ttft_later_turns_ms,
                  multi_turn[1].ttft_later_turns_ms / multi_turn[0].ttft_later_turns_ms);
    s << line;
  }
  return s.str();
}

namespace {

// One --goodput KEY:MS pair.
void set_slo(serve_bench_options& o, const std::string& kv) {
  const size_t colon = kv.find(':');
  const std::string key = kv.substr(0, colon);
  double ms = 0;
  try {
    size_t used = 0;
    if (colon == std::string::npos) throw std::invalid_argument("no ':'");
    ms = std::stod(kv.substr(colon + 1), &used);
    if (used != kv.size() - colon - 1 || !(ms > 0)) throw std::invalid_argument("not a positive number");
  } catch (const std::exception&) {
    throw error("bench serve: --goodput takes KEY:MS with KEY ttft, tpot or e2el and MS > 0, got '" + kv +
                "'");
  }
  if (key == "ttft")
    o.slo_ttft_ms = ms;
  else if (key == "tpot")
    o.slo_tpot_ms = ms;
  else if (key == "e2el")
    o.slo_e2el_ms = ms;
  else
    throw error("bench serve: --goodput key must be ttft, tpot or e2el, got '" + key + "'");
}

}  // namespace

void add_serve_bench(CLI::App& bench) {
  struct options {
    serve_bench_options b;
    bool json = false;
  };
  auto o = std::make_shared<options>();
  auto* cmd = bench.add_subcommand("serve", "Serving throughput and latency (vllm bench serve metrics)");
  auto goodput = std::make_shared<std::vector<std::string>>();
  auto* url = cmd->add_option("--url", o->b.url, "A running server, e.g. http://127.0.0.1:8000");
  cmd->add_option("-m,--model", o->b.model_dir, "Start a server in this process on this model directory")
      ->excludes(url);
  cmd->add_option("--api-key", o->b.api_key, "Bearer key for the server");
  cmd->add_option("--concurrency", o->b.concurrency, "Concurrency levels, e.g. 1,4,16,64")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--prompts", o->b.prompts, "Requests per concurrency level")->capture_default_str();
  cmd->add_option("--request-rate", o->b.request_rate,
                  "Poisson arrivals at this many requests/s, capped by the concurrency (0: all at once)")
      ->capture_default_str();
  cmd->add_option("--input-len", o->b.input_len, "Prompt tokens")->capture_default_str();
  cmd->add_option("--output-len", o->b.output_len, "Generated tokens per request")->capture_default_str();
  cmd->add_flag("--multi-turn", o->b.multi_turn,
                "Also time multi-turn conversations (with --model: prefix cache on vs off)");
  cmd->add_option("--conversations", o->b.conversations, "Multi-turn conversations")->capture_default_str();
  cmd->add_option("--turns", o->b.turns, "Turns per conversation")->capture_default_str();
  cmd->add_option("--turn-len", o->b.turn_len, "Tokens of each follow-up user message")
      ->capture_default_str();
  cmd->add_option("--seed", o->b.seed, "Prompt contents")->capture_default_str();
  cmd->add_option("--goodput", *goodput,
                  "SLOs for goodput, e.g. ttft:200 tpot:50 e2el:2000 (ms; vLLM's --goodput)");
  cmd->add_option("--executor", o->b.executor,
                  "In-process server: batched, parallel or sequential (moxi serve --executor)")
      ->capture_default_str();
  cmd->add_option("--idle-connections", o->b.idle_connections,
                  "Idle keep-alive connections held open while /health is timed (0: skip)")
      ->capture_default_str();
  cmd->add_option("--health-probes", o->b.health_probes,
                  "/health requests timed alone and under the idle ones")
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "Print one JSON object instead of the table");
  cmd->callback([o, goodput] {
    for (const auto& g : *goodput) set_slo(o->b, g);
    const auto r = run_serve_bench(o->b);
    if (o->json)
      std::printf("%s\n", r.to_json().dump().c_str());
    else
      std::printf("%s", r.table().c_str());
  });
}

}  // namespace moxi::bench
