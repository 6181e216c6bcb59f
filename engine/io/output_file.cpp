#include "engine/io/output_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

namespace fs = std::filesystem;

namespace zinf::engine {
namespace {

std::string parent_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string name_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// What a path that is not a regular file is, in words (lstat: a link is named as one).
std::string kind_of(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return "not a regular file";
  if (S_ISDIR(st.st_mode)) return "a directory";
  if (S_ISLNK(st.st_mode)) return "a symbolic link";
  if (S_ISCHR(st.st_mode)) return "a character device";
  if (S_ISBLK(st.st_mode)) return "a block device";
  if (S_ISFIFO(st.st_mode)) return "a FIFO";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  return "not a regular file";
}

// Refuses an existing target that is not a regular file, and a parent that is not a directory.
void check_target(IoEnv& env, const std::string& path, const std::string& who) {
  if (path.empty()) throw FileError(who, "write", "''", ENOENT, "an empty path names no file");
  FileInfo st;
  const int r = env.lstat(path, st);
  if (r == 0 && st.kind != FileInfo::Kind::Regular) {
    const std::string kind = kind_of(path);
    throw FileError(who, "write", path, st.kind == FileInfo::Kind::Directory ? EISDIR : EEXIST,
                    "it is " + kind + "; zinf writes its outputs only as regular files, replaced whole, and leaves "
                                      "anything else alone");
  }
  if (r < 0 && r != -ENOENT) throw FileError(who, "stat", path, -r);
  const std::string dir = parent_of(path);
  struct stat ds {};
  if (::stat(dir.c_str(), &ds) != 0) {
    const int e = errno;
    throw FileError(who, "write", path, e,
                    e == ENOENT ? "its directory " + dir + " does not exist" : "its directory " + dir + " cannot be used");
  }
  if (!S_ISDIR(ds.st_mode)) throw FileError(who, "write", path, ENOTDIR, dir + " is not a directory");
}

// Creates <dir>/.<name>.<random>.tmp exclusively (never through a link); returns the descriptor.
int create_temporary(IoEnv& env, const std::string& path, const std::string& who, std::string& tmp) {
  static thread_local std::mt19937_64 gen{std::random_device{}()};
  const std::string dir = parent_of(path), name = name_of(path);
  for (int attempt = 0; attempt < 64; ++attempt) {
    static constexpr char kDigits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
    std::string suffix(12, '0');
    for (char& c : suffix) c = kDigits[gen() % 36];
    tmp = (dir == "." ? std::string() : dir + "/") + "." + name + "." + suffix + ".tmp";
    const int fd = env.open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0666);
    if (fd >= 0) return fd;
    if (fd != -EEXIST) throw FileError(who, "create a temporary file for", path, -fd, "in " + dir);
  }
  throw FileError(who, "create a temporary file for", path, EEXIST, "64 random names in " + dir + " were taken");
}

}  // namespace

// Collects the stream's bytes and hands them to the OutputFile in blocks; a failure is kept for
// commit, since an ostream swallows what its buffer throws.
class OutputFile::Buffer : public std::streambuf {
public:
  explicit Buffer(OutputFile& out) : out_(out) { setp(block_.data(), block_.data() + block_.size()); }
  int sync() override { return drain() ? 0 : -1; }

protected:
  int_type overflow(int_type c) override {
    if (!drain()) return traits_type::eof();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }

private:
  bool drain() {
    const auto n = size_t(pptr() - pbase());
    if (n == 0) return true;
    try {
      out_.append(pbase(), n);
    } catch (...) {
      out_.stream_error_ = std::current_exception();
      return false;
    }
    setp(block_.data(), block_.data() + block_.size());
    return true;
  }
  OutputFile& out_;
  std::array<char, 1 << 16> block_{};
};

void check_output_path(IoEnv& env, const std::string& path, const std::string& who) {
  check_target(env, path, who);
  std::string tmp;
  const int fd = create_temporary(env, path, who, tmp);
  env.close(fd);
  env.remove(tmp);
}

OutputFile::OutputFile(IoEnv& env, const std::string& path, const std::string& who) : env_(env), path_(path), who_(who) {
  check_target(env_, path_, who_);
  fd_ = create_temporary(env_, path_, who_, tmp_);
}

OutputFile::~OutputFile() { discard(); }

void OutputFile::discard() noexcept {
  if (fd_ >= 0) env_.close(fd_);
  fd_ = -1;
  if (!tmp_.empty()) env_.remove(tmp_);
  tmp_.clear();
}

void OutputFile::fail_if_stream_failed() {
  if (stream_error_) std::rethrow_exception(std::exchange(stream_error_, nullptr));
}

void OutputFile::write(const void* data, size_t length) {
  if (stream_) stream_->flush();  // what the stream holds goes first
  fail_if_stream_failed();
  append(data, length);
}

void OutputFile::append(const void* data, size_t length) {
  if (fd_ < 0) throw FileError(who_, "write", path_, EBADF, "the file was already committed or discarded");
  const int64_t w = env_.pwrite(fd_, data, length, offset_);
  if (w < 0) throw FileError(who_, "write", path_, int(-w), "through its temporary " + tmp_ + ", now removed");
  if (uint64_t(w) != length) throw FileError(who_, "write", path_, EIO, "the write was short");
  offset_ += length;
}

std::ostream& OutputFile::stream() {
  if (!stream_) {
    buffer_ = std::make_unique<Buffer>(*this);
    stream_ = std::make_unique<std::ostream>(buffer_.get());
  }
  return *stream_;
}

void OutputFile::commit() {
  try {
    if (stream_) stream_->flush();
    fail_if_stream_failed();
    if (stream_ && !*stream_) throw FileError(who_, "write", path_, EIO, "the stream writing it failed");
    if (fd_ < 0) throw FileError(who_, "write", path_, EBADF, "the file was already committed or discarded");
    fsync_checked(env_, fd_, tmp_, who_);
    const int r = env_.close(std::exchange(fd_, -1));
    if (r < 0) throw FileError(who_, "close", tmp_, -r);
    check_target(env_, path_, who_);  // nothing but a regular file was put there meanwhile
    const int m = env_.rename(tmp_, path_);
    if (m < 0) throw FileError(who_, "rename " + tmp_ + " to", path_, -m);
    tmp_.clear();
    fsync_directory(env_, parent_of(path_), who_);
  } catch (...) {
    discard();
    throw;
  }
}

void write_output_file(IoEnv& env, const std::string& path, std::string_view text, const std::string& who) {
  OutputFile out(env, path, who);
  out.write(text);
  out.commit();
}

PrivateDir::PrivateDir(const std::string& prefix, const std::string& parent) {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = (!parent.empty() ? parent : std::string(base && *base ? base : "/tmp")) + "/" + prefix + "-XXXXXX";
  if (!::mkdtemp(tmpl.data())) throw FileError("zinf", "create a private directory", tmpl, errno);
  path_ = tmpl;
}

PrivateDir::~PrivateDir() {
  if (keep_) return;
  std::error_code ec;
  fs::remove_all(path_, ec);
}

}  // namespace zinf::engine
