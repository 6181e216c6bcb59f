#include "cli/stop_signals.hpp"

#include <signal.h>
#include <unistd.h>

#include <csignal>
#include <algorithm>
#include <cstring>

namespace zinf::cli {
namespace {

// The line is composed before any signal comes: a handler may only write(2) and _exit.
char g_command[64];
char g_leaves[1024];
volatile std::sig_atomic_t g_deferred = 0;  // StopDeferred objects alive
volatile std::sig_atomic_t g_pending = 0;

void copy(char* into, size_t size, const std::string& from) {
  const size_t n = std::min(size - 1, from.size());
  std::memcpy(into, from.data(), n);
  into[n] = '\0';
}

void put(const char* s) { [[maybe_unused]] auto n = ::write(STDERR_FILENO, s, std::strlen(s)); }

[[noreturn]] void stop_now(int sig) {
  put("\n");
  put(g_command);
  put(": stopped by ");
  put(sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : "a signal");
  put("; ");
  put(g_leaves);
  put("\n");
  ::_exit(128 + sig);
}

extern "C" void on_stop(int sig) {
  if (g_deferred > 0) {
    if (g_pending == 0) g_pending = sig;
    return;
  }
  stop_now(sig);
}

}  // namespace

void stop_at_once_on_signals(const std::string& command, const std::string& leaves) {
  copy(g_command, sizeof g_command, command);
  copy(g_leaves, sizeof g_leaves, leaves);
  struct sigaction sa {};
  sa.sa_handler = on_stop;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

void set_stop_leaves(const std::string& leaves) {
  StopDeferred hold;  // no signal reads the line while it changes
  copy(g_leaves, sizeof g_leaves, leaves);
}

StopDeferred::StopDeferred() { g_deferred = g_deferred + 1; }

StopDeferred::~StopDeferred() {
  g_deferred = g_deferred - 1;
  if (g_deferred == 0 && g_pending != 0) stop_now(g_pending);
}

}  // namespace zinf::cli
