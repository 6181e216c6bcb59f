// An IoEnv that passes every call to the real one: tests derive from it and override the calls
// they make fail. Thread-safe as the real one is.
#pragma once
#include "engine/io/io_env.hpp"

namespace zinf::test {

class ForwardingIoEnv : public engine::IoEnv {
public:
  int make_dir(const std::string& p, mode_t m) override { return real().make_dir(p, m); }
  int lstat(const std::string& p, engine::FileInfo& o) override { return real().lstat(p, o); }
  int fstat(int fd, engine::FileInfo& o) override { return real().fstat(fd, o); }
  int open(const std::string& p, int f, mode_t m) override { return real().open(p, f, m); }
  int close(int fd) override { return real().close(fd); }
  int allocate(int fd, uint64_t off, uint64_t n) override { return real().allocate(fd, off, n); }
  int64_t file_size(int fd) override { return real().file_size(fd); }
  int remove(const std::string& p) override { return real().remove(p); }
  int64_t pread(int fd, void* d, uint64_t n, uint64_t o) override { return real().pread(fd, d, n, o); }
  int64_t pwrite(int fd, const void* d, uint64_t n, uint64_t o) override { return real().pwrite(fd, d, n, o); }
  int fsync(int fd) override { return real().fsync(fd); }
  int lock(int fd) override { return real().lock(fd); }
  int truncate(int fd, uint64_t n) override { return real().truncate(fd, n); }
  int rename(const std::string& a, const std::string& b) override { return real().rename(a, b); }
  int exchange(const std::string& a, const std::string& b) override { return real().exchange(a, b); }
  int open_at(int d, const std::string& n, int f, mode_t m) override { return real().open_at(d, n, f, m); }
  int make_dir_at(int d, const std::string& n, mode_t m) override { return real().make_dir_at(d, n, m); }
  int lstat_at(int d, const std::string& n, engine::FileInfo& o) override { return real().lstat_at(d, n, o); }
  int remove_at(int d, const std::string& n, bool dir) override { return real().remove_at(d, n, dir); }
  int rename_at(int d, const std::string& a, const std::string& b) override { return real().rename_at(d, a, b); }
  int exchange_at(int d, const std::string& a, const std::string& b) override { return real().exchange_at(d, a, b); }
  int list_at(int d, std::vector<std::string>& n) override { return real().list_at(d, n); }
  uid_t user() override { return real().user(); }
  std::string process() override { return real().process(); }
  std::unique_ptr<engine::IoRing> make_ring(unsigned entries, int& error) override {
    return real().make_ring(entries, error);
  }

protected:
  static engine::IoEnv& real() { return engine::default_io_env(); }
};

}  // namespace zinf::test
