// response_format end to end: an in-process server over the bundled moxi-tiny (byte-level BPE) and over a
// random tiny checkpoint (byte tokenizer) samples at temperature 1 with several seeds under json_object and
// json_schema; every response that finished with "stop" must parse with nlohmann::json and validate
// against the schema by a checker written here (types, lengths in code points, enum membership, required
// and no other properties). Bad response_format values must be 400s whose param names the field.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "serve/http-test-util.h"

namespace moxi::serve {
namespace {

using namespace moxi::serve::testing;

size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// The schema below, checked by hand-written rules (JSON Schema validation semantics).
const char* kSchema = R"({
  "type": "object",
  "properties": {
    "answer": {"type": "string", "maxLength": 6},
    "count": {"type": "integer"},
    "ok": {"type": "boolean"},
    "unit": {"enum": ["m", "s", 1, null]},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 2}
  },
  "required": ["answer", "count", "unit"],
  "additionalProperties": false
})";

std::string check_schema_value(const json& v) {
  if (!v.is_object()) return "not an object";
  for (const char* k : {"answer", "count", "unit"})
    if (!v.contains(k)) return std::string("missing ") + k;
  for (const auto& [k, x] : v.items()) {
    if (k == "answer") {
      if (!x.is_string() || code_points(x.get<std::string>()) > 6) return "bad answer";
    } else if (k == "count") {
      if (!x.is_number_integer() && !x.is_number_unsigned()) return "bad count";
    } else if (k == "ok") {
      if (!x.is_boolean()) return "bad ok";
    } else if (k == "unit") {
      if (!(x == "m" || x == "s" || x == 1 || x.is_null())) return "bad unit";
    } else if (k == "tags") {
      if (!x.is_array() || x.size() > 2) return "bad tags";
      for (const auto& t : x)
        if (!t.is_string() || code_points(t.get<std::string>()) > 3) return "bad tag";
    } else {
      return "extra property " + k;
    }
  }
  return "";
}

json schema_format() {
  return {{"type", "json_schema"},
          {"json_schema", {{"name", "reply"}, {"strict", true}, {"schema", json::parse(kSchema)}}}};
}

json chat_body(const json& format, uint64_t seed, int max_tokens) {
  return {{"messages", {{{"role", "user"}, {"content", "Answer in JSON."}}}},
          {"temperature", 1.0},
          {"seed", seed},
          {"max_tokens", max_tokens},
          {"response_format", format}};
}

TEST(json_mode, JsonObjectOutputsAreObjects) {
  auto s = start_server(bundled_config());
  auto c = client_for(*s);
  int stopped = 0;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    const auto r = post(*c, "/v1/chat/completions", chat_body({{"type", "json_object"}}, seed, 400));
    ASSERT_EQ(r.status, 200) << r.body.dump();
    const auto& choice = r.body["choices"][0];
    const std::string text = choice["message"]["content"];
    const std::string finish = choice["finish_reason"];
    ASSERT_TRUE(finish == "stop" || finish == "length") << finish;
    if (finish != "stop") continue;
    ++stopped;
    const json v = json::parse(text, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << "seed " << seed << ": " << text;
    EXPECT_TRUE(v.is_object()) << text;
  }
  EXPECT_GE(stopped, 1) << "no response completed its JSON within max_tokens";
  EXPECT_TRUE(eventually([&] { return at_baseline(*s); }, 20));
}

TEST(json_mode, JsonSchemaOutputsValidateOnBothModelsEndpointsAndStreams) {
  for (const bool bundled : {true, false}) {
    auto s = start_server(bundled ? bundled_config() : tiny_config());
    auto c = client_for(*s);
    int stopped = 0, total = 0;
    auto judge = [&](const std::string& text, const std::string& finish, const std::string& what) {
      ++total;
      ASSERT_TRUE(finish == "stop" || finish == "length") << what << ": " << finish;
      if (finish != "stop") return;
      ++stopped;
      const json v = json::parse(text, nullptr, false);
      ASSERT_FALSE(v.is_discarded()) << what << ": " << text;
      EXPECT_EQ(check_schema_value(v), "") << what << ": " << text;
    };
    for (uint64_t seed = 1; seed <= 4; ++seed) {
      // Chat, n = 2 (forks carry their own constraint state).
      json body = chat_body(schema_format(), seed, 300);
      body["n"] = 2;
      auto r = post(*c, "/v1/chat/completions", body);
      ASSERT_EQ(r.status, 200) << r.body.dump();
      for (const auto& ch : r.body["choices"])
        judge(ch["message"]["content"], ch["finish_reason"], "chat seed " + std::to_string(seed));
      // Completions.
      json cb = {{"prompt", "{"},
                 {"temperature", 1.0},
                 {"seed", seed},
                 {"max_tokens", 300},
                 {"response_format", schema_format()}};
      r = post(*c, "/v1/completions", cb);
      ASSERT_EQ(r.status, 200) << r.body.dump();
      judge(r.body["choices"][0]["text"], r.body["choices"][0]["finish_reason"],
            "completion seed " + std::to_string(seed));
      // Streaming: the concatenated deltas are the value.
      body = chat_body(schema_format(), seed + 100, 300);
      body["stream"] = true;
      auto res = c->Post("/v1/chat/completions", body.dump(), "application/json");
      ASSERT_TRUE(res);
      const auto sse = parse_sse(res->body, true);
      ASSERT_TRUE(sse.ok) << sse.error;
      judge(sse.text, sse.finish_reason, "stream seed " + std::to_string(seed));
    }
    EXPECT_GE(stopped, total / 2) << (bundled ? "bundled" : "random") << " model: " << stopped << " of "
                                  << total << " completed";
    EXPECT_TRUE(eventually([&] { return at_baseline(*s); }, 20));
  }
}

TEST(json_mode, BadResponseFormatIs400NamingTheField) {
  auto s = start_server(tiny_config());
  auto c = client_for(*s);
  auto schema = [](const json& sch) {
    return json{{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", sch}}}};
  };
  std::string deep = R"({"type":"string"})";
  for (int i = 0; i < 40; ++i) deep = R"({"type":"array","items":)" + deep + "}";
  const std::vector<std::tuple<json, std::string, std::string>> cases = {
      {"json", "response_format", "must be an object"},
      {{{"type", "xml"}}, "response_format.type", "'xml'"},
      {json::object(), "response_format.type", "must be one of"},
      {{{"type", "json_object"}, {"extra", 1}}, "response_format.extra", "not a known field"},
      {{{"type", "json_schema"}}, "response_format.json_schema", "must be an object"},
      {{{"type", "json_schema"}, {"json_schema", {{"name", "a b"}, {"schema", json::object()}}}},
       "response_format.json_schema.name",
       "name"},
      {schema(json::array()), "response_format.json_schema.schema", "JSON Schema object"},
      {schema({{"type", "string"}, {"pattern", "^a"}}), "response_format.json_schema.schema", "'pattern'"},
      {schema({{"type", "object"}, {"properties", {{"a", {{"oneOf", json::array()}}}}}}),
       "response_format.json_schema.schema", "schema.properties.a: 'oneOf' is not supported"},
      {schema(json::parse(deep)), "response_format.json_schema.schema", "deeper than"},
  };
  for (const auto& [format, param, words] : cases) {
    for (const char* path : {"/v1/chat/completions", "/v1/completions"}) {
      json body = {{"max_tokens", 4}, {"response_format", format}};
      if (std::string(path) == "/v1/completions")
        body["prompt"] = "hi";
      else
        body["messages"] = {{{"role", "user"}, {"content", "hi"}}};
      const auto r = post(*c, path, body);
      ASSERT_EQ(r.status, 400) << format.dump();
      EXPECT_EQ(r.body["error"]["param"], param) << format.dump();
      EXPECT_NE(r.body["error"]["message"].get<std::string>().find(words), std::string::npos)
          << r.body.dump();
      EXPECT_EQ(r.body["error"]["type"], "invalid_request_error");
    }
  }
  // text is the default and accepted.
  const auto r = post(*c, "/v1/completions",
                      {{"prompt", "hi"}, {"max_tokens", 2}, {"response_format", {{"type", "text"}}}});
  EXPECT_EQ(r.status, 200) << r.body.dump();
  EXPECT_TRUE(eventually([&] { return at_baseline(*s); }, 20));
}

}  // namespace
}  // namespace moxi::serve
