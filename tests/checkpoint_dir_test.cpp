// CheckpointDir: a checkpoint is never replaced before its successor is durable, `latest` never
// names a missing or partial one, every fsync's failure is reported by path, step directories that
// `latest` does not name are kept, every file of a step is covered by its checksums (flipped,
// edited, padded, planted or missing files are found), one run at a time holds the directory, and
// a directory replaced mid-run or under an ancestor others can write is refused.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

#include "engine/train/checkpoint_dir.hpp"
#include "forwarding_io_env.hpp"
#include "temp_dir.hpp"

using namespace zinf;
using Catch::Matchers::Contains;
using zinf::test::TempDir;
namespace fs = std::filesystem;

namespace {

nlohmann::json meta(int step) { return {{"format", "zinf-checkpoint-1"}, {"step", step}}; }

// Fails fsync of files whose path contains `fail_fsync_of`, and the directory swap when asked.
class FailingEnv final : public test::ForwardingIoEnv {
public:
  std::string fail_fsync_of;     // any path containing this
  std::string fail_fsync_exact;  // exactly this path
  bool fail_exchange = false;
  int open(const std::string& p, int f, mode_t m) override {
    int fd = real().open(p, f, m);
    std::lock_guard lock(mu_);
    if (fd >= 0) paths_[fd] = p;
    return fd;
  }
  int open_at(int dir, const std::string& name, int f, mode_t m) override {
    int fd = real().open_at(dir, name, f, m);
    std::lock_guard lock(mu_);
    if (fd >= 0) paths_[fd] = paths_[dir] + "/" + name;
    return fd;
  }
  int fsync(int fd) override {
    std::lock_guard lock(mu_);
    if (!fail_fsync_of.empty() && paths_[fd].find(fail_fsync_of) != std::string::npos) return -EIO;
    if (paths_[fd] == fail_fsync_exact) return -EIO;
    return real().fsync(fd);
  }
  int exchange_at(int dir, const std::string& a, const std::string& b) override {
    return fail_exchange ? -EIO : real().exchange_at(dir, a, b);
  }

private:
  std::mutex mu_;
  std::map<int, std::string> paths_;
};

// Swaps the checkpoint directory's path for a link to `target` just before the first call whose
// name is `at` (one made through the directory's handle), the way another process could between
// a save's check of the path and its writes.
class RacingEnv final : public test::ForwardingIoEnv {
public:
  std::string root, target, at;
  bool armed = false, swapped = false;
  void swap_if(const std::string& name) {
    if (!armed || swapped || name != at) return;
    swapped = true;
    fs::rename(root, root + ".moved");
    fs::create_directory_symlink(target, root);
  }
  int make_dir_at(int d, const std::string& n, mode_t m) override {
    swap_if(n);
    return real().make_dir_at(d, n, m);
  }
  int open_at(int d, const std::string& n, int f, mode_t m) override {
    swap_if(n);
    return real().open_at(d, n, f, m);
  }
  int rename_at(int d, const std::string& a, const std::string& b) override {
    swap_if(b);
    return real().rename_at(d, a, b);
  }
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_CASE("a saved checkpoint loads back verified, and latest names it", "[checkpoint]") {
  TempDir tmp;
  auto& env = engine::default_io_env();
  engine::CheckpointDir dir(env, tmp.path.string());
  CHECK_FALSE(dir.holds_checkpoints());
  dir.save("step-00000001", "state one", meta(1));
  CHECK(dir.holds_checkpoints());
  auto c = engine::load_latest_checkpoint(env, tmp.path.string());
  CHECK(c.verified);
  CHECK(c.meta["step"] == 1);
  CHECK(slurp(c.state_path) == "state one");
}

TEST_CASE("a streamed state is checksummed as written; a writer that fails midway leaves latest as it was",
          "[checkpoint]") {
  TempDir tmp;
  auto& env = engine::default_io_env();
  const std::string root = tmp.path.string();
  engine::CheckpointDir dir(env, root);
  dir.save("step-00000001", [](const engine::ByteSink& sink) {
    sink("state ", 6);
    sink("in ", 3);
    sink("pieces", 6);
  }, meta(1));
  auto c = engine::load_latest_checkpoint(env, root);
  CHECK(c.verified);
  CHECK(slurp(c.state_path) == "state in pieces");
  CHECK(nlohmann::json::parse(slurp(c.dir + "/checksums.json"))["files"]["state.safetensors"]["bytes"] == 15);

  CHECK_THROWS_WITH(dir.save("step-00000002", [](const engine::ByteSink& sink) {
    sink("half a sta", 10);
    throw std::runtime_error("the tier could not be read");
  }, meta(2)), Contains("could not be read"));
  c = engine::load_latest_checkpoint(env, root);
  CHECK(c.meta["step"] == 1);
  CHECK(slurp(c.state_path) == "state in pieces");
  CHECK_FALSE(fs::exists(root + "/step-00000002"));
}

TEST_CASE("re-saving the step latest names swaps it in whole; a failed swap leaves the old one", "[checkpoint]") {
  TempDir tmp;
  FailingEnv env;
  const std::string root = tmp.path.string();
  engine::CheckpointDir dir(env, root);
  dir.save("step-00000003", "old state", meta(3));
  env.fail_exchange = true;  // a crash at the swap: nothing of the old checkpoint may be gone
  CHECK_THROWS_WITH(dir.save("step-00000003", "new state", meta(3)), Contains("step-00000003"));
  auto c = engine::load_latest_checkpoint(env, root);
  CHECK(slurp(c.state_path) == "old state");
  env.fail_exchange = false;
  dir.save("step-00000003", "new state", meta(3));
  c = engine::load_latest_checkpoint(env, root);
  CHECK(slurp(c.state_path) == "new state");
  CHECK_FALSE(fs::exists(root + "/step-00000003.tmp"));
}

TEST_CASE("a failed fsync is an error naming the file, and latest stays on the last whole checkpoint", "[checkpoint]") {
  TempDir tmp;
  FailingEnv env;
  const std::string root = tmp.path.string();
  engine::CheckpointDir dir(env, root);
  dir.save("step-00000001", "one", meta(1));
  for (const char* what : {"state.safetensors", "meta.json", "checksums.json", "latest"}) {
    env.fail_fsync_of = what;
    CHECK_THROWS_WITH(dir.save("step-00000002", "two", meta(2)), Contains("fsync") && Contains(what));
    env.fail_fsync_of.clear();
    if (std::string(what) != "latest") CHECK(engine::latest_checkpoint_name(env, root) == "step-00000001");
  }
  env.fail_fsync_exact = root;  // the directory's own fsync, after the rename
  CHECK_THROWS_WITH(dir.save("step-00000004", "four", meta(4)), Contains("fsync " + root + ":"));
}

TEST_CASE("a step directory latest does not name is kept aside, never deleted", "[checkpoint]") {
  TempDir tmp;
  auto& env = engine::default_io_env();
  const std::string root = tmp.path.string();
  engine::CheckpointDir dir(env, root);
  dir.save("step-00000005", "five", meta(5));
  dir.save("step-00000008", "eight, from a run that crashed before latest moved", meta(8));
  {
    std::ofstream(root + "/latest") << "step-00000005\n";
  }
  auto notes = dir.save("step-00000008", "eight again", meta(8));
  REQUIRE(notes.size() == 1);
  CHECK_THAT(notes[0], Contains("step-00000008.replaced-1"));
  CHECK(slurp(root + "/step-00000008.replaced-1/state.safetensors") == "eight, from a run that crashed before latest moved");
  CHECK(slurp(root + "/step-00000008/state.safetensors") == "eight again");
}

TEST_CASE("a flipped byte in a checkpoint is found by its checksum", "[checkpoint]") {
  TempDir tmp;
  auto& env = engine::default_io_env();
  const std::string root = tmp.path.string();
  engine::CheckpointDir dir(env, root);
  dir.save("step-00000001", std::string(10000, 'x'), meta(1));
  {
    std::fstream f(root + "/step-00000001/state.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(5000);
    f.put('y');
  }
  CHECK_THROWS_WITH(engine::load_latest_checkpoint(env, root),
                    Contains("state.safetensors") && Contains("damaged") && Contains("CRC32C"));
}

TEST_CASE("latest must name a step directory of this directory", "[checkpoint]") {
  TempDir tmp;
  auto& env = engine::default_io_env();
  const std::string root = tmp.path.string();
  {
    std::ofstream(root + "/latest") << "../../etc\n";
  }
  CHECK_THROWS_WITH(engine::load_latest_checkpoint(env, root), Contains(root + "/latest") && Contains("step-NNNNNNNN"));
  fs::remove(root + "/latest");
  CHECK_THROWS_WITH(engine::load_latest_checkpoint(env, root), Contains("no checkpoint has been saved"));
  fs::create_directory(root + "/real");
  fs::create_directory_symlink(root + "/real", root + "/step-00000001");
  {
    std::ofstream(root + "/latest") << "step-00000001\n";
  }
  CHECK_THROWS_WITH(engine::load_latest_checkpoint(env, root), Contains("not a directory"));
}

TEST_CASE("one run at a time holds a checkpoint directory", "[checkpoint]") {
  TempDir tmp;
  auto& env = engine::default_io_env();
  engine::CheckpointDir first(env, tmp.path.string());
  CHECK_THROWS_WITH(engine::CheckpointDir(env, tmp.path.string()),
                    Contains(tmp.path.string()) && Contains("in use by zinf pid " + std::to_string(::getpid())));
}

TEST_CASE("a checkpoint directory that cannot be created is refused at once, naming it", "[checkpoint]") {
  TempDir tmp;
  {
    std::ofstream(tmp.path / "file") << "x";
  }
  const std::string bad = (tmp.path / "file" / "ckpt").string();
  CHECK_THROWS_WITH(engine::CheckpointDir(engine::default_io_env(), bad), Contains(bad));
}

namespace {

// A saved checkpoint of two files and its directory, for the tests that damage it.
struct Saved {
  TempDir tmp;
  std::string root = tmp.path.string(), step = root + "/step-00000002";
  Saved() {
    engine::CheckpointDir dir(engine::default_io_env(), root);
    const auto state = [](const engine::ByteSink& sink) { sink("the state", 9); };
    dir.save("step-00000002", state, engine::CheckpointDir::Files{{"meta.json", meta(2).dump(2)}, {"schedule.json", "{}"}});
  }
};

}  // namespace

TEST_CASE("every file of a step is covered: an edited, padded, planted or missing file is refused, naming it",
          "[checkpoint]") {
  auto& env = engine::default_io_env();
  {
    Saved s;
    CHECK(engine::load_latest_checkpoint(env, s.root).verified);
    std::ofstream(s.step + "/meta.json") << meta(7).dump(2);  // the step edited by hand
    CHECK_THROWS_WITH(engine::load_latest_checkpoint(env, s.root), Contains("meta.json") && Contains("damaged"));
  }
  {
    Saved s;
    std::ofstream(s.step + "/schedule.json", std::ios::app) << std::string(64, '\0');
    CHECK_THROWS_WITH(engine::load_latest_checkpoint(env, s.root), Contains("schedule.json") && Contains("damaged"));
  }
  {
    Saved s;
    std::ofstream(s.step + "/planted.bin") << "x";
    CHECK_THROWS_WITH(engine::load_latest_checkpoint(env, s.root), Contains("planted.bin") && Contains("not covered"));
  }
  {
    Saved s;
    fs::remove(s.step + "/schedule.json");
    CHECK_THROWS_WITH(engine::load_latest_checkpoint(env, s.root), Contains("schedule.json") && Contains("missing"));
  }
}

TEST_CASE("a checkpoint without checksums is refused unless accepted unverified", "[checkpoint]") {
  auto& env = engine::default_io_env();
  Saved s;
  fs::remove(s.step + "/checksums.json");
  CHECK_THROWS_WITH(engine::load_latest_checkpoint(env, s.root),
                    Contains("no checksums.json") && Contains("--accept-unverified"));
  const auto c = engine::load_latest_checkpoint(env, s.root, true);
  CHECK_FALSE(c.verified);
  CHECK(c.meta["step"] == 2);
}

TEST_CASE("meta.json is read within bounds: NUL bytes, a huge file or a FIFO are refused, naming it", "[checkpoint]") {
  auto& env = engine::default_io_env();
  CHECK_THROWS_WITH(engine::parse_checkpoint_meta(meta(1).dump() + std::string(10, '\0'), "m.json"),
                    Contains("m.json") && Contains("NUL"));
  CHECK_THROWS_WITH(engine::parse_checkpoint_meta("[1]", "m.json"), Contains("zinf-checkpoint-1"));
  Saved s;
  fs::remove(s.step + "/checksums.json");
  fs::resize_file(s.step + "/meta.json", 100ull << 30);  // sparse: no disk used
  CHECK_THROWS_WITH(engine::load_latest_checkpoint(env, s.root, true), Contains("meta.json") && Contains("larger than"));
  fs::remove(s.step + "/meta.json");
  REQUIRE(::mkfifo((s.step + "/meta.json").c_str(), 0600) == 0);
  CHECK_THROWS_WITH(engine::load_latest_checkpoint(env, s.root, true), Contains("meta.json") && Contains("regular"));
  fs::remove(s.root + "/latest");
  REQUIRE(::mkfifo((s.root + "/latest").c_str(), 0600) == 0);
  CHECK_THROWS_WITH(engine::load_latest_checkpoint(env, s.root), Contains("latest") && Contains("regular"));
}

TEST_CASE("latest can wait for publish; a step set aside is out of reach", "[checkpoint]") {
  TempDir tmp;
  auto& env = engine::default_io_env();
  const std::string root = tmp.path.string();
  engine::CheckpointDir dir(env, root);
  dir.save("step-00000001", "one", meta(1));
  dir.save("step-00000002", "two", meta(2), engine::CheckpointDir::Latest::Keep);
  CHECK(engine::latest_checkpoint_name(env, root) == "step-00000001");
  dir.publish("step-00000002");
  CHECK(engine::latest_checkpoint_name(env, root) == "step-00000002");
  dir.save("step-00000003", "three", meta(3), engine::CheckpointDir::Latest::Keep);
  CHECK(dir.set_aside("step-00000003", "diverged") == root + "/step-00000003.diverged-1");
  CHECK_FALSE(fs::exists(root + "/step-00000003"));
  CHECK(engine::latest_checkpoint_name(env, root) == "step-00000002");
}

TEST_CASE("without latest, resume finds the newest step that verifies whole, unconfirmed", "[checkpoint]") {
  TempDir tmp;
  auto& env = engine::default_io_env();
  const std::string root = tmp.path.string();
  engine::CheckpointDir dir(env, root);
  dir.save("step-00000001", "one", meta(1), engine::CheckpointDir::Latest::Keep);
  dir.save("step-00000002", "two", meta(2), engine::CheckpointDir::Latest::Keep);
  // No latest yet: what a run stopped by kill -9 before any step confirmed a checkpoint leaves.
  REQUIRE(engine::latest_checkpoint_name(env, root).empty());
  auto c = engine::load_latest_checkpoint(env, root);
  CHECK(c.name == "step-00000002");
  CHECK(c.dir == root + "/step-00000002");
  CHECK_FALSE(c.confirmed);
  CHECK(c.verified);
  CHECK(c.skipped.empty());
  // A damaged newest one is passed over, and said.
  {
    std::fstream f(root + "/step-00000002/state.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.put('T');
  }
  c = engine::load_latest_checkpoint(env, root);
  CHECK(c.name == "step-00000001");
  REQUIRE(c.skipped.size() == 1);
  CHECK_THAT(c.skipped[0], Contains("step-00000002/state.safetensors") && Contains("damaged"));
  // So is one without checksums, and one that is not a directory; with none left, nothing to resume.
  fs::remove(root + "/step-00000001/" + engine::kChecksumsFile);
  std::ofstream(root + "/step-00000003") << "a file";
  CHECK_THROWS_WITH(engine::load_latest_checkpoint(env, root),
                    Contains("no checkpoint has been saved there") && Contains("step-00000003: not a directory") &&
                        Contains("step-00000002/state.safetensors") && Contains("step-00000001: no checksums.json"));
  // With latest, the step it names is taken, confirmed, though a newer one exists.
  dir.save("step-00000004", "four", meta(4));
  dir.save("step-00000005", "five", meta(5), engine::CheckpointDir::Latest::Keep);
  c = engine::load_latest_checkpoint(env, root);
  CHECK(c.name == "step-00000004");
  CHECK(c.confirmed);
}

TEST_CASE("a checkpoint directory replaced by a link mid-run gets nothing written through the link", "[checkpoint]") {
  TempDir tmp;
  auto& env = engine::default_io_env();
  const std::string root = (tmp.path / "ck").string(), target = (tmp.path / "target").string();
  engine::CheckpointDir dir(env, root);
  dir.save("step-00000001", "one", meta(1));
  fs::rename(root, tmp.path / "ck.moved");
  fs::create_directory(target);
  fs::create_directory_symlink(target, root);
  CHECK_THROWS_WITH(dir.save("step-00000002", "two", meta(2)), Contains(root) && Contains("symbolic link"));
  CHECK(fs::is_empty(target));
}

TEST_CASE("a checkpoint directory swapped for a link between a save's check and its writes gets nothing through it",
          "[checkpoint]") {
  // Each point of a save where the swap lands: the step directory's creation, its state file,
  // its rename into place, `latest`. The writes go to the directory locked (now at ck.moved);
  // the save refuses, naming the path; the link's target stays empty.
  for (const char* at : {"step-00000002.tmp", "state.safetensors", "step-00000002", "latest.tmp"}) {
    TempDir tmp;
    RacingEnv env;
    env.root = (tmp.path / "ck").string();
    env.target = (tmp.path / "target").string();
    env.at = at;
    fs::create_directory(env.target);
    engine::CheckpointDir dir(env, env.root);
    dir.save("step-00000001", "one", meta(1));
    env.armed = true;
    CHECK_THROWS_WITH(dir.save("step-00000002", "two", meta(2)), Contains(env.root) && Contains("symbolic link"));
    CHECK(env.swapped);
    CHECK(fs::is_empty(env.target));
    CHECK(slurp(tmp.path / "ck.moved" / "latest") == (std::string(at) == "latest.tmp" ? "step-00000002\n" : "step-00000001\n"));
  }
}

TEST_CASE("a checkpoint directory under an ancestor every user may write is refused unless it is sticky",
          "[checkpoint]") {
  TempDir tmp;
  auto& env = engine::default_io_env();
  fs::create_directory(tmp.path / "open");
  fs::permissions(tmp.path / "open", fs::perms::all);
  CHECK_THROWS_WITH(engine::CheckpointDir(env, (tmp.path / "open" / "ck").string()),
                    Contains((tmp.path / "open").string()) && Contains("writable by every user") && Contains("not sticky"));
  CHECK_FALSE(fs::exists(tmp.path / "open" / "ck"));  // refused before anything is created there
  fs::permissions(tmp.path / "open", fs::perms::all | fs::perms::sticky_bit);
  CHECK_NOTHROW(engine::CheckpointDir(env, (tmp.path / "open" / "ck").string()));
}
