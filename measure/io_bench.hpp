// The NVMe store's block size x queue depth sweep behind `zinf io-bench`.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace zinf::measure {

struct IoBenchOptions {
  std::string dir;  // an existing directory on the disk to test; a temporary subdirectory is made and removed
  uint64_t bytes = uint64_t(1) << 30;  // moved per measurement, rounded up to 64 MiB
  std::vector<uint64_t> block_sizes{256 << 10, 1 << 20, 4 << 20, 8 << 20};  // multiples of the O_DIRECT alignment
  std::vector<int64_t> queue_depths{4, 8, 16, 32, 64};
  int64_t rings = 1;
  bool compute_load = false;
};

// One setting's rates, each direction measured alone.
struct IoBenchPoint {
  uint64_t block = 0;
  int64_t qd = 0;
  double write_bps = 0, read_bps = 0;
  double score() const { return 2.0 / (1.0 / write_bps + 1.0 / read_bps); }  // both directions matter equally
};

// The setting to recommend: among those within 5% of the best score, the deepest queue (then the
// better score). Throws std::invalid_argument on no points.
IoBenchPoint pick_recommended(std::span<const IoBenchPoint> points);

// Runs the sweep, printing each point and the recommendation; returns the recommended setting.
IoBenchPoint run_io_bench(const IoBenchOptions& opt);

}  // namespace zinf::measure
