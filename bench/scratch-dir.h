// A private temp directory for a benchmark's generated checkpoint, removed with everything in it when the
// benchmark ends.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

#include "moxi/base/error.h"

namespace moxi::bench {

class scratch_dir {
 public:
  scratch_dir() {
    std::string t = (std::filesystem::temp_directory_path() / "moxi-bench-XXXXXX").string();
    if (!::mkdtemp(t.data())) throw error("bench: cannot create a temp directory");
    dir_ = t;
  }
  ~scratch_dir() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

}  // namespace moxi::bench
