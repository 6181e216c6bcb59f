// The one way zinf writes a file the user named (a sweep's CSV, a token file, an export, a Program,
// a trace, a profile, a tuned config, validate's results): whole or not at all, never through
// something planted in its place. The target must be absent or a regular file: a directory, a
// device (/dev/null included: it is refused, never replaced or written), a FIFO, a socket or a
// symbolic link is refused before any work starts. The bytes go to a temporary file created with
// O_CREAT | O_EXCL | O_NOFOLLOW under a random name in the target's own directory; every write,
// the fsync and the close are checked; then the temporary is renamed over the target and the
// directory fsynced. On any failure, or when the object goes away uncommitted, the temporary is
// removed and the target is as it was. Scratch files go under a PrivateDir (mkdtemp, mode 0700).
// Built on safe_files (FileError, fsync_checked, fsync_directory) and an IoEnv, so tests can fail
// each call. An OutputFile or PrivateDir is owned by one thread; the free functions are stateless.
#pragma once
#include <exception>
#include <memory>
#include <ostream>
#include <streambuf>
#include <string>
#include <string_view>

#include "engine/io/io_env.hpp"
#include "engine/io/safe_files.hpp"

namespace zinf::engine {

// Refuses (FileError naming `who`, e.g. "zinf plan --program", and the path) an output path zinf
// must not write: an existing target that is not a regular file, or a parent that is missing, not
// a directory, or where this user cannot create a file (tried with a temporary, removed at once).
// Commands call it for every output before their work starts.
void check_output_path(IoEnv& env, const std::string& path, const std::string& who);

class OutputFile {
public:
  // Checks the path (check_output_path) and creates the temporary beside it.
  OutputFile(IoEnv& env, const std::string& path, const std::string& who);
  ~OutputFile();  // uncommitted: the temporary is removed
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  // Appends bytes after what the stream holds; throws FileError naming the target on a failed write.
  void write(const void* data, size_t length);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // A buffered stream onto the same file, for writers that take an ostream; an error it meets is
  // thrown by commit (or by the next write).
  std::ostream& stream();
  // Flushes, fsyncs, closes, checks the target is still absent or a regular file, renames the
  // temporary over it and fsyncs the directory. Throws FileError; the temporary is gone either way.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temporary() const { return tmp_; }

private:
  class Buffer;
  void append(const void* data, size_t length);  // to the file, past the stream's buffer
  void fail_if_stream_failed();
  void discard() noexcept;

  IoEnv& env_;
  std::string path_, tmp_, who_;
  int fd_ = -1;
  uint64_t offset_ = 0;
  std::unique_ptr<Buffer> buffer_;
  std::unique_ptr<std::ostream> stream_;
  std::exception_ptr stream_error_;
};

// The whole of `text` written to `path` through an OutputFile.
void write_output_file(IoEnv& env, const std::string& path, std::string_view text, const std::string& who);

// A directory of this process's own (mkdtemp, mode 0700) for scratch files that children read and
// write: no other user can plant or read anything there, and its name is not guessable. Made in
// `parent`, or $TMPDIR (else /tmp) when empty; removed with everything in it when the object goes
// away.
class PrivateDir {
public:
  explicit PrivateDir(const std::string& prefix, const std::string& parent = "");
  ~PrivateDir();
  PrivateDir(const PrivateDir&) = delete;
  PrivateDir& operator=(const PrivateDir&) = delete;
  const std::string& path() const { return path_; }
  // Leaves the directory in place when the object goes away (its logs explain a failure).
  void keep() { keep_ = true; }

private:
  std::string path_;
  bool keep_ = false;
};

}  // namespace zinf::engine
