// NvmeStore: round trips at odd sizes and offsets, many requests in flight, reopen, checksums, and
// faults injected through the IoEnv (EIO, ENOSPC, short reads, refused O_DIRECT, missing paths),
// and the directory's safety: no symbolic links followed, only this user's files, one store at a time.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/io/nvme_store.hpp"
#include "forwarding_io_env.hpp"

using namespace zinf::engine;
namespace fs = std::filesystem;

namespace {

// A directory on the real disk (O_DIRECT needs one), removed with everything in it.
struct TempDir {
  std::string path;
  TempDir() {
    std::string base = fs::exists("/var/tmp") ? "/var/tmp" : "/tmp";
    std::string tmpl = base + "/zinf-store-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() { fs::remove_all(path); }
};

std::vector<unsigned char> random_bytes(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

NvmeStoreOptions small_options(const std::string& dir) {
  NvmeStoreOptions o;
  o.dir = dir + "/store";
  o.block_size = 64 << 10;
  o.queue_depth = 8;
  o.rings = 2;
  return o;
}

// Shared fault plan for every ring the FaultEnv makes. Ops are counted across rings.
struct FaultPlan {
  std::mutex mu;
  long op_count = 0;
  long fail_op = -1;       // this data op (0-based) completes with EIO
  long short_op = -1;      // this data op reports half its length
  long write_budget = -1;  // bytes of writes that succeed before ENOSPC; -1 = unlimited
  long written = 0;
  bool refuse_direct = false;
  bool no_space_on_allocate = false;
  uid_t user = ::geteuid();  // the user the store believes it runs as
};

class FaultRing final : public IoRing {
public:
  FaultRing(std::unique_ptr<IoRing> real, FaultPlan& plan) : real_(std::move(real)), plan_(plan) {}
  int register_file_table(unsigned slots) override { return real_->register_file_table(slots); }
  int update_file(unsigned slot, int fd) override { return real_->update_file(slot, fd); }
  int register_buffers(std::span<const iovec> b) override { return real_->register_buffers(b); }
  int unregister_buffers() override { return real_->unregister_buffers(); }
  bool push(const IoOp& op) override {
    int override_result = 1;  // 1 = none
    if (op.kind != IoOp::Kind::Nop) {
      std::lock_guard lock(plan_.mu);
      long k = plan_.op_count++;
      if (k == plan_.fail_op) override_result = -EIO;
      if (k == plan_.short_op) override_result = int(op.length / 2);
      if (op.kind == IoOp::Kind::Write && plan_.write_budget >= 0) {
        if (plan_.written + long(op.length) > plan_.write_budget)
          override_result = -ENOSPC;
        else
          plan_.written += op.length;
      }
    }
    IoOp sent = op;
    if (override_result < 0) sent.kind = IoOp::Kind::Nop;  // the device never sees a failed op
    if (!real_->push(sent)) {
      if (op.kind != IoOp::Kind::Nop) {
        std::lock_guard lock(plan_.mu);
        --plan_.op_count;
      }
      return false;
    }
    if (override_result != 1) {
      std::lock_guard lock(mu_);
      overrides_[op.tag] = override_result;
    }
    return true;
  }
  int submit() override { return real_->submit(); }
  int wait(std::span<IoCompletion> out) override {
    int n = real_->wait(out);
    std::lock_guard lock(mu_);
    for (int i = 0; i < n; ++i) {
      auto it = overrides_.find(out[size_t(i)].tag);
      if (it == overrides_.end()) continue;
      out[size_t(i)].result = it->second;
      overrides_.erase(it);
    }
    return n;
  }

private:
  std::unique_ptr<IoRing> real_;
  FaultPlan& plan_;
  std::mutex mu_;
  std::unordered_map<uint64_t, int> overrides_;
};

// The real environment with the faults of a FaultPlan: O_DIRECT refused, ENOSPC on allocation,
// another user's files, and the ring's requests failing as planned.
class FaultEnv final : public zinf::test::ForwardingIoEnv {
public:
  explicit FaultEnv(FaultPlan& plan) : plan_(plan) {}
  int open(const std::string& p, int flags, mode_t m) override {
    if (plan_.refuse_direct && (flags & O_DIRECT)) return -EINVAL;
    return real().open(p, flags, m);
  }
  int allocate(int fd, uint64_t off, uint64_t len) override {
    return plan_.no_space_on_allocate ? -ENOSPC : real().allocate(fd, off, len);
  }
  uid_t user() override { return plan_.user; }
  std::unique_ptr<IoRing> make_ring(unsigned entries, int& error) override {
    auto r = real().make_ring(entries, error);
    if (!r) return nullptr;
    return std::make_unique<FaultRing>(std::move(r), plan_);
  }

private:
  FaultPlan& plan_;
};

void write_all(NvmeStore& s, NvmeStore::TensorId id, uint64_t off, const void* src, uint64_t n) {
  IoStatus st = s.write(id, off, src, n).wait();
  INFO(st.message);
  REQUIRE(st.ok());
}

std::vector<unsigned char> read_all(NvmeStore& s, NvmeStore::TensorId id, uint64_t off, uint64_t n) {
  std::vector<unsigned char> out(n + 1);
  IoStatus st = s.read(id, off, out.data() + 1, n).wait();  // +1: an unaligned destination on purpose
  INFO(st.message);
  REQUIRE(st.ok());
  return {out.begin() + 1, out.end()};
}

}  // namespace

TEST_CASE("random tensors at odd sizes and offsets round-trip") {
  TempDir tmp;
  NvmeStore store(small_options(tmp.path));
  std::mt19937 rng(7);
  for (uint64_t size : {uint64_t(1), uint64_t(4095), uint64_t(4097), uint64_t(65536 * 3 + 5), uint64_t((1 << 20) + 13)}) {
    auto id = store.create(std::string("t").append(std::to_string(size)), size);
    CHECK(store.size(id) == size);
    auto model = random_bytes(size, unsigned(size));
    write_all(store, id, 0, model.data(), size);
    CHECK(read_all(store, id, 0, size) == model);
    for (int k = 0; k < 6; ++k) {
      uint64_t off = rng() % size, len = 1 + rng() % (size - off);
      auto patch = random_bytes(len, unsigned(k + 100));
      write_all(store, id, off, patch.data(), len);
      std::memcpy(model.data() + off, patch.data(), len);
      uint64_t roff = rng() % size, rlen = 1 + rng() % (size - roff);
      auto got = read_all(store, id, roff, rlen);
      CHECK(std::equal(got.begin(), got.end(), model.begin() + long(roff)));
    }
    CHECK(read_all(store, id, 0, size) == model);
  }
  auto files = std::distance(fs::directory_iterator(tmp.path + "/store"), fs::directory_iterator{});
  CHECK(files == 6);  // five tensors and the directory's .lock
  CHECK((fs::status(tmp.path + "/store/t1.zt").permissions() & fs::perms::all) == (fs::perms::owner_read | fs::perms::owner_write));
}

TEST_CASE("hundreds of requests in flight, waited on by another thread") {
  TempDir tmp;
  auto opt = small_options(tmp.path);
  opt.block_size = 16 << 10;
  opt.queue_depth = 16;
  NvmeStore store(opt);
  constexpr int kRequests = 400;
  constexpr uint64_t kEach = 40 << 10;
  auto id = store.create("big", kRequests * kEach);
  void* raw = std::aligned_alloc(4096, kRequests * kEach);
  auto* src = static_cast<unsigned char*>(raw);
  auto data = random_bytes(kRequests * kEach, 3);
  std::memcpy(src, data.data(), data.size());
  iovec region{src, kRequests * kEach};
  store.register_buffers({&region, 1});

  std::vector<IoHandle> handles;
  for (int i = 0; i < kRequests; ++i) handles.push_back(store.write(id, i * kEach, src + i * kEach, kEach));
  std::thread waiter([&] {
    for (auto& h : handles) CHECK(h.wait().ok());
  });
  waiter.join();

  std::memset(src, 0, kRequests * kEach);
  handles.clear();
  for (int i = kRequests; i-- > 0;) handles.push_back(store.read(id, i * kEach, src + i * kEach, kEach));
  std::thread waiter2([&] {
    for (auto& h : handles) CHECK(h.wait().ok());
  });
  waiter2.join();
  CHECK(std::memcmp(src, data.data(), data.size()) == 0);
  store.register_buffers({});
  std::free(raw);
}

TEST_CASE("a reopened store reads what an earlier one wrote, with checksums") {
  TempDir tmp;
  auto opt = small_options(tmp.path);
  opt.checksums = true;
  auto data = random_bytes(300000, 11);
  {
    NvmeStore a(opt);
    auto id = a.create("states", data.size());
    write_all(a, id, 0, data.data(), data.size());
  }
  {
    NvmeStore b(opt);
    auto id = b.open("states");
    CHECK(b.size(id) == 303104);  // rounded up to 4 KiB
    CHECK(read_all(b, id, 0, data.size()) == data);
  }
  // Flip one byte behind the store's back: the next read must say so, not return it.
  int fd = ::open((opt.dir + "/states.zt").c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  unsigned char x = static_cast<unsigned char>(data[200000] ^ 0xff);
  REQUIRE(::pwrite(fd, &x, 1, 200000) == 1);
  ::fsync(fd);
  ::close(fd);
  NvmeStore c(opt);
  auto id = c.open("states");
  std::vector<unsigned char> out(data.size());
  IoStatus st = c.read(id, 0, out.data(), out.size()).wait();
  CHECK(st.error == EIO);
  CHECK_THAT(st.message, Catch::Contains("checksum mismatch") && Catch::Contains("states.zt"));
  CHECK(read_all(c, id, 0, 100000) == std::vector<unsigned char>(data.begin(), data.begin() + 100000));
}

TEST_CASE("checksums summed by the submitting thread block by block match what is read back, at any offset and ring") {
  // Requests of many 64 KiB blocks over two rings, several in flight, aligned and not (the bounce
  // buffer, and the pages around an unaligned write read first): each page's sum must be the one
  // of the bytes that reached the disk, in this store and in one reopened from its side file.
  TempDir tmp;
  auto opt = small_options(tmp.path);
  opt.checksums = true;
  const uint64_t size = 1 << 20;
  std::vector<unsigned char> model(size, 0);
  std::mt19937 rng(23);
  {
    NvmeStore a(opt);
    auto id = a.create("sums", size);
    std::vector<std::vector<unsigned char>> pieces;
    std::vector<IoHandle> handles;
    const std::vector<std::pair<uint64_t, uint64_t>> ranges = {
        {0, 300 << 10}, {300 << 10, 4096}, {(512 << 10) + 17, 100000}, {(768 << 10) - 5, 9000}, {size - 4096, 4096}};
    for (const auto& [off, len] : ranges) {
      pieces.push_back(random_bytes(len, unsigned(rng())));
      std::copy(pieces.back().begin(), pieces.back().end(), model.begin() + std::ptrdiff_t(off));
      handles.push_back(a.write(id, off, pieces.back().data(), len));
    }
    for (auto& h : handles) CHECK(h.wait().ok());
    CHECK(read_all(a, id, 0, size) == model);
  }
  NvmeStore b(opt);
  auto id = b.open("sums");
  CHECK(read_all(b, id, 0, size) == model);
}

TEST_CASE("an aligned read into the caller's memory is verified by wait(): a flipped byte fails it, every waiter alike") {
  TempDir tmp;
  auto opt = small_options(tmp.path);
  opt.checksums = true;
  const uint64_t size = 256 << 10;
  auto data = random_bytes(size, 31);
  std::unique_ptr<unsigned char, decltype(&std::free)> buf(static_cast<unsigned char*>(std::aligned_alloc(4096, size)), &std::free);
  REQUIRE(buf);
  {
    NvmeStore a(opt);
    auto id = a.create("aligned", size);
    write_all(a, id, 0, data.data(), size);
    REQUIRE(a.read(id, 0, buf.get(), size).wait().ok());  // verified, and good
    CHECK(std::equal(data.begin(), data.end(), buf.get()));
  }
  int fd = ::open((opt.dir + "/aligned.zt").c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  const unsigned char x = static_cast<unsigned char>(data[150000] ^ 0x01);
  REQUIRE(::pwrite(fd, &x, 1, 150000) == 1);
  ::fsync(fd);
  ::close(fd);
  NvmeStore c(opt);
  auto id = c.open("aligned");
  IoHandle h = c.read(id, 0, buf.get(), size);
  const IoHandle copy = h;
  IoStatus st = h.wait();
  CHECK(h.done());
  CHECK(st.error == EIO);
  CHECK_THAT(st.message, Catch::Contains("checksum mismatch") && Catch::Contains("aligned.zt") &&
                             Catch::Contains("offset " + std::to_string(150000 / 4096 * 4096)));
  CHECK(copy.wait().error == EIO);
  // The pages before the flipped one read and verify as written.
  REQUIRE(c.read(id, 0, buf.get(), 36 * 4096).wait().ok());
  CHECK(std::equal(data.begin(), data.begin() + 36 * 4096, buf.get()));
}

TEST_CASE("EIO on the k-th request reaches the caller; the store keeps working") {
  TempDir tmp;
  FaultPlan plan;
  FaultEnv env(plan);
  NvmeStore store(small_options(tmp.path), env);
  auto id = store.create("x", 1 << 20);
  auto before = random_bytes(256 << 10, 1);
  write_all(store, id, 0, before.data(), before.size());
  {
    std::lock_guard lock(plan.mu);
    plan.fail_op = plan.op_count + 2;  // the third block of the next request
  }
  auto later = random_bytes(512 << 10, 2);
  IoStatus st = store.write(id, 256 << 10, later.data(), later.size()).wait();
  CHECK(st.error == EIO);
  CHECK_THAT(st.message, Catch::Contains(tmp.path + "/store/x.zt") && Catch::Contains("write"));
  CHECK(read_all(store, id, 0, before.size()) == before);
  write_all(store, id, 256 << 10, later.data(), later.size());
  CHECK(read_all(store, id, 256 << 10, later.size()) == later);
}

TEST_CASE("ENOSPC in the middle of a write reaches the caller; earlier data stays readable") {
  TempDir tmp;
  FaultPlan plan;
  FaultEnv env(plan);
  NvmeStore store(small_options(tmp.path), env);
  auto id = store.create("x", 2 << 20);
  auto before = random_bytes(1 << 20, 4);
  write_all(store, id, 0, before.data(), before.size());
  {
    std::lock_guard lock(plan.mu);
    plan.write_budget = plan.written + (256 << 10);
  }
  auto more = random_bytes(1 << 20, 5);
  IoStatus st = store.write(id, 1 << 20, more.data(), more.size()).wait();
  CHECK(st.error == ENOSPC);
  CHECK_THAT(st.message, Catch::Contains("x.zt") && Catch::Contains("No space"));
  CHECK(read_all(store, id, 0, before.size()) == before);
  {
    std::lock_guard lock(plan.mu);
    plan.write_budget = -1;
  }
  write_all(store, id, 1 << 20, more.data(), more.size());
  CHECK(read_all(store, id, 1 << 20, more.size()) == more);
}

TEST_CASE("a short read or write is an error naming the path, never silent") {
  TempDir tmp;
  FaultPlan plan;
  FaultEnv env(plan);
  NvmeStore store(small_options(tmp.path), env);
  auto id = store.create("x", 1 << 20);
  auto data = random_bytes(1 << 20, 6);
  write_all(store, id, 0, data.data(), data.size());
  {
    std::lock_guard lock(plan.mu);
    plan.short_op = plan.op_count + 5;
  }
  std::vector<unsigned char> out(data.size());
  IoStatus st = store.read(id, 0, out.data(), out.size()).wait();
  CHECK(st.error == EIO);
  CHECK_THAT(st.message, Catch::Contains("short") && Catch::Contains("x.zt"));
  CHECK(read_all(store, id, 0, data.size()) == data);
  {
    std::lock_guard lock(plan.mu);
    plan.short_op = plan.op_count + 3;
  }
  auto patch = random_bytes(512 << 10, 12);
  st = store.write(id, 0, patch.data(), patch.size()).wait();
  CHECK(st.error == EIO);
  CHECK_THAT(st.message, Catch::Contains("write") && Catch::Contains("short") && Catch::Contains("x.zt"));
  write_all(store, id, 0, patch.data(), patch.size());
  CHECK(read_all(store, id, 0, patch.size()) == patch);
}

TEST_CASE("setup failures name the path and the operation") {
  TempDir tmp;
  SECTION("missing parent directory") {
    NvmeStoreOptions o = small_options(tmp.path + "/no/such");
    try {
      NvmeStore s(o);
      FAIL("expected an IoError");
    } catch (const IoError& e) {
      CHECK(e.error() == ENOENT);
      CHECK_THAT(e.what(), Catch::Contains(tmp.path + "/no/such/store"));
    }
  }
  SECTION("a file system that refuses O_DIRECT") {
    FaultPlan plan;
    plan.refuse_direct = true;
    FaultEnv env(plan);
    NvmeStore s(small_options(tmp.path), env);
    try {
      s.create("x", 4096);
      FAIL("expected an IoError");
    } catch (const IoError& e) {
      CHECK(e.op() == "open (O_DIRECT)");
      CHECK_THAT(e.what(), Catch::Contains("x.zt") && Catch::Contains("tmpfs"));
    }
  }
  SECTION("no space to preallocate") {
    FaultPlan plan;
    plan.no_space_on_allocate = true;
    FaultEnv env(plan);
    NvmeStore s(small_options(tmp.path), env);
    CHECK_THROWS_WITH(s.create("x", 1 << 20), Catch::Contains("preallocate") && Catch::Contains("x.zt"));
    CHECK_FALSE(fs::exists(tmp.path + "/store/x.zt"));
  }
  SECTION("reading outside a tensor") {
    NvmeStore s(small_options(tmp.path));
    auto id = s.create("x", 4096);
    char buf[16];
    IoStatus st = s.read(id, 4090, buf, 16).wait();
    CHECK(st.error == EINVAL);
    CHECK_THAT(st.message, Catch::Contains("outside"));
  }
}

TEST_CASE("options come from the run config") {
  zinf::core::RunConfig c;
  c.aio_block_size = 8 << 20;
  c.aio_queue_depth = 16;
  c.aio_rings = 2;
  c.swap_checksums = true;
  auto o = NvmeStoreOptions::from_run_config(c, "/some/dir");
  CHECK(o.checksums);
  CHECK(o.dir == "/some/dir");
  CHECK(o.block_size == (8u << 20));
  CHECK(o.queue_depth == 16);
  CHECK(o.rings == 2);
}

TEST_CASE("a removed tensor's file is gone and its name can be reused") {
  TempDir tmp;
  NvmeStore store(small_options(tmp.path));
  auto a = store.create("w", 5000);
  const std::string path = store.path(a);
  CHECK(fs::exists(path));
  store.remove(a);
  CHECK_FALSE(fs::exists(path));
  CHECK_THROWS_AS(store.size(a), std::invalid_argument);
  auto b = store.create("w", 100);
  auto data = random_bytes(100, 8);
  write_all(store, b, 0, data.data(), 100);
  CHECK(read_all(store, b, 0, 100) == data);
  CHECK(store.read(b, 0, nullptr, 0).wait().ok());
}

TEST_CASE("a symbolic link planted in the store's directory is refused, and its target left alone") {
  TempDir tmp;
  const std::string victim = tmp.path + "/victim";
  {
    std::ofstream(victim) << "precious";
  }
  auto opt = small_options(tmp.path);
  SECTION("the directory itself is a link") {
    fs::create_directory(tmp.path + "/elsewhere");
    fs::create_directory_symlink(tmp.path + "/elsewhere", opt.dir);
    CHECK_THROWS_WITH(NvmeStore(opt), Catch::Contains(opt.dir) && Catch::Contains("symbolic link"));
  }
  SECTION("a tensor file is a link") {
    fs::create_directory(opt.dir, tmp.path);
    fs::permissions(opt.dir, fs::perms::owner_all);
    fs::create_symlink(victim, opt.dir + "/params.zt");
    NvmeStore s(opt);
    CHECK_THROWS_WITH(s.create("params", 4096), Catch::Contains("params.zt") && Catch::Contains("symbolic link"));
    CHECK_THROWS_WITH(s.open("params"), Catch::Contains("symbolic link"));
  }
  std::ifstream in(victim);
  std::string text;
  in >> text;
  CHECK(text == "precious");
}

TEST_CASE("a directory or file of another user is refused, naming the owner") {
  TempDir tmp;
  FaultPlan plan;
  plan.user = ::geteuid() + 4242;  // the files are ours; the store believes it is someone else
  FaultEnv env(plan);
  auto opt = small_options(tmp.path);
  fs::create_directory(opt.dir);
  CHECK_THROWS_WITH(NvmeStore(opt, env), Catch::Contains(opt.dir) && Catch::Contains("not by this user"));
}

TEST_CASE("a directory every user can write is refused") {
  TempDir tmp;
  auto opt = small_options(tmp.path);
  fs::create_directory(opt.dir);
  fs::permissions(opt.dir, fs::perms::all);
  CHECK_THROWS_WITH(NvmeStore(opt), Catch::Contains("writable by every user"));
}

TEST_CASE("two stores on one directory: the second is refused, naming the holder") {
  TempDir tmp;
  auto opt = small_options(tmp.path);
  {
    NvmeStore first(opt);
    CHECK_THROWS_WITH(NvmeStore(opt), Catch::Contains(opt.dir) && Catch::Contains("in use by zinf pid " +
                                                                                   std::to_string(::getpid())));
    // Another process is refused as well (flock is per open file, so this holds across processes).
    pid_t child = ::fork();
    if (child == 0) {
      int code = 0;
      try {
        NvmeStore again(opt);
      } catch (const IoError&) {
        code = 7;
      }
      ::_exit(code);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 7);
  }
  NvmeStore after(opt);  // the lock ended with the first store
}
