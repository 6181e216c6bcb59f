// The one writer of the files a user names (engine/io/output_file.hpp), with every system call it
// makes failing in turn: a failed write, fsync, close or rename leaves the target as it was and
// no temporary; a target that is a device, a FIFO, a directory or a link is refused and left
// alone; the temporary is created exclusively without following links; scratch directories are
// private. The sweep CSV's lock lives in sweep_spec_test, the CLI's use of all this in
// tests/cli/file_options_cli.sh.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "engine/io/output_file.hpp"
#include "forwarding_io_env.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using zinf::engine::FileError;
using zinf::engine::OutputFile;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Names in `dir` other than `keep`: a temporary left behind would be one.
std::vector<std::string> others(const fs::path& dir, const std::set<std::string>& keep) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (!keep.count(e.path().filename().string())) out.push_back(e.path().filename().string());
  return out;
}

// Fails one kind of call with `error` (as -errno), and records the flags of every open.
class FailingEnv final : public zinf::test::ForwardingIoEnv {
public:
  enum class Call { None, Write, Fsync, Close, Rename };
  Call fail = Call::None;
  int error = ENOSPC;
  std::vector<int> open_flags;
  int open(const std::string& p, int f, mode_t m) override {
    open_flags.push_back(f);
    return real().open(p, f, m);
  }
  int64_t pwrite(int fd, const void* d, uint64_t n, uint64_t o) override {
    return fail == Call::Write ? -error : real().pwrite(fd, d, n, o);
  }
  int fsync(int fd) override { return fail == Call::Fsync ? -error : real().fsync(fd); }
  int close(int fd) override {
    const int r = real().close(fd);
    return fail == Call::Close ? -error : r;
  }
  int rename(const std::string& a, const std::string& b) override { return fail == Call::Rename ? -error : real().rename(a, b); }
};

}  // namespace

TEST_CASE("an output is written whole through a temporary created exclusively, never through a link") {
  zinf::test::TempDir dir("out");
  const fs::path target = dir.path / "out.csv";
  std::ofstream(target) << "old\n";
  FailingEnv env;
  {
    OutputFile out(env, target.string(), "test");
    CHECK(fs::path(out.temporary()).parent_path() == dir.path);  // the target's own directory: rename stays atomic
    out.stream() << "new " << 42 << "\n";
    out.write(std::string(100000, 'x'));
    CHECK(slurp(target) == "old\n");  // nothing reaches the target before commit
    out.commit();
  }
  CHECK(slurp(target) == "new 42\n" + std::string(100000, 'x'));
  CHECK(others(dir.path, {"out.csv"}).empty());
  bool exclusive = false;
  for (int f : env.open_flags) exclusive = exclusive || ((f & O_CREAT) && (f & O_EXCL) && (f & O_NOFOLLOW));
  CHECK(exclusive);
}

TEST_CASE("a failed write, fsync, close or rename leaves the target as it was and no temporary, naming it") {
  using Call = FailingEnv::Call;
  for (Call c : {Call::Write, Call::Fsync, Call::Close, Call::Rename}) {
    INFO(int(c));
    zinf::test::TempDir dir("out-fail");
    const fs::path target = dir.path / "out.json";
    std::ofstream(target) << "kept";
    FailingEnv env;
    env.fail = c;
    CHECK_THROWS_AS(
        [&] {
          OutputFile out(env, target.string(), "zinf plan --program");
          out.stream() << std::string(200000, 'y');  // past the stream's buffer: a write during the stream
          out.commit();
        }(),
        FileError);
    CHECK(slurp(target) == "kept");
    CHECK(others(dir.path, {"out.json"}).empty());
  }
  // The message names the flag, the file and the error.
  zinf::test::TempDir dir("out-msg");
  FailingEnv env;
  env.fail = Call::Write;
  CHECK_THROWS_WITH(zinf::engine::write_output_file(env, (dir.path / "t.csv").string(), "abc", "zinf sim --timeline"),
                    Contains("zinf sim --timeline") && Contains("t.csv") && Contains("No space left"));
}

TEST_CASE("a target that is not a regular file is refused and left alone: /dev/null, a FIFO, a directory, a link") {
  auto& env = zinf::engine::default_io_env();
  zinf::test::TempDir dir("out-kinds");
  const fs::path fifo = dir.path / "fifo", sub = dir.path / "sub", link = dir.path / "link", victim = dir.path / "victim";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  fs::create_directory(sub);
  std::ofstream(victim) << "victim";
  fs::create_symlink(victim, link);
  CHECK_THROWS_WITH(zinf::engine::check_output_path(env, "/dev/null", "zinf sweep --out"),
                    Contains("/dev/null") && Contains("character device") && Contains("zinf sweep --out"));
  CHECK_THROWS_WITH(zinf::engine::write_output_file(env, "/dev/full", "x", "t"), Contains("character device"));
  CHECK_THROWS_WITH(zinf::engine::write_output_file(env, fifo.string(), "x", "t"), Contains("FIFO"));
  CHECK_THROWS_WITH(zinf::engine::write_output_file(env, sub.string(), "x", "t"), Contains("directory"));
  CHECK_THROWS_WITH(zinf::engine::write_output_file(env, link.string(), "x", "t"), Contains("symbolic link"));
  CHECK(fs::is_fifo(fifo));
  CHECK(fs::is_symlink(link));
  CHECK(slurp(victim) == "victim");
  // A missing directory is found before any work: the check a command runs first.
  CHECK_THROWS_WITH(zinf::engine::check_output_path(env, (dir.path / "none" / "x.st").string(), "zinf train --export"),
                    Contains("none does not exist") && Contains("zinf train --export"));
  zinf::engine::check_output_path(env, (dir.path / "fresh.csv").string(), "t");
  CHECK(!fs::exists(dir.path / "fresh.csv"));  // the check leaves nothing behind
  CHECK(others(dir.path, {"fifo", "sub", "link", "victim"}).empty());
}

TEST_CASE("a scratch directory is private, unguessable and removed with what it holds") {
  std::string path;
  {
    zinf::engine::PrivateDir d("zinf-test-scratch");
    path = d.path();
    struct stat st {};
    REQUIRE(::lstat(path.c_str(), &st) == 0);
    CHECK(S_ISDIR(st.st_mode));
    CHECK((st.st_mode & 0777) == 0700);
    CHECK(path.find("zinf-test-scratch-") != std::string::npos);
    std::ofstream(path + "/comm.txt") << "1 2\n";
    zinf::engine::PrivateDir other("zinf-test-scratch");
    CHECK(other.path() != path);
  }
  CHECK(!fs::exists(path));
}
