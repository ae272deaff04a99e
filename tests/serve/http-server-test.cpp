// The OpenAI HTTP server in process on a loopback port with a tiny random checkpoint: well-formed
// non-stream and SSE responses, greedy output equal to the runtime's single-request generation (an
// independent path: contiguous cache, no scheduler), prefix-cache hits giving the same tokens and reporting
// cached_tokens, API-key auth, the concurrency limit (429), hostile bodies getting JSON 4xx errors, client
// disconnects freeing memory, /metrics as valid Prometheus text, and graceful shutdown.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "common/loopback.h"
#include "moxi/formats/tokenizer.h"
#include "moxi/model/model.h"
#include "moxi/runtime/sampler.h"
#include "moxi/serve/api-openai.h"
#include "serve/http-test-util.h"

namespace moxi::serve {
namespace {

using namespace moxi::serve::testing;

class http_server : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { srv_ = start_server(tiny_config()).release(); }
  static void TearDownTestSuite() {
    delete srv_;
    srv_ = nullptr;
  }
  static server* srv_;

  json post(const std::string& path, const json& body, int expect_status = 200) {
    auto c = client_for(*srv_);
    auto res = c->Post(path, body.dump(), "application/json");
    EXPECT_TRUE(res) << "no response for " << path;
    if (!res) return json();
    EXPECT_EQ(res->status, expect_status) << res->body;
    auto j = json::parse(res->body, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << res->body;
    return j;
  }
  sse_result stream(const std::string& path, json body) {
    body["stream"] = true;
    auto c = client_for(*srv_);
    auto res = c->Post(path, body.dump(), "application/json");
    EXPECT_TRUE(res);
    if (!res) return {};
    EXPECT_EQ(res->status, 200) << res->body;
    EXPECT_NE(res->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
    return parse_sse(res->body, path.find("chat") != std::string::npos);
  }
};
server* http_server::srv_ = nullptr;

// The runtime's own single-request generation, greedy: the model with its contiguous cache, one prefill of
// the whole prompt, then one token at a time through the runtime's sampler; no scheduler, paging or
// prefix cache. (Not runtime::generate itself: it detokenizes, and a random checkpoint emits ids that its
// byte-level tokenizer does not have.)
struct reference_result {
  std::vector<int64_t> tokens;
  std::string finish;
};

reference_result reference_greedy(const std::vector<token_id>& prompt, int64_t max_tokens,
                                  std::optional<std::vector<token_id>> stops = std::nullopt) {
  static const auto m = model::model::load(tiny_model_dir());
  if (!stops) stops = std::vector<token_id>{token_id(*m.config().eos_token_id)};
  auto cache = m.new_cache();
  runtime::sampling_params p;
  p.temperature = 0;
  runtime::sampler smp(p, prompt);
  model::forward_options o;
  o.last_only = true;
  auto logits = m.forward(prompt, *cache, o);
  reference_result r;
  r.finish = "length";
  for (int64_t i = 0; i < max_tokens; ++i) {
    const token_id t = smp.sample(logits);
    smp.accept(t);
    r.tokens.push_back(t);
    if (std::find(stops->begin(), stops->end(), t) != stops->end()) {
      r.finish = "stop";
      break;
    }
    const token_id next[1] = {t};
    logits = m.forward(next, *cache, o);
  }
  return r;
}

// The server's sampled ids, from logprobs rendered as "token_id:N".
std::vector<int64_t> token_ids(const json& choice) {
  std::vector<int64_t> v;
  for (const auto& t : choice["logprobs"]["tokens"]) v.push_back(std::stoll(t.get<std::string>().substr(9)));
  return v;
}

std::vector<token_id> ids(int n, int seed) {
  std::vector<token_id> v;
  for (int i = 0; i < n; ++i) v.push_back(token_id(3 + (i * 37 + seed * 101) % 250));
  return v;
}

using moxi::testing::connect_to;  // common/loopback.h

TEST_F(http_server, HealthModelsAndUnknownRoutes) {
  auto c = client_for(*srv_);
  auto h = c->Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  auto m = c->Get("/v1/models");
  ASSERT_TRUE(m);
  const auto j = json::parse(m->body);
  EXPECT_EQ(j["object"], "list");
  EXPECT_EQ(j["data"][0]["id"], "moxi-tiny");
  auto nf = c->Get("/v1/nothing");
  ASSERT_TRUE(nf);
  EXPECT_EQ(nf->status, 404);
  EXPECT_TRUE(json::parse(nf->body)["error"]["message"].is_string());
}

TEST_F(http_server, NonStreamCompletionIsWellFormedAndEqualsRuntimeGreedy) {
  for (int n : {5, 12, 40}) {  // within one block, and crossing block boundaries (chunked prefill)
    const auto prompt = ids(n, n);
    const auto j = post("/v1/completions", {{"model", "moxi-tiny"},
                                            {"prompt", prompt},
                                            {"max_tokens", 10},
                                            {"temperature", 0},
                                            {"logprobs", 0},
                                            {"return_tokens_as_token_ids", true}});
    EXPECT_EQ(j["object"], "text_completion");
    EXPECT_TRUE(j["id"].get<std::string>().rfind("cmpl-", 0) == 0);
    EXPECT_EQ(j["model"], "moxi-tiny");
    ASSERT_EQ(j["choices"].size(), 1u);
    const auto ref = reference_greedy(prompt, 10);
    EXPECT_EQ(token_ids(j["choices"][0]), ref.tokens) << "prompt length " << n;
    EXPECT_EQ(j["choices"][0]["finish_reason"], ref.finish);
    EXPECT_EQ(j["usage"]["prompt_tokens"], n);
    EXPECT_EQ(j["usage"]["completion_tokens"], ref.tokens.size());
    EXPECT_EQ(j["usage"]["total_tokens"], n + int(ref.tokens.size()));
    EXPECT_TRUE(j["usage"]["prompt_tokens_details"]["cached_tokens"].is_number());
  }
}

// Concurrent requests share engine steps, so the executor runs them through one batched forward (prefill
// chunks of different lengths next to decode tokens); each still gets its own greedy continuation.
TEST_F(http_server, ConcurrentRequestsBatchedTogetherEachEqualRuntimeGreedy) {
  const int kRequests = 6;
  std::vector<json> results(kRequests);
  std::vector<std::thread> threads;
  for (int i = 0; i < kRequests; ++i)
    threads.emplace_back([&, i] {
      auto c = client_for(*srv_);
      auto res = c->Post("/v1/completions",
                         json{{"prompt", ids(3 + 7 * i, 40 + i)},
                              {"max_tokens", 12},
                              {"temperature", 0},
                              {"logprobs", 0},
                              {"return_tokens_as_token_ids", true}}
                             .dump(),
                         "application/json");
      if (res && res->status == 200) results[size_t(i)] = json::parse(res->body);
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(results[size_t(i)].contains("choices")) << "request " << i << " failed";
    const auto ref = reference_greedy(ids(3 + 7 * i, 40 + i), 12);
    EXPECT_EQ(token_ids(results[size_t(i)]["choices"][0]), ref.tokens) << "request " << i;
  }
}

TEST_F(http_server, StreamsAreWellFormedAndEqualNonStream) {
  const json comp = {{"prompt", "The quick brown fox"}, {"max_tokens", 12}, {"temperature", 0}};
  const auto full = post("/v1/completions", comp);
  const auto s = stream("/v1/completions", comp);
  ASSERT_TRUE(s.ok) << s.error;
  EXPECT_EQ(s.text, full["choices"][0]["text"]);
  EXPECT_EQ(s.finish_reason, full["choices"][0]["finish_reason"]);

  const json chat = {
      {"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}}},
      {"max_tokens", 12},
      {"temperature", 0},
      {"stream_options", {{"include_usage", true}}}};
  json chat_ns = chat;
  chat_ns.erase("stream_options");
  const auto cfull = post("/v1/chat/completions", chat_ns);
  EXPECT_EQ(cfull["object"], "chat.completion");
  EXPECT_EQ(cfull["choices"][0]["message"]["role"], "assistant");
  const auto cs = stream("/v1/chat/completions", chat);
  ASSERT_TRUE(cs.ok) << cs.error;
  EXPECT_EQ(cs.chunks.front()["choices"][0]["delta"]["role"], "assistant");
  for (const auto& ch : cs.chunks) EXPECT_EQ(ch["object"], "chat.completion.chunk");
  EXPECT_EQ(cs.text, cfull["choices"][0]["message"]["content"]);
  EXPECT_EQ(cs.usage["completion_tokens"], cfull["usage"]["completion_tokens"]);
  EXPECT_EQ(cs.usage["prompt_tokens"], cfull["usage"]["prompt_tokens"]);
}

TEST_F(http_server, PrefixCacheHitGivesTheSameTokensAndReportsCachedTokens) {
  const auto prompt = ids(50, 9);  // 3 full blocks of 16 + 2
  const json body = {{"prompt", prompt},
                     {"max_tokens", 8},
                     {"temperature", 0},
                     {"logprobs", 0},
                     {"return_tokens_as_token_ids", true}};
  const auto miss = post("/v1/completions", body);
  const auto hit = post("/v1/completions", body);
  EXPECT_EQ(miss["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(hit["usage"]["prompt_tokens_details"]["cached_tokens"], 48);
  EXPECT_EQ(hit["choices"][0]["text"], miss["choices"][0]["text"]);
  EXPECT_EQ(hit["choices"][0]["logprobs"]["tokens"], miss["choices"][0]["logprobs"]["tokens"]);
  EXPECT_EQ(token_ids(hit["choices"][0]), reference_greedy(prompt, 8).tokens);
  // The next turn of a conversation (the prompt extended) reuses the blocks up to the last KDA snapshot,
  // which exists where the first prompt's prefill step ended (block 3's end, docs/serving.md).
  auto longer = prompt;
  for (int i = 0; i < 20; ++i) longer.push_back(token_id(5 + i));
  const auto next = post("/v1/completions", {{"prompt", longer},
                                             {"max_tokens", 4},
                                             {"temperature", 0},
                                             {"logprobs", 0},
                                             {"return_tokens_as_token_ids", true}});
  EXPECT_EQ(next["usage"]["prompt_tokens_details"]["cached_tokens"], 48);
  EXPECT_EQ(token_ids(next["choices"][0]), reference_greedy(longer, 4).tokens);
  const std::string metrics = srv_->metrics_text();
  EXPECT_NE(metrics.find("moxi:prefix_cache_hits_total"), std::string::npos);
}

TEST_F(http_server, SeededSamplingIsReproducibleAndLogprobsAreShaped) {
  const json body = {
      {"prompt", "abc"}, {"max_tokens", 8}, {"temperature", 1.0}, {"top_p", 0.9}, {"seed", 42}};
  const auto a = post("/v1/completions", body);
  const auto b = post("/v1/completions", body);
  EXPECT_EQ(a["choices"][0]["text"], b["choices"][0]["text"]);
  const auto c = post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "x"}}}},
                                               {"max_tokens", 4},
                                               {"logprobs", true},
                                               {"top_logprobs", 3},
                                               {"temperature", 0}});
  const auto& content = c["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), c["usage"]["completion_tokens"].get<size_t>());
  for (const auto& e : content) {
    EXPECT_LE(e["logprob"].get<double>(), 0.0);
    ASSERT_EQ(e["top_logprobs"].size(), 3u);
    // Greedy: the sampled token is the most likely one.
    EXPECT_NEAR(e["top_logprobs"][0]["logprob"].get<double>(), e["logprob"].get<double>(), 1e-6);
  }
}

TEST_F(http_server, SeveralChoicesStreamAndNonStream) {
  const json body = {{"prompt", "abc"}, {"max_tokens", 6}, {"temperature", 0}, {"n", 3}};
  const auto j = post("/v1/completions", body);
  ASSERT_EQ(j["choices"].size(), 3u);
  int64_t total = 0;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_EQ(j["choices"][i]["text"], j["choices"][0]["text"]);  // greedy: the same continuation
  }
  const auto one = post("/v1/completions", {{"prompt", "abc"}, {"max_tokens", 6}, {"temperature", 0}});
  total = one["usage"]["completion_tokens"].get<int64_t>() * 3;
  EXPECT_EQ(j["usage"]["completion_tokens"], total);
  EXPECT_EQ(j["usage"]["prompt_tokens"], one["usage"]["prompt_tokens"]);
  json chat = {{"messages", {{{"role", "user"}, {"content", "x"}}}},
               {"max_tokens", 5},
               {"temperature", 0.9},
               {"seed", 3},
               {"n", 2},
               {"stream_options", {{"include_usage", true}}}};
  const auto s = stream("/v1/chat/completions", chat);
  ASSERT_TRUE(s.ok) << s.error;
  ASSERT_EQ(s.texts.size(), 2u);
  ASSERT_EQ(s.finishes.size(), 2u);
  chat.erase("stream_options");
  const auto ns = post("/v1/chat/completions", chat);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(s.texts.at(i), ns["choices"][i]["message"]["content"]) << i;
  EXPECT_TRUE(eventually([] { return at_baseline(*srv_); }));
}

TEST_F(http_server, SeveralChoicesForkOnePrefillAndEqualSeparateSeededRequests) {
  ASSERT_TRUE(eventually([] { return at_baseline(*srv_); }));
  // 11 tokens, inside one block: no prefix hit can make the separate requests' prefill differ.
  const auto prompt = ids(11, 5);
  const int64_t max_tokens = 8;
  json body = {{"prompt", prompt},
               {"max_tokens", max_tokens},
               {"temperature", 1.0},
               {"seed", 77},
               {"ignore_eos", true},
               {"logprobs", 0},
               {"return_tokens_as_token_ids", true}};
  const auto before = srv_->snapshot();
  json forked = body;
  forked["n"] = 3;
  const auto j = post("/v1/completions", forked);
  ASSERT_EQ(j["choices"].size(), 3u);
  ASSERT_TRUE(eventually([] { return at_baseline(*srv_); }));
  const auto after = srv_->snapshot();
  // The prompt computed once, then each choice's tokens but its last.
  EXPECT_EQ(after.computed_tokens - before.computed_tokens, 11 + 3 * (max_tokens - 1));
  EXPECT_EQ(after.memory.free_blocks, before.memory.free_blocks);
  EXPECT_EQ(after.memory.free_state_slots, before.memory.free_state_slots);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 11);
  EXPECT_EQ(j["usage"]["completion_tokens"], 3 * max_tokens);
  // Choice i is what a single request with seed 77 + i samples.
  std::set<std::vector<int64_t>> distinct;
  for (int i = 0; i < 3; ++i) {
    json single = body;
    single["seed"] = 77 + i;
    const auto one = post("/v1/completions", single);
    EXPECT_EQ(token_ids(j["choices"][i]), token_ids(one["choices"][0])) << "choice " << i;
    EXPECT_EQ(j["choices"][i]["index"], i);
    distinct.insert(token_ids(j["choices"][i]));
  }
  EXPECT_GT(distinct.size(), 1u) << "seeded choices sample independently";
}

TEST_F(http_server, NonStreamClientThatClosesEarlyIsCancelled) {
  ASSERT_TRUE(eventually([] { return at_baseline(*srv_); }));
  const auto before = srv_->snapshot();
  const int fd = connect_to(srv_->port());
  ASSERT_GE(fd, 0);
  const std::string body =
      json{{"prompt", "x"}, {"max_tokens", 4000}, {"ignore_eos", true}, {"temperature", 0}}.dump();
  const std::string head =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n";
  const std::string msg = head + body;
  ASSERT_EQ(::send(fd, msg.data(), msg.size(), MSG_NOSIGNAL), ssize_t(msg.size()));
  ASSERT_TRUE(eventually([] { return srv_->snapshot().live_requests == 1; }));
  ::close(fd);
  EXPECT_TRUE(eventually([] { return at_baseline(*srv_); }, 20)) << "memory not back to baseline";
  const auto after = srv_->snapshot();
  EXPECT_EQ(after.aborted, before.aborted + 1) << "cancelled, not run to max_tokens";
  EXPECT_LT(after.computed_tokens - before.computed_tokens, 4000);
  EXPECT_EQ(after.memory.free_blocks, before.memory.free_blocks);
}

// The chat prompt is the model's own template (moxi-tiny's, which `moxi init` gave the checkpoint) rendered
// and tokenized; the expected texts are @huggingface/jinja's renderings of configs/chat-templates/
// moxi-tiny.jinja (an independent Jinja implementation), encoded by the checkpoint's tokenizer.
TEST_F(http_server, ChatPromptIsTheModelTemplateRendering) {
  const auto tok = formats::tokenizer::from_hf_json_file(tiny_model_dir() + "/tokenizer.json");
  const nlohmann::ordered_json conversation = {{{"role", "system"}, {"content", "Be brief."}},
                                               {{"role", "user"}, {"content", "Hi"}}};
  const std::string rendered = "<|bos|><|system|>Be brief.<|end|>\n<|user|>Hi<|end|>\n<|assistant|>\n";
  const auto ids = tok.encode(rendered);
  ASSERT_EQ(ids.front(), 1) << "<|bos|> is a special token";
  nlohmann::ordered_json body = {{"messages", conversation}, {"max_tokens", 6},
                                 {"temperature", 0},         {"ignore_eos", true},
                                 {"logprobs", true},         {"return_tokens_as_token_ids", true}};
  auto c = client_for(*srv_);
  auto res = c->Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  auto j = json::parse(res->body);
  EXPECT_EQ(j["usage"]["prompt_tokens"], ids.size());
  std::vector<int64_t> got;
  for (const auto& e : j["choices"][0]["logprobs"]["content"])
    got.push_back(std::stoll(e["token"].get<std::string>().substr(9)));
  EXPECT_EQ(got, reference_greedy(ids, 6, std::vector<token_id>{}).tokens)
      << "the model saw exactly these ids";

  // chat_template_kwargs reach the template (here: no generation prompt).
  body["chat_template_kwargs"] = {{"add_generation_prompt", false}};
  res = c->Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(res && res->status == 200) << (res ? res->body : "no response");
  EXPECT_EQ(json::parse(res->body)["usage"]["prompt_tokens"],
            tok.encode("<|bos|><|system|>Be brief.<|end|>\n<|user|>Hi<|end|>\n").size());

  // Tools are rendered by the template (with their keys in the order sent).
  body.erase("chat_template_kwargs");
  body["messages"] = {{{"role", "user"}, {"content", "What time is it?"}}};
  body["tools"] = nlohmann::ordered_json::parse(
      R"([{"type": "function", "function": {"name": "get_time", "description": "now",
           "parameters": {"type": "object", "properties": {}}}}])");
  res = c->Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(res && res->status == 200) << (res ? res->body : "no response");
  EXPECT_EQ(
      json::parse(res->body)["usage"]["prompt_tokens"],
      tok.encode("<|bos|><|system|>You may call these tools:\n- get_time: {\"type\": \"function\", "
                 "\"function\": {\"name\": \"get_time\", \"description\": \"now\", \"parameters\": "
                 "{\"type\": \"object\", \"properties\": {}}}}\n<|end|>\n<|user|>What time is it?<|end|>\n"
                 "<|assistant|>\n")
          .size());

  // The template's own errors are 400s carrying its message (moxi-tiny raises on roles it does not know).
  const auto e =
      post("/v1/chat/completions", {{"messages", {{{"role", "developer"}, {"content", "x"}}}}}, 400);
  EXPECT_NE(e["error"]["message"].get<std::string>().find("unknown role developer"), std::string::npos) << e;
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
}

TEST_F(http_server, StopStringsEndTheOutputBeforeTheMatch) {
  const auto full = post("/v1/completions", {{"prompt", "hello"}, {"max_tokens", 16}, {"temperature", 0}});
  const std::string text = full["choices"][0]["text"];
  // Stop at a character that occurs in the greedy output (if any printable one does).
  size_t k = text.find_first_of("abcdefghijklmnopqrstuvwxyz");
  if (k == std::string::npos || k == 0) GTEST_SKIP() << "no usable stop character in " << text;
  const std::string stop(1, text[k]);
  const auto cut =
      post("/v1/completions", {{"prompt", "hello"}, {"max_tokens", 16}, {"temperature", 0}, {"stop", stop}});
  EXPECT_EQ(cut["choices"][0]["text"], text.substr(0, text.find(stop)));
  EXPECT_EQ(cut["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(eventually([] { return at_baseline(*srv_); }));
}

TEST_F(http_server, HostileBodiesGetJsonErrorsAndTheServerKeepsServing) {
  auto c = client_for(*srv_);
  struct hostile {
    std::string path, body;
    int status;
    std::string param;
  };
  const std::string big_prompt(2 << 20, 'a');
  const std::vector<hostile> cases = {
      {"/v1/completions", "{not json", 400, ""},
      {"/v1/completions", "", 400, ""},
      {"/v1/completions", "[1,2,3]", 400, ""},
      {"/v1/completions", "\"just a string\"", 400, ""},
      {"/v1/completions", "{\"prompt\": \"\xff\xfe\"}", 400, ""},
      {"/v1/completions", "{\"prompt\": {}}", 400, "prompt"},
      {"/v1/completions", "{\"prompt\": [\"a\", \"b\"]}", 400, "prompt"},
      {"/v1/completions", "{\"prompt\": [-1]}", 400, "prompt"},
      {"/v1/completions", "{\"prompt\": [99999]}", 400, "prompt"},
      {"/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": \"ten\"}", 400, "max_tokens"},
      {"/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": -5}", 400, "max_tokens"},
      {"/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 1e300}", 400, "max_tokens"},
      {"/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 99999999}", 400, "max_tokens"},
      {"/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 18446744073709551615}", 400, "max_tokens"},
      {"/v1/completions", "{\"prompt\": \"x\", \"temperature\": -1}", 400, "temperature"},
      {"/v1/completions", "{\"prompt\": \"x\", \"top_p\": 0}", 400, "top_p"},
      {"/v1/completions", "{\"prompt\": \"x\", \"n\": 17}", 400, "n"},
      {"/v1/completions", "{\"prompt\": \"x\", \"stop\": [1]}", 400, "stop"},
      {"/v1/completions", "{\"prompt\": \"x\", \"stream\": \"yes\"}", 400, "stream"},
      {"/v1/completions", "{\"prompt\": \"x\", \"model\": \"gpt-4\"}", 404, "model"},
      {"/v1/completions", "{\"prompt\": \"x\", \"model\": 5}", 400, "model"},
      {"/v1/chat/completions", "{\"messages\": \"hi\"}", 400, "messages"},
      {"/v1/chat/completions", "{\"messages\": []}", 400, "messages"},
      {"/v1/chat/completions", "{\"messages\": [{\"role\": 1}]}", 400, "messages"},
      {"/v1/chat/completions", "{\"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}]}", 400,
       "messages"},
      {"/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", 400,
       "messages[0].content"},
      {"/v1/chat/completions",
       "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"top_logprobs\": 3}", 400,
       "top_logprobs"},
      {"/v1/completions", "{\"prompt\": \"" + std::string(5000, 'a') + "\", \"max_tokens\": 1}", 400,
       "prompt"},
      {"/v1/completions", "{\"prompt\": \"" + big_prompt + "\"}", 413, ""},
  };
  for (const auto& h : cases) {
    auto res = c->Post(h.path, h.body, "application/json");
    ASSERT_TRUE(res) << h.body.substr(0, 80);
    EXPECT_EQ(res->status, h.status) << h.body.substr(0, 80) << " -> " << res->body;
    const auto j = json::parse(res->body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << res->body;
    ASSERT_TRUE(j.contains("error")) << res->body;
    EXPECT_TRUE(j["error"]["message"].is_string());
    EXPECT_TRUE(j["error"]["type"].is_string());
    if (!h.param.empty()) {
      EXPECT_EQ(j["error"]["param"], h.param) << res->body;
    }
  }
  auto wrong_method = c->Get("/v1/completions");
  ASSERT_TRUE(wrong_method);
  EXPECT_GE(wrong_method->status, 400);
  EXPECT_TRUE(json::parse(wrong_method->body, nullptr, false).contains("error"));
  // Still serving.
  post("/v1/completions", {{"prompt", "ok"}, {"max_tokens", 2}});
  EXPECT_TRUE(eventually([] { return at_baseline(*srv_); }));
}

TEST_F(http_server, ClientDisconnectCancelsAndFreesMemory) {
  ASSERT_TRUE(eventually([] { return at_baseline(*srv_); }));
  const auto before = srv_->snapshot();
  auto c = client_for(*srv_);
  for (bool chat : {false, true}) {
    httplib::Request req;
    req.method = "POST";
    req.path = chat ? "/v1/chat/completions" : "/v1/completions";
    json body = {{"max_tokens", 3000}, {"stream", true}, {"temperature", 0}, {"ignore_eos", true}};
    if (chat) {
      body["messages"] = {{{"role", "user"}, {"content", "go on forever"}}};
      body["n"] = 3;  // forked choices are cancelled and freed too
    } else {
      body["prompt"] = ids(30, 4);
    }
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    int chunks = 0;
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 4; };
    auto res = c->send(req);
    EXPECT_GE(chunks, 4);
    EXPECT_TRUE(eventually([] { return at_baseline(*srv_); }, 20)) << "memory not back to baseline";
  }
  const auto after = srv_->snapshot();
  EXPECT_EQ(after.memory.free_blocks, before.memory.free_blocks);
  EXPECT_EQ(after.memory.free_state_slots, before.memory.free_state_slots);
  const std::string m = srv_->metrics_text();
  EXPECT_TRUE(std::regex_search(
      m, std::regex("moxi:request_success_total\\{[^}]*finished_reason=\"abort\"\\} [1-9]")))
      << m;
}

// A strict reader of the text exposition format: every sample line belongs to a family declared by
// HELP/TYPE before it, names and labels are well-formed, values parse, histograms are cumulative and end
// with +Inf == _count.
void check_prometheus_text(const std::string& text) {
  const std::regex sample(
      R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*"(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*")*)\})? (\S+)$)");
  const std::regex type_line(
      R"(^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$)");
  std::map<std::string, std::string> types;
  std::map<std::string, double> last_bucket;
  std::istringstream in(text);
  int samples = 0;
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (line.rfind("# HELP ", 0) == 0) continue;
    if (line.rfind("# TYPE ", 0) == 0) {
      ASSERT_TRUE(std::regex_match(line, m, type_line)) << line;
      ASSERT_FALSE(types.count(m[1])) << "family declared twice: " << line;
      types[m[1]] = m[2];
      continue;
    }
    ASSERT_TRUE(std::regex_match(line, m, sample)) << "bad sample line: " << line;
    std::string name = m[1];
    const std::string value = m[4];
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    ASSERT_TRUE(*end == 0 || value == "+Inf" || value == "NaN") << line;
    std::string family = name;
    for (const char* suffix : {"_bucket", "_sum", "_count"})
      if (!types.count(family) && name.size() > strlen(suffix) &&
          name.compare(name.size() - strlen(suffix), std::string::npos, suffix) == 0)
        family = name.substr(0, name.size() - strlen(suffix));
    ASSERT_TRUE(types.count(family)) << "sample before its TYPE: " << line;
    if (types[family] == "histogram" && name == family + "_bucket") {
      const std::string labels = m[3];
      const std::string key = family + std::regex_replace(labels, std::regex(",?le=\"[^\"]*\""), "");
      if (last_bucket.count(key)) {
        ASSERT_GE(v, last_bucket[key]) << "buckets not cumulative: " << line;
      }
      last_bucket[key] = v;
    }
    ++samples;
  }
  EXPECT_GT(samples, 20);
  for (const char* f :
       {"moxi:time_to_first_token_seconds", "moxi:inter_token_latency_seconds",
        "moxi:e2e_request_latency_seconds", "moxi:num_requests_running", "moxi:num_requests_waiting",
        "moxi:kv_cache_usage_perc", "moxi:prefix_cache_queries_total", "moxi:prefix_cache_hits_total",
        "moxi:prompt_tokens_total", "moxi:generation_tokens_total"})
    EXPECT_TRUE(types.count(f)) << f;
}

TEST_F(http_server, MetricsAreValidPrometheusText) {
  post("/v1/completions", {{"prompt", "metrics please"}, {"max_tokens", 4}});
  auto c = client_for(*srv_);
  auto res = c->Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_NE(res->get_header_value("Content-Type").find("text/plain"), std::string::npos);
  check_prometheus_text(res->body);
  EXPECT_TRUE(std::regex_search(
      res->body, std::regex("moxi:generation_tokens_total\\{model_name=\"moxi-tiny\"\\} [1-9]")));

  // promtool (Debian package `prometheus`) parses the exposition; its only complaint allowed is the colon
  // in the names, which vLLM's names have too (recording-rule style).
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) GTEST_SKIP() << "promtool not installed";
  moxi::testing::temp_dir tmp("moxi-promtool");
  const std::string in = tmp / "metrics.txt", out = tmp / "out.txt";
  std::ofstream(in) << res->body;
  const int rc = std::system(("promtool check metrics < " + in + " > " + out + " 2>&1").c_str());
  std::ifstream o(out);
  std::string line, complaints;
  while (std::getline(o, line))
    if (line.find("should not contain ':'") == std::string::npos && !line.empty()) complaints += line + "\n";
  EXPECT_TRUE(complaints.empty()) << "promtool: " << complaints << "(exit " << rc << ")";
}

// A checkpoint without tokenizer_config.json (a base model) and with generation_config.json naming a stop
// token: chat is a 400 saying there is no template (vLLM makes none up), and generation stops at that token.
TEST(http_server_alone, NoTemplateMeansChatIs400AndGenerationConfigStopsGeneration) {
  const std::vector<token_id> prompt = {20, 21, 22, 23};
  const auto free_run = reference_greedy(prompt, 12, std::vector<token_id>{});
  const token_id stop = token_id(free_run.tokens[4]);
  const auto first =
      std::find(free_run.tokens.begin(), free_run.tokens.end(), stop) - free_run.tokens.begin();
  moxi::testing::temp_dir dir("moxi-serve-base");
  namespace fs = std::filesystem;
  for (const auto& f : fs::directory_iterator(tiny_model_dir())) {
    const std::string name = f.path().filename().string();
    if (name != "tokenizer_config.json" && name != "generation_config.json")
      fs::create_symlink(f.path(), fs::path(dir.path()) / name);
  }
  std::ofstream(dir / "generation_config.json") << json{{"eos_token_id", {stop}}}.dump();
  auto cfg = tiny_config();
  cfg.model_dir = dir.path();
  auto s = start_server(cfg);
  auto c = client_for(*s);
  auto res = c->Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}]})",
                     "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  const auto e = json::parse(res->body);
  EXPECT_NE(e["error"]["message"].get<std::string>().find("no chat template"), std::string::npos) << e;
  EXPECT_EQ(e["error"]["param"], "messages");
  res = c->Post("/v1/completions",
                json{{"prompt", prompt},
                     {"max_tokens", 12},
                     {"temperature", 0},
                     {"logprobs", 0},
                     {"return_tokens_as_token_ids", true}}
                    .dump(),
                "application/json");
  ASSERT_TRUE(res && res->status == 200) << (res ? res->body : "no response");
  const auto j = json::parse(res->body);
  const std::vector<int64_t> expect(free_run.tokens.begin(), free_run.tokens.begin() + first + 1);
  EXPECT_EQ(token_ids(j["choices"][0]), expect);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
}

TEST(http_server_alone, ApiKeysAreRequiredOnV1AndCheckedExactly) {
  auto cfg = tiny_config();
  cfg.api_keys = {"sk-right-key", "sk-second"};
  auto s = start_server(cfg);
  auto c = client_for(*s);
  auto none = c->Get("/v1/models");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  EXPECT_EQ(json::parse(none->body)["error"]["type"], "authentication_error");
  for (const char* bad :
       {"Bearer sk-right-ke", "Bearer sk-right-key2", "sk-right-key", "Bearer ", "Basic sk-right-key"}) {
    auto r = c->Get("/v1/models", {{"Authorization", bad}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << bad;
  }
  auto post_none = c->Post("/v1/completions", "{\"prompt\": \"x\"}", "application/json");
  ASSERT_TRUE(post_none);
  EXPECT_EQ(post_none->status, 401);
  for (const char* good : {"Bearer sk-right-key", "Bearer sk-second"}) {
    auto r = c->Get("/v1/models", {{"Authorization", good}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << good;
  }
  auto h = c->Get("/health");  // probes need no key (as vLLM)
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
}

TEST(http_server_alone, ConcurrentRequestsBeyondTheLimitGet429) {
  auto cfg = tiny_config();
  cfg.max_concurrent_requests = 2;
  auto s = start_server(cfg);
  std::atomic<bool> release{false};
  std::vector<std::thread> holders;
  for (int i = 0; i < 2; ++i)
    holders.emplace_back([&] {
      auto c = client_for(*s);
      httplib::Request req;
      req.method = "POST";
      req.path = "/v1/completions";
      req.body =
          json{{"prompt", "hold"}, {"max_tokens", 3000}, {"stream", true}, {"ignore_eos", true}}.dump();
      req.set_header("Content-Type", "application/json");
      req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return !release.load(); };
      c->send(req);
    });
  ASSERT_TRUE(eventually([&] { return s->snapshot().active_http == 2; }));
  auto c = client_for(*s);
  auto r = c->Post("/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 1}", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  EXPECT_EQ(json::parse(r->body)["error"]["type"], "rate_limit_error");
  release = true;
  for (auto& t : holders) t.join();
  EXPECT_TRUE(eventually([&] { return at_baseline(*s); }, 20));
  auto ok = c->Post("/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 1}", "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

TEST(http_server_alone, SlowAndVanishingClientsAreCutOffAndTheServerKeepsServing) {
  auto cfg = tiny_config();
  cfg.io_timeout_s = 1;
  auto s = start_server(cfg);
  // Headers promise a body that never comes: the read timeout closes the connection.
  const int slow = connect_to(s->port());
  ASSERT_GE(slow, 0);
  const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pro";
  ASSERT_EQ(::send(slow, head.data(), head.size(), MSG_NOSIGNAL), ssize_t(head.size()));
  timeval tv{5, 0};
  ::setsockopt(slow, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  const auto t0 = std::chrono::steady_clock::now();
  char buf[4096];
  ssize_t n;
  std::string reply;
  while ((n = ::recv(slow, buf, sizeof buf, 0)) > 0) reply.append(buf, size_t(n));
  EXPECT_EQ(n, 0) << "the server did not close the connection";
  // Either a 4xx for the incomplete body or a plain close, never a completion.
  EXPECT_TRUE(reply.empty() || reply.rfind("HTTP/1.1 4", 0) == 0) << reply;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 4.0);
  ::close(slow);
  // Clients that send half a request, or a full streaming request, and vanish.
  for (const std::string& partial :
       {std::string("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"),
        std::string("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    "Content-Length: 72\r\n\r\n{\"prompt\": \"x\", \"max_tokens\": 500, \"stream\": true, "
                    "\"ignore_eos\": true}  ")}) {
    const int fd = connect_to(s->port());
    ASSERT_GE(fd, 0);
    ::send(fd, partial.data(), partial.size(), MSG_NOSIGNAL);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ::close(fd);
  }
  EXPECT_TRUE(eventually([&] { return at_baseline(*s); }, 20));
  auto c = client_for(*s);
  auto ok = c->Post("/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 2}", "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

// A 128K-token prompt on tiny-seed with a long context: it is admitted, its prefill shows in /metrics as
// it goes (prompt tokens pending falling, prompt tokens computed rising, 512 a step), and the client
// leaving during the prefill frees its blocks and state slot as soon as the step in flight ends; the
// prefill computed only part of the prompt.
TEST(http_server_alone, ALongPromptsPrefillShowsInMetricsAndADisconnectFreesIt) {
  moxi::testing::temp_dir dir("moxi-serve-long");
  const std::string model_dir = dir / "tiny-seed-128k";
  {
    auto doc = nlohmann::json::parse(std::ifstream(std::string(MOXI_SOURCE_DIR) + "/configs/tiny-seed.json"));
    doc["max_position_embeddings"] = 262144;
    model::init_options o;
    o.seed = 1;
    o.show_progress = false;
    model::init_checkpoint(model::parse_model_config(doc, "tiny-seed-128k"), model_dir, o);
  }
  constexpr int64_t kPrompt = 131072;
  auto cfg = tiny_config();
  cfg.model_dir = model_dir;
  cfg.max_model_len = kPrompt + 16;  // the limit that lets the prompt in (the default is 32768)
  cfg.num_blocks = 0;                // sized for one max_model_len sequence
  auto s = start_server(cfg);
  ASSERT_TRUE(eventually([&] { return at_baseline(*s); }));
  const int64_t computed_before = s->snapshot().gauges.prefill_tokens;

  std::atomic<bool> left{false};
  std::thread client([&] {
    auto c = client_for(*s);
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = json{{"prompt", ids(int(kPrompt), 7)}, {"max_tokens", 1}, {"stream", true}}.dump();
    req.set_header("Content-Type", "application/json");
    // The first bytes of the stream are the keep-alive comment sent while nothing is produced; then leave.
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return false; };
    c->send(req);
    left = true;
  });
  // Progress while the prefill runs: pending falls from the prompt, computed rises by the same amount.
  std::vector<std::pair<int64_t, int64_t>> seen;  // (pending, computed)
  ASSERT_TRUE(eventually(
      [&] {
        const auto g = s->snapshot().gauges;
        if (g.prefill_tokens_pending > 0) seen.emplace_back(g.prefill_tokens_pending, g.prefill_tokens);
        return seen.size() >= 2 && seen.back().first < seen.front().first;
      },
      60))
      << "no prefill progress seen";
  for (const auto& [pending, computed] : seen) {
    EXPECT_LE(pending, kPrompt);
    EXPECT_EQ(pending + (computed - computed_before), kPrompt) << "pending and computed must add up";
  }
  const std::string m = s->metrics_text();
  EXPECT_TRUE(std::regex_search(m, std::regex(R"(moxi:num_prefill_tokens_pending\{[^}]*\} [1-9][0-9]*\n)"))) << m;
  EXPECT_TRUE(std::regex_search(m, std::regex(R"(moxi:prefill_tokens_total\{[^}]*\} [1-9][0-9]*\n)"))) << m;

  client.join();
  EXPECT_TRUE(left);
  EXPECT_TRUE(eventually([&] { return at_baseline(*s); }, 30)) << "memory not freed after the disconnect";
  const auto g = s->snapshot().gauges;
  EXPECT_EQ(g.prefill_tokens_pending, 0);
  EXPECT_LT(g.prefill_tokens - computed_before, kPrompt) << "the prefill ran to the end: nothing was cancelled";
  EXPECT_TRUE(std::regex_search(s->metrics_text(),
                                std::regex(R"(moxi:request_success_total\{[^}]*finished_reason="abort"\} 1\n)")));
}

TEST(http_server_alone, ShutdownDrainsThenCancelsInFlightStreams) {
  // A stream far longer than the drain: 4000 tokens (the tiny model's context is 4096) take the tiny model
  // well over half a second on two cores, the drain is 0.1 s.
  auto cfg = tiny_config();
  cfg.drain_timeout_s = 0.1;
  auto s = start_server(cfg);
  std::string body;
  std::thread t([&] {
    auto c = client_for(*s);
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = json{{"prompt", "long"}, {"max_tokens", 4000}, {"stream", true}, {"ignore_eos", true}}.dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
      body.append(d, n);
      return true;
    };
    c->send(req);
  });
  ASSERT_TRUE(eventually([&] { return s->snapshot().active_http == 1; }));
  const auto t0 = std::chrono::steady_clock::now();
  s->shutdown();
  t.join();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  const auto r = parse_sse(body, false);
  EXPECT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.finish_reason, "abort");
  auto c = client_for(*s);
  EXPECT_FALSE(c->Get("/health"));  // no longer listening
}

}  // namespace
}  // namespace moxi::serve
