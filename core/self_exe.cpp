#include "core/self_exe.hpp"

#include <stdexcept>

namespace zinf::core {

std::filesystem::path self_exe(std::error_code& ec, const std::filesystem::path& link) {
  std::filesystem::path exe = std::filesystem::read_symlink(link, ec);
  if (ec) return {};
  return exe;
}

std::filesystem::path self_exe(const std::filesystem::path& link) {
  std::error_code ec;
  std::filesystem::path exe = self_exe(ec, link);
  if (ec)
    throw std::runtime_error("cannot find this executable: reading the link " + link.string() + " failed: " + ec.message());
  return exe;
}

}  // namespace zinf::core
