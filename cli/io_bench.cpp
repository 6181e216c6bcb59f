// `zinf io-bench --dir D`: the NVMe store's block size x queue depth sweep (measure/io_bench), then
// the aio settings it recommends.
#include <memory>
#include <string>
#include <vector>

#include "cli/command.hpp"
#include "core/errors.hpp"
#include "core/units.hpp"
#include "measure/io_bench.hpp"

namespace zinf::cli {
namespace {

struct IoBenchFlags {
  std::string dir;
  std::string size = "1 GiB";
  std::vector<std::string> block_sizes{"256 KiB", "1 MiB", "4 MiB", "8 MiB"};
  std::vector<int64_t> queue_depths{4, 8, 16, 32, 64};
  int64_t rings = 1;
  bool compute_load = false;
};

uint64_t parse_bytes(const std::string& text, const std::string& flag) {
  auto v = core::parse_quantity(text, core::UnitKind::Bytes);
  if (!v || *v <= 0) throw core::ConfigError("", flag, "expected a size such as '1 MiB', got '" + text + "'");
  return uint64_t(*v);
}

void run(const IoBenchFlags& flags) {
  measure::IoBenchOptions opt;
  opt.dir = flags.dir;
  opt.bytes = parse_bytes(flags.size, "--size");
  opt.block_sizes.clear();
  for (const auto& b : flags.block_sizes) opt.block_sizes.push_back(parse_bytes(b, "--block-sizes"));
  opt.queue_depths = flags.queue_depths;
  opt.rings = flags.rings;
  opt.compute_load = flags.compute_load;
  measure::run_io_bench(opt);
}

}  // namespace

void add_io_bench_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("io-bench", "Sweep NVMe store block size x queue depth and recommend aio settings");
  auto opts = std::make_shared<IoBenchFlags>();
  cmd->add_option("--dir", opts->dir, "Directory on the disk to test (a temporary subdirectory is created and removed)")->required();
  cmd->add_option("--size", opts->size, "Bytes to move per measurement")->capture_default_str();
  cmd->add_option("--block-sizes", opts->block_sizes, "Block sizes to try")->delimiter(',')->capture_default_str();
  cmd->add_option("--queue-depths", opts->queue_depths, "Queue depths to try")->delimiter(',')->capture_default_str();
  cmd->add_option("--rings", opts->rings, "io_uring rings")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_flag("--compute-load", opts->compute_load,
                "Measure while the CPU backend's GEMMs keep the cores busy (the disk a CPU-backend run gets)");
  cmd->callback([opts] { run(*opts); });
}

}  // namespace zinf::cli
