// The DeepSpeed reader: real configs from public projects (tests/data/deepspeed) read as DeepSpeed
// 0.16.5 reads them, or refused as it refuses them; and each of DeepSpeed's rules on small files.
#include <catch2/catch.hpp>
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <set>
#include <sstream>

#include "formats/deepspeed_config.hpp"
#include "core/errors.hpp"
#include "formats/lr_schedule_reader.hpp"
#include "test_paths.hpp"

using namespace zinf::core;
using Catch::Matchers::Contains;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

DeepSpeedContext context(int ranks, Precision hw = Precision::Bf16) {
  DeepSpeedContext c;
  c.ranks = ranks;
  c.ranks_text = std::to_string(ranks) + " GPUs";
  c.model_micro_batch = 4;
  c.hidden = 4096;
  c.hw_precision = hw;
  c.hw_name = "test-gpu";
  return c;
}

DeepSpeedReading read(const std::string& json, int ranks = 1, Precision hw = Precision::Bf16) {
  return read_deepspeed_config(json, "ds.json", context(ranks, hw));
}

const char* tier(Tier t) { return to_string(t); }

bool any_message(const DeepSpeedReading& r, const std::string& words) {
  for (const auto& m : r.messages)
    if (m.find(words) != std::string::npos) return true;
  return false;
}

const KeyNote* note_of(const DeepSpeedReading& r, const std::string& key) {
  for (const auto& n : r.notes)
    if (n.key == key) return &n;
  return nullptr;
}

}  // namespace

TEST_CASE("real DeepSpeed configs read as DeepSpeed 0.16.5 reads them, or are refused as it refuses them",
          "[deepspeed]") {
  const std::string dir = zinf::test::source("tests/data/deepspeed/");
  const YAML::Node expected = YAML::LoadFile(dir + "EXPECTED.yaml");
  REQUIRE(expected.size() >= 30);
  for (const auto& e : expected) {
    const std::string file = e["file"].as<std::string>();
    DYNAMIC_SECTION(file) {
      const Precision hw = e["hw"].as<std::string>() == "fp16" ? Precision::Fp16 : Precision::Bf16;
      const std::string text = slurp(dir + file);
      if (e["refuse"]) {
        try {
          read_deepspeed_config(text, file, context(e["ranks"].as<int>(), hw));
          FAIL("accepted a file DeepSpeed refuses");
        } catch (const ConfigError& err) {
          CHECK(err.key() == e["refuse"]["key"].as<std::string>());
          CHECK_THAT(err.what(), Contains(e["refuse"]["says"].as<std::string>()));
        }
        continue;
      }
      const DeepSpeedReading r = read_deepspeed_config(text, file, context(e["ranks"].as<int>(), hw));
      const YAML::Node x = e["read"];
      const RunConfig& c = r.config;
      CHECK(c.zero_stage == x["stage"].as<int>());
      CHECK(c.micro_batch.value_or(-1) == x["micro"].as<int64_t>());
      CHECK(c.gradient_accumulation == x["accumulation"].as<int64_t>());
      CHECK(r.train_batch_size == x["train_batch"].as<int64_t>());
      CHECK(std::string(tier(c.params.tier)) == x["params"].as<std::string>());
      CHECK(std::string(tier(c.optimizer.tier)) == x["optimizer"].as<std::string>());
      CHECK((c.checkpoint_interval > 0 ? std::string(tier(c.checkpoints.tier)) : std::string("none")) ==
            x["checkpoints"].as<std::string>());
      REQUIRE(c.precision);
      CHECK(std::string(to_string(*c.precision)) == x["precision"].as<std::string>());
      CHECK(c.optimizer_type == x["optimizer_type"].as<std::string>());
      CHECK(decoupled_weight_decay(c.optimizer_type) == x["decoupled"].as<bool>());
      CHECK(c.tensor_parallel == (x["tensor_parallel"] ? x["tensor_parallel"].as<int64_t>() : 1));
      CHECK(any_message(r, "DeepSpeed would refuse") == bool(e["warns"]));
      // Every key of the file is accounted for.
      for (const auto& n : r.notes) CHECK_FALSE(n.key.empty());
    }
  }
}

TEST_CASE("the real configs name their source: repository, path and commit, from at least six projects",
          "[deepspeed]") {
  const std::string dir = zinf::test::source("tests/data/deepspeed/");
  std::ifstream in(dir + "SOURCES");
  REQUIRE(in);
  std::set<std::string> files, repos;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::stringstream ss(line);
    std::string file, repo, path, commit;
    std::getline(ss, file, '\t');
    std::getline(ss, repo, '\t');
    std::getline(ss, path, '\t');
    std::getline(ss, commit, '\t');
    CHECK(commit.size() == 40);
    CHECK_FALSE(path.empty());
    CHECK(std::ifstream(dir + file).good());
    files.insert(file);
    repos.insert(repo);
  }
  CHECK(files.size() >= 30);
  CHECK(repos.size() >= 6);
  for (const auto& e : YAML::LoadFile(dir + "EXPECTED.yaml")) CHECK(files.count(e["file"].as<std::string>()) == 1);
}

TEST_CASE("DeepSpeed's defaults: no zero_optimization is stage 0, no fp16/bf16 is fp32, no optimizer is AdamW",
          "[deepspeed]") {
  const auto r = read(R"({"train_batch_size": 8})", 8);
  CHECK(r.config.zero_stage == 0);
  CHECK(r.config.precision == Precision::Fp32);
  CHECK(r.config.optimizer_type == "adamw");
  CHECK(r.config.checkpoint_interval == 0);
  CHECK(any_message(r, "ZeRO stage 0"));
  CHECK(any_message(r, "precision fp32"));
  CHECK(note_of(r, "zero_optimization.stage")->fate == KeyFate::Defaulted);
  CHECK(note_of(r, "activation_checkpointing")->fate == KeyFate::Defaulted);
}

TEST_CASE("the batch triple is derived, or refused with DeepSpeed's message and the world size used", "[deepspeed]") {
  auto r = read(R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4})", 8);
  CHECK(r.config.gradient_accumulation == 2);
  CHECK(note_of(r, "gradient_accumulation_steps")->fate == KeyFate::Derived);
  r = read(R"({"train_batch_size": 64, "gradient_accumulation_steps": 2})", 8);
  CHECK(r.config.micro_batch == 4);
  r = read(R"({"train_micro_batch_size_per_gpu": 3, "gradient_accumulation_steps": 5})", 2);
  CHECK(r.train_batch_size == 30);
  // A recipe written for a node, run on one GPU: DeepSpeed derives 2048 steps, and so does zinf.
  r = read(R"({"train_batch_size": 2048, "train_micro_batch_size_per_gpu": 1})", 1);
  CHECK(r.config.gradient_accumulation == 2048);
  CHECK_THROWS_WITH(read(R"({"train_batch_size": 4194304, "train_micro_batch_size_per_gpu": 1})", 1),
                    Contains("train_batch_size") && Contains("4194304 gradient accumulation steps (derived)") &&
                        Contains("zinf's bound of 1048576"));
  CHECK_THROWS_WITH(read(R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1})", 8),
                    Contains("train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size") &&
                        Contains("16 != 4 * 1 * 8") && Contains("world size 8 (8 GPUs)"));
  CHECK_THROWS_WITH(read(R"({"gradient_accumulation_steps": 2})"),
                    Contains("Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided"));
  CHECK_THROWS_WITH(read(R"({"train_batch_size": 4})", 8), Contains("Micro batch size per gpu: 0 has to be greater than 0"));
}

TEST_CASE("deprecated keys are mapped as DeepSpeed maps them", "[deepspeed]") {
  auto r = read(R"({"train_batch_size": 1, "zero_optimization": {"stage": 2, "cpu_offload": true}})");
  CHECK(r.config.optimizer.tier == Tier::Host);
  CHECK(note_of(r, "zero_optimization.cpu_offload")->fate == KeyFate::Mapped);
  r = read(R"({"train_batch_size": 1, "zero_optimization": {"stage": 3, "cpu_offload_param": true}})");
  CHECK(r.config.params.tier == Tier::Host);
  r = read(R"({"train_batch_size": 1, "zero_optimization": true})");
  CHECK(r.config.zero_stage == 1);
  CHECK_THROWS_WITH(read(R"({"train_batch_size": 1, "zero_optimization": {"stage": 2, "cpu_offload": true, "offload_optimizer": {"device": "cpu"}}})"),
                    Contains("Cannot provide deprecated parameter 'cpu_offload' and replacing parameter"));
  r = read(R"({"train_batch_size": 1, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.3}}})");
  CHECK(note_of(r, "zero_optimization.offload_optimizer.ratio")->fate == KeyFate::Ignored);
  CHECK_THROWS_WITH(read(R"({"train_batch_size": 1, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 0.3}}})"),
                    Contains("Partial offloading only supported for ZeRO Stage 3."));
}

TEST_CASE("precision: fp16, bf16 (or its old name bfloat16), fp32; both enabled is refused", "[deepspeed]") {
  CHECK(read(R"({"train_batch_size": 1, "fp16": {"enabled": true}})").config.precision == Precision::Fp16);
  CHECK(read(R"({"train_batch_size": 1, "bfloat16": {"enabled": true}})").config.precision == Precision::Bf16);
  CHECK(read(R"({"train_batch_size": 1, "fp16": {"enabled": false}})").config.precision == Precision::Fp32);
  CHECK_THROWS_WITH(read(R"({"train_batch_size": 1, "fp16": {"enabled": true}, "bf16": {"enabled": true}})"),
                    Contains("bfloat16 and fp16 modes cannot be simultaneously enabled"));
}

TEST_CASE("optimizer names are case-insensitive; Adam is AdamW unless adam_w_mode is false", "[deepspeed]") {
  CHECK(read(R"({"train_batch_size": 1, "optimizer": {"type": "ADAMW"}})").config.optimizer_type == "adamw");
  CHECK(read(R"({"train_batch_size": 1, "optimizer": {"type": "Adam"}})").config.optimizer_type == "adamw");
  CHECK(read(R"({"train_batch_size": 1, "optimizer": {"type": "adam", "params": {"adam_w_mode": false}}})").config.optimizer_type == "adam");
  CHECK(read(R"({"train_batch_size": 1, "optimizer": {"type": "AdamW", "params": {"adam_w_mode": false}}})").config.optimizer_type == "adamw");
  CHECK_THROWS_WITH(read(R"({"train_batch_size": 1, "optimizer": {"type": "Adamm"}})"),
                    Contains("Adamm is not a supported DeepSpeed Optimizer"));
  CHECK_THROWS_WITH(read(R"({"train_batch_size": 1, "optimizer": {"type": "Adam", "params": {"max_grad_norm": 1.0}}})"),
                    Contains("'max_grad_norm' is not supported as an optimizer parameter"));
  CHECK_THROWS_WITH(read(R"({"train_batch_size": 1, "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "momentum": 0.9}}})"),
                    Contains("unexpected keyword argument 'momentum'"));
  CHECK_THROWS_WITH(read(R"({"train_batch_size": 1, "zero_optimization": {"stage": 2}, "optimizer": {"type": "Lamb"}, "fp16": {"enabled": true}})"),
                    Contains("untested ZeRO Optimizer"));
  const auto lion = read(R"({"train_batch_size": 1, "zero_optimization": {"stage": 2}, "optimizer": {"type": "Lion"}})");
  CHECK(lion.config.optimizer_states == 1);
}

TEST_CASE("stage rules: offload_param only at stage 3, an NVMe optimizer in host memory below stage 3", "[deepspeed]") {
  auto r = read(R"({"train_batch_size": 1, "zero_optimization": {"stage": 2, "offload_param": {"device": "nvme"}}})");
  CHECK(r.config.params.tier == Tier::Device);
  CHECK(any_message(r, "only at stage 3"));
  r = read(R"({"train_batch_size": 1, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme"}}})");
  CHECK(r.config.optimizer.tier == Tier::Host);
  r = read(R"({"train_batch_size": 1, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}, "offload_param": {"device": "nvme"}}})");
  CHECK(r.config.optimizer.tier == Tier::Nvme);
  CHECK(r.config.params.tier == Tier::Nvme);
  CHECK_THROWS_WITH(read(R"({"train_batch_size": 1, "zero_optimization": {"stage": 3}, "tensor_parallel": {"autotp_size": 2}})"),
                    Contains("'autotp' and 'zero_stage = 3'"));
}

TEST_CASE("keys DeepSpeed rejects are errors; keys it reads and zinf cannot honour are named", "[deepspeed]") {
  CHECK_THROWS_WITH(read(R"({"train_batch_size": 1, "zero_optimization": {"stage": 3, "stage3_param_persitence_threshold": 1}})"),
                    Contains("zero_optimization.stage3_param_persitence_threshold") && Contains("DeepSpeed 0.16.5 refuses"));
  CHECK_THROWS_WITH(read(R"({"train_batch_size": 1, "zero_optimization": {"stage": 3, "aio": {"block_size": 1}}})"),
                    Contains("zero_optimization.aio"));
  const auto r = read(R"({"train_batch_size": 1, "zero_optimization": {"stage": 2, "overlap_comm": false},
                          "aio": {"thread_count": 2}, "gradient_acumulation_steps": 4})");
  CHECK(note_of(r, "zero_optimization.overlap_comm")->fate == KeyFate::Ignored);
  CHECK(note_of(r, "aio.thread_count")->fate == KeyFate::NotRead);
  CHECK(note_of(r, "gradient_acumulation_steps")->fate == KeyFate::NotRead);
  CHECK(any_message(r, "'zero_optimization.overlap_comm'"));
  CHECK(any_message(r, "'gradient_acumulation_steps'"));
}

TEST_CASE("HF \"auto\" values are resolved as the HF Trainer resolves them, all in one message", "[deepspeed]") {
  const auto r = read(R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
                          "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
                          "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"},
                          "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto"}},
                          "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto",
                                                "stage3_prefetch_bucket_size": "auto",
                                                "stage3_param_persistence_threshold": "auto"}})",
                      8, Precision::Fp16);
  CHECK(r.config.micro_batch == 4);
  CHECK(r.train_batch_size == 32);
  CHECK(r.config.precision == Precision::Fp16);
  int auto_lines = 0;
  for (const auto& m : r.messages)
    if (m.find("HF \"auto\"") != std::string::npos) {
      ++auto_lines;
      for (const char* k : {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                            "gradient_clipping", "fp16.enabled", "bf16.enabled", "optimizer.params.lr",
                            "optimizer.params.betas", "zero_optimization.reduce_bucket_size = 16777216",
                            "zero_optimization.stage3_prefetch_bucket_size = 15099494",
                            "zero_optimization.stage3_param_persistence_threshold = 40960"})
        CHECK_THAT(m, Contains(k));
    }
  CHECK(auto_lines == 1);
}

TEST_CASE("a DeepSpeed-autotuner config goes to zinf tune", "[deepspeed]") {
  const std::string json = R"({"train_micro_batch_size_per_gpu": "auto", "autotuning": {"enabled": true}})";
  CHECK_THROWS_WITH(read(json), Contains("zinf tune"));
  DeepSpeedContext c = context(8);
  c.for_tune = true;
  const auto r = read_deepspeed_config(json, "tune.json", c);
  CHECK(r.autotuner);
  CHECK(r.autotuner_keys == std::vector<std::string>{"train_micro_batch_size_per_gpu"});
  CHECK(r.config.micro_batch == 4);
}

TEST_CASE("Hjson as DeepSpeed loads it: comments, unquoted keys, missing commas", "[deepspeed][hjson]") {
  // The ZeRO-Offload tutorial's example (a comma after "cpu", none after the brace), with a batch.
  const auto r = read(R"({
    # a comment
    train_batch_size: 2   // another
    "zero_optimization": {
        "stage": 2,
        "offload_optimizer": {
            "device": "cpu",
        }
        "contiguous_gradients": true,
        /* and a block comment */
        "overlap_comm": true
    }
})");
  CHECK(r.config.zero_stage == 2);
  CHECK(r.config.optimizer.tier == Tier::Host);
  CHECK_THROWS_WITH(read(R"({"train_batch_size": 1, "train_batch_size": 2})"), Contains("appears twice"));
}

TEST_CASE("a number past a double's range (1e400) is refused wherever it stands, naming its key", "[deepspeed]") {
  // Read as infinity, eps 1e400 trained nothing and exited 0; a scheduler's field turned into
  // null, then into its default. Each is refused before any reader sees it.
  const std::string base = R"({"train_micro_batch_size_per_gpu": 1, "gradient_clipping": GC,
    "optimizer": {"type": "AdamW", "params": {"lr": LR, "eps": EPS, "weight_decay": WD}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": WMAX, "warmup_num_steps": 10}}})";
  const std::vector<std::pair<std::string, std::string>> fields = {
      {"LR", "optimizer.params.lr"}, {"EPS", "optimizer.params.eps"}, {"WD", "optimizer.params.weight_decay"},
      {"GC", "gradient_clipping"}, {"WMAX", "scheduler.params.warmup_max_lr"}};
  auto with = [&](const std::string& hostile) {
    std::string t = base;
    for (const auto& [mark, key] : fields) t.replace(t.find(mark), mark.size(), mark == hostile ? "1e400" : "0.001");
    return t;
  };
  CHECK_NOTHROW(read(with("")));
  for (const auto& [mark, key] : fields) {
    INFO(key);
    CHECK_THROWS_WITH(read(with(mark)), Catch::Contains("ds.json") && Catch::Contains(key) && Catch::Contains("infinity"));
    std::vector<std::string> warnings;
    CHECK_THROWS_WITH(parse_lr_schedule(with(mark), "ds.json", warnings), Catch::Contains(key));
    CHECK_THROWS_WITH(read(with(mark).replace(0, 1, "{ // Hjson\n")), Catch::Contains(key));
  }
}
