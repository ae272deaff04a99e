// See model-dir.h. MOXI_DEFAULT_MODEL_DIR is set by cli/CMakeLists.txt.
#include "moxi/cli/model-dir.h"

#include <cstdlib>
#include <filesystem>

#include "moxi/base/error.h"

namespace moxi::cli {

std::string default_model_dir() {
  if (const char* env = std::getenv("MOXI_MODEL"); env && *env) return env;
  return MOXI_DEFAULT_MODEL_DIR;
}

std::string resolve_model_dir(const std::string& given) {
  const std::string dir = given.empty() ? default_model_dir() : given;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(std::filesystem::path(dir) / "config.json", ec)) {
    throw error("no model at " + dir + " (no config.json)" +
                (given.empty() ? "; pass --model DIR or set MOXI_MODEL" : ""));
  }
  return dir;
}

}  // namespace moxi::cli
