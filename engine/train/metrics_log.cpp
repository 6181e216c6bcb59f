#include "engine/train/metrics_log.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace zinf::engine {

nlohmann::json step_record(const StepStats& s) {
  nlohmann::json lanes = nlohmann::json::object();
  for (const auto& e : s.timeline.events) {
    auto& busy = lanes[core::to_string(e.lane)];
    busy = (busy.is_null() ? 0.0 : busy.get<double>()) + (e.end - e.start);
  }
  nlohmann::json r = {{"kind", "step"},
                      {"step", s.step},
                      {"loss", s.loss},
                      {"lr", s.lr},
                      {"grad_norm", s.grad_norm},
                      {"tokens_per_s", s.tokens_per_s},
                      {"step_seconds", s.seconds},
                      {"lane_busy_seconds", lanes},
                      {"peak_bytes",
                       {{"device", core::at(s.peak, core::Tier::Device)},
                        {"host", core::at(s.peak, core::Tier::Host)},
                        {"nvme", core::at(s.peak, core::Tier::Nvme)}}}};
  if (s.device_arena_peak >= 0) r["device_arena_peak_bytes"] = s.device_arena_peak;
  if (s.loss_scale > 0) {  // fp16
    r["loss_scale"] = s.loss_scale;
    r["skipped"] = s.skipped;
  }
  return r;
}

nlohmann::json eval_record(const EvalStats& e) {
  return {{"kind", "eval"},
          {"step", e.step},
          {"loss", e.loss},
          {"perplexity", e.perplexity},
          {"batches", e.batches},
          {"tokens", e.tokens},
          {"seconds", e.seconds},
          {"peak_bytes",
           {{"device", core::at(e.peak, core::Tier::Device)},
            {"host", core::at(e.peak, core::Tier::Host)},
            {"nvme", core::at(e.peak, core::Tier::Nvme)}}}};
}

MetricsLog::MetricsLog(const std::string& path, bool append) : path_(path) {
  // An append-only log, so not the one writer's whole-file replace; opened the way it opens its
  // temporaries: never through a link planted at the path, and only a regular file (a FIFO or a
  // device is refused without blocking).
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | (append ? O_APPEND : O_TRUNC),
                        0644);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int e = fd < 0 ? errno : EINVAL;
    if (fd >= 0) ::close(fd);
    throw std::runtime_error(fmt::format("--metrics {}: cannot open for writing: {}", path,
                                         e == ELOOP ? "it is a symbolic link" : e == EINVAL ? "not a regular file"
                                                                                            : std::strerror(e)));
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  file_ = ::fdopen(fd, append ? "a" : "w");
  if (!file_) {
    ::close(fd);
    throw std::runtime_error(fmt::format("--metrics {}: cannot open for writing: {}", path, std::strerror(errno)));
  }
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::write(const nlohmann::json& record) {
  const std::string line = record.dump() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0)
    throw std::runtime_error(fmt::format("--metrics {}: write failed: {}", path_, std::strerror(errno)));
}

}  // namespace zinf::engine
