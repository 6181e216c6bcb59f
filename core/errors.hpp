// Errors a user can act on. A ConfigError names the file, the key and what is allowed;
// a PlanError names the tier that is short and by how much, or why the plan is refused.
#pragma once
#include <memory>
#include <stdexcept>
#include <string>

namespace zinf::core {

class ConfigError : public std::runtime_error {
public:
  ConfigError(std::string file, std::string key, const std::string& message)
      : std::runtime_error(format(file, key, message)), file_(std::move(file)), key_(std::move(key)) {}
  const std::string& file() const { return file_; }
  const std::string& key() const { return key_; }

private:
  static std::string format(const std::string& file, const std::string& key, const std::string& message) {
    std::string out = file.empty() ? std::string("<config>") : file;
    if (!key.empty()) out += ": key '" + key + "'";
    out += ": " + message;
    // A message quotes what the file said; a huge value must not come back whole.
    constexpr std::size_t kLongest = 1000;
    if (out.size() > kLongest) out = out.substr(0, kLongest) + "... (message cut)";
    return out;
  }
  std::string file_, key_;
};

struct Fit;  // core/fit.hpp

// A plan that is refused: short on a tier (the planner's verdict, core::Fit, comes with it) or an
// invalid combination. core::fit_of turns either into the one verdict every command reports.
class PlanError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
  PlanError(const std::string& message, std::shared_ptr<const Fit> fit) : std::runtime_error(message), fit_(std::move(fit)) {}
  const Fit* fit() const { return fit_.get(); }

private:
  std::shared_ptr<const Fit> fit_;
};

}  // namespace zinf::core
