#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <set>

#include "formats/config_paths.hpp"
#include "core/errors.hpp"
#include "core/sweep_spec.hpp"
#include "core/sweep_table.hpp"
#include "engine/io/row_file.hpp"
#include "formats/hwprofile_reader.hpp"
#include "formats/sweep_spec_reader.hpp"

using namespace zinf::core;
namespace fs = std::filesystem;

namespace {

const std::string kRoot = ZINF_SOURCE_DIR;

SweepSpec parse(const std::string& text) { return parse_sweep_spec(text, "spec.yaml", kRoot); }

// The message of the ConfigError `text` raises ("" if none).
std::string error_of(const std::string& text) {
  try {
    parse(text);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// The message of the ConfigError reading `text`'s models raises ("" if none).
std::string models_error_of(const std::string& text) {
  try {
    check_sweep_models(parse(text), kRoot);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

const std::string kFiles = "models: [gpt-tiny]\nhwprofiles: [dgx2-v100]\nconfigs: [infinity-nvme]\nnodes: [1]\n";

}  // namespace

TEST_CASE("a field axis is written into the parsed file and read by the file's own reader") {
  const auto spec = parse(kFiles +
                          "axes:\n"
                          "  - {key: node.nvme.read_bandwidth, values: [50 GB/s]}\n"
                          "  - {key: prefetch.nvme_distance, values: [5]}\n"
                          "  - {key: model.layers, values: [3]}\n"
                          "  - {key: hwprofile.fabric.latency, scale: [2]}\n"
                          "  - {key: offload.params, values: [cpu]}\n");
  const auto points = expand(spec);
  REQUIRE(points.size() == 1);
  const auto in = load_point_inputs(points[0], kRoot);
  const auto base_hw = load_hwprofile(kRoot + "/hwprofiles/dgx2-v100.yaml");
  CHECK(in.hw.node.nvme_read_bandwidth == Approx(50e9));
  CHECK(in.hw.fabric.latency == Approx(2 * base_hw.fabric.latency));
  CHECK(in.hw.node.nvme_write_bandwidth == base_hw.node.nvme_write_bandwidth);  // untouched
  CHECK(in.config.nvme_prefetch_distance == 5);
  CHECK(in.config.h2d_prefetch_distance == 2);  // the file's value beside it stays
  CHECK(in.config.params.tier == Tier::Host);
  CHECK(in.model.layers == 3);
  CHECK(points[0].coords == std::vector<std::string>{"50 GB/s", "5", "3", "2", "cpu"});
  // Keys without a prefix go to the file their first word belongs to.
  const auto cols = sweep_columns(spec);
  CHECK(cols[4] == "hwprofile.node.nvme.read_bandwidth");
  CHECK(cols[5] == "config.prefetch.nvme_distance");
  CHECK(cols[7] == "hwprofile.fabric.latency (scale)");
}

TEST_CASE("a scaled field keeps its unit's meaning: 100 Gb/s times 2 is 25 GB/s") {
  const auto spec = parse(kFiles + "axes:\n  - {key: node.nic.bandwidth, scale: [2]}\n");
  const auto in = load_point_inputs(expand(spec)[0], kRoot);
  CHECK(in.hw.node.nic_bandwidth == Approx(25e9));
}

TEST_CASE("a bad field value is refused by the reader, naming the spec line, the key and the file") {
  const std::string spec = kFiles +
                           "axes:\n"
                           "  - key: node.nvme.read_bandwidth\n"
                           "    values:\n"
                           "      - 25 GB/s\n"
                           "      - -3 GB/s\n";
  const auto msg = error_of(spec);
  CHECK(msg.find("spec.yaml:9") != std::string::npos);
  CHECK(msg.find("node.nvme.read_bandwidth") != std::string::npos);
  CHECK(msg.find("dgx2-v100") != std::string::npos);
  CHECK(msg.find("must be positive") != std::string::npos);

  // An unknown key is what the reader says it is: unknown.
  const auto typo = error_of(kFiles + "axes:\n  - {key: prefetch.nvme_distanse, values: [2]}\n");
  CHECK(typo.find("spec.yaml:6") != std::string::npos);
  CHECK(typo.find("nvme_distanse") != std::string::npos);
  CHECK(typo.find("unknown key") != std::string::npos);
  // A word not allowed for a placement.
  const auto tier = error_of(kFiles + "axes:\n  - {key: offload.params, values: [cpu, disk]}\n");
  CHECK(tier.find("spec.yaml:6") != std::string::npos);
  CHECK(tier.find("'disk' is not allowed") != std::string::npos);
  // Scaling a field the file does not set, and an integer scaled to a fraction.
  CHECK(error_of(kFiles + "axes:\n  - {key: micro_batch, scale: [2]}\n").find("does not set") != std::string::npos);
  CHECK(error_of(kFiles + "axes:\n  - {key: node.gpus, scale: [0.3]}\n").find("must be an integer") != std::string::npos);
  // Structure: zipped lengths, repeated axes, missing file axes, unknown keys.
  const auto zip = error_of(kFiles + "axes:\n  - zip:\n    - {key: micro_batch, values: [1, 2]}\n"
                                     "    - {key: node.nvme.read_bandwidth, scale: [1, 2, 3]}\n");
  CHECK(zip.find("spec.yaml:8") != std::string::npos);
  CHECK(zip.find("equal length") != std::string::npos);
  CHECK(error_of(kFiles + "axes:\n  - {key: micro_batch, values: [1]}\n  - {key: config.micro_batch, values: [2]}\n")
            .find("given twice") != std::string::npos);
  CHECK(error_of("models: [gpt-tiny]\nconfigs: [infinity-nvme]\nnodes: [1]\n").find("hwprofiles") != std::string::npos);
  CHECK(error_of(kFiles + "axis: []\n").find("spec.yaml:5") != std::string::npos);
  CHECK(error_of("models: [gpt-nope]\nhwprofiles: [dgx2-v100]\nconfigs: [infinity-nvme]\nnodes: [1]\n")
            .find("spec.yaml:1") != std::string::npos);
  CHECK(error_of(kFiles + "axes:\n  - {key: micro_batch, values: [1], scale: [2]}\n").find("exactly one") != std::string::npos);
}

TEST_CASE("a value refused alone but right beside another axis's value is kept, its bad points are left to run") {
  // heads 3 divides hidden 96 but not the file's 64.
  const auto spec = parse(kFiles + "axes:\n  - {key: heads, values: [4, 3]}\n  - {key: hidden, values: [64, 96]}\n");
  const auto points = expand(spec);
  REQUIRE(points.size() == 4);
  CHECK_THROWS_AS(load_point_inputs(points[2], kRoot), ConfigError);  // heads 3, hidden 64
  CHECK(load_point_inputs(points[3], kRoot).model.heads == 3);
  // With no hidden it could go with, heads 3 is refused at once.
  CHECK(error_of(kFiles + "axes:\n  - {key: heads, values: [4, 3]}\n").find("divisible") != std::string::npos);
}

TEST_CASE("axes form a product, zipped axes advance together, the first axis outermost") {
  const auto spec = parse("models: [gpt-tiny, gpt-mini]\nhwprofiles: [dgx2-v100]\nconfigs: [infinity-nvme]\n"
                          "axes:\n"
                          "  - {key: micro_batch, values: [1, 2, 4]}\n"
                          "  - zip:\n"
                          "      - {key: nodes, values: [1, 2]}\n"
                          "      - {key: node.nvme.read_bandwidth, scale: [1, 2]}\n");
  const auto points = expand(spec);
  REQUIRE(points.size() == 2 * 3 * 2);
  CHECK(points[0].model == "gpt-tiny");
  CHECK(points[0].coords == std::vector<std::string>{"1", "1"});
  CHECK(points[0].nodes == 1);
  CHECK(points[1].coords == std::vector<std::string>{"1", "2"});
  CHECK(points[1].nodes == 2);  // zipped with the factor 2
  CHECK(points[2].coords == std::vector<std::string>{"2", "1"});
  CHECK(points[6].model == "gpt-mini");
  std::set<std::string> keys;
  for (const auto& p : points) keys.insert(p.key());
  CHECK(keys.size() == points.size());
  // The same axes as a product: four node/factor pairs instead of two.
  const auto product = parse("models: [gpt-tiny]\nhwprofiles: [dgx2-v100]\nconfigs: [infinity-nvme]\n"
                             "axes:\n  - {key: nodes, values: [1, 2]}\n  - {key: node.nvme.read_bandwidth, scale: [1, 2]}\n");
  CHECK(expand(product).size() == 4);
}

TEST_CASE("a sweep CSV keeps finished rows, drops failed and cut-off ones, and refuses another spec's header") {
  const fs::path dir = fs::temp_directory_path() / ("zinf-sweep-table-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string csv = (dir / "s.csv").string();
  const auto spec = parse(kFiles + "axes:\n  - {key: micro_batch, values: [1, 2, 4, 8]}\n");
  const auto points = expand(spec);
  const auto cols = sweep_columns(spec);
  auto& env = zinf::engine::default_io_env();
  const auto read_back = [&] {
    zinf::engine::RowFile f(env, csv, "test", 1 << 20);
    return read_finished_rows(f.existing(), csv, cols);
  };
  {
    zinf::engine::RowFile t(env, csv, "test", 1 << 20);
    CHECK(t.existing().empty());
    t.rewrite(sweep_header(cols), {});
    t.append(sweep_row(points[0], {{"status", "ok"}, {"step_time_s", "1.5"}}, cols));
    t.append(sweep_row(points[1], {{"status", "does-not-fit"}, {"message", "host memory short by 3 GB, see plan"}}, cols));
    t.append(sweep_row(points[2], {{"status", "error"}, {"message", "killed by signal 9"}}, cols));
    // One sweep at a time: a second writer is refused while the first holds the CSV, naming it.
    CHECK_THROWS_WITH(zinf::engine::RowFile(env, csv, "second sweep", 1 << 20),
                      Catch::Contains("s.csv") && Catch::Contains("in use by zinf pid"));
  }
  {
    // A row a kill cut short: no newline at its end.
    std::ofstream out(csv, std::ios::app);
    out << sweep_row(points[3], {{"status", "ok"}}, cols).substr(0, 20);
  }
  auto kept = read_back();
  CHECK(kept.size() == 2);
  CHECK(kept.count(points[0].key()) == 1);
  CHECK(kept.count(points[1].key()) == 1);
  CHECK(csv_split(kept[points[1].key()]).back() == "host memory short by 3 GB, see plan");
  CHECK(kept.count(points[2].key()) == 0);

  // Restarting keeps the finished rows; a new row is appended after them and sorting orders them.
  {
    zinf::engine::RowFile t(env, csv, "test", 1 << 20);
    std::vector<std::string> rows = {kept[points[1].key()], kept[points[0].key()]};
    t.rewrite(sweep_header(cols), rows);
    rows.push_back(sweep_row(points[3], {{"status", "ok"}}, cols));
    t.append(rows.back());
    t.rewrite(sweep_header(cols), sorted_rows(rows, {points[0].key(), points[1].key(), points[2].key(), points[3].key()}, cols));
  }
  kept = read_back();
  CHECK(kept.size() == 3);
  std::ifstream in(csv);
  std::string header, first;
  std::getline(in, header);
  std::getline(in, first);
  CHECK(row_key(csv_split(first), cols) == points[0].key());

  const auto other = sweep_columns(parse(kFiles + "axes:\n  - {key: node.nvme.read_bandwidth, scale: [1]}\n"));
  zinf::engine::RowFile again(env, csv, "test", 1 << 20);
  CHECK_THROWS_WITH(read_finished_rows(again.existing(), csv, other), Catch::Contains("s.csv") && Catch::Contains("header differs"));
  // A CSV larger than the bound is refused by its size, naming it, before it is read.
  std::ofstream(dir / "big.csv").close();
  fs::resize_file(dir / "big.csv", 2 << 20);
  CHECK_THROWS_WITH(zinf::engine::RowFile(env, (dir / "big.csv").string(), "test", 1 << 20),
                    Catch::Contains("big.csv") && Catch::Contains("larger than"));
  // ... and before its lock is taken: the refused command leaves no big.csv.lock behind.
  CHECK_FALSE(fs::exists(dir / "big.csv.lock"));
  fs::remove_all(dir);
}

TEST_CASE("a DeepSpeed config takes its own keys as axes; a key its reader would only warn about is refused") {
  const std::string files = "models: [gpt-tiny]\nhwprofiles: [dgx2-v100]\nconfigs: [deepspeed-infinity]\nnodes: [1]\n";
  const auto spec = parse(files + "axes:\n  - {key: zero_optimization.sub_group_size, values: [1000000]}\n");
  CHECK(load_point_inputs(expand(spec)[0], kRoot).config.sub_group_size == 1000000);
  const auto msg = error_of(files + "axes:\n  - {key: zero_optimization.stage3_bogus, values: [1]}\n");
  CHECK(msg.find("spec.yaml:6") != std::string::npos);
  CHECK(msg.find("'stage3_bogus' is not a field of zero_optimization") != std::string::npos);
}

TEST_CASE("a sweep names the files of the zinf tree relative to it, wherever the spec is read from") {
  const auto spec = load_sweep_spec(kRoot + "/experiments/paper/prefetch.yaml", kRoot);
  const auto points = expand(spec);
  REQUIRE_FALSE(points.empty());
  CHECK(points[0].config == "experiments/paper/configs/prefetch-on-mb2.yaml");
  CHECK(points[0].model.find(kRoot) == std::string::npos);
  CHECK(sweep_row(points[0], {{"status", "ok"}}, sweep_columns(spec)).find(kRoot) == std::string::npos);
  CHECK(load_point_inputs(points[0], kRoot).config.nvme_prefetch_distance >= 0);
  CHECK(point_file(points[0].config, kRoot) == kRoot + "/experiments/paper/configs/prefetch-on-mb2.yaml");
  CHECK(point_file("gpt-tiny", kRoot) == "gpt-tiny");
  // Outside the tree, a path stays as given; a name stays a name.
  CHECK(display_path("/nonexistent-dir/x.yaml", kRoot) == "/nonexistent-dir/x.yaml");
  CHECK(display_path("zero3", kRoot) == "zero3");
  CHECK(display_path(kRoot + "/configs/zero3.yaml", kRoot) == "configs/zero3.yaml");
}

TEST_CASE("a spec's points are counted before they are expanded: a product past the bound is refused, naming the spec") {
  // Four axes of 1000 values: 10^12 points, refused from the sizes alone (expanding them would
  // take terabytes); a count that overflows 64 bits is refused the same way.
  std::string values = "[";
  for (int i = 1; i <= 1000; ++i) values += (i > 1 ? ", " : "") + std::to_string(i);
  values += "]";
  std::string axes = "axes:\n";
  for (const char* key : {"micro_batch", "layers", "hidden", "node.nvme.read_bandwidth"})
    axes += std::string("  - {key: ") + key + (key[0] == 'n' ? ", scale: " : ", values: ") + values + "}\n";
  const std::string msg = error_of(kFiles + axes);
  CHECK_THAT(msg, Catch::Contains("spec.yaml") && Catch::Contains("more than 1000000 points") &&
                      Catch::Contains("1 x 1 x 1 x 1 x 1000 x 1000 x 1000"));
  CHECK_THAT(error_of(kFiles + "axes:\n  - {key: micro_batch, values: [1, 2]}\n"), Catch::Equals(""));
  SweepSpec huge;
  huge.path = "huge.yaml";
  for (int g = 0; g < 8; ++g) {
    SweepGroup group;
    SweepAxis a;
    a.texts.assign(1 << 10, "1");
    group.axes.push_back(a);
    huge.groups.push_back(group);
  }
  CHECK_THROWS_WITH(expand(huge), Catch::Contains("huge.yaml") && Catch::Contains("more than"));
  CHECK_THAT(error_of("models: [gpt-tiny]\nhwprofiles: [dgx2-v100]\nconfigs: [infinity-nvme]\nnodes: [1e30]\n"),
             Catch::Contains("not a node count from 1 to"));
}

TEST_CASE("a model axis takes Hugging Face config.json files and their folders beside zinf's YAML models") {
  const std::string hf = kRoot + "/tests/data/hf/";
  const auto spec = parse("models: [" + hf + "llama-3.1-8b, " + hf + "qwen2.5-7b/config.json, gpt-tiny]\n"
                          "hwprofiles: [dgx-h100]\nconfigs: [infinity-cpu]\nnodes: [1]\n");
  const auto points = expand(spec);
  REQUIRE(points.size() == 3);
  // Named as the CSV names them: relative to the tree.
  CHECK(points[0].model == "tests/data/hf/llama-3.1-8b");
  CHECK(points[1].model == "tests/data/hf/qwen2.5-7b/config.json");
  CHECK(points[2].model == "gpt-tiny");
  const auto llama = load_point_inputs(points[0], kRoot).model;
  CHECK(llama.name == "llama-3.1-8b");
  CHECK(llama.family == Family::Llama);
  CHECK(exact_params(llama).total == 8030261248);
  const auto qwen = load_point_inputs(points[1], kRoot).model;
  CHECK(qwen.name == "qwen2.5-7b");
  CHECK(qwen.family == Family::Qwen2);
  CHECK(load_point_inputs(points[2], kRoot).model.family == Family::Gpt2);
}

TEST_CASE("a config.json takes its own keys as model axes, and the run config's seq overrides its sequence") {
  const auto spec = parse("models: [" + kRoot + "/tests/data/hf/mixtral-8x7b-v0.1]\nhwprofiles: [dgx-h100]\n"
                          "configs: [infinity-cpu]\nnodes: [1]\n"
                          "axes:\n  - {key: model.num_hidden_layers, values: [2, 4]}\n  - {key: config.seq, values: [256]}\n");
  const auto points = expand(spec);
  REQUIRE(points.size() == 2);
  const auto two = load_point_inputs(points[0], kRoot);
  CHECK(two.model.layers == 2);
  CHECK(two.model.seq == 256);
  CHECK(two.model.name == "mixtral-8x7b-v0.1");  // the folder's name, whatever the overrides
  CHECK(load_point_inputs(points[1], kRoot).model.layers == 4);
  // zinf's YAML word for the same field is not a config.json key: refused, naming the spec line.
  const auto msg = error_of("models: [" + kRoot + "/tests/data/hf/mixtral-8x7b-v0.1]\nhwprofiles: [dgx-h100]\n"
                            "configs: [infinity-cpu]\nnodes: [1]\naxes:\n  - {key: layers, values: [2]}\n");
  CHECK(msg.find("spec.yaml:6") != std::string::npos);
  CHECK(msg.find("'layers'") != std::string::npos);
}

TEST_CASE("a bad config.json in a model axis refuses the spec, naming the spec's line and the file") {
  const fs::path dir = fs::temp_directory_path() / ("zinf-sweep-hf-" + std::to_string(::getpid()));
  fs::create_directories(dir / "bad");
  fs::create_directories(dir / "empty");
  std::ofstream(dir / "bad" / "config.json") << "{\"model_type\": \"llama\", \"hidden_size\": 4096, \"num_lstm_layers\": 2}\n";
  const std::string files = "\nhwprofiles: [dgx-h100]\nconfigs: [infinity-cpu]\nnodes: [1]\n";
  const std::string bad = (dir / "bad").string();
  const auto msg = models_error_of("models:\n  - " + kRoot + "/tests/data/hf/gemma-7b\n  - " + bad + files);
  CHECK(msg.find("spec.yaml:3") != std::string::npos);
  CHECK(msg.find(bad + "/config.json") != std::string::npos);
  CHECK(msg.find("num_lstm_layers") != std::string::npos);
  const auto broken = (dir / "broken.json").string();
  std::ofstream(broken) << "{\"model_type\": \"llama\",";
  CHECK_THAT(models_error_of("models: [" + broken + "]" + files), Catch::Contains(broken) && Catch::Contains("not valid JSON"));
  CHECK_THAT(models_error_of("models: [" + (dir / "empty").string() + "]" + files),
             Catch::Contains((dir / "empty").string()) && Catch::Contains("spec.yaml:1"));
  // Where an axis writes into the models, a model is read with each point's values instead: one
  // that reads only with them (heads 8 divide hidden 64, not the file's 100) is not refused.
  const auto odd = (dir / "odd.yaml").string();
  std::ofstream(odd) << "name: odd\nlayers: 2\nhidden: 100\nheads: 8\nseq: 64\nvocab: 512\n";
  CHECK_THAT(models_error_of("models: [" + odd + "]" + files), Catch::Contains("divisible by heads"));
  CHECK(models_error_of("models: [" + odd + "]" + files + "axes:\n  - {key: hidden, values: [64]}\n").empty());
  fs::remove_all(dir);
}
