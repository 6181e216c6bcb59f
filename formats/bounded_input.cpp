#include "formats/bounded_input.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "core/errors.hpp"
#include "core/units.hpp"

namespace zinf::core {
namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Opens `path` for reading without blocking (a FIFO with no writer would block a plain open) and
// checks it is a regular file; returns the descriptor and its size.
std::pair<int, uint64_t> open_regular(const std::string& path, const std::string& what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw ConfigError(path, "", fmt::format("cannot open the {} for reading: {}", what, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw ConfigError(path, "", fmt::format("cannot stat the {}: {}", what, std::strerror(e)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw ConfigError(path, "", fmt::format("the {} must be a regular file, and this is {}", what, kind_of(st.st_mode)));
  }
  return {fd, uint64_t(st.st_size)};
}

std::string too_large(const std::string& what, uint64_t limit) {
  return fmt::format("the {} is larger than {}, the most zinf reads from such a file", what, format_bytes(double(limit)));
}

}  // namespace

void require_regular_file(const std::string& path, const std::string& what) { ::close(open_regular(path, what).first); }

void check_bounded_file(const std::string& path, uint64_t limit, const std::string& what) {
  auto [fd, size] = open_regular(path, what);
  ::close(fd);
  if (size > limit) throw ConfigError(path, "", too_large(what, limit));
}

std::string read_bounded_file(const std::string& path, uint64_t limit, const std::string& what) {
  auto [fd, size] = open_regular(path, what);
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } close{fd};
  if (size > limit) throw ConfigError(path, "", too_large(what, limit));
  // Read to one byte past the limit: a file that grew since fstat is caught here.
  std::string text(size_t(std::min<uint64_t>(size, limit)) + 1, '\0');
  size_t got = 0;
  for (;;) {
    if (got == text.size()) {
      if (text.size() > limit) throw ConfigError(path, "", too_large(what, limit));
      text.resize(std::min<size_t>(size_t(limit) + 1, text.size() * 2));
    }
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw ConfigError(path, "", fmt::format("cannot read the {}: {}", what, std::strerror(errno)));
    if (n == 0) break;
    got += size_t(n);
  }
  text.resize(got);
  return text;
}

YAML::Node load_bounded_yaml(const std::string& text, const std::string& name) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(name, "", fmt::format("not valid YAML/JSON (line {}, column {}): {}", e.mark.line + 1,
                                            e.mark.column + 1, e.msg));
  }
  // Walk the tree as its readers will, aliases expanded, within the budget.
  uint64_t nodes = 0;
  std::vector<std::pair<YAML::Node, int>> todo{{root, 0}};
  while (!todo.empty()) {
    auto [n, depth] = std::move(todo.back());
    todo.pop_back();
    if (++nodes > kMaxYamlNodes)
      throw ConfigError(name, "", fmt::format("the document stands for more than {} nodes once its aliases (*name) are "
                                              "expanded; zinf refuses such documents (a few aliases of aliases can stand "
                                              "for billions)",
                                              kMaxYamlNodes));
    if (depth > kMaxYamlDepth)
      throw ConfigError(name, "", fmt::format("the document nests deeper than {} levels", kMaxYamlDepth));
    if (n.IsSequence()) {
      for (const auto& child : n) todo.emplace_back(child, depth + 1);
    } else if (n.IsMap()) {
      for (const auto& kv : n) {
        todo.emplace_back(kv.first, depth + 1);
        todo.emplace_back(kv.second, depth + 1);
      }
    }
  }
  return root;
}

}  // namespace zinf::core
