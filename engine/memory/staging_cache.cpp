#include "engine/memory/staging_cache.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <new>

#include "core/program.hpp"

namespace zinf::engine {

namespace {

constexpr size_t kPage = core::kIoAlignmentBytes;
constexpr size_t kHuge = 2u << 20;

// A 2 MiB-aligned anonymous mapping of `bytes` (a multiple of 2 MiB), advised as huge pages and
// touched, or nullptr.
std::byte* map_huge(size_t bytes) {
  const size_t span = bytes + kHuge;
  void* p = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  auto* raw = static_cast<std::byte*>(p);
  auto* base = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(raw) + kHuge - 1) & ~(kHuge - 1));
  if (base > raw) munmap(raw, size_t(base - raw));
  const size_t tail = size_t(raw + span - (base + bytes));
  if (tail) munmap(base + bytes, tail);
  madvise(base, bytes, MADV_HUGEPAGE);
  std::memset(base, 0, bytes);
  return base;
}

}  // namespace

StagingCache::~StagingCache() {
  for (const auto& m : mappings_) munmap(m.base, m.bytes);
}

StagingCache& StagingCache::instance() {
  static StagingCache* cache = new StagingCache();  // never destroyed: vectors may outlive statics
  return *cache;
}

size_t StagingCache::size_class(size_t bytes) {
  if (bytes <= kPage) return kPage;
  if (bytes <= kHuge) return std::bit_ceil(bytes);
  return (bytes + kHuge - 1) / kHuge * kHuge;
}

void StagingCache::map_class(size_t cls) {
  const size_t bytes = std::max(cls, kHuge);
  std::byte* base = map_huge(bytes);
  if (!base) throw std::bad_alloc();
  mappings_.push_back({base, bytes, cls});
  ++stats_.maps;
  stats_.mapped_bytes += bytes;
  auto& list = free_[cls];
  for (size_t off = 0; off + cls <= bytes; off += cls) list.push_back(base + off);
}

void* StagingCache::allocate(size_t bytes) {
  const size_t cls = size_class(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  auto& list = free_[cls];
  if (list.empty()) map_class(cls);
  std::byte* p = free_[cls].back();
  free_[cls].pop_back();
  stats_.in_use_bytes += cls;
  stats_.peak_in_use_bytes = std::max(stats_.peak_in_use_bytes, stats_.in_use_bytes);
  ++stats_.allocations;
  return p;
}

void StagingCache::release(void* p, size_t bytes) {
  if (!p) return;
  const size_t cls = size_class(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  free_[cls].push_back(static_cast<std::byte*>(p));
  stats_.in_use_bytes -= cls;
}

void StagingCache::trim() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Mapping> kept;
  for (const auto& m : mappings_) {
    auto& list = free_[m.block];
    const size_t blocks = m.bytes / m.block;
    const auto inside = [&](std::byte* b) { return b >= m.base && b < m.base + m.bytes; };
    if (size_t(std::count_if(list.begin(), list.end(), inside)) == blocks) {
      list.erase(std::remove_if(list.begin(), list.end(), inside), list.end());
      munmap(m.base, m.bytes);
      stats_.mapped_bytes -= m.bytes;
    } else {
      kept.push_back(m);
    }
  }
  mappings_ = std::move(kept);
}

void StagingCache::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_in_use_bytes = stats_.in_use_bytes;
}

StagingCache::Stats StagingCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace zinf::engine
