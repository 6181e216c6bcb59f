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
constexpr size_t kLargeMapping = 64u << 20;  // the least a mapping for large blocks holds

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

// Best fit among the free ranges, carved from its start; a new mapping when none fits.
std::byte* StagingCache::take_large(size_t cls) {
  auto best = large_free_.end();
  for (auto it = large_free_.begin(); it != large_free_.end(); ++it)
    if (it->second >= cls && (best == large_free_.end() || it->second < best->second)) best = it;
  if (best == large_free_.end()) {
    const size_t bytes = std::max(cls, kLargeMapping);
    std::byte* base = map_huge(bytes);
    if (!base) throw std::bad_alloc();
    mappings_.push_back({base, bytes, 0});
    large_maps_[base] = bytes;
    ++stats_.maps;
    stats_.mapped_bytes += bytes;
    best = large_free_.emplace(base, bytes).first;
  }
  std::byte* p = best->first;
  const size_t rest = best->second - cls;
  large_free_.erase(best);
  if (rest > 0) large_free_.emplace(p + cls, rest);
  return p;
}

// Back into the free ranges, merged with a free neighbour in the same mapping.
void StagingCache::give_large(std::byte* p, size_t cls) {
  auto m = std::prev(large_maps_.upper_bound(p));  // the mapping that holds p
  std::byte* const lo = m->first;
  std::byte* const hi = m->first + m->second;
  auto next = large_free_.lower_bound(p);
  if (next != large_free_.end() && next->first == p + cls && next->first < hi) {
    cls += next->second;
    next = large_free_.erase(next);
  }
  if (next != large_free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first >= lo && prev->first + prev->second == p) {
      prev->second += cls;
      return;
    }
  }
  large_free_.emplace(p, cls);
}

void* StagingCache::allocate(size_t bytes) {
  const size_t cls = size_class(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  std::byte* p = nullptr;
  if (cls > kHuge) {
    p = take_large(cls);
  } else {
    auto& list = free_[cls];
    if (list.empty()) map_class(cls);
    p = free_[cls].back();
    free_[cls].pop_back();
  }
  stats_.in_use_bytes += cls;
  stats_.peak_in_use_bytes = std::max(stats_.peak_in_use_bytes, stats_.in_use_bytes);
  ++stats_.allocations;
  return p;
}

void StagingCache::release(void* p, size_t bytes) {
  if (!p) return;
  const size_t cls = size_class(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  if (cls > kHuge) give_large(static_cast<std::byte*>(p), cls);
  else free_[cls].push_back(static_cast<std::byte*>(p));
  stats_.in_use_bytes -= cls;
}

void StagingCache::trim() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Mapping> kept;
  for (const auto& m : mappings_) {
    if (m.block == 0) {  // a large mapping is free when one free range covers it
      auto it = large_free_.find(m.base);
      if (it != large_free_.end() && it->second == m.bytes) {
        large_free_.erase(it);
        large_maps_.erase(m.base);
        munmap(m.base, m.bytes);
        stats_.mapped_bytes -= m.bytes;
      } else {
        kept.push_back(m);
      }
      continue;
    }
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
