#include "engine/io/nvme_store.hpp"

#include "engine/io/crc32c.hpp"
#include "engine/io/io_priority.hpp"
#include "engine/io/safe_files.hpp"
#include "engine/thread_name.hpp"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace zinf::engine {

// ---- errors ----------------------------------------------------------------------------------

namespace {

std::string errno_text(int error) { return std::strerror(error); }

std::string io_error_message(const std::string& op, const std::string& path, int error, const std::string& detail) {
  std::string m = "nvme store: " + op + " " + path + ": " + errno_text(error);
  if (!detail.empty()) m += " (" + detail + ")";
  return m;
}

uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }
uint64_t round_down(uint64_t x, uint64_t a) { return x / a * a; }

struct AlignedFree {
  void operator()(char* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<char, AlignedFree>;

AlignedBuffer aligned_alloc_or_throw(uint64_t bytes) {
  void* p = std::aligned_alloc(kDirectIoAlignment, round_up(std::max<uint64_t>(bytes, 1), kDirectIoAlignment));
  if (!p) throw std::bad_alloc();
  return AlignedBuffer(static_cast<char*>(p));
}

}  // namespace

IoError::IoError(std::string op, std::string path, int error) : IoError(std::move(op), std::move(path), error, "") {}

IoError::IoError(std::string op, std::string path, int error, const std::string& detail)
    : std::runtime_error(io_error_message(op, path, error, detail)), op_(std::move(op)), path_(std::move(path)), error_(error) {}

IoError::IoError(const std::string& message, std::string path, int error, Preformatted)
    : std::runtime_error(message), path_(std::move(path)), error_(error) {}

NvmeStoreOptions NvmeStoreOptions::from_run_config(const core::RunConfig& config, std::string dir) {
  NvmeStoreOptions o;
  o.dir = std::move(dir);
  o.block_size = uint64_t(config.aio_block_size);
  o.queue_depth = unsigned(config.aio_queue_depth);
  o.rings = unsigned(config.aio_rings);
  o.checksums = config.swap_checksums;
  return o;
}

// ---- requests --------------------------------------------------------------------------------

namespace detail {

struct Tensor {
  std::string name, path;
  int fd = -1;
  int slot = -1;  // registered-file slot, or -1 for a plain fd
  uint64_t bytes = 0;     // as created (or, when reopened, the file's size)
  uint64_t capacity = 0;  // bytes rounded up to 4 KiB: the file's size and the addressable range
  // One CRC32C per 4 KiB page when checksums are on; atomics because completion threads of
  // different rings update pages of one tensor concurrently.
  std::unique_ptr<std::atomic<uint32_t>[]> crc;
  uint64_t pages = 0;
};

enum class Phase : uint8_t { EdgeRead, Main };

struct IoRequest {
  detail::Tensor* tensor = nullptr;
  bool is_write = false;
  char* user = nullptr;  // caller's memory
  uint64_t offset = 0, length = 0;
  char* io = nullptr;  // what the device sees: the caller's memory or the bounce buffer
  uint64_t io_offset = 0, io_length = 0;
  AlignedBuffer bounce;
  // CRC32C per 4 KiB page of [io_offset, io_offset + io_length). A write's: computed by the
  // submitting thread as each block goes, filed in the tensor's table when the block completes. A
  // deferred read's: the stored sums, copied as each block completes, for wait() to verify against.
  std::vector<uint32_t> page_crc;
  bool deferred_verify = false;  // a read into the caller's memory, verified by the first wait()
  std::string tensor_path;       // for a deferred read's message: the tensor may be gone by then
  std::once_flag verified;
  int buffer_index = -1;
  Phase phase = Phase::Main;

  std::atomic<uint64_t> remaining{0};  // blocks of the current phase not yet completed
  std::mutex mu;                       // guards status until done
  IoStatus status;
  std::atomic<uint32_t> done{0};
  std::shared_ptr<IoRequest> self;  // keeps the request alive while the store works on it

  void fail(int error, const std::string& what) {
    std::lock_guard lock(mu);
    if (status.ok()) status = {error, what};
  }
};

}  // namespace detail

bool IoHandle::done() const { return req_ && req_->done.load(std::memory_order_acquire) != 0; }

namespace {

// The checksums of a read whose completion left them to wait(): the first page that differs fails
// the request, as the completion thread would have.
void verify_deferred_read(detail::IoRequest& req) {
  {
    std::lock_guard lock(req.mu);
    if (!req.status.ok()) return;
  }
  for (uint64_t p = 0; p < req.page_crc.size(); ++p) {
    const uint32_t c = crc32c(req.io + p * kDirectIoAlignment, kDirectIoAlignment);
    if (c == req.page_crc[p]) continue;
    const uint64_t at = req.io_offset + p * kDirectIoAlignment;
    req.fail(EIO, "nvme store: read of " + req.tensor_path + " at offset " + std::to_string(at) + " (" +
                      std::to_string(kDirectIoAlignment) + " bytes): checksum mismatch (stored " + std::to_string(req.page_crc[p]) +
                      ", read " + std::to_string(c) + ")");
    return;
  }
}

}  // namespace

IoStatus IoHandle::wait() const {
  if (!req_) return {EINVAL, "nvme store: wait on an empty handle"};
  req_->done.wait(0, std::memory_order_acquire);
  if (req_->deferred_verify) std::call_once(req_->verified, verify_deferred_read, *req_);
  std::lock_guard lock(req_->mu);
  return req_->status;
}

void IoHandle::wait_or_throw() const {
  IoStatus s = wait();
  if (!s.ok()) throw std::runtime_error(s.message);
}

// ---- the store -------------------------------------------------------------------------------

namespace {

using detail::IoRequest;
using detail::Phase;
using detail::Tensor;

struct Block {
  IoRequest* req = nullptr;
  uint64_t offset = 0;  // in the file
  char* data = nullptr;
  uint32_t length = 0;
  bool is_write = false;
};

constexpr uint64_t kShutdownTag = ~uint64_t(0);

}  // namespace

struct NvmeStore::Impl {
  struct Ring {
    std::unique_ptr<IoRing> io;
    std::mutex mu;  // the submission side: pending, slots, in_flight, io->push/submit
    std::deque<Block> pending;
    std::vector<Block> slots;  // tag -> block in flight
    std::vector<uint32_t> free_slots;
    unsigned in_flight = 0;
    std::thread reaper;
  };

  NvmeStoreOptions opt;
  IoEnv& env;
  std::vector<std::unique_ptr<Ring>> rings;
  std::atomic<unsigned> next_ring{0};

  mutable std::mutex tensors_mu;
  std::vector<std::unique_ptr<Tensor>> tensors;  // indexed by TensorId; null once removed
  std::vector<int> free_file_slots;

  std::mutex buffers_mu;
  std::vector<iovec> buffers;

  std::atomic<uint64_t> live{0};  // requests not yet completed
  std::unique_ptr<DirLock> dir_lock;  // this store's hold on its directory

  Impl(NvmeStoreOptions o, IoEnv& e) : opt(std::move(o)), env(e) {}

  Tensor& tensor(TensorId id) const {
    std::lock_guard lock(tensors_mu);
    if (id >= tensors.size() || !tensors[id]) throw std::invalid_argument("nvme store: unknown tensor id " + std::to_string(id));
    return *tensors[id];
  }

  int find_buffer(const char* p, uint64_t n) {
    std::lock_guard lock(buffers_mu);
    for (size_t i = 0; i < buffers.size(); ++i) {
      auto* b = static_cast<const char*>(buffers[i].iov_base);
      if (p >= b && p + n <= b + buffers[i].iov_len) return int(i);
    }
    return -1;
  }

  // Moves pending blocks into the ring while it has room, then hands them to the kernel.
  void pump(Ring& r) {
    unsigned pushed = 0;
    while (!r.pending.empty() && r.in_flight < opt.queue_depth) {
      Block b = r.pending.front();
      uint32_t slot = r.free_slots.back();
      IoOp op;
      op.kind = b.is_write ? IoOp::Kind::Write : IoOp::Kind::Read;
      Tensor& t = *b.req->tensor;
      op.fixed_file = t.slot >= 0;
      op.file = t.slot >= 0 ? t.slot : t.fd;
      op.buffer_index = b.req->buffer_index;
      op.data = b.data;
      op.length = b.length;
      op.offset = b.offset;
      op.tag = slot;
      if (!r.io->push(op)) break;
      r.free_slots.pop_back();
      r.slots[slot] = b;
      r.pending.pop_front();
      ++r.in_flight;
      ++pushed;
    }
    if (pushed == 0) return;
    int s;
    do s = r.io->submit();
    while (s == -EINTR);
    // Ops the kernel refused to take stay queued in the ring and go with the next submit; a hard
    // error there surfaces as failed completions, so nothing is lost silently.
  }

  // Splits [io_offset, io_offset + io_length) of a request (or the given sub-range) into blocks
  // and spreads them over the rings.
  void issue(IoRequest& req, uint64_t file_offset, char* data, uint64_t length, bool is_write) {
    const uint64_t bs = opt.block_size;
    const uint64_t nblocks = (length + bs - 1) / bs;
    const unsigned nrings = unsigned(rings.size());
    const unsigned first = next_ring.fetch_add(1, std::memory_order_relaxed) % nrings;
    if (is_write && req.tensor->crc) {
      // Each block's pages are checksummed here, on the submitting thread, just before the block
      // goes: the device starts on the first while the rest are summed, and the completion
      // thread, which keeps the queue full, only files the sums.
      for (uint64_t i = 0; i < nblocks; ++i) {
        const uint64_t off = i * bs, len = std::min(bs, length - off);
        for (uint64_t p = 0; p < len; p += kDirectIoAlignment)
          req.page_crc[(file_offset + off + p - req.io_offset) / kDirectIoAlignment] = crc32c(data + off + p, kDirectIoAlignment);
        Ring& r = *rings[(first + i) % nrings];
        std::lock_guard lock(r.mu);
        r.pending.push_back({&req, file_offset + off, data + off, uint32_t(len), is_write});
        pump(r);
      }
      return;
    }
    // Group by ring so each ring's lock is taken once per request.
    for (unsigned k = 0; k < std::min<uint64_t>(nrings, nblocks); ++k) {
      Ring& r = *rings[(first + k) % nrings];
      std::lock_guard lock(r.mu);
      for (uint64_t i = k; i < nblocks; i += nrings) {
        uint64_t off = i * bs;
        r.pending.push_back({&req, file_offset + off, data + off, uint32_t(std::min(bs, length - off)), is_write});
      }
      pump(r);
    }
  }

  void start(IoRequest& req, std::vector<std::pair<uint64_t, uint64_t>> ranges, bool is_write) {
    uint64_t total = 0;
    for (auto& [off, len] : ranges) total += (len + opt.block_size - 1) / opt.block_size;
    req.remaining.store(total, std::memory_order_relaxed);
    if (req.tensor->crc && (is_write || req.deferred_verify)) req.page_crc.assign(req.io_length / kDirectIoAlignment, 0);
    for (auto& [off, len] : ranges) issue(req, off, req.io + (off - req.io_offset), len, is_write);
  }

  std::string describe(const IoRequest& req, const char* what, uint64_t off, uint64_t len) const {
    return "nvme store: " + std::string(what) + " of " + req.tensor->path + " at offset " + std::to_string(off) + " (" +
           std::to_string(len) + " bytes)";
  }

  void complete_block(const Block& b, int32_t result) {
    IoRequest& req = *b.req;
    Tensor& t = *req.tensor;
    const char* what = b.is_write ? "write" : "read";
    if (result < 0) {
      req.fail(-result, describe(req, what, b.offset, b.length) + " failed: " + errno_text(-result));
    } else if (uint32_t(result) != b.length) {
      req.fail(EIO, describe(req, what, b.offset, b.length) + " was short: " + std::to_string(result) + " of " +
                        std::to_string(b.length) + " bytes transferred");
    } else if (t.crc) {
      for (uint64_t p = 0; p < b.length; p += kDirectIoAlignment) {
        uint64_t page = (b.offset + p) / kDirectIoAlignment;
        const uint64_t in_request = (b.offset + p - req.io_offset) / kDirectIoAlignment;
        if (b.is_write) {
          t.crc[page].store(req.page_crc[in_request], std::memory_order_relaxed);
          continue;
        }
        if (req.deferred_verify) {
          req.page_crc[in_request] = t.crc[page].load(std::memory_order_relaxed);
          continue;
        }
        const uint32_t c = crc32c(b.data + p, kDirectIoAlignment);
        if (c != t.crc[page].load(std::memory_order_relaxed)) {
          req.fail(EIO, describe(req, "read", b.offset + p, kDirectIoAlignment) + ": checksum mismatch (stored " +
                            std::to_string(t.crc[page].load()) + ", read " + std::to_string(c) + ")");
          break;
        }
      }
    }
    if (req.remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) phase_done(req);
  }

  void phase_done(IoRequest& req) {
    bool ok;
    {
      std::lock_guard lock(req.mu);
      ok = req.status.ok();
    }
    if (ok && req.phase == Phase::EdgeRead) {
      std::memcpy(req.io + (req.offset - req.io_offset), req.user, req.length);
      req.phase = Phase::Main;
      start(req, {{req.io_offset, req.io_length}}, true);
      return;
    }
    if (ok && !req.is_write && req.io != req.user) std::memcpy(req.user, req.io + (req.offset - req.io_offset), req.length);
    finish(req);
  }

  void finish(IoRequest& req) {
    std::shared_ptr<IoRequest> keep = std::move(req.self);
    req.bounce.reset();
    req.done.store(1, std::memory_order_release);
    req.done.notify_all();
    if (live.fetch_sub(1, std::memory_order_acq_rel) == 1) live.notify_all();
  }

  TensorId add_tensor(std::unique_ptr<Tensor> t) {
    std::lock_guard lock(tensors_mu);
    if (!free_file_slots.empty()) {
      int slot = free_file_slots.back();
      bool ok = true;
      for (auto& r : rings) {
        std::lock_guard rl(r->mu);
        ok = ok && r->io->update_file(unsigned(slot), t->fd) >= 0;
      }
      if (ok) {
        free_file_slots.pop_back();
        t->slot = slot;
      } else {
        // A ring that cannot take the file is not an error: plain fds work, only slower.
        for (auto& r : rings) {
          std::lock_guard rl(r->mu);
          r->io->update_file(unsigned(slot), -1);
        }
      }
    }
    tensors.push_back(std::move(t));
    return TensorId(tensors.size() - 1);
  }

  void drop_tensor(Tensor& t) {
    if (t.slot >= 0) {
      for (auto& r : rings) {
        std::lock_guard rl(r->mu);
        r->io->update_file(unsigned(t.slot), -1);
      }
      free_file_slots.push_back(t.slot);
    }
    env.close(t.fd);
  }

  void reap(Ring& r) {
    std::vector<IoCompletion> cq(opt.queue_depth + 1);
    std::vector<Block> blocks;
    blocks.reserve(cq.size());
    for (;;) {
      int n = r.io->wait(cq);
      if (n < 0) {
        // The ring itself failed; nothing else will complete the blocks in it, so fail them.
        std::vector<Block> lost;
        {
          std::lock_guard lock(r.mu);
          std::vector<bool> is_free(r.slots.size(), false);
          for (uint32_t s : r.free_slots) is_free[s] = true;
          for (uint32_t s = 0; s < r.slots.size(); ++s)
            if (!is_free[s]) lost.push_back(r.slots[s]);
        }
        for (const Block& b : lost) complete_block(b, n);
        return;
      }
      bool stop = false;
      blocks.clear();
      {
        std::lock_guard lock(r.mu);
        for (int i = 0; i < n; ++i) {
          if (cq[size_t(i)].tag == kShutdownTag) {
            stop = true;
            continue;
          }
          blocks.push_back(r.slots[cq[size_t(i)].tag]);
        }
      }
      size_t bi = 0;
      for (int i = 0; i < n; ++i) {
        if (cq[size_t(i)].tag == kShutdownTag) continue;
        complete_block(blocks[bi++], cq[size_t(i)].result);
      }
      {
        std::lock_guard lock(r.mu);
        for (int i = 0; i < n; ++i) {
          if (cq[size_t(i)].tag == kShutdownTag) continue;
          r.free_slots.push_back(uint32_t(cq[size_t(i)].tag));
          --r.in_flight;
        }
        pump(r);
      }
      if (stop) return;
    }
  }
};

NvmeStore::NvmeStore(NvmeStoreOptions options, IoEnv& env) : options_(std::move(options)) {
  auto& o = options_;
  if (o.block_size == 0 || o.block_size % kDirectIoAlignment != 0 || o.block_size > (1u << 30))
    throw std::invalid_argument("nvme store: block_size must be a positive multiple of " + std::to_string(kDirectIoAlignment) +
                                " up to 1 GiB, got " +
                                std::to_string(o.block_size));
  if (o.queue_depth == 0 || o.rings == 0) throw std::invalid_argument("nvme store: queue_depth and rings must be positive");
  if (o.dir.empty()) throw std::invalid_argument("nvme store: no directory given");
  impl_ = std::make_unique<Impl>(o, env);
  try {
    ensure_own_directory(env, o.dir, "nvme store");
    impl_->dir_lock = std::make_unique<DirLock>(env, o.dir, "nvme store");
  } catch (const FileError& e) {
    throw IoError(e.what(), e.path(), e.error(), IoError::Preformatted{});
  }
  for (unsigned i = 0; i < o.rings; ++i) {
    auto ring = std::make_unique<Impl::Ring>();
    int err = 0;
    ring->io = env.make_ring(o.queue_depth + 1, err);
    if (!ring->io) throw IoError("set up io_uring for", o.dir, -err);
    if (o.file_slots > 0) {
      err = ring->io->register_file_table(o.file_slots);
      if (err < 0) throw IoError("register file table for", o.dir, -err);
    }
    ring->slots.resize(o.queue_depth);
    for (uint32_t s = o.queue_depth; s-- > 0;) ring->free_slots.push_back(s);
    impl_->rings.push_back(std::move(ring));
  }
  for (int s = int(o.file_slots); s-- > 0;) impl_->free_file_slots.push_back(s);
  for (auto& ring : impl_->rings) {
    Impl::Ring* rp = ring.get();
    ring->reaper = std::thread([this, rp] {
      name_this_thread("zinf io reap");
      raise_io_thread_priority();
      impl_->reap(*rp);
    });
  }
}

NvmeStore::~NvmeStore() {
  for (uint64_t n = impl_->live.load(); n != 0; n = impl_->live.load()) impl_->live.wait(n);
  for (auto& r : impl_->rings) {
    {
      std::lock_guard lock(r->mu);
      IoOp nop;
      nop.tag = kShutdownTag;
      while (!r->io->push(nop)) r->io->submit();
      r->io->submit();
    }
    r->reaper.join();
  }
  try {
    flush();
  } catch (const std::exception&) {
    // A destructor cannot report; callers who need to know call flush() themselves.
  }
  for (auto& t : impl_->tensors)
    if (t) impl_->env.close(t->fd);
}

namespace {

std::string crc_path(const Tensor& t) { return t.path + ".crc"; }

constexpr char kCrcMagic[8] = {'Z', 'I', 'N', 'F', 'C', 'R', 'C', '1'};

uint32_t zero_page_crc() {
  static const uint32_t c = [] {
    std::vector<char> z(kDirectIoAlignment, 0);
    return crc32c(z.data(), z.size());
  }();
  return c;
}

// Opens a tensor file without following a link there, and only if it is a regular file of this
// user: a link planted in the store's directory would otherwise be truncated and overwritten.
int open_tensor_file(IoEnv& env, const std::string& path, int flags, const char* op) {
  int fd = env.open(path, flags | O_NOFOLLOW, 0600);
  if (fd == -EINVAL)
    throw IoError("open (O_DIRECT)", path, EINVAL,
                  "the file system refuses O_DIRECT; put the store on a disk-backed file system, not tmpfs");
  if (fd == -ELOOP) throw IoError(op, path, ELOOP, "it is a symbolic link; zinf does not follow links here");
  if (fd < 0) throw IoError(op, path, -fd);
  FileInfo st;
  int r = env.fstat(fd, st);
  std::string problem = r < 0                                  ? std::string("cannot stat it")
                        : st.kind != FileInfo::Kind::Regular ? std::string("not a regular file")
                        : st.owner != env.user() ? "owned by uid " + std::to_string(st.owner) + ", not by this user"
                                                 : std::string();
  if (!problem.empty()) {
    env.close(fd);
    throw IoError(op, path, r < 0 ? -r : EPERM, problem);
  }
  return fd;
}

void check_name(const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos || name.starts_with("."))
    throw std::invalid_argument("nvme store: bad tensor name '" + name + "' (no '/', not starting with '.')");
}

}  // namespace

NvmeStore::TensorId NvmeStore::create(const std::string& name, uint64_t bytes) {
  check_name(name);
  auto t = std::make_unique<Tensor>();
  t->name = name;
  t->path = options_.dir + "/" + name + ".zt";
  t->bytes = bytes;
  t->capacity = round_up(bytes, kDirectIoAlignment);
  IoEnv& env = impl_->env;
  t->fd = open_tensor_file(env, t->path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, "create");
  const int fd = t->fd;
  if (t->capacity > 0) {
    int r = env.allocate(fd, 0, t->capacity);
    if (r < 0) {
      env.close(fd);
      env.remove(t->path);
      throw IoError("preallocate", t->path, -r, std::to_string(t->capacity) + " bytes");
    }
  }
  if (options_.checksums) {
    t->pages = t->capacity / kDirectIoAlignment;
    t->crc = std::make_unique<std::atomic<uint32_t>[]>(t->pages);
    for (uint64_t p = 0; p < t->pages; ++p) t->crc[p].store(zero_page_crc(), std::memory_order_relaxed);
  }
  env.remove(crc_path(*t));  // a side file left by an earlier tensor of this name no longer applies
  return impl_->add_tensor(std::move(t));
}

NvmeStore::TensorId NvmeStore::open(const std::string& name) {
  check_name(name);
  auto t = std::make_unique<Tensor>();
  t->name = name;
  t->path = options_.dir + "/" + name + ".zt";
  IoEnv& env = impl_->env;
  t->fd = open_tensor_file(env, t->path, O_RDWR | O_DIRECT, "open");
  const int fd = t->fd;
  int64_t size = env.file_size(fd);
  if (size < 0) {
    env.close(fd);
    throw IoError("stat", t->path, int(-size));
  }
  if (uint64_t(size) % kDirectIoAlignment != 0) {
    env.close(fd);
    throw IoError("open", t->path, EINVAL, "size " + std::to_string(size) + " is not a multiple of " + std::to_string(kDirectIoAlignment) + ": not a store file");
  }
  t->bytes = t->capacity = uint64_t(size);
  if (options_.checksums) {
    t->pages = t->capacity / kDirectIoAlignment;
    t->crc = std::make_unique<std::atomic<uint32_t>[]>(t->pages);
    // Without a side file there is nothing to verify against; reads of this tensor are then
    // unchecked until pages are rewritten, which is why flush() always writes the side file.
    std::string cp = crc_path(*t);
    int cfd = env.open(cp, O_RDONLY | O_NOFOLLOW, 0);
    bool loaded = false;
    if (cfd >= 0) {
      char magic[8];
      uint64_t pages = 0;
      std::vector<uint32_t> v(t->pages);
      loaded = env.pread(cfd, magic, 8, 0) == 8 && std::memcmp(magic, kCrcMagic, 8) == 0 &&
               env.pread(cfd, &pages, 8, 8) == 8 && pages == t->pages &&
               env.pread(cfd, v.data(), v.size() * 4, 16) == int64_t(v.size() * 4);
      env.close(cfd);
      if (loaded)
        for (uint64_t p = 0; p < t->pages; ++p) t->crc[p].store(v[p], std::memory_order_relaxed);
    }
    if (!loaded) t->crc.reset();
  }
  return impl_->add_tensor(std::move(t));
}

void NvmeStore::remove(TensorId id) {
  std::unique_ptr<Tensor> t;
  {
    std::lock_guard lock(impl_->tensors_mu);
    if (id >= impl_->tensors.size() || !impl_->tensors[id])
      throw std::invalid_argument("nvme store: unknown tensor id " + std::to_string(id));
    t = std::move(impl_->tensors[id]);
    impl_->drop_tensor(*t);
  }
  int r = impl_->env.remove(t->path);
  impl_->env.remove(crc_path(*t));
  if (r < 0) throw IoError("remove", t->path, -r);
}

uint64_t NvmeStore::size(TensorId id) const { return impl_->tensor(id).bytes; }
std::string NvmeStore::path(TensorId id) const { return impl_->tensor(id).path; }

void NvmeStore::register_buffers(std::span<const iovec> regions) {
  std::lock_guard lock(impl_->buffers_mu);
  const bool had = !impl_->buffers.empty();
  for (auto& r : impl_->rings) {
    std::lock_guard rl(r->mu);
    if (had) r->io->unregister_buffers();
    if (regions.empty()) continue;
    int e = r->io->register_buffers(regions);
    if (e < 0) {
      for (auto& r2 : impl_->rings) {
        if (r2 == r) break;
        std::lock_guard rl2(r2->mu);
        r2->io->unregister_buffers();
      }
      impl_->buffers.clear();
      throw IoError("register buffers with io_uring for", options_.dir, -e,
                    std::to_string(regions.size()) + " regions; each must be at most 1 GiB and lockable (see ulimit -l)");
    }
  }
  impl_->buffers.assign(regions.begin(), regions.end());
}

namespace {

IoHandle make_failed(std::shared_ptr<IoRequest> req, int error, std::string message) {
  req->status = {error, std::move(message)};
  req->done.store(1);
  return IoHandle::from_request(std::move(req));
}

}  // namespace

IoHandle NvmeStore::submit(TensorId id, uint64_t offset, char* data, uint64_t length, bool is_write) {
  Tensor& t = impl_->tensor(id);
  auto req = std::make_shared<IoRequest>();
  req->tensor = &t;
  req->is_write = is_write;
  req->user = data;
  req->offset = offset;
  req->length = length;
  const char* what = is_write ? "write" : "read";
  if (offset > t.capacity || length > t.capacity - offset) {
    std::string m = impl_->describe(*req, what, offset, length) + " is outside the tensor (" + std::to_string(t.bytes) + " bytes)";
    return make_failed(std::move(req), EINVAL, std::move(m));
  }
  if (length == 0) return make_failed(std::move(req), 0, "");
  const uint64_t a = kDirectIoAlignment;
  req->io_offset = round_down(offset, a);
  req->io_length = round_up(offset + length, a) - req->io_offset;
  const bool aligned = offset % a == 0 && length % a == 0 && reinterpret_cast<uintptr_t>(data) % a == 0;
  try {
    if (aligned) {
      req->io = data;
      req->buffer_index = impl_->find_buffer(data, length);
      if (!is_write && t.crc) {
        req->deferred_verify = true;
        req->tensor_path = t.path;
      }
    } else {
      req->bounce = aligned_alloc_or_throw(req->io_length);
      req->io = req->bounce.get();
    }
  } catch (const std::bad_alloc&) {
    std::string m = impl_->describe(*req, what, offset, length) + ": no memory for a bounce buffer";
    return make_failed(std::move(req), ENOMEM, std::move(m));
  }
  req->self = req;
  impl_->live.fetch_add(1, std::memory_order_acq_rel);
  IoHandle h = IoHandle::from_request(req);
  if (is_write && !aligned) {
    // The device writes whole pages: fetch the partly covered first and last pages so the bytes
    // around the range survive.
    std::vector<std::pair<uint64_t, uint64_t>> edges;
    const uint64_t end = offset + length, io_end = req->io_offset + req->io_length;
    if (offset != req->io_offset) edges.push_back({req->io_offset, a});
    if (end != io_end && (edges.empty() || io_end - a != req->io_offset)) edges.push_back({io_end - a, a});
    if (!edges.empty()) {
      req->phase = Phase::EdgeRead;
      impl_->start(*req, edges, false);
      return h;
    }
    std::memcpy(req->io + (offset - req->io_offset), data, length);
  }
  impl_->start(*req, {{req->io_offset, req->io_length}}, is_write);
  return h;
}

IoHandle NvmeStore::read(TensorId id, uint64_t offset, void* dst, uint64_t length) {
  return submit(id, offset, static_cast<char*>(dst), length, false);
}

IoHandle NvmeStore::write(TensorId id, uint64_t offset, const void* src, uint64_t length) {
  // The cast is safe: a write only ever reads from the caller's memory.
  return submit(id, offset, const_cast<char*>(static_cast<const char*>(src)), length, true);
}

void NvmeStore::flush() {
  std::lock_guard lock(impl_->tensors_mu);
  IoEnv& env = impl_->env;
  for (auto& t : impl_->tensors) {
    if (!t) continue;
    if (t->crc) {
      std::string cp = crc_path(*t);
      int fd = env.open(cp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0600);
      if (fd < 0) throw IoError("create checksum file", cp, -fd);
      std::vector<uint32_t> v(t->pages);
      for (uint64_t p = 0; p < t->pages; ++p) v[p] = t->crc[p].load(std::memory_order_relaxed);
      uint64_t pages = t->pages;
      int64_t r = env.pwrite(fd, kCrcMagic, 8, 0);
      if (r >= 0) r = env.pwrite(fd, &pages, 8, 8);
      if (r >= 0) r = env.pwrite(fd, v.data(), v.size() * 4, 16);
      int s = r >= 0 ? env.fsync(fd) : 0;
      env.close(fd);
      if (r < 0) throw IoError("write checksum file", cp, int(-r));
      if (s < 0) throw IoError("fsync checksum file", cp, -s);
    }
    int s = env.fsync(t->fd);
    if (s < 0) throw IoError("fsync", t->path, -s);
  }
}

}  // namespace zinf::engine
