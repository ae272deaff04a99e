// Unit tests of the API layer without a server: request parsing (defaults, every parameter's type and
// range errors naming the parameter), error bodies, chat rendering through the model's template (and the
// 400s without one or when it raises), JSON dumps of bytes that are not UTF-8, constant-time key checks, and
// the Prometheus histogram exposition.
#include "moxi/serve/api-openai.h"

#include <gtest/gtest.h>

#include "moxi/serve/http-auth.h"
#include "moxi/serve/metrics.h"

namespace moxi::serve {
namespace {

using nlohmann::json;

api_error error_of(const std::string& body, bool chat = false) {
  try {
    parse_completion_request(body, chat, "m");
  } catch (const api_error& e) {
    return e;
  }
  ADD_FAILURE() << "no error for " << body;
  return api_error(0, "");
}

TEST(api_openai, ParsesCompletionDefaultsAndParameters) {
  auto r = parse_completion_request(R"({"prompt": "hi"})", false, "m");
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(*r.prompt_text, "hi");
  EXPECT_FALSE(r.max_tokens);
  EXPECT_FALSE(r.stream);
  EXPECT_EQ(r.top_logprobs, -1);
  r = parse_completion_request(
      R"({"model": "m", "prompt": [5, 6], "max_tokens": 7, "temperature": 0, "top_p": 0.5, "seed": -3,
          "stop": ["a", "b"], "n": 1, "stream": true, "stream_options": {"include_usage": true}, "logprobs": 2})",
      false, "m");
  EXPECT_EQ(r.prompt_ids, (std::vector<token_id>{5, 6}));
  EXPECT_EQ(*r.max_tokens, 7);
  EXPECT_EQ(r.sampling.temperature, 0.0f);
  EXPECT_EQ(r.sampling.top_p, 0.5f);
  EXPECT_EQ(*r.sampling.seed, uint64_t(-3));
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(r.stream && r.include_usage);
  EXPECT_EQ(r.top_logprobs, 2);
}

TEST(api_openai, ParsesChatMessagesAndContentParts) {
  const auto r = parse_completion_request(
      R"({"messages": [{"role": "system", "content": "s"},
                       {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
          "max_completion_tokens": 3, "logprobs": true, "top_logprobs": 4})",
      true, "m");
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1]["content"], "ab");
  EXPECT_EQ(*r.max_tokens, 3);
  EXPECT_EQ(r.top_logprobs, 4);
  EXPECT_TRUE(r.add_generation_prompt);
  EXPECT_FALSE(r.tools);
}

TEST(api_openai, ChatRendersWithTheModelTemplateAndFailsWithout) {
  auto r = parse_completion_request(
      R"({"messages": [{"role": "user", "content": "Hi"}], "tools": [{"type": "function",
          "function": {"name": "f", "parameters": {}}}], "chat_template_kwargs": {"add_generation_prompt": false}})",
      true, "m");
  ASSERT_TRUE(r.tools);
  // Key order as sent (tojson shows it): "type" before "function".
  EXPECT_EQ(r.tools->dump(), R"([{"type":"function","function":{"name":"f","parameters":{}}}])");
  // A template that prints exactly what it is given, so the expected text follows from Jinja alone.
  const formats::chat_template echo(
      "{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}{{ tools | length }}"
      "{{ '+' if add_generation_prompt else '-' }}",
      "echo");
  EXPECT_EQ(render_chat(&echo, r), "[user:Hi]1-");
  r.template_kwargs = nlohmann::ordered_json::object();
  EXPECT_EQ(render_chat(&echo, r), "[user:Hi]1+");
  try {
    render_chat(nullptr, r);
    FAIL();
  } catch (const api_error& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_NE(std::string(e.what()).find("no chat template"), std::string::npos) << e.what();
  }
  const formats::chat_template raising("{{ raise_exception('only user turns, please') }}", "strict");
  try {
    render_chat(&raising, r);
    FAIL();
  } catch (const api_error& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_NE(std::string(e.what()).find("only user turns, please"), std::string::npos) << e.what();
  }
}

TEST(api_openai, RejectsBadBodiesNamingTheParameter) {
  EXPECT_EQ(error_of("{").status, 400);
  EXPECT_EQ(error_of("null").status, 400);
  EXPECT_EQ(error_of(R"({"prompt": "x", "model": "other"})").status, 404);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({})", "prompt"},
      {R"({"prompt": 1})", "prompt"},
      {R"({"prompt": [1.5]})", "prompt"},
      {R"({"prompt": "x", "max_tokens": 0})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 2.5})", "max_tokens"},
      {R"({"prompt": "x", "temperature": "hot"})", "temperature"},
      {R"({"prompt": "x", "temperature": 2.5})", "temperature"},
      {R"({"prompt": "x", "top_p": 1.5})", "top_p"},
      {R"({"prompt": "x", "presence_penalty": 3})", "presence_penalty"},
      {R"({"prompt": "x", "n": 17})", "n"},
      {R"({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]})", "stop"},
      {R"({"prompt": "x", "stop": [""]})", "stop"},
      {R"({"prompt": "x", "logprobs": 21})", "logprobs"},
      {R"({"prompt": "x", "stream_options": {"include_usage": true}})", "stream_options"},
      {R"({"prompt": "x", "echo": true})", "echo"},
      {R"({"prompt": "x", "seed": "1"})", "seed"},
  };
  for (const auto& [body, param] : cases) {
    const auto e = error_of(body);
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.param, param) << body << ": " << e.what();
  }
  EXPECT_EQ(error_of(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", true).param,
            "messages[0].content[0]");
  EXPECT_EQ(error_of(R"({"messages": [{"role": "user", "content": [{"type": "audio"}]}]})", true).param,
            "messages[0].content");
  EXPECT_EQ(error_of(R"({"messages": [{"role": "user", "content": "x"}], "tools": {}})", true).param,
            "tools");
  EXPECT_EQ(error_of(R"({"messages": [{"role": "user", "content": "x"}], "tools": [1]})", true).param,
            "tools");
  EXPECT_EQ(
      error_of(R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": []})", true).param,
      "chat_template_kwargs");
  EXPECT_EQ(
      error_of(R"({"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": 1})", true).param,
      "add_generation_prompt");
  EXPECT_EQ(
      error_of(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 30, "logprobs": true})",
               true)
          .param,
      "top_logprobs");
}

TEST(api_openai, ErrorBodiesAreOpenAiShaped) {
  const auto j = json::parse(error_body(429, "slow down"));
  EXPECT_EQ(j["error"]["message"], "slow down");
  EXPECT_EQ(j["error"]["type"], "rate_limit_error");
  EXPECT_TRUE(j["error"]["param"].is_null());
  EXPECT_EQ(j["error"]["code"], 429);
  EXPECT_EQ(json::parse(error_body(401, "x"))["error"]["type"], "authentication_error");
  EXPECT_EQ(json::parse(error_body(500, "x"))["error"]["type"], "server_error");
  EXPECT_EQ(json::parse(error_body(400, "x", "top_p"))["error"]["param"], "top_p");
}

TEST(api_openai, DumpReplacesInvalidUtf8) {
  const std::string s = dump(json{{"text", std::string("a\xff"
                                                       "b")}});
  EXPECT_EQ(json::parse(s)["text"],
            "a\xEF\xBF\xBD"
            "b");
}

TEST(api_openai, LogprobsShapes) {
  const std::vector<logprob_entry> e = {{"he", -0.5f, {{"he", -0.5f}, {"ha", -1.5f}}}, {"llo", -0.1f, {}}};
  const auto c = logprobs_json(false, e);
  EXPECT_EQ(c["tokens"], json({"he", "llo"}));
  EXPECT_EQ(c["text_offset"], json({0, 2}));
  EXPECT_EQ(c["top_logprobs"][0].size(), 2u);
  const auto ch = logprobs_json(true, e);
  EXPECT_EQ(ch["content"][0]["token"], "he");
  EXPECT_EQ(ch["content"][0]["bytes"], json({104, 101}));
  EXPECT_EQ(ch["content"][0]["top_logprobs"][1]["token"], "ha");
}

TEST(http_auth, ConstantTimeEqualAndBearerKeys) {
  EXPECT_TRUE(constant_time_equal("abc", "abc"));
  EXPECT_FALSE(constant_time_equal("abc", "abd"));
  EXPECT_FALSE(constant_time_equal("abc", "abcd"));
  EXPECT_FALSE(constant_time_equal("", "a"));
  EXPECT_TRUE(constant_time_equal("", ""));
  const std::vector<std::string> keys = {"k1", "key-two"};
  EXPECT_TRUE(api_key_ok("Bearer k1", keys));
  EXPECT_TRUE(api_key_ok("Bearer key-two", keys));
  EXPECT_FALSE(api_key_ok("Bearer k2", keys));
  EXPECT_FALSE(api_key_ok("k1", keys));
  EXPECT_FALSE(api_key_ok("", keys));
}

TEST(metrics, HistogramExpositionIsCumulative) {
  histogram h({0.1, 1.0});
  h.observe(0.05);
  h.observe(0.5);
  h.observe(0.5);
  h.observe(7);
  std::string out;
  h.render(out, "x", "a=\"b\"");
  EXPECT_EQ(out,
            "x_bucket{a=\"b\",le=\"0.1\"} 1\n"
            "x_bucket{a=\"b\",le=\"1\"} 3\n"
            "x_bucket{a=\"b\",le=\"+Inf\"} 4\n"
            "x_sum{a=\"b\"} 8.05\n"
            "x_count{a=\"b\"} 4\n");
}

}  // namespace
}  // namespace moxi::serve
