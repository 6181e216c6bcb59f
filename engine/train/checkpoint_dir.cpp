#include "engine/train/checkpoint_dir.hpp"

#include <fcntl.h>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include "engine/io/crc32c.hpp"

namespace fs = std::filesystem;

namespace zinf::engine {
namespace {

const char* kWho = "checkpoint";

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

// CRC32C and size of a file, read in pieces.
std::pair<uint32_t, uint64_t> file_crc(IoEnv& env, const std::string& path) {
  Fd f{env, open_own_file(env, path, O_RDONLY, 0, kWho)};
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

bool exists(IoEnv& env, const std::string& path) {
  FileInfo st;
  return env.lstat(path, st) == 0;
}

void remove_tree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);  // removes links themselves, never what they point to
  if (ec) throw FileError(kWho, "remove", path, ec.value());
}

}  // namespace

std::string latest_checkpoint_name(IoEnv& env, const std::string& root) {
  const std::string path = root + "/latest";
  if (!exists(env, path)) return "";
  std::string name = read_own_file(env, path, kWho);
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  if (!is_step_name(name))
    throw FileError(kWho, "read", path, EINVAL,
                    fmt::format("it must name a step-NNNNNNNN directory, not '{}'", name.substr(0, 64)));
  return name;
}

LoadedCheckpoint load_latest_checkpoint(IoEnv& env, const std::string& root) {
  const std::string name = latest_checkpoint_name(env, root);
  if (name.empty()) throw FileError(kWho, "resume from", root + "/latest", ENOENT, "no checkpoint has been saved there");
  LoadedCheckpoint c;
  c.dir = root + "/" + name;
  FileInfo st;
  int r = env.lstat(c.dir, st);
  if (r < 0) throw FileError(kWho, "open", c.dir, -r, "named by " + root + "/latest");
  if (st.kind != FileInfo::Kind::Directory) throw FileError(kWho, "open", c.dir, ENOTDIR, "a link or a file, not a directory");
  c.meta_path = c.dir + "/meta.json";
  c.state_path = c.dir + "/state.safetensors";
  try {
    c.meta = nlohmann::json::parse(read_own_file(env, c.meta_path, kWho));
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(fmt::format("checkpoint {}: not valid JSON: {}", c.meta_path, e.what()));
  }
  if (!c.meta.is_object() || c.meta.value("format", "") != "zinf-checkpoint-1")
    throw std::runtime_error(fmt::format("checkpoint {}: field 'format' is not zinf-checkpoint-1", c.meta_path));
  if (c.meta.contains("checksums")) {
    const auto& want = c.meta["checksums"]["state.safetensors"];
    if (!want.is_object() || !want["crc32c"].is_number_unsigned() || !want["bytes"].is_number_unsigned())
      throw std::runtime_error(fmt::format("checkpoint {}: field 'checksums.state.safetensors' needs crc32c and bytes",
                                           c.meta_path));
    auto [crc, bytes] = file_crc(env, c.state_path);
    if (bytes != want["bytes"].get<uint64_t>() || crc != want["crc32c"].get<uint32_t>())
      throw std::runtime_error(fmt::format(
          "checkpoint {}: the file is damaged: {} bytes with CRC32C {:08x}, but {} recorded {} bytes with {:08x}",
          c.state_path, bytes, crc, c.meta_path, want["bytes"].get<uint64_t>(), want["crc32c"].get<uint32_t>()));
    c.verified = true;
  }
  return c;
}

CheckpointDir::CheckpointDir(IoEnv& env, std::string root) : env_(env), root_(std::move(root)) {
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
  ensure_own_directory(env_, root_, kWho);
  lock_ = std::make_unique<DirLock>(env_, root_, kWho);
}

bool CheckpointDir::holds_checkpoints() const {
  if (exists(env_, root_ + "/latest")) return true;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root_, ec))
    if (is_step_name(e.path().filename().string())) return true;
  return false;
}

std::vector<std::string> CheckpointDir::save(const std::string& name, const std::string& state_bytes, nlohmann::json meta) {
  return save(name, [&state_bytes](const ByteSink& sink) { sink(state_bytes.data(), state_bytes.size()); }, std::move(meta));
}

std::vector<std::string> CheckpointDir::save(const std::string& name, const StateWriter& write_state, nlohmann::json meta) {
  if (!is_step_name(name)) throw std::invalid_argument("checkpoint: bad checkpoint name '" + name + "'");
  std::vector<std::string> notes;
  const std::string tmp = root_ + "/" + name + ".tmp", final_dir = root_ + "/" + name;
  remove_tree(tmp);  // what a crash mid-save left
  int r = env_.make_dir(tmp, 0700);
  if (r < 0) throw FileError(kWho, "create directory", tmp, -r);
  ensure_own_directory(env_, tmp, kWho);
  uint32_t crc = 0;
  uint64_t bytes = 0;
  {
    const std::string path = tmp + "/state.safetensors";
    Fd f{env_, open_own_file(env_, path, O_WRONLY | O_CREAT | O_EXCL, 0600, kWho)};
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
    r = env_.close(std::exchange(f.fd, -1));
    if (r < 0) throw FileError(kWho, "close", path, -r);
  }
  meta["checksums"] = {{"state.safetensors", {{"crc32c", crc}, {"bytes", bytes}}}};
  write_file_durable(env_, tmp + "/meta.json", meta.dump(2), kWho);  // fsyncs tmp as well

  const std::string latest = latest_checkpoint_name(env_, root_);
  if (exists(env_, final_dir)) {
    // Swap, so that at every instant <name> is a whole checkpoint: the old one until the swap,
    // the new one after it.
    r = env_.exchange(tmp, final_dir);
    if (r < 0) throw FileError(kWho, "swap " + tmp + " with", final_dir, -r);
    fsync_directory(env_, root_, kWho);
    if (latest == name) {
      remove_tree(tmp);  // `latest` now names the new one, whole and durable
    } else {
      std::string aside;
      for (int k = 1; aside.empty() || exists(env_, aside); ++k) aside = fmt::format("{}.replaced-{}", final_dir, k);
      r = env_.rename(tmp, aside);
      if (r < 0) throw FileError(kWho, "rename " + tmp + " to", aside, -r);
      notes.push_back(fmt::format("an earlier {} (not the one `latest` named) was kept as {}", final_dir, aside));
    }
  } else {
    r = env_.rename(tmp, final_dir);
    if (r < 0) throw FileError(kWho, "rename " + tmp + " to", final_dir, -r);
  }
  fsync_directory(env_, root_, kWho);
  write_file_durable(env_, root_ + "/latest", name + "\n", kWho);
  return notes;
}

}  // namespace zinf::engine
