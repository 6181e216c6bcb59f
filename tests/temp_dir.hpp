// A fresh directory under the system's temporary folder for one test, removed with everything in
// it when the test ends. mkdtemp makes the name unique, so tests running at once never share one.
#pragma once
#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>

namespace zinf::test {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag = "test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / ("zinf_" + tag + "_XXXXXX")).string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("cannot create a temporary directory " + tmpl);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace zinf::test
