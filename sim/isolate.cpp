#include "sim/isolate.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string_view>

namespace zinf::sim {

namespace {

bool write_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

std::string run_isolated(const std::function<std::string()>& fn) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::close(fds[0]);
    // First byte: 'o' for a result, 'e' for an error message.
    int status = 0;
    try {
      std::string out = fn();
      if (!write_all(fds[1], "o", 1) || !write_all(fds[1], out.data(), out.size())) status = 3;
    } catch (const std::exception& e) {
      const std::string_view what = e.what();
      if (write_all(fds[1], "e", 1)) write_all(fds[1], what.data(), what.size());
      status = 2;
    }
    ::close(fds[1]);
    std::fflush(nullptr);
    ::_exit(status);
  }
  ::close(fds[1]);
  std::string out;
  char buf[1 << 16];
  for (;;) {
    ssize_t r = ::read(fds[0], buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    out.append(buf, static_cast<size_t>(r));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!out.empty() && out[0] == 'e') throw std::runtime_error(out.substr(1));
  if (WIFSIGNALED(status))
    throw std::runtime_error("simulation process killed by signal " + std::to_string(WTERMSIG(status)));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || out.empty())
    throw std::runtime_error("simulation process failed with exit status " + std::to_string(WEXITSTATUS(status)));
  return out.substr(1);
}

}  // namespace zinf::sim
