// `--api-key ""` used to turn authentication off without a word; it is refused. And what a client can read
// never names the model's filesystem location: /v1/models and error bodies show the served name. Against a
// real `moxi serve` on a copy of the bundled model in a directory with a recognizable name.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/temp-dir.h"
#include "security/serve-harness.h"

namespace moxi::serve {
namespace {

using namespace moxi::security_testing;
using nlohmann::json;

TEST(serve_auth, AnEmptyApiKeyIsRefusedAtStartup) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--api-key", ""}, std::vector<std::string>{"--api-key="}}) {
    serve_process srv(args);
    const auto status = srv.wait_exit(60);
    ASSERT_TRUE(status) << "moxi serve " << args[0] << " kept running";
    if (args.size() == 2) {
      EXPECT_NE(srv.log().find("--api-key is empty"), std::string::npos) << srv.log();
    }
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) != 0) << srv.log();
    EXPECT_EQ(srv.port(), 0) << "it listened";
    // moxi's own message, or CLI11's for an option given without its value.
    EXPECT_NE(srv.log().find("--api-key"), std::string::npos) << srv.log();
  }
}

TEST(serve_auth, AKeyFileWithoutKeysIsRefusedAtStartup) {
  moxi::testing::temp_dir dir("moxi-serve-auth");
  const std::string file = dir / "keys";
  std::ofstream(file) << "\n   \n\t\n";
  serve_process srv({"--api-key-file", file});
  const auto status = srv.wait_exit(60);
  ASSERT_TRUE(status);
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) != 0) << srv.log();
}

TEST(serve_auth, ClientsNeverSeeTheModelDirectory) {
  moxi::testing::temp_dir dir("moxi-serve-private");
  const std::string model = dir / "private-location-7f3a";
  std::filesystem::copy(bundled_model(), model, std::filesystem::copy_options::recursive);
  serve_process srv({"--served-model-name", "public-name", "--api-key", "sk-test"}, model);
  ASSERT_GT(srv.port(), 0) << srv.log();
  const std::string auth = "Authorization: Bearer sk-test\r\n";
  const auto models = exchange(srv.port(), "GET /v1/models HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n");
  ASSERT_EQ(models.status, 200);
  const json j = json::parse(models.body);
  EXPECT_EQ(j["data"][0]["id"], "public-name");
  EXPECT_EQ(j["data"][0]["root"], "public-name");
  // Every response a client can provoke: none carries the path (or the directory's name).
  const std::vector<std::string> requests = {
      "GET /v1/models HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n",
      "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
      "GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n",
      post_request("/v1/completions", R"({"prompt": "x", "model": "other-model"})", auth),
      post_request("/v1/completions", R"({"prompt": [99999999]})", auth),
      post_request("/v1/completions", R"({"prompt": "x", "max_tokens": 5000})", auth),
      post_request("/v1/chat/completions",
                   R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 2})", auth),
      post_request("/v1/chat/completions",
                   R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"x": 1}, )"
                   R"("tools": [{"type": "function"}], "max_tokens": 1})",
                   auth),
      post_request("/v1/completions", "{", auth),
  };
  for (const auto& req : requests) {
    const auto r = exchange(srv.port(), req);
    ASSERT_NE(r.status, 0) << req;
    EXPECT_EQ(r.body.find(dir.path()), std::string::npos) << req << "\n" << r.body;
    EXPECT_EQ(r.body.find("private-location-7f3a"), std::string::npos) << req << "\n" << r.body;
  }
}

}  // namespace
}  // namespace moxi::serve
