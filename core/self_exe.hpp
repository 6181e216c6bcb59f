// The path of the running executable, read from the link the kernel publishes (/proc/self/exe on
// Linux). Commands that start copies of themselves (`zinf validate`'s ranks, `profile-hw`'s
// measuring runs), the CUDA plugin's search beside the binary and the `auto` cache's build
// identity all ask here. Pure reads of the file system; safe from any thread.
#pragma once
#include <filesystem>
#include <system_error>

namespace zinf::core {

inline constexpr const char* kSelfExeLink = "/proc/self/exe";

// Throws std::runtime_error naming the link and the reason when it cannot be read. `link` is only
// for tests: another symbolic link read the same way.
std::filesystem::path self_exe(const std::filesystem::path& link = kSelfExeLink);

// For callers that can do without: an empty path and `ec` set instead of throwing.
std::filesystem::path self_exe(std::error_code& ec, const std::filesystem::path& link = kSelfExeLink);

}  // namespace zinf::core
