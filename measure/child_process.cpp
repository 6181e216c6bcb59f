#include "measure/child_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

namespace zinf::measure {
namespace {

constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP};
volatile std::sig_atomic_t g_child_group = 0;
volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void forward_to_child(int sig) {
  if (g_stop_signal == 0) g_stop_signal = sig;
  if (g_child_group > 0) ::kill(-pid_t(g_child_group), sig);  // async-signal-safe
}

[[noreturn]] void exec_child(const std::string& command, const std::string& log_path, pid_t parent) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != parent) ::_exit(128 + SIGTERM);  // zinf ended before the line above
  for (int sig : kForwarded) ::signal(sig, SIG_DFL);
  const int in = ::open("/dev/null", O_RDONLY);
  if (in >= 0) ::dup2(in, STDIN_FILENO);
  if (!log_path.empty()) {
    // The log lies in the output directory zinf checked; O_NOFOLLOW refuses a link planted there.
    const int out = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0644);
    if (out < 0) ::_exit(127);
    ::dup2(out, STDOUT_FILENO);
    ::dup2(out, STDERR_FILENO);
  }
  ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
  ::_exit(127);
}

}  // namespace

std::string signal_name(int signal) {
  switch (signal) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "signal " + std::to_string(signal);
  }
}

int run_child(const std::string& command, const std::string& log_path) {
  struct sigaction forward {}, old[3];
  forward.sa_handler = forward_to_child;
  sigemptyset(&forward.sa_mask);
  forward.sa_flags = SA_RESTART;
  g_stop_signal = 0;
  for (int i = 0; i < 3; ++i) sigaction(kForwarded[i], &forward, &old[i]);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    for (int i = 0; i < 3; ++i) sigaction(kForwarded[i], &old[i], nullptr);
    throw std::runtime_error(std::string("cannot start a child process: ") + std::strerror(e));
  }
  if (pid == 0) exec_child(command, log_path, parent);
  ::setpgid(pid, pid);  // also here: a signal before the child's own setpgid must find the group
  g_child_group = pid;
  if (g_stop_signal != 0) ::kill(-pid, g_stop_signal);  // arrived before the group was known
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  g_child_group = 0;
  for (int i = 0; i < 3; ++i) sigaction(kForwarded[i], &old[i], nullptr);
  if (g_stop_signal != 0) {
    const int sig = g_stop_signal;
    throw ChildStopped(sig, signal_name(sig) + ": stopped, and the child process with it (" + command + ")");
  }
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

}  // namespace zinf::measure
