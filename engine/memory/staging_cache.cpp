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
  for (const auto& [base, m] : mappings_) munmap(base, m.bytes);
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

void StagingCache::make_room(size_t bytes) {
  for (auto it = free_.rbegin(); it != free_.rend() && stats_.mapped_bytes + bytes > limit();) {
    if (it->first <= kHuge || it->second.empty()) {
      ++it;
      continue;
    }
    std::byte* p = it->second.back();
    it->second.pop_back();
    munmap(p, it->first);
    mappings_.erase(p);
    stats_.mapped_bytes -= it->first;
    stats_.unmapped_for_limit += it->first;
  }
}

void StagingCache::map_class(size_t cls) {
  make_room(kHuge);
  std::byte* base = map_huge(kHuge);
  if (!base) throw std::bad_alloc();
  mappings_[base] = {kHuge, cls};
  ++stats_.maps;
  stats_.mapped_bytes += kHuge;
  auto& list = free_[cls];
  for (size_t off = 0; off + cls <= kHuge; off += cls) list.push_back(base + off);
}

std::byte* StagingCache::cut_larger_free(size_t cls) {
  for (auto it = free_.upper_bound(cls); it != free_.end(); ++it) {
    if (it->second.empty()) continue;
    std::byte* p = it->second.back();
    it->second.pop_back();
    // Large classes are whole 2 MiB pages from a 2 MiB-aligned base: the tail goes back to the
    // kernel on a huge-page boundary and the head keeps its pages.
    const size_t tail = it->first - cls;
    munmap(p + cls, tail);
    mappings_[p].bytes = cls;
    stats_.mapped_bytes -= tail;
    stats_.unmapped_for_limit += tail;
    ++stats_.cut_to_size;
    return p;
  }
  return nullptr;
}

std::byte* StagingCache::map_large(size_t cls) {
  make_room(cls);
  std::byte* base = map_huge(cls);
  if (!base) throw std::bad_alloc();
  mappings_[base] = {cls, 0};
  ++stats_.maps;
  stats_.mapped_bytes += cls;
  return base;
}

void* StagingCache::allocate(size_t bytes) {
  const size_t cls = size_class(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  high_water_ = std::max<uint64_t>(high_water_, stats_.in_use_bytes + cls);
  auto& list = free_[cls];
  std::byte* p = nullptr;
  if (!list.empty()) {
    p = list.back();
    list.pop_back();
  } else if (cls > kHuge) {
    if (stats_.mapped_bytes + cls > limit()) p = cut_larger_free(cls);
    if (!p) p = map_large(cls);
  } else {
    map_class(cls);
    p = list.back();
    list.pop_back();
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
  free_[cls].push_back(static_cast<std::byte*>(p));
  stats_.in_use_bytes -= cls;
}

void StagingCache::add_budget(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.budget_bytes += bytes;
}

void StagingCache::remove_budget(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.budget_bytes -= std::min(bytes, stats_.budget_bytes);
}

void StagingCache::trim() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = mappings_.begin(); it != mappings_.end();) {
    std::byte* const base = it->first;
    const Mapping m = it->second;
    auto& list = free_[m.block == 0 ? m.bytes : m.block];
    const auto inside = [&](std::byte* b) { return b >= base && b < base + m.bytes; };
    const size_t blocks = m.block == 0 ? 1 : m.bytes / m.block;
    if (size_t(std::count_if(list.begin(), list.end(), inside)) == blocks) {
      list.erase(std::remove_if(list.begin(), list.end(), inside), list.end());
      munmap(base, m.bytes);
      stats_.mapped_bytes -= m.bytes;
      it = mappings_.erase(it);
    } else {
      ++it;
    }
  }
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
