#include "sim/isolate.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <exception>
#include <stdexcept>
#include <string_view>
#include <vector>

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

struct Process {
  pid_t pid = -1;
  int fd = -1;
  size_t index = 0;
  std::string out;
};

Process spawn(const std::function<std::string()>& fn) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  std::fflush(nullptr);
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    // A child dies with its parent: zinf stopped by a signal (tune, sweep) leaves no simulation
    // running on its own. Checked again after the call, in case the parent died before it.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(128 + SIGKILL);
    // The parent's stop handlers (cli/stop_signals.hpp) speak for the command, not for each child.
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::signal(sig, SIG_DFL);
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
  return {pid, fds[0], 0, {}};
}

// One read (blocking); returns false at end of file.
bool drain(Process& c) {
  char buf[1 << 16];
  ssize_t r;
  while ((r = ::read(c.fd, buf, sizeof buf)) < 0 && errno == EINTR) {
  }
  if (r <= 0) return false;
  c.out.append(buf, static_cast<size_t>(r));
  return true;
}

// After end of file: reaps the child; returns (ok, result or error message).
std::pair<bool, std::string> finish(Process& c) {
  ::close(c.fd);
  int status = 0;
  while (::waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!c.out.empty() && c.out[0] == 'e') return {false, c.out.substr(1)};
  if (WIFSIGNALED(status)) return {false, "simulation process killed by signal " + std::to_string(WTERMSIG(status))};
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || c.out.empty())
    return {false, "simulation process failed with exit status " + std::to_string(WEXITSTATUS(status))};
  return {true, c.out.substr(1)};
}

}  // namespace

std::string run_isolated(const std::function<std::string()>& fn) {
  Process c = spawn(fn);
  while (drain(c)) {
  }
  auto [ok, text] = finish(c);
  if (!ok) throw std::runtime_error(text);
  return text;
}

void run_isolated_parallel(size_t count, int workers, const std::function<std::string(size_t)>& job,
                           const std::function<void(size_t, bool, const std::string&)>& done) {
  IsolatedPool pool;
  size_t next = 0;
  while (next < count || pool.running() > 0) {
    while (next < count && static_cast<int>(pool.running()) < std::max(1, workers)) {
      const size_t i = next++;
      pool.start(i, [&job, i] { return job(i); });
    }
    for (auto& f : pool.wait(-1)) done(f.index, f.ok, f.text);
  }
}

IsolatedPool::~IsolatedPool() {
  for (auto& c : children_) {
    ::kill(c.pid, SIGKILL);
    ::close(c.fd);
    while (::waitpid(c.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

void IsolatedPool::start(size_t index, const std::function<std::string()>& fn) {
  Process c = spawn(fn);
  children_.push_back({static_cast<int>(c.pid), c.fd, index, {}});
}

std::vector<IsolatedPool::Finished> IsolatedPool::wait(int timeout_ms) {
  std::vector<Finished> ended;
  // A child's output can arrive in several reads before its end: without a timeout, keep waiting.
  do {
    wait_once(timeout_ms, ended);
  } while (timeout_ms < 0 && ended.empty() && !children_.empty());
  return ended;
}

void IsolatedPool::wait_once(int timeout_ms, std::vector<Finished>& ended) {
  if (children_.empty()) return;
  std::vector<pollfd> fds;
  for (const auto& c : children_) fds.push_back({c.fd, POLLIN, 0});
  if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR)
    throw std::runtime_error(std::string("poll: ") + std::strerror(errno));
  for (size_t k = children_.size(); k-- > 0;) {
    if (fds[k].revents == 0) continue;
    Process c{static_cast<pid_t>(children_[k].pid), children_[k].fd, children_[k].index,
                         std::move(children_[k].out)};
    const bool more = drain(c);
    if (more) {
      children_[k].out = std::move(c.out);
      continue;
    }
    auto [ok, text] = finish(c);
    ended.push_back({c.index, ok, std::move(text)});
    children_.erase(children_.begin() + static_cast<std::ptrdiff_t>(k));
  }
}

}  // namespace zinf::sim
