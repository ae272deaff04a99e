// Shared scaffolding of the HTTP server tests: a tiny random checkpoint (configs/tiny-seed.json, made once
// per test binary), an in-process server on an ephemeral loopback port, and helpers to post JSON and read
// SSE streams strictly (every event must be `data: <json>` or `data: [DONE]`, nothing after [DONE]).
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/temp-dir.h"
#include "moxi/formats/model-config.h"
#include "moxi/model/config.h"
#include "moxi/model/init.h"
#include "moxi/serve/server.h"

namespace moxi::serve::testing {

using nlohmann::json;

// The checkpoint directory, created on first use and removed at exit.
inline const std::string& tiny_model_dir() {
  static moxi::testing::temp_dir dir("moxi-serve-model");
  static const std::string path = [] {
    const std::string out = dir / "moxi-tiny";
    model::init_options o;
    o.seed = 1;
    o.show_progress = false;
    model::init_checkpoint(model::load_model_config(std::string(MOXI_SOURCE_DIR) + "/configs/tiny-seed.json"),
                           out, o);
    return out;
  }();
  return path;
}

inline server_config tiny_config() {
  server_config c;
  c.model_dir = tiny_model_dir();
  c.port = 0;
  c.max_running = 16;
  c.max_batch_tokens = 512;
  c.num_blocks = 1024;
  c.drain_timeout_s = 5;
  return c;
}

// tiny_config() over the bundled, trained moxi-tiny (its byte-level BPE and chat template).
inline server_config bundled_config() {
  auto cfg = tiny_config();
  cfg.model_dir = std::string(MOXI_SOURCE_DIR) + "/models/moxi-tiny";
  return cfg;
}

inline std::unique_ptr<server> start_server(const server_config& c) {
  auto s = std::make_unique<server>(c);
  s->start();
  return s;
}

inline std::unique_ptr<httplib::Client> client_for(const server& s) {
  auto c = std::make_unique<httplib::Client>("127.0.0.1", s.port());
  c->set_read_timeout(60, 0);
  c->set_write_timeout(60, 0);
  return c;
}

// A POST of a JSON body: the status and the parsed body (discarded when not JSON; status 0 when no reply).
struct json_reply {
  int status = 0;
  nlohmann::json body;
};
inline json_reply post(httplib::Client& c, const std::string& path, const nlohmann::json& body) {
  auto res = c.Post(path, body.dump(), "application/json");
  if (!res) return {};
  return {res->status, nlohmann::json::parse(res->body, nullptr, false)};
}

struct sse_result {
  bool ok = false;    // well-formed: only data events, JSON chunks, exactly one [DONE] at the end
  std::string error;  // why not
  std::vector<json> chunks;
  std::string text;           // choice 0: concatenated text (completions) or delta content (chat)
  std::string finish_reason;  // choice 0
  std::map<int, std::string> texts, finishes;  // per choice index
  json usage;
};

// Parses a whole SSE body strictly.
inline sse_result parse_sse(const std::string& body, bool chat) {
  sse_result r;
  size_t pos = 0;
  bool done = false;
  while (pos < body.size()) {
    const size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) {
      r.error = "unterminated event at byte " + std::to_string(pos);
      return r;
    }
    const std::string ev = body.substr(pos, end - pos);
    pos = end + 2;
    if (ev.rfind(":", 0) == 0) continue;  // comment (keep-alive)
    if (done) {
      r.error = "event after [DONE]: " + ev;
      return r;
    }
    if (ev.rfind("data: ", 0) != 0 || ev.find('\n') != std::string::npos) {
      r.error = "not a single data line: " + ev;
      return r;
    }
    const std::string data = ev.substr(6);
    if (data == "[DONE]") {
      done = true;
      continue;
    }
    json j = json::parse(data, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      r.error = "not JSON: " + data;
      return r;
    }
    if (j.contains("error")) {
      r.error = "error event: " + data;
      return r;
    }
    if (j.contains("usage") && !j["usage"].is_null()) r.usage = j["usage"];
    for (const auto& c : j["choices"]) {
      const int index = c["index"].get<int>();
      if (r.finishes.count(index)) {
        r.error = "a chunk for choice " + std::to_string(index) + " after its finish_reason";
        return r;
      }
      if (chat) {
        if (c["delta"].contains("content")) r.texts[index] += c["delta"]["content"].get<std::string>();
      } else {
        r.texts[index] += c["text"].get<std::string>();
      }
      if (!c["finish_reason"].is_null()) r.finishes[index] = c["finish_reason"].get<std::string>();
    }
    r.chunks.push_back(std::move(j));
  }
  if (!done) {
    r.error = "no [DONE]";
    return r;
  }
  for (const auto& [index, text] : r.texts)
    if (!r.finishes.count(index)) {
      r.error = "no finish_reason for choice " + std::to_string(index);
      return r;
    }
  if (!r.finishes.count(0)) {
    r.error = "no finish_reason";
    return r;
  }
  r.text = r.texts[0];
  r.finish_reason = r.finishes[0];
  r.ok = true;
  return r;
}

// Polls until pred() holds or the timeout passes.
template <class F>
bool eventually(F pred, double seconds = 10) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(seconds * 1000));
  while (std::chrono::steady_clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

// The engine is idle and holds no sequence: every block free (cached ones count as free), every state slot
// free, no request anywhere.
inline bool at_baseline(const server& s) {
  const auto snap = s.snapshot();
  return snap.memory.num_blocks > 0 && snap.live_requests == 0 && snap.active_http == 0 &&
         snap.gauges.running == 0 && snap.gauges.waiting == 0 && snap.memory.live_sequences == 0 &&
         snap.memory.free_blocks == snap.memory.num_blocks &&
         snap.memory.free_state_slots == snap.memory.num_state_slots;
}

}  // namespace moxi::serve::testing
