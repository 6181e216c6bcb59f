// A results file of whole lines, a header and then one row per line (a sweep's CSV), kept by one
// command at a time: the file is locked (DirLock::for_output: a second writer is refused naming
// the holder) before what it holds is read, within a bound, through the bounded reader. It is
// started afresh through the one writer (engine/io/output_file.hpp: a temporary renamed over it,
// so a kill during the rewrite loses nothing), and each row is then appended with a single
// positional write, so a kill leaves whole rows and at most one unterminated last line. Owned by
// one thread.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/io/io_env.hpp"
#include "engine/io/output_file.hpp"
#include "engine/io/safe_files.hpp"

namespace zinf::engine {

class RowFile {
public:
  // Locks `path` and reads it (absent: ""); throws FileError naming `who` and the path when it is
  // held by another process or cannot be written, core::ConfigError when it is not a regular file
  // or larger than `limit` bytes.
  RowFile(IoEnv& env, const std::string& path, const std::string& who, uint64_t limit);
  ~RowFile();
  RowFile(const RowFile&) = delete;
  RowFile& operator=(const RowFile&) = delete;

  // What the file held when it was locked.
  const std::string& existing() const { return existing_; }
  // Replaces the file with `header` and `rows` (lines without their newline), then keeps it open
  // for append.
  void rewrite(const std::string& header, const std::vector<std::string>& rows);
  // One row, in one write.
  void append(const std::string& row);

private:
  IoEnv& env_;
  std::string path_, who_, existing_;
  std::unique_ptr<DirLock> lock_;
  int fd_ = -1;
  uint64_t end_ = 0;
};

}  // namespace zinf::engine
