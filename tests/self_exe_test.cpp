// core::self_exe: this test's own binary through /proc/self/exe, another link's target, and the
// error (naming the link) for a link that is missing or is not a link.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "core/self_exe.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;

TEST_CASE("self_exe is this test's own binary", "[self_exe]") {
  const fs::path exe = zinf::core::self_exe();
  CHECK(exe.is_absolute());
  CHECK(exe.filename() == "self_exe_test");
  CHECK(fs::equivalent(exe, fs::path(ZINF_BINARY_DIR) / "tests" / "self_exe_test"));
  std::error_code ec;
  CHECK(zinf::core::self_exe(ec) == exe);
  CHECK(!ec);
}

TEST_CASE("self_exe reads another link the same way", "[self_exe]") {
  zinf::test::TempDir dir("self_exe");
  std::ofstream(dir.path / "target") << "x";
  fs::create_symlink(dir.path / "target", dir.path / "link");
  CHECK(zinf::core::self_exe(dir.path / "link") == dir.path / "target");
}

TEST_CASE("self_exe names the link and the reason when it cannot read it", "[self_exe]") {
  zinf::test::TempDir dir("self_exe");
  const fs::path missing = dir.path / "missing";
  try {
    zinf::core::self_exe(missing);
    FAIL("no error for a missing link");
  } catch (const std::runtime_error& e) {
    CHECK_THAT(e.what(), Contains("cannot find this executable") && Contains(missing.string()) &&
                             Contains(std::make_error_code(std::errc::no_such_file_or_directory).message()));
  }
  std::ofstream(dir.path / "plain") << "x";  // a file, not a link
  CHECK_THROWS_WITH(zinf::core::self_exe(dir.path / "plain"), Contains((dir.path / "plain").string()));
  std::error_code ec;
  CHECK(zinf::core::self_exe(ec, missing).empty());
  CHECK(ec == std::errc::no_such_file_or_directory);
}
