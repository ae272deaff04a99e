// S1: request bodies nested tens of thousands of levels deep (in any field) used to overflow the stack of
// the server. Now a SAX pass bounds the depth before any tree is built: 400 at once, the server lives on.
// Checked against an independent bracket counter (fuzzed over random JSON-like text) and against a real
// `moxi serve` with deep nesting in every field of both completion endpoints.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "moxi/serve/api-openai.h"
#include "security/serve-harness.h"

namespace moxi::serve {
namespace {

using namespace moxi::security_testing;
using nlohmann::json;

// The reference: the deepest [ / { nesting outside string literals, counted character by character.
int bracket_depth(const std::string& s) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : s) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    if (c == '[' || c == '{') deepest = std::max(deepest, ++depth);
    if (c == ']' || c == '}') --depth;
  }
  return deepest;
}

// Valid JSON nested `depth` levels, mixing arrays and objects (with keys) and strings holding brackets.
std::string nested(int depth, std::mt19937& rng) {
  std::string open, close;
  for (int i = 0; i < depth; ++i) {
    if (rng() % 2) {
      open += "[\"[{\",";
      close = "]" + close;
    } else {
      open += "{\"k]\":";
      close = "}" + close;
    }
  }
  return open + "1" + close;
}

TEST(serve_json_depth, ProbeAgreesWithABracketCounterOnRandomDocuments) {
  std::mt19937 rng(20261201);
  for (int trial = 0; trial < 400; ++trial) {
    const int depth = 1 + int(rng() % 140);
    const std::string doc = R"({"a": )" + nested(depth, rng) + "}";
    ASSERT_EQ(bracket_depth(doc), depth + 1);
    for (int limit : {depth, depth + 1, depth + 2, 64}) {
      EXPECT_EQ(json_nesting_exceeds(doc, limit), bracket_depth(doc) > limit)
          << "depth " << depth + 1 << " limit " << limit;
    }
  }
  // Cut documents (the SAX pass stops on the syntax error) are never reported too deep below the limit.
  const std::string deep = std::string(100, '[');
  EXPECT_TRUE(json_nesting_exceeds(deep, 64));
  EXPECT_FALSE(json_nesting_exceeds(std::string(10, '['), 64));
}

TEST(serve_json_depth, ParserRejectsDeepBodiesInEveryFieldWithoutRecursing) {
  const std::string deep = std::string(30000, '[') + std::string(30000, ']');
  const std::vector<std::string> bodies = {
      deep,
      R"({"prompt": )" + deep + "}",
      R"({"prompt": "x", "stop": )" + deep + "}",
      R"({"prompt": "x", "logit_bias": {"1": )" + deep + "}}",
      R"({"prompt": "x", "unknown_field": )" + deep + "}",
  };
  for (const auto& b : bodies) {
    try {
      parse_completion_request(b, false, "m");
      ADD_FAILURE() << "accepted " << b.substr(0, 60);
    } catch (const api_error& e) {
      EXPECT_EQ(e.status, 400);
    }
  }
}

class serve_json_depth_live : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { srv_ = new serve_process({}); }
  static void TearDownTestSuite() {
    delete srv_;
    srv_ = nullptr;
  }
  static serve_process* srv_;
};
serve_process* serve_json_depth_live::srv_ = nullptr;

TEST_F(serve_json_depth_live, DeepNestingInAnyFieldIs400AndTheServerLives) {
  ASSERT_GT(srv_->port(), 0) << srv_->log();
  const std::string deep = std::string(30000, '[') + std::string(30000, ']');
  const std::string deep_obj = [] {
    std::string s;
    for (int i = 0; i < 30000; ++i) s += "{\"a\":";
    return s + "1" + std::string(30000, '}');
  }();
  const std::string msg = R"({"role": "user", "content": "hi"})";
  struct probe {
    std::string path, body;
  };
  std::vector<probe> probes;
  for (const std::string& d : {deep, deep_obj}) {
    probes.push_back({"/v1/chat/completions", R"({"messages": )" + d + "}"});
    probes.push_back({"/v1/chat/completions", R"({"messages": [)" + d + "]}"});
    probes.push_back({"/v1/chat/completions", R"({"messages": [{"role": "user", "content": )" + d + "}]}"});
    probes.push_back({"/v1/chat/completions", R"({"messages": [)" + msg + R"(], "tools": )" + d + "}"});
    probes.push_back({"/v1/chat/completions",
                      R"({"messages": [)" + msg + R"(], "chat_template_kwargs": {"x": )" + d + "}}"});
    probes.push_back({"/v1/chat/completions", R"({"messages": [)" + msg + R"(], "stop": )" + d + "}"});
    probes.push_back(
        {"/v1/chat/completions", R"({"messages": [)" + msg + R"(], "stream_options": )" + d + "}"});
    probes.push_back({"/v1/completions", R"({"prompt": )" + d + "}"});
    probes.push_back({"/v1/completions", R"({"prompt": "x", "n": )" + d + "}"});
    probes.push_back({"/v1/completions", d});
  }
  for (const auto& p : probes) {
    const auto r = exchange(srv_->port(), post_request(p.path, p.body));
    EXPECT_EQ(r.status, 400) << p.path << " " << p.body.substr(0, 80) << "\n" << srv_->log();
    const json j = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r.body;
    ASSERT_FALSE(srv_->exited()) << "the server died on " << p.body.substr(0, 80) << "\n" << srv_->log();
  }
  EXPECT_EQ(health(srv_->port()), 200);
}

TEST_F(serve_json_depth_live, FuzzedDepthsAroundTheLimitInEveryField) {
  ASSERT_GT(srv_->port(), 0) << srv_->log();
  std::mt19937 rng(7);
  // A field of a chat request, with `v` as its value.
  const std::vector<std::function<std::string(const std::string&)>> fields = {
      [](const std::string& v) {
        return R"({"messages": [{"role": "user", "content": "x", "name": )" + v + "}]}";
      },
      [](const std::string& v) {
        return R"({"messages": [{"role": "user", "content": "x"}], "tools": [)" + v + "]}";
      },
      [](const std::string& v) {
        return R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"k": )" + v +
               "}}";
      },
      [](const std::string& v) {
        return R"({"messages": [{"role": "user", "content": "x"}], "metadata": )" + v + "}";
      },
  };
  for (int trial = 0; trial < 24; ++trial) {
    const auto& field = fields[size_t(trial) % fields.size()];
    // Beyond the limit: deep and just over it. (At or under it the request is judged on its content.)
    const int over = trial % 2 ? max_json_depth + 1 + int(rng() % 4) : 1000 + int(rng() % 20000);
    const std::string body = field(nested(over, rng));
    ASSERT_GT(bracket_depth(body), max_json_depth);
    const auto r = exchange(srv_->port(), post_request("/v1/chat/completions", body));
    EXPECT_EQ(r.status, 400) << body.substr(0, 120);
    EXPECT_NE(r.body.find("nests arrays and objects deeper"), std::string::npos) << r.body;
    ASSERT_FALSE(srv_->exited()) << srv_->log();
    // Just within the limit the depth is never the reason for a refusal.
    std::string within = field(nested(max_json_depth - 8, rng));
    while (bracket_depth(within) > max_json_depth) within = field(nested(max_json_depth - 12, rng));
    const auto w = exchange(srv_->port(), post_request("/v1/chat/completions", within));
    EXPECT_NE(w.status, 0);
    EXPECT_EQ(w.body.find("nests arrays and objects deeper"), std::string::npos) << w.body;
  }
  EXPECT_EQ(health(srv_->port()), 200);
}

}  // namespace
}  // namespace moxi::serve
