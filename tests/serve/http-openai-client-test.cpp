// The official `openai` npm client (tests/serve/openai-client, pinned by its package-lock.json) drives an
// in-process server with an API key: models, chat and completions, streaming and not, seeded sampling,
// logprobs, an image part (data: URL), and the typed errors the client raises for 401/400/404. Fails, naming
// the setup script, when node or the client's node_modules is missing.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "common/run-moxi.h"
#include "serve/http-test-util.h"

namespace moxi::serve {
namespace {

using namespace moxi::serve::testing;

TEST(http_openai_client, OfficialClientDrivesTheServer) {
  const std::string dir = std::string(MOXI_SOURCE_DIR) + "/tests/serve/openai-client";
  ASSERT_EQ(std::system("command -v node >/dev/null 2>&1"), 0)
      << "node is not installed; run scripts/setup-serve-test-deps.sh";
  ASSERT_TRUE(std::filesystem::exists(dir + "/node_modules/openai/package.json"))
      << dir
      << "/node_modules is missing: run scripts/setup-serve-test-deps.sh (npm ci of the pinned openai "
         "client)";
  auto cfg = tiny_config();
  cfg.api_keys = {"sk-moxi-test"};
  auto s = start_server(cfg);
  const std::string cmd = "cd '" + dir + "' && MOXI_BASE_URL=http://127.0.0.1:" + std::to_string(s->port()) +
                          "/v1 MOXI_API_KEY=sk-moxi-test MOXI_MODEL=moxi-tiny timeout 120 node test.mjs 2>&1";
  const auto run = moxi::testing::run_shell(cmd);
  const std::string& out = run.out;
  std::printf("%s", out.c_str());
  EXPECT_EQ(run.code, 0) << out;
  EXPECT_EQ(out.find("not ok"), std::string::npos) << out;
  EXPECT_NE(out.find("ok - chat stream"), std::string::npos) << out;
  EXPECT_NE(out.find("ok - chat with an image"), std::string::npos) << out;
  EXPECT_TRUE(eventually([&] { return at_baseline(*s); }, 20));
}

}  // namespace
}  // namespace moxi::serve
