// Config files: every bad value is an error naming the file, the key and what is allowed;
// DeepSpeed JSON maps onto the run config and names what it does not support.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "formats/config_paths.hpp"
#include "core/errors.hpp"
#include "core/hwprofile.hpp"
#include "core/model_spec.hpp"
#include "formats/deepspeed_config.hpp"
#include "core/run_config.hpp"
#include "core/units.hpp"
#include "test_paths.hpp"
#include "formats/hwprofile_reader.hpp"
#include "formats/model_spec_reader.hpp"
#include "formats/run_config_reader.hpp"

using namespace zinf::core;
using Catch::Matchers::Contains;
using zinf::test::source;

TEST_CASE("every shipped model, hwprofile and run config loads", "[config]") {
  for (const auto& n : list_configs("models", ZINF_SOURCE_DIR)) CHECK_NOTHROW(load_model_spec(source("models/" + n + ".yaml")));
  for (const auto& n : list_configs("hwprofiles", ZINF_SOURCE_DIR))
    CHECK_NOTHROW(load_hwprofile(source("hwprofiles/" + n + ".yaml")));
  std::vector<std::string> warnings;
  for (const auto& n : list_configs("configs", ZINF_SOURCE_DIR)) {
    auto path = resolve_config(n, "configs", ZINF_SOURCE_DIR);
    CHECK_NOTHROW(load_any_run_config(path, warnings));
  }
  CHECK(list_configs("models", ZINF_SOURCE_DIR).size() >= 12);
  CHECK(list_configs("hwprofiles", ZINF_SOURCE_DIR).size() >= 3);
}

TEST_CASE("units parse the way datasheets write them", "[config][units]") {
  CHECK(*parse_quantity("32 GiB", UnitKind::Bytes) == 32.0 * (1ull << 30));
  CHECK(*parse_quantity("1.5 TB", UnitKind::Bytes) == 1.5e12);
  CHECK(*parse_quantity("12 GB/s", UnitKind::BytesPerSecond) == 12e9);
  CHECK(*parse_quantity("100 Gb/s", UnitKind::BytesPerSecond) == 12.5e9);
  CHECK(*parse_quantity("125 TFLOP/s", UnitKind::FlopsPerSecond) == 125e12);
  CHECK(*parse_quantity("4096", UnitKind::Bytes) == 4096);
  CHECK(*parse_quantity("5 us", UnitKind::Seconds) == Approx(5e-6));
  CHECK_FALSE(parse_quantity("12 GB", UnitKind::BytesPerSecond));
  CHECK_FALSE(parse_quantity("fast", UnitKind::Bytes));
}

TEST_CASE("an unknown key is an error naming file and key", "[config][errors]") {
  const std::string yaml = "name: m\nlayers: 2\nhidden: 64\nheads: 4\nseq: 8\nvocab: 256\nhiden_size: 3\n";
  REQUIRE_THROWS_AS(parse_model_spec(yaml, "models/bad.yaml"), ConfigError);
  REQUIRE_THROWS_WITH(parse_model_spec(yaml, "models/bad.yaml"),
                      Contains("models/bad.yaml") && Contains("'hiden_size'") && Contains("unknown key"));
  REQUIRE_THROWS_WITH(parse_run_config("zero_stage: 3\nprefetch: {nvme_distanse: 2}\n", "run.yaml"),
                      Contains("run.yaml") && Contains("'prefetch.nvme_distanse'") && Contains("unknown key"));
}

TEST_CASE("a value of the wrong type is an error saying what is allowed", "[config][errors]") {
  REQUIRE_THROWS_WITH(parse_model_spec("name: m\nlayers: many\nhidden: 64\nheads: 4\nseq: 8\nvocab: 256\n", "m.yaml"),
                      Contains("m.yaml") && Contains("'layers'") && Contains("'many' is not a number"));
  REQUIRE_THROWS_WITH(parse_run_config("offload: {params: ssd}\n", "r.yaml"),
                      Contains("'offload.params'") && Contains("'ssd' is not allowed") && Contains("none, device, cpu, host, nvme, auto"));
  REQUIRE_THROWS_WITH(parse_run_config("activation_checkpoint: [1, 2]\n", "r.yaml"),
                      Contains("'activation_checkpoint'") && Contains("must be a mapping"));
  REQUIRE_THROWS_WITH(parse_run_config("optimizer: {timing: sometimes}\n", "r.yaml"),
                      Contains("'optimizer.timing'") && Contains("after-backward, overlap-backward"));
}

TEST_CASE("negative or zero sizes are errors", "[config][errors]") {
  REQUIRE_THROWS_WITH(parse_model_spec("name: m\nlayers: 0\nhidden: 64\nheads: 4\nseq: 8\nvocab: 256\n", "m.yaml"),
                      Contains("'layers'") && Contains("must be a positive integer (at most 1000000), got 0"));
  REQUIRE_THROWS_WITH(parse_model_spec("name: m\nlayers: 2\nhidden: -64\nheads: 4\nseq: 8\nvocab: 256\n", "m.yaml"),
                      Contains("'hidden'") && Contains("positive"));
  REQUIRE_THROWS_WITH(parse_run_config("aio: {block_size: 1000}\n", "r.yaml"),
                      Contains("'aio.block_size'") && Contains("multiple of 4096"));
  REQUIRE_THROWS_WITH(parse_model_spec("name: m\nlayers: 2\nhidden: 66\nheads: 4\nseq: 8\nvocab: 256\n", "m.yaml"),
                      Contains("'heads'") && Contains("divisible"));
  std::string hw;
  {
    std::ifstream in(source("hwprofiles/dgx2-v100.yaml"));
    hw.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto pos = hw.find("memory: 32 GiB");
  REQUIRE(pos != std::string::npos);
  hw.replace(pos, 14, "memory: -32 GiB");
  REQUIRE_THROWS_WITH(parse_hwprofile(hw, "hw.yaml"), Contains("'node.gpu.memory'") && Contains("must be positive"));
}

TEST_CASE("an unknown model or profile lists what exists", "[config][errors]") {
  REQUIRE_THROWS_WITH(resolve_config("gpt-7", "models", ZINF_SOURCE_DIR),
                      Contains("unknown models 'gpt-7'") && Contains("gpt2-small") && Contains("gpt-tiny"));
  REQUIRE_THROWS_WITH(resolve_config("dgx-9", "hwprofiles", ZINF_SOURCE_DIR),
                      Contains("unknown hwprofiles 'dgx-9'") && Contains("dgx2-v100"));
}

TEST_CASE("an unreadable or malformed file is an error naming it", "[config][errors]") {
  REQUIRE_THROWS_WITH(load_model_spec("/nonexistent/zinf/m.yaml"), Contains("/nonexistent/zinf/m.yaml") && Contains("cannot open"));
  auto dir = std::filesystem::temp_directory_path() / "zinf_config_test";
  std::filesystem::create_directories(dir);
  auto path = (dir / "broken.yaml").string();
  {
    std::ofstream out(path);
    out << "name: m\nlayers: [2\n";
  }
  REQUIRE_THROWS_WITH(load_model_spec(path), Contains(path) && Contains("not valid YAML"));
  // A directory is not a readable config file either.
  REQUIRE_THROWS_AS(load_run_config(dir.string()), ConfigError);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a DeepSpeed JSON config maps onto the run config", "[config][deepspeed]") {
  std::vector<std::string> warnings;
  auto c = load_any_run_config(source("configs/deepspeed-infinity.json"), warnings);
  CHECK(c.zero_stage == 3);
  CHECK(to_string(c.params) == std::string("nvme"));
  CHECK(to_string(c.optimizer) == std::string("nvme"));
  CHECK(to_string(c.checkpoints) == std::string("host"));
  CHECK(c.checkpoint_copies_synchronous);  // DeepSpeed's cpu_checkpointing copies on the compute stream
  CHECK(c.checkpoint_interval == 1);
  CHECK(c.aio_block_size == 1048576);
  CHECK(c.aio_queue_depth == 8);
  CHECK(c.max_live_bytes == 2e9);
  CHECK(c.reuse_distance_bytes == 2e9);
  CHECK(c.sub_group_size == 1000000000);
  CHECK(c.micro_batch == 1);
  CHECK(c.grad_clip == 1.0);
  CHECK(c.beta2 == 0.95);
  CHECK(c.optimizer_type == "adamw");
  CHECK(c.precision == Precision::Fp16);
  // DeepSpeed's swap buffer_count and buffer_size have no zinf setting: one line names each.
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Contains("not honoured") && Contains("'zero_optimization.offload_param.buffer_count'") &&
                              Contains("'zero_optimization.offload_param.buffer_size'") &&
                              Contains("'zero_optimization.offload_optimizer.buffer_count'"));
}

TEST_CASE("the removed pinned block is an error that says what replaced it", "[config]") {
  CHECK_THROWS_WITH(parse_run_config("pinned: {buffer_count: 8, buffer_size: 64 MiB}\n", "old.yaml"),
                    Contains("old.yaml") && Contains("pinned") && Contains("host peak"));
  const RunConfig c =
      parse_run_config("optimizer: {sub_groups_in_flight: 12, nvme_phases: false, read_ahead: false}\n", "c.yaml");
  CHECK(c.optimizer_sub_groups_in_flight == 12);
  CHECK_FALSE(c.optimizer_nvme_phases);
  CHECK_FALSE(c.optimizer_read_ahead);
  const RunConfig d = parse_run_config("optimizer: {sub_groups_in_flight: auto}\n", "d.yaml");
  CHECK(d.optimizer_sub_groups_in_flight == 0);
  CHECK(d.optimizer_nvme_phases);
  CHECK(d.optimizer_read_ahead);
  CHECK_THROWS_WITH(parse_run_config("optimizer: {read_ahead: sometimes}\n", "f.yaml"),
                    Contains("f.yaml") && Contains("read_ahead"));
  CHECK_THROWS_WITH(parse_run_config("optimizer: {sub_groups_in_flight: 0}\n", "e.yaml"),
                    Contains("e.yaml") && Contains("sub_groups_in_flight"));
  // Written out and read back, the same.
  const RunConfig e = parse_run_config(run_config_to_yaml(c, "round trip"), "rt.yaml");
  CHECK(e.optimizer_sub_groups_in_flight == 12);
  CHECK_FALSE(e.optimizer_nvme_phases);
  CHECK_FALSE(e.optimizer_read_ahead);
}

TEST_CASE("optimizer.host_path reads fused, deepspeed-0.3 or deepspeed-0.9 and names the file on anything else", "[config]") {
  CHECK(parse_run_config("zero_stage: 2\n", "a.yaml").optimizer_host_path == HostPath::Fused);
  const RunConfig c = parse_run_config("optimizer: {host_path: deepspeed-0.3}\n", "b.yaml");
  CHECK(c.optimizer_host_path == HostPath::DeepSpeed03);
  CHECK(parse_run_config(run_config_to_yaml(c, "round trip"), "rt.yaml").optimizer_host_path == HostPath::DeepSpeed03);
  CHECK_THROWS_WITH(parse_run_config("optimizer: {host_path: deepspeed}\n", "bad.yaml"),
                    Contains("bad.yaml") && Contains("host_path") && Contains("deepspeed-0.3") && Contains("deepspeed-0.9"));
  const RunConfig d = parse_run_config("optimizer: {host_path: deepspeed-0.9}\n", "d.yaml");
  CHECK(d.optimizer_host_path == HostPath::DeepSpeed09);
  CHECK(parse_run_config(run_config_to_yaml(d, "round trip"), "rt.yaml").optimizer_host_path == HostPath::DeepSpeed09);
}

TEST_CASE("DeepSpeed keys zinf does not support are named in warnings", "[config][deepspeed]") {
  std::vector<std::string> warnings;
  auto c = parse_deepspeed_config(R"({"train_batch_size": 8, "zero_optimization": {"stage": 2, "round_robin_gradients": true},
      "wall_clock_breakdown": true, "fp16": {"enabled": true}})", "ds.json", warnings);
  CHECK(c.zero_stage == 2);
  CHECK(c.precision == Precision::Fp16);
  // round_robin_gradients changes DeepSpeed's run and not zinf's plan: named; the overlap DeepSpeed
  // leaves off below stage 3 too. wall_clock_breakdown is logging: not a warning.
  std::string all;
  for (const auto& w : warnings) all += w + "\n";
  CHECK_THAT(all, Contains("ds.json") && Contains("'zero_optimization.round_robin_gradients'") &&
                      Contains("'zero_optimization.overlap_comm'"));
  CHECK_THAT(all, !Contains("wall_clock_breakdown"));
  REQUIRE_THROWS_WITH(parse_deepspeed_config(R"({"train_batch_size": 8, "zero_optimization": {"stage": 7}})", "ds.json", warnings),
                      Contains("'zero_optimization.stage'") && Contains("0, 1, 2 or 3"));
}

namespace {
void reject(const std::string& yaml, const std::string& expect) {
  INFO(yaml);
  std::vector<std::string> w;
  CHECK_THROWS_WITH(parse_run_config(yaml, "cfg.yaml"), Contains(expect));
}
void reject_ds(const std::string& json, const std::string& expect) {
  INFO(json);
  std::vector<std::string> w;
  CHECK_THROWS_WITH(parse_deepspeed_config(json, "ds.json", w), Contains(expect));
}
}  // namespace

TEST_CASE("Adam's betas must lie in [0, 1) and eps be a small finite number", "[config][ranges]") {
  reject("optimizer: {beta1: 1}\n", "optimizer.beta1");
  reject("optimizer: {beta2: -0.1}\n", "below 1");
  reject("optimizer: {eps: inf}\n", "optimizer.eps");
  reject("optimizer: {eps: 1e300 T}\n", "optimizer.eps");
  reject_ds(R"({"train_batch_size": 8, "optimizer": {"type": "Adam", "params": {"betas": [2, -1]}}})", "betas");
  reject_ds(R"({"train_batch_size": 8, "optimizer": {"type": "Adam", "params": {"betas": [NaN, 0.95]}}})", "betas");
  reject_ds(R"({"train_batch_size": 8, "optimizer": {"type": "Adam", "params": {"betas": [0.9]}}})", "betas");
  reject_ds(R"({"train_batch_size": 8, "optimizer": {"type": "Adam", "params": {"eps": "inf"}}})", "eps");
}

TEST_CASE("numbers past their range are refused before any arithmetic on them", "[config][ranges]") {
  reject_ds(R"({"train_batch_size": 8, "gradient_accumulation_steps": 1e9})", "gradient_accumulation_steps");
  reject("gradient_accumulation: 10000000\n", "gradient_accumulation");
  reject("aio: {queue_depth: 1e12}\n", "aio.queue_depth");
  reject("zero_stage: 1e300\n", "zero_stage");
  CHECK_THROWS_WITH(parse_model_spec("name: x\nlayers: 2\nhidden: 64\nheads: 4\nffn_multiple: 1e15\nseq: 8\nvocab: 64\n", "m.yaml"),
                    Contains("ffn_multiple"));
  CHECK_THROWS_WITH(parse_model_spec("name: x\nlayers: 1000000\nhidden: 1000000\nheads: 1\nseq: 8\nvocab: 64\n", "m.yaml"),
                    Contains("parameters"));
}

TEST_CASE("a key given twice is an error, in YAML and in DeepSpeed JSON", "[config]") {
  reject("zero_stage: 3\nzero_stage: 2\n", "'zero_stage': appears twice");
  reject_ds(R"({"train_batch_size": 8, "optimizer": {"type": "Adam", "params": {"lr": 1, "lr": 0.001}}})",
            "'optimizer.params.lr': appears twice");
}

TEST_CASE("a huge value is not echoed whole in an error", "[config]") {
  const std::string huge(1 << 20, 'x');
  try {
    parse_run_config("zero_stage: " + huge + "\n", "cfg.yaml");
    FAIL("expected a ConfigError");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()).size() < 400);
    CHECK_THAT(e.what(), Contains("1048576 bytes"));
  }
}

TEST_CASE("a profile's rates must be large enough to simulate", "[config][ranges]") {
  std::ifstream in(source("hwprofiles/cpu-dev.yaml"));
  std::string text((std::istreambuf_iterator<char>(in)), {});
  const auto at = text.find("peak_flops:");
  REQUIRE(at != std::string::npos);
  text.replace(at, text.find('\n', at) - at, "peak_flops: 1e-300 FLOP/s");
  CHECK_THROWS_WITH(parse_hwprofile(text, "hw.yaml"), Contains("peak_flops"));
}

TEST_CASE("the swap files' checksums are on by default; aio.checksums: false turns them off", "[config]") {
  CHECK(parse_run_config("zero_stage: 3\n", "r.yaml").swap_checksums);
  CHECK(parse_run_config("aio: {block_size: 1 MiB}\n", "r.yaml").swap_checksums);
  CHECK_FALSE(parse_run_config("aio: {checksums: false}\n", "r.yaml").swap_checksums);
  CHECK(parse_run_config(run_config_to_yaml(parse_run_config("zero_stage: 3\n", "r.yaml"), "d"), "w.yaml").swap_checksums);
}

TEST_CASE("activation_checkpoint.per_block is 1 or 2, round-trips, and DeepSpeed JSON says it cannot carry 2", "[config]") {
  CHECK(parse_run_config("zero_stage: 3\n", "r.yaml").checkpoints_per_block == 1);
  const RunConfig two = parse_run_config("activation_checkpoint: {interval: 1, per_block: 2}\n", "r.yaml");
  CHECK(two.checkpoints_per_block == 2);
  CHECK(parse_run_config(run_config_to_yaml(two, "round trip"), "rt.yaml").checkpoints_per_block == 2);
  CHECK_THROWS_WITH(parse_run_config("activation_checkpoint: {per_block: 3}\n", "r.yaml"),
                    Contains("r.yaml") && Contains("per_block"));
  std::vector<std::string> not_expressed;
  (void)run_config_to_deepspeed_json(two, DeepSpeedTarget{}, not_expressed);
  bool named = false;
  for (const auto& w : not_expressed) named = named || w.find("split-transformers") != std::string::npos;
  CHECK(named);
}
