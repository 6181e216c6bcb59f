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
constexpr size_t kEighthsMax = 256u << 10;  // classes up to this are eight per doubling, then 32

// A 2 MiB-aligned anonymous mapping of `bytes` (whole pages), advised as huge pages and touched,
// or nullptr.
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
  if (bytes > (size_t(1) << 62)) throw std::bad_alloc();  // no class: rounding up would wrap
  const size_t per_doubling = bytes <= kEighthsMax ? 8 : 32;
  const size_t step = std::clamp(std::bit_floor(bytes) / per_doubling, kPage, kHuge);
  return (bytes + step - 1) / step * step;
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
  // Then slabs none of whose blocks is out.
  for (auto it = mappings_.begin(); it != mappings_.end() && stats_.mapped_bytes + bytes > limit();) {
    if (it->second.slab && it->second.out == 0) {
      stats_.unmapped_for_limit += it->second.bytes;
      it = unmap_slab(it);
    } else {
      ++it;
    }
  }
}

std::map<std::byte*, StagingCache::Mapping>::iterator StagingCache::unmap_slab(
    std::map<std::byte*, Mapping>::iterator it) {
  std::byte* const base = it->first;
  const size_t bytes = it->second.bytes;
  const auto inside = [&](std::byte* b) { return b >= base && b < base + bytes; };
  for (auto& [cls, list] : free_)
    if (cls <= kHuge) list.erase(std::remove_if(list.begin(), list.end(), inside), list.end());
  std::erase_if(remnants_, [&](const auto& r) { return inside(r.first); });
  munmap(base, bytes);
  stats_.mapped_bytes -= bytes;
  return mappings_.erase(it);
}

std::byte* StagingCache::carve(size_t cls) {
  // The smallest remnant the block fits in, else a new slab.
  auto best = remnants_.end();
  for (auto it = remnants_.begin(); it != remnants_.end(); ++it)
    if (it->second >= cls && (best == remnants_.end() || it->second < best->second)) best = it;
  if (best == remnants_.end()) {
    // At the limit, the smallest larger free block is cut to size (its tail a remnant) before a new
    // slab is mapped, so what a phase freed serves the next phase's sizes.
    if (stats_.mapped_bytes + kHuge > limit())
      for (auto it = free_.upper_bound(cls); it != free_.end() && it->first <= kHuge; ++it)
        if (!it->second.empty()) {
          std::byte* p = it->second.back();
          it->second.pop_back();
          remnants_.emplace_back(p + cls, it->first - cls);
          ++stats_.cut_to_size;
          return p;
        }
    best = remnants_.emplace(remnants_.end(), map_new(kHuge, true), kHuge);
  }
  std::byte* p = best->first;
  best->first += cls;
  best->second -= cls;
  if (best->second == 0) remnants_.erase(best);
  return p;
}

StagingCache::Mapping& StagingCache::slab_of(const std::byte* p) {
  auto it = mappings_.upper_bound(const_cast<std::byte*>(p));
  return std::prev(it)->second;
}

std::byte* StagingCache::cut_larger_free(size_t cls) {
  for (auto it = free_.upper_bound(cls); it != free_.end(); ++it) {
    if (it->second.empty()) continue;
    std::byte* p = it->second.back();
    it->second.pop_back();
    // A large block starts on a 2 MiB boundary and classes are whole pages: the tail goes back to
    // the kernel and the head keeps its touched pages (a huge page the cut falls in is split).
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

std::byte* StagingCache::map_new(size_t bytes, bool slab) {
  make_room(bytes);
  std::byte* base = map_huge(bytes);
  if (!base) throw std::bad_alloc();
  mappings_[base] = {bytes, slab, 0};
  ++stats_.maps;
  stats_.mapped_bytes += bytes;
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
    if (!p) p = map_new(cls, false);
  } else {
    p = carve(cls);
  }
  if (cls <= kHuge) ++slab_of(p).out;
  stats_.in_use_bytes += cls;
  stats_.peak_in_use_bytes = std::max(stats_.peak_in_use_bytes, stats_.in_use_bytes);
  ++stats_.allocations;
  return p;
}

void StagingCache::release(void* p, size_t bytes) {
  if (!p) return;
  const size_t cls = size_class(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  if (cls <= kHuge) --slab_of(static_cast<std::byte*>(p)).out;
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
    if (m.slab) {
      it = m.out == 0 ? unmap_slab(it) : std::next(it);
      continue;
    }
    auto& list = free_[m.bytes];
    const auto found = std::find(list.begin(), list.end(), base);
    if (found == list.end()) {
      ++it;
      continue;
    }
    list.erase(found);
    munmap(base, m.bytes);
    stats_.mapped_bytes -= m.bytes;
    it = mappings_.erase(it);
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
