#include "engine/io/row_file.hpp"

#include <fcntl.h>

#include <cerrno>
#include <utility>

#include "formats/bounded_input.hpp"

namespace zinf::engine {

RowFile::RowFile(IoEnv& env, const std::string& path, const std::string& who, uint64_t limit)
    : env_(env), path_(path), who_(who) {
  check_output_path(env_, path_, who_);
  // A file past the bound is refused before the lock is taken: a refused command leaves no
  // <path>.lock behind. It is read, within the bound again, once the lock is held.
  FileInfo st;
  if (env_.lstat(path_, st) == 0) core::check_bounded_file(path_, limit, "results file");
  lock_ = DirLock::for_output(env_, path_, who_);
  if (env_.lstat(path_, st) == 0) existing_ = core::read_bounded_file(path_, limit, "results file");
}

RowFile::~RowFile() {
  if (fd_ >= 0) env_.close(fd_);
}

void RowFile::rewrite(const std::string& header, const std::vector<std::string>& rows) {
  if (fd_ >= 0) env_.close(std::exchange(fd_, -1));
  std::string text = header + "\n";
  for (const auto& r : rows) text += r + "\n";
  write_output_file(env_, path_, text, who_);
  fd_ = open_own_file(env_, path_, O_WRONLY, 0, who_);
  end_ = text.size();
}

void RowFile::append(const std::string& row) {
  if (fd_ < 0) throw FileError(who_, "append to", path_, EBADF, "the file was not started");
  const std::string line = row + "\n";
  const int64_t w = env_.pwrite(fd_, line.data(), line.size(), end_);
  if (w < 0) throw FileError(who_, "append to", path_, int(-w));
  if (uint64_t(w) != line.size()) throw FileError(who_, "append to", path_, EIO, "the write was short");
  end_ += line.size();
}

}  // namespace zinf::engine
