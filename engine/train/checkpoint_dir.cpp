#include "engine/train/checkpoint_dir.hpp"

#include <fcntl.h>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <map>

#include "engine/io/crc32c.hpp"

namespace fs = std::filesystem;

namespace zinf::engine {
namespace {

const char* kWho = "checkpoint";
constexpr uint64_t kLatestBytes = 4096;

bool is_step_name(const std::string& name) {
  if (name.size() != 13 || name.compare(0, 5, "step-") != 0) return false;
  return std::all_of(name.begin() + 5, name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Closes a descriptor when the scope ends unless released.
struct Fd {
  IoEnv& env;
  int fd;
  ~Fd() {
    if (fd >= 0) env.close(fd);
  }
};

// CRC32C and size of an open file (`path` names it in errors), read in pieces.
std::pair<uint32_t, uint64_t> file_crc(IoEnv& env, const Fd& f, const std::string& path) {
  std::vector<char> buf(1 << 20);
  uint32_t crc = 0;
  uint64_t off = 0;
  for (;;) {
    int64_t n = env.pread(f.fd, buf.data(), buf.size(), off);
    if (n < 0) throw FileError(kWho, "read", path, int(-n));
    if (n == 0) break;
    crc = crc32c(buf.data(), size_t(n), crc);
    off += uint64_t(n);
  }
  return {crc, off};
}

std::pair<uint32_t, uint64_t> file_crc(IoEnv& env, const std::string& path) {
  return file_crc(env, Fd{env, open_own_file(env, path, O_RDONLY | O_NONBLOCK, 0, kWho)}, path);
}

// The step name `latest` holds (read from `path`), checked to be one.
std::string parse_latest(std::string name, const std::string& path) {
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  if (!is_step_name(name))
    throw FileError(kWho, "read", path, EINVAL,
                    fmt::format("it must name a step-NNNNNNNN directory, not '{}'", name.substr(0, 64)));
  return name;
}

bool exists(IoEnv& env, const std::string& path) {
  FileInfo st;
  return env.lstat(path, st) == 0;
}

// The names in a directory, links and all (nothing followed).
std::vector<std::string> entries(const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> names;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) names.push_back(it->path().filename().string());
  if (ec) throw FileError(kWho, "list", dir, ec.value());
  std::sort(names.begin(), names.end());
  return names;
}

// Verifies step directory `dir` whole against its checksums.json: every entry is a regular file
// it lists, and every listed file has the recorded size and CRC32C. False when there is no
// checksums.json (nothing to verify against).
bool verify_step(IoEnv& env, const std::string& dir) {
  const std::string list_path = dir + "/" + kChecksumsFile;
  if (!exists(env, list_path)) return false;
  const auto listed = parse_checksums(read_own_file(env, list_path, kWho), list_path);
  std::map<std::string, std::pair<uint64_t, uint32_t>> want(listed.begin(), listed.end());
  for (const std::string& name : entries(dir)) {
    if (name == kChecksumsFile) continue;
    if (!want.count(name))
      throw std::runtime_error(fmt::format("checkpoint {}/{}: the file is not covered by {} (every file of a step "
                                           "must be): it was added after the checkpoint was written",
                                           dir, name, list_path));
  }
  for (const auto& [name, size_crc] : listed) {
    const std::string path = dir + "/" + name;
    FileInfo st;
    if (env.lstat(path, st) != 0)
      throw std::runtime_error(fmt::format("checkpoint {}: the file is missing, but {} lists it", path, list_path));
    // A size that differs refuses the file before it is read: a 100 GB file is not checksummed.
    if (st.kind == FileInfo::Kind::Regular && uint64_t(st.size) != size_crc.first)
      throw std::runtime_error(fmt::format("checkpoint {}: the file is damaged: {} bytes, but {} recorded {} bytes", path,
                                           st.size, list_path, size_crc.first));
    auto [crc, bytes] = file_crc(env, path);
    if (bytes != size_crc.first || crc != size_crc.second)
      throw std::runtime_error(fmt::format(
          "checkpoint {}: the file is damaged: {} bytes with CRC32C {:08x}, but {} recorded {} bytes with {:08x}", path,
          bytes, crc, list_path, size_crc.first, size_crc.second));
  }
  return true;
}

}  // namespace

nlohmann::json parse_checkpoint_meta(const std::string& text, const std::string& path) {
  if (text.find('\0') != std::string::npos)
    throw std::runtime_error(fmt::format("checkpoint {}: the file holds a NUL byte at offset {}: it is damaged", path,
                                         text.find('\0')));
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(fmt::format("checkpoint {}: not valid JSON: {}", path, e.what()));
  }
  if (!meta.is_object() || !meta.contains("format") || !meta["format"].is_string() ||
      meta["format"].get<std::string>() != "zinf-checkpoint-1")
    throw std::runtime_error(fmt::format("checkpoint {}: field 'format' is not zinf-checkpoint-1", path));
  return meta;
}

std::vector<std::pair<std::string, std::pair<uint64_t, uint32_t>>> parse_checksums(const std::string& text,
                                                                                    const std::string& path) {
  const auto bad = [&](const std::string& why) {
    return std::runtime_error(fmt::format("checkpoint {}: {}", path, why));
  };
  if (text.find('\0') != std::string::npos) throw bad("the file holds a NUL byte: it is damaged");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw bad(std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object() || !j.contains("format") || j["format"] != "zinf-checksums-1" || !j.contains("files") ||
      !j["files"].is_object())
    throw bad("not a zinf-checksums-1 list of files");
  std::vector<std::pair<std::string, std::pair<uint64_t, uint32_t>>> out;
  for (const auto& [name, v] : j["files"].items()) {
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos || name == kChecksumsFile)
      throw bad(fmt::format("'{}' is not the name of a file in the step directory", name.substr(0, 64)));
    if (!v.is_object() || !v.contains("bytes") || !v["bytes"].is_number_unsigned() || !v.contains("crc32c") ||
        !v["crc32c"].is_number_unsigned() || v["crc32c"].get<uint64_t>() > 0xffffffffull)
      throw bad(fmt::format("the entry of '{}' needs bytes and crc32c", name.substr(0, 64)));
    out.push_back({name, {v["bytes"].get<uint64_t>(), uint32_t(v["crc32c"].get<uint64_t>())}});
  }
  return out;
}

std::string latest_checkpoint_name(IoEnv& env, const std::string& root) {
  const std::string path = root + "/latest";
  if (!exists(env, path)) return "";
  return parse_latest(read_own_file(env, path, kWho, kLatestBytes), path);
}

namespace {

// The newest step directory under `root` that verifies whole, for a directory without `latest`;
// `skipped` collects the newer ones passed over. "" when there is none.
std::string newest_whole_step(IoEnv& env, const std::string& root, std::vector<std::string>& skipped) {
  if (!exists(env, root)) return "";
  auto names = entries(root);
  std::erase_if(names, [](const std::string& n) { return !is_step_name(n); });
  for (auto it = names.rbegin(); it != names.rend(); ++it) {
    const std::string dir = root + "/" + *it;
    FileInfo st;
    if (env.lstat(dir, st) != 0 || st.kind != FileInfo::Kind::Directory) {
      skipped.push_back(dir + ": not a directory");
      continue;
    }
    try {
      if (verify_step(env, dir)) return *it;
      skipped.push_back(fmt::format("{}: no {} to verify it against", dir, kChecksumsFile));
    } catch (const std::exception& e) {
      skipped.push_back(e.what());
    }
  }
  return "";
}

}  // namespace

LoadedCheckpoint load_latest_checkpoint(IoEnv& env, const std::string& root, bool accept_unverified) {
  LoadedCheckpoint c;
  std::string name = latest_checkpoint_name(env, root);
  if (name.empty()) {
    name = newest_whole_step(env, root, c.skipped);
    c.confirmed = false;
  }
  if (name.empty()) {
    std::string why;
    for (const auto& s : c.skipped) why += "; passed over " + s;
    throw FileError(kWho, "resume from", root + "/latest", ENOENT, "no checkpoint has been saved there" + why);
  }
  c.name = name;
  c.dir = root + "/" + name;
  FileInfo st;
  int r = env.lstat(c.dir, st);
  if (r < 0) throw FileError(kWho, "open", c.dir, -r, "named by " + root + "/latest");
  if (st.kind != FileInfo::Kind::Directory) throw FileError(kWho, "open", c.dir, ENOTDIR, "a link or a file, not a directory");
  c.meta_path = c.dir + "/meta.json";
  c.state_path = c.dir + "/state.safetensors";
  c.verified = c.confirmed ? verify_step(env, c.dir) : true;  // an unconfirmed one was found by verifying it
  c.meta = parse_checkpoint_meta(read_own_file(env, c.meta_path, kWho), c.meta_path);
  if (!c.verified) {
    // An older zinf recorded the state file's checksum in meta.json only: check what it covers.
    if (c.meta.contains("checksums") && c.meta["checksums"].is_object()) {
      const auto& want = c.meta["checksums"]["state.safetensors"];
      if (!want.is_object() || !want["crc32c"].is_number_unsigned() || !want["bytes"].is_number_unsigned())
        throw std::runtime_error(
            fmt::format("checkpoint {}: field 'checksums.state.safetensors' needs crc32c and bytes", c.meta_path));
      auto [crc, bytes] = file_crc(env, c.state_path);
      if (bytes != want["bytes"].get<uint64_t>() || crc != want["crc32c"].get<uint32_t>())
        throw std::runtime_error(fmt::format(
            "checkpoint {}: the file is damaged: {} bytes with CRC32C {:08x}, but {} recorded {} bytes with {:08x}",
            c.state_path, bytes, crc, c.meta_path, want["bytes"].get<uint64_t>(), want["crc32c"].get<uint32_t>()));
    }
    if (!accept_unverified)
      throw std::runtime_error(fmt::format(
          "checkpoint {}: there is no {}, so its files (meta.json's step, data position and seeds among them) are "
          "not covered by a checksum: an older zinf wrote it, or the file was deleted. Pass --accept-unverified to "
          "resume from it anyway",
          c.dir, kChecksumsFile));
  }
  return c;
}

CheckpointDir::CheckpointDir(IoEnv& env, std::string root) : env_(env), root_(std::move(root)) {
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
  ensure_own_directory(env_, root_, kWho);
  lock_ = std::make_unique<DirLock>(env_, root_, kWho);
  // Opened once, after the lock: every write from here on goes through this handle, so the path
  // replaced by a link later redirects nothing. It must be the directory locked: its .lock is the
  // very file the lock is on.
  dir_ = std::make_unique<DirHandle>(DirHandle::open(env_, root_, kWho));
  FileInfo locked, here;
  const int r = env_.fstat(lock_->fd(), locked);
  if (r < 0) throw FileError(kWho, "stat", root_ + "/.lock", -r);
  if (dir_->stat(".lock", here) != 0 || here.device != locked.device || here.inode != locked.inode)
    throw FileError(kWho, "use directory", root_, EXDEV, "it was replaced while zinf locked it; nothing was written");
  const FileInfo st = dir_->stat_self();
  device_ = st.device;
  inode_ = st.inode;
}

void CheckpointDir::check_still_locked() const {
  FileInfo st;
  const int r = env_.lstat(root_, st);
  if (r < 0)
    throw FileError(kWho, "use directory", root_, -r, "it was removed or replaced while this run held it; nothing saved");
  if (st.kind != FileInfo::Kind::Directory || st.device != device_ || st.inode != inode_)
    throw FileError(kWho, "use directory", root_, EXDEV,
                    std::string("it was replaced while this run held it (now ") +
                        (st.kind == FileInfo::Kind::Symlink ? "a symbolic link" : "another directory or file") +
                        "); nothing was written through it");
}

bool CheckpointDir::holds_checkpoints() const {
  if (dir_->exists("latest")) return true;
  const auto names = dir_->list();
  return std::any_of(names.begin(), names.end(), is_step_name);
}

std::vector<std::string> CheckpointDir::save(const std::string& name, const std::string& state_bytes,
                                             const nlohmann::json& meta, Latest latest) {
  return save(name, [&state_bytes](const ByteSink& sink) { sink(state_bytes.data(), state_bytes.size()); }, meta, latest);
}

std::vector<std::string> CheckpointDir::save(const std::string& name, const StateWriter& write_state,
                                             const nlohmann::json& meta, Latest latest) {
  return save(name, write_state, Files{{"meta.json", meta.dump(2)}}, latest);
}

std::vector<std::string> CheckpointDir::save(const std::string& name, const StateWriter& write_state, const Files& files,
                                             Latest latest) {
  if (!is_step_name(name)) throw std::invalid_argument("checkpoint: bad checkpoint name '" + name + "'");
  for (const auto& [file, bytes] : files)
    if (file.empty() || file.find('/') != std::string::npos || file == kChecksumsFile || file == "state.safetensors" ||
        file[0] == '.')
      throw std::invalid_argument("checkpoint: bad file name '" + file + "' for a step directory");
  check_still_locked();
  try {
    return save_checked(name, write_state, files, latest);
  } catch (const FileError&) {
    check_still_locked();  // a directory replaced mid-save is said as such, not as the file it broke
    throw;
  }
}

std::vector<std::string> CheckpointDir::save_checked(const std::string& name, const StateWriter& write_state,
                                                     const Files& files, Latest latest) {
  std::vector<std::string> notes;
  const std::string tmp = name + ".tmp";
  dir_->remove_tree(tmp);  // what a crash mid-save left
  dir_->make_dir(tmp);
  const DirHandle step = dir_->open_dir(tmp);
  nlohmann::json sums = nlohmann::json::object();
  {
    const std::string path = step.path_of("state.safetensors");
    uint32_t crc = 0;
    uint64_t bytes = 0;
    Fd f{env_, step.open_file("state.safetensors", O_WRONLY | O_CREAT | O_EXCL, 0600)};
    write_state([&](const char* data, size_t n) {
      size_t done = 0;
      while (done < n) {  // a short write is continued; an error or no progress is a failure
        int64_t w = env_.pwrite(f.fd, data + done, n - done, bytes + done);
        if (w < 0) throw FileError(kWho, "write", path, int(-w));
        if (w == 0) throw FileError(kWho, "write", path, EIO, "the write made no progress");
        done += size_t(w);
      }
      crc = crc32c(data, n, crc);
      bytes += n;
    });
    fsync_checked(env_, f.fd, path, kWho);
    const int r = env_.close(std::exchange(f.fd, -1));
    if (r < 0) throw FileError(kWho, "close", path, -r);
    sums["state.safetensors"] = {{"bytes", bytes}, {"crc32c", crc}};
  }
  for (const auto& [file, bytes] : files) {
    step.write_new_file(file, bytes);
    sums[file] = {{"bytes", uint64_t(bytes.size())}, {"crc32c", crc32c(bytes.data(), bytes.size())}};
  }
  // The list is made from the directory as it stands: a file that got there any other way is
  // covered too (read back for its checksum), so the checksums never leave a file of the step out.
  for (const std::string& file : step.list()) {
    if (sums.contains(file)) continue;
    auto [crc, bytes] = file_crc(env_, Fd{env_, step.open_file(file, O_RDONLY | O_NONBLOCK, 0)}, step.path_of(file));
    sums[file] = {{"bytes", bytes}, {"crc32c", crc}};
  }
  step.write_new_file(kChecksumsFile, nlohmann::json{{"format", "zinf-checksums-1"}, {"files", sums}}.dump(2));
  step.fsync();

  const std::string named =
      dir_->exists("latest") ? parse_latest(dir_->read_small_file("latest", kLatestBytes), dir_->path_of("latest")) : "";
  if (dir_->exists(name)) {
    // Swap, so that at every instant <name> is a whole checkpoint: the old one until the swap,
    // the new one after it.
    dir_->exchange(tmp, name);
    dir_->fsync();
    if (named == name) {
      dir_->remove_tree(tmp);  // `latest` now names the new one, whole and durable
    } else {
      std::string aside;
      for (int k = 1; aside.empty() || dir_->exists(aside); ++k) aside = fmt::format("{}.replaced-{}", name, k);
      dir_->rename(tmp, aside);
      notes.push_back(fmt::format("an earlier {} (not the one `latest` named) was kept as {}", dir_->path_of(name),
                                  dir_->path_of(aside)));
    }
  } else {
    dir_->rename(tmp, name);
  }
  dir_->fsync();
  // The handle cannot be redirected, but a path that now leads elsewhere is an error the user must
  // hear of: checked before `latest` moves (then it stays) and after (the save is in the directory
  // locked, wherever it now is, and nothing went through the path).
  check_still_locked();
  if (latest == Latest::Move) dir_->write_file_durable("latest", name + "\n");
  check_still_locked();
  return notes;
}

void CheckpointDir::publish(const std::string& name) {
  if (!is_step_name(name)) throw std::invalid_argument("checkpoint: bad checkpoint name '" + name + "'");
  check_still_locked();
  FileInfo st;
  const int r = dir_->stat(name, st);
  if (r < 0 || st.kind != FileInfo::Kind::Directory)
    throw FileError(kWho, "point latest at", dir_->path_of(name), r < 0 ? -r : ENOTDIR);
  dir_->write_file_durable("latest", name + "\n");
}

std::string CheckpointDir::set_aside(const std::string& name, const std::string& why) {
  if (!is_step_name(name)) throw std::invalid_argument("checkpoint: bad checkpoint name '" + name + "'");
  check_still_locked();
  std::string aside;
  for (int k = 1; aside.empty() || dir_->exists(aside); ++k) aside = fmt::format("{}.{}-{}", name, why, k);
  dir_->rename(name, aside);
  dir_->fsync();
  return dir_->path_of(aside);
}

}  // namespace zinf::engine
