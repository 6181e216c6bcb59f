#include "engine/train/trainer.hpp"

#include <fcntl.h>
#include <malloc.h>
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/data/token_data.hpp"
#include "engine/exec/backend_select.hpp"
#include "engine/exec/executor.hpp"
#include "engine/exec/gpt_backend.hpp"
#include "engine/machine_info.hpp"
#ifdef ZINF_HAVE_CUDA
#include "engine/cuda/gpt_cuda_backend.hpp"
#include "engine/cuda/nccl_collectives.hpp"
#endif
#include "engine/model/safetensors.hpp"
#include "models/gpt.hpp"

namespace fs = std::filesystem;

namespace zinf::engine {

namespace {

void fsync_path(const fs::path& p) {
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(fmt::format("checkpoint: cannot open {} to fsync it", p.string()));
  ::fsync(fd);
  ::close(fd);
}

void write_file_atomic(const fs::path& path, const std::string& text) {
  fs::path tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) throw std::runtime_error(fmt::format("checkpoint: cannot write {}", tmp.string()));
  }
  fsync_path(tmp);
  fs::rename(tmp, path);
  fsync_path(path.parent_path());
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(fmt::format("checkpoint: cannot read {}", path.string()));
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Ranks sharing this machine's RAM: OpenMPI's local size, else every rank of the job.
int ranks_on_this_node(int ranks) {
  if (const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE")) {
    const int n = std::atoi(local);
    if (n >= 1) return n;
  }
  return ranks;
}

}  // namespace

struct Trainer::Impl {
  TrainerOptions opt;
  Collectives& comm;
  core::ModelGraph graph;
  core::PlanResult planned;
  Gpt2 model;
  TokenCorpus corpus;
  std::unique_ptr<BatchLoader> loader;
  std::unique_ptr<GptCpuBackend> backend;
#ifdef ZINF_HAVE_CUDA
  std::unique_ptr<Collectives> device_comm;  // NCCL (or device copies for one rank), bootstrapped over `comm`
  std::unique_ptr<cuda::GptCudaBackend> cuda_backend;
#endif
  std::unique_ptr<Executor> executor;
  int64_t steps_done = 0;

  Impl(TrainerOptions o, Collectives& c)
      : opt(std::move(o)), comm(c), graph(build_graph(opt)), planned(core::make_plan(graph, opt.hw, opt.config, c.size())),
        model(graph) {
    // Every step frees and reallocates the same activation, staging and gradient buffers. Keeping
    // freed memory in the heap (no mmap for large blocks, no trimming) lets the next step reuse
    // pages that are already faulted in: first touch of fresh pages runs at ~0.3 GB/s here.
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, INT32_MAX);
    // Say so up front when the plan cannot fit in this machine's RAM, instead of meeting the OOM
    // killer halfway through initialization.
    const bool device_in_ram = select_backend(opt.backend) != BackendKind::Cuda;
    check_plan_fits_ram(planned.plan.peak_bytes, device_in_ram, ranks_on_this_node(c.size()), available_memory());
    corpus = TokenCorpus::load(opt.data);
    if (corpus.vocab > opt.model.vocab)
      throw std::runtime_error(fmt::format("data {}: token ids go up to {}, but model {} has a vocabulary of {}",
                                           corpus.source, corpus.vocab - 1, opt.model.name, opt.model.vocab));
    loader = std::make_unique<BatchLoader>(corpus, opt.model.micro_batch, opt.model.seq, comm.rank(), comm.size(),
                                           opt.data_seed);
    GptBackendOptions bo;
    if (!opt.nvme_dir.empty()) {
      fs::path dir = fs::path(opt.nvme_dir) / fmt::format("rank{}", comm.rank());
      std::error_code ec;
      if (!fs::is_directory(opt.nvme_dir, ec))
        throw std::runtime_error(fmt::format("--nvme-dir {}: no such directory", opt.nvme_dir));
      fs::create_directories(dir, ec);
      if (ec) throw std::runtime_error(fmt::format("--nvme-dir: cannot create {}: {}", dir.string(), ec.message()));
      bo.nvme_dir = dir.string();
    }
    bo.config = opt.config;
    bo.adam_threads = opt.adam_threads;
    if (select_backend(opt.backend) == BackendKind::Cuda) {
#ifdef ZINF_HAVE_CUDA
      auto init = opt.init_from.empty() ? model.init_params(opt.init_seed) : load_gpt2_safetensors(opt.init_from, graph);
      const int device = cuda_device_for_rank(comm.rank());
      device_comm = cuda::make_device_collectives(comm, device);
      cuda_backend = std::make_unique<cuda::GptCudaBackend>(planned.program, planned.plan, model, comm.rank(),
                                                            *device_comm, cuda::GptCudaBackendOptions{bo, device, opt.device_memory});
      cuda_backend->initialize(init);
      executor = std::make_unique<Executor>(planned.program, comm.rank(), *cuda_backend);
#endif
    } else {
      backend = std::make_unique<GptCpuBackend>(planned.program, planned.plan, model, comm.rank(), comm, bo);
      // A fresh start streams its initialization a parameter group at a time into the homes the
      // plan chose, so the model never sits whole in host memory.
      if (opt.init_from.empty()) {
        Gpt2::InitStream stream(model, opt.init_seed);
        backend->initialize([&stream](int32_t g, std::vector<float>& out) { stream.next(g, out); });
      } else {
        backend->initialize(load_gpt2_safetensors(opt.init_from, graph));
      }
      executor = std::make_unique<Executor>(planned.program, comm.rank(), *backend);
    }
  }

  // The backend running the steps; both have the same step and state interface.
  template <class F>
  decltype(auto) with_backend(F&& f) {
#ifdef ZINF_HAVE_CUDA
    if (cuda_backend) return f(*cuda_backend);
#endif
    return f(*backend);
  }

  static core::ModelGraph build_graph(TrainerOptions& o) {
    if (o.config.micro_batch) o.model.micro_batch = *o.config.micro_batch;
    return models::build_gpt(o.model);
  }

  StepStats step() {
    std::vector<Batch> batches;
    for (int mb = 0; mb < planned.program.micro_batches(); ++mb) batches.push_back(loader->next());
    with_backend([&](auto& b) { b.begin_step(steps_done + 1, std::move(batches)); });
    with_backend([](auto& b) {
      if constexpr (requires { b.reset_device_peak(); }) b.reset_device_peak();
    });
    const auto t0 = std::chrono::steady_clock::now();
    StepStats s;
    s.timeline = executor->run_step();
    s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++steps_done;
    s.step = steps_done;
    double loss[2] = {with_backend([](auto& b) { return b.loss(); }), s.seconds};
    comm.all_reduce(loss, 2, "step loss");
    s.loss = loss[0] / comm.size();
    const double slowest = loss[1] / comm.size();
    s.tokens_per_s = double(graph.tokens) * planned.program.micro_batches() * comm.size() / std::max(slowest, 1e-9);
    s.grad_norm = with_backend([](auto& b) { return b.grad_norm(); });
    s.peak = executor->peak_bytes();
    s.device_arena_peak = with_backend([](auto& b) -> int64_t {
      if constexpr (requires { b.device_peak_bytes(); }) return b.device_peak_bytes();
      else return -1;
    });
    return s;
  }

  std::string save_checkpoint() {
    if (opt.checkpoint_dir.empty()) throw std::runtime_error("no checkpoint directory was given (--checkpoint-dir)");
    auto state = with_backend([](auto& b) { return b.gather_state(); });
    const fs::path root = opt.checkpoint_dir;
    const std::string name = fmt::format("step-{:08d}", steps_done);
    if (comm.rank() == 0) {
      fs::create_directories(root);
      const fs::path tmp = root / (name + ".tmp");
      fs::remove_all(tmp);
      fs::create_directories(tmp);
      std::vector<TensorToWrite> tensors;
      for (size_t g = 0; g < graph.params.size(); ++g) {
        const auto& pg = graph.params[g];
        for (auto [suffix, src] : {std::pair{"master", &state.master}, {"adam_m", &state.m}, {"adam_v", &state.v}})
          tensors.push_back({pg.name + "." + suffix, {pg.numel}, (*src)[g].data()});
      }
      write_safetensors((tmp / "state.safetensors").string(), tensors, TensorDtype::F32);
      nlohmann::json meta = {{"format", "zinf-checkpoint-1"},
                             {"model", {{"name", opt.model.name}, {"layers", opt.model.layers}, {"hidden", opt.model.hidden},
                                        {"heads", opt.model.heads}, {"seq", opt.model.seq}, {"vocab", opt.model.vocab},
                                        {"micro_batch", opt.model.micro_batch}}},
                             {"step", steps_done},
                             // micro-batch slots consumed by all ranks together: resumable on any rank count
                             {"data_position", loader->position() * uint64_t(comm.size())},
                             {"data_seed", opt.data_seed},
                             {"ranks", comm.size()}};
      write_file_atomic(tmp / "meta.json", meta.dump(2));
      const fs::path final_dir = root / name;
      fs::remove_all(final_dir);
      fs::rename(tmp, final_dir);
      fsync_path(root);
      write_file_atomic(root / "latest", name + "\n");
    }
    comm.barrier("checkpoint saved");
    return (root / name).string();
  }

  void resume() {
    if (opt.checkpoint_dir.empty()) throw std::runtime_error("--resume needs --checkpoint-dir");
    const fs::path root = opt.checkpoint_dir;
    std::string name = read_file(root / "latest");
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    const fs::path dir = root / name;
    const fs::path meta_path = dir / "meta.json";
    nlohmann::json meta;
    try {
      meta = nlohmann::json::parse(read_file(meta_path));
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error(fmt::format("checkpoint {}: not valid JSON: {}", meta_path.string(), e.what()));
    }
    if (meta.value("format", "") != "zinf-checkpoint-1")
      throw std::runtime_error(fmt::format("checkpoint {}: field 'format' is not zinf-checkpoint-1", meta_path.string()));
    for (auto [key, want] : {std::pair{"layers", opt.model.layers}, {"hidden", opt.model.hidden}, {"heads", opt.model.heads},
                             {"seq", opt.model.seq}, {"vocab", opt.model.vocab}}) {
      const int64_t got = meta["model"].value(key, int64_t(-1));
      if (got != want)
        throw std::runtime_error(fmt::format("checkpoint {}: field 'model.{}' is {}, but model {} has {}", meta_path.string(),
                                             key, got, opt.model.name, want));
    }
    SafetensorsReader reader((dir / "state.safetensors").string());
    GptCpuBackend::FullState state;
    for (const auto& pg : graph.params) {
      state.master.push_back(reader.read_f32(pg.name + ".master"));
      state.m.push_back(reader.read_f32(pg.name + ".adam_m"));
      state.v.push_back(reader.read_f32(pg.name + ".adam_v"));
    }
    with_backend([&](auto& b) { b.load_state(state); });
    steps_done = meta.at("step").get<int64_t>();
    // Slots consumed by all ranks together; rank r of N continues at slot position/N (its loader
    // maps its own position q to slot q·N + r, so the ranks together resume where the run stopped).
    const uint64_t slots = meta.at("data_position").get<uint64_t>();
    if (slots % uint64_t(comm.size()) != 0)
      throw std::runtime_error(fmt::format("checkpoint {}: field 'data_position' ({}) is not a multiple of {} ranks",
                                           meta_path.string(), slots, comm.size()));
    loader->seek(slots / uint64_t(comm.size()));
  }
};

Trainer::Trainer(TrainerOptions options, Collectives& comm) : impl_(std::make_unique<Impl>(std::move(options), comm)) {}
Trainer::~Trainer() = default;
const core::Plan& Trainer::plan() const { return impl_->planned.plan; }
const core::Program& Trainer::program() const { return impl_->planned.program; }
int64_t Trainer::step_count() const { return impl_->steps_done; }
const char* Trainer::backend() const { return impl_->backend ? "cpu" : "cuda"; }
StepStats Trainer::step() { return impl_->step(); }
std::string Trainer::save_checkpoint() { return impl_->save_checkpoint(); }
void Trainer::resume() { impl_->resume(); }

void Trainer::export_safetensors(const std::string& path) {
  auto state = impl_->with_backend([](auto& b) { return b.gather_state(); });
  if (impl_->comm.rank() == 0) save_gpt2_safetensors(path, impl_->graph, state.master, TensorDtype::F32);
  impl_->comm.barrier("export");
}

}  // namespace zinf::engine
