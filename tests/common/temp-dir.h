// Test scaffolding shared by the test binaries: a fresh directory per test under the system temp dir,
// removed afterwards, so tests never write into the source tree or collide when run in parallel.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

namespace moxi::testing {

class temp_dir {
 public:
  explicit temp_dir(const std::string& prefix = "moxi-test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + tmpl);
    path_ = tmpl;
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;

  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A fixture whose tests each get dir_ (and path(name) inside it).
class temp_dir_test : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  temp_dir tmp_{"moxi-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name())};
  std::string dir_ = tmp_.path();
};

}  // namespace moxi::testing
