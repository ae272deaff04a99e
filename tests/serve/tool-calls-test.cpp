// Tool calls end to end: a tool_choice that names a function (or "required" with one tool) makes the reply
// a call of it, whatever the model: the prompt ends with the template's own opening of a call and the
// arguments are held to the function's parameters schema. Checked on an in-process server over the bundled
// moxi-tiny at temperature 1 with several seeds: the response shape (OpenAI's tool_calls, finish_reason
// "tool_calls"), the arguments against the schema by rules written here, streaming deltas that add up to
// the same call, text replies for "auto"/"none", a tool loop's history, and 400s naming the field.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "moxi/runtime/local-model.h"
#include "moxi/serve/api-openai.h"
#include "serve/http-test-util.h"

namespace moxi::serve {
namespace {

using namespace moxi::serve::testing;

json_reply post(httplib::Client& c, const json& body) {
  return testing::post(c, "/v1/chat/completions", body);
}

json run_command_tool() {
  return {{"type", "function"},
          {"function",
           {{"name", "run_command"},
            {"description", "run a shell command"},
            {"parameters",
             {{"type", "object"},
              {"properties", {{"command", {{"type", "string"}, {"maxLength", 12}}}}},
              {"required", {"command"}},
              {"additionalProperties", false}}}}}};
}

json body_with(const json& tool_choice, uint64_t seed) {
  return {{"messages", {{{"role", "user"}, {"content", "How many lines are in notes.txt?"}}}},
          {"tools", {run_command_tool()}},
          {"tool_choice", tool_choice},
          {"temperature", 1.0},
          {"seed", seed},
          {"max_tokens", 120}};
}

// The arguments against the schema above: an object with exactly a string "command" of at most 12 code
// points.
std::string check_arguments(const std::string& text) {
  const json v = json::parse(text, nullptr, false);
  if (v.is_discarded()) return "not JSON: " + text;
  if (!v.is_object() || v.size() != 1 || !v.contains("command") || !v["command"].is_string())
    return "not {\"command\": string}: " + text;
  size_t cps = 0;
  for (unsigned char c : v["command"].get<std::string>()) cps += (c & 0xC0) != 0x80;
  return cps <= 12 ? "" : "command longer than 12: " + text;
}

TEST(tool_calls, AForcedChoiceIsACallWithValidArgumentsStreamedOrNot) {
  auto s = start_server(bundled_config());
  auto c = client_for(*s);
  const json named = {{"type", "function"}, {"function", {{"name", "run_command"}}}};
  int complete = 0;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    for (const json& choice : {named, json("required")}) {
      const auto r = post(*c, body_with(choice, seed));
      ASSERT_EQ(r.status, 200) << r.body.dump();
      const auto& ch = r.body["choices"][0];
      const std::string finish = ch["finish_reason"];
      ASSERT_TRUE(finish == "tool_calls" || finish == "length") << finish;
      const auto& msg = ch["message"];
      EXPECT_TRUE(msg["content"].is_null());
      ASSERT_EQ(msg["tool_calls"].size(), 1u) << msg.dump();
      const auto& call = msg["tool_calls"][0];
      EXPECT_EQ(call["type"], "function");
      EXPECT_EQ(call["function"]["name"], "run_command");
      EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);
      if (finish != "tool_calls") continue;
      ++complete;
      EXPECT_EQ(check_arguments(call["function"]["arguments"]), "") << "seed " << seed;
    }
    // Streaming, same seed: the first delta carries id, type and name; the argument pieces add up to the
    // non-streamed arguments.
    json body = body_with(named, seed);
    const auto once = post(*c, body);
    body["stream"] = true;
    auto res = c->Post("/v1/chat/completions", body.dump(), "application/json");
    ASSERT_TRUE(res);
    std::istringstream in(res->body);
    std::string args, name, id, finish;
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("data: {", 0) != 0) continue;
      const json ev = json::parse(line.substr(6));
      const auto& ch = ev["choices"][0];
      if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
      if (!ch["delta"].contains("tool_calls")) continue;
      const auto& tc = ch["delta"]["tool_calls"][0];
      EXPECT_EQ(tc["index"], 0);
      if (tc.contains("id")) id = tc["id"], name = tc["function"]["name"];
      args += tc["function"]["arguments"].get<std::string>();
    }
    EXPECT_EQ(name, "run_command");
    EXPECT_EQ(id.rfind("call_", 0), 0u);
    EXPECT_EQ(finish, once.body["choices"][0]["finish_reason"]);
    EXPECT_EQ(args, once.body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]);
  }
  EXPECT_GE(complete, 4) << "calls completed within max_tokens";
  EXPECT_TRUE(eventually([&] { return at_baseline(*s); }, 20));
}

TEST(tool_calls, AutoAndNoneReplyWithTextAndAToolLoopRendersItsHistory) {
  auto s = start_server(bundled_config());
  auto c = client_for(*s);
  for (const char* choice : {"auto", "none"}) {
    const auto r = post(*c, body_with(choice, 3));
    ASSERT_EQ(r.status, 200) << r.body.dump();
    EXPECT_TRUE(r.body["choices"][0]["message"]["content"].is_string());
    EXPECT_FALSE(r.body["choices"][0]["message"].contains("tool_calls"));
    EXPECT_NE(r.body["choices"][0]["finish_reason"], "tool_calls");
  }
  // Streamed with tools (auto), the text is held until it is known not to be a call, then sent: the
  // same text as without streaming.
  json body_auto = body_with("auto", 4);
  const auto once = post(*c, body_auto);
  body_auto["stream"] = true;
  auto res = c->Post("/v1/chat/completions", body_auto.dump(), "application/json");
  ASSERT_TRUE(res);
  const auto sse = parse_sse(res->body, true);
  ASSERT_TRUE(sse.ok) << sse.error;
  EXPECT_EQ(sse.text, once.body["choices"][0]["message"]["content"]);
  EXPECT_EQ(sse.finish_reason, once.body["choices"][0]["finish_reason"]);
  // The call goes back as the assistant turn, its result as a tool message; the next reply is text.
  const auto first = post(*c, body_with({{"type", "function"}, {"function", {{"name", "run_command"}}}}, 5));
  ASSERT_EQ(first.status, 200);
  json body = body_with("none", 5);
  body["messages"].push_back(first.body["choices"][0]["message"]);
  body["messages"].push_back({{"role", "tool"},
                              {"tool_call_id", first.body["choices"][0]["message"]["tool_calls"][0]["id"]},
                              {"content", "12 notes.txt"}});
  const auto second = post(*c, body);
  ASSERT_EQ(second.status, 200) << second.body.dump();
  EXPECT_TRUE(second.body["choices"][0]["message"]["content"].is_string());
  EXPECT_GT(second.body["usage"]["prompt_tokens"].get<int>(), first.body["usage"]["prompt_tokens"].get<int>());
}

TEST(tool_calls, BadToolsAndToolChoicesAre400NamingTheField) {
  auto s = start_server(tiny_config());
  auto c = client_for(*s);
  json two = {run_command_tool(), run_command_tool()};
  two[1]["function"]["name"] = "other";
  json bad_schema = run_command_tool();
  bad_schema["function"]["parameters"]["properties"]["command"]["pattern"] = "^a";
  const json named = {{"type", "function"}, {"function", {{"name", "run_command"}}}};
  const std::vector<std::tuple<json, json, std::string, std::string>> cases = {
      {"ls", nullptr, "tools", "must be an array"},
      {{{{"function", {{"name", "x"}}}}}, nullptr, "tools", "'type': 'function'"},
      {{{{"type", "function"}, {"function", {{"name", "a b"}}}}}, nullptr, "tools", "function.name"},
      {{{{"type", "function"}, {"function", {{"name", "x"}, {"parameters", "s"}}}}}, nullptr, "tools", "parameters"},
      {json::array({run_command_tool()}), "sometimes", "tool_choice", "must be"},
      {json::array({run_command_tool()}), {{"type", "function"}, {"function", {{"name", "nope"}}}}, "tool_choice",
       "not in 'tools'"},
      {two, "required", "tool_choice", "exactly one tool"},
      {nullptr, "required", "tool_choice", "exactly one tool"},
      {json::array({bad_schema}), named, "tools", "'pattern'"},
  };
  for (const auto& [tools, choice, param, words] : cases) {
    json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 4}};
    if (!tools.is_null()) body["tools"] = tools;
    if (!choice.is_null()) body["tool_choice"] = choice;
    const auto r = post(*c, body);
    ASSERT_EQ(r.status, 400) << body.dump() << " -> " << r.body.dump();
    EXPECT_EQ(r.body["error"]["param"], param) << body.dump();
    EXPECT_NE(r.body["error"]["message"].get<std::string>().find(words), std::string::npos) << r.body.dump();
  }
  json body = body_with(named, 1);
  body["response_format"] = {{"type", "json_object"}};
  const auto r = post(*c, body);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["error"]["param"], "response_format");
}

// moxi's call lines in a free-form reply (tool_choice auto), on crafted replies.
TEST(tool_calls, CallLinesInAReplyAreParsedOnlyWhenTheyAreCalls) {
  const nlohmann::ordered_json tools = nlohmann::ordered_json::parse(json::array({run_command_tool()}).dump());
  auto p = parse_tool_calls("\n[call 1/1] run_command({\"command\": \"wc -l notes.txt\"})", tools);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].first, "run_command");
  EXPECT_EQ(p.calls[0].second, "{\"command\": \"wc -l notes.txt\"}");
  EXPECT_TRUE(p.content.is_null());
  p = parse_tool_calls("Let me count.\n[call 1/2] run_command({\"command\": \"ls\"})\n[call 2/2] run_command({})  ", tools);
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.content, "Let me count.");
  EXPECT_EQ(p.calls[1].second, "{}");
  for (const char* text : {"[call 1/1] other_tool({})",             // not in tools
                           "[call 1/1] run_command({\"command\": }", // not JSON
                           "[call 1/1] run_command([1, 2])",          // not an object
                           "say [call 1/1] run_command({})",          // not at a line start
                           "[call x/1] run_command({})", "plain text"}) {
    p = parse_tool_calls(text, tools);
    EXPECT_TRUE(p.calls.empty()) << text;
    EXPECT_EQ(p.content, text);
  }
}

TEST(tool_calls, MoxiTemplatesWriteCallLines) {
  const auto cfg = bundled_config();
  const auto lm = runtime::local_model::load(cfg.model_dir);
  completion_request r;
  r.messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
  EXPECT_TRUE(template_uses_call_lines(lm.require_chat(), r));
  const formats::chat_template plain("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}", "plain");
  EXPECT_FALSE(template_uses_call_lines(plain, r));
}

}  // namespace
}  // namespace moxi::serve
