// A command run the way `zinf validate` and `zinf profile-hw` run their measuring children: under
// /bin/sh, in a process group of its own, its output to a log and its input from /dev/null. While
// it runs, SIGINT, SIGTERM and SIGHUP sent to zinf are passed on to the child's whole group (mpirun
// passes them on to its ranks) and zinf waits for it to end, then throws ChildStopped naming the
// signal; the child is also set to get SIGTERM should zinf die without passing anything on.
// Unlike std::system, zinf itself does not ignore SIGINT meanwhile. One child at a time per
// process; call from one thread.
#pragma once
#include <stdexcept>
#include <string>

namespace zinf::measure {

class ChildStopped : public std::runtime_error {
public:
  ChildStopped(int signal, const std::string& message) : std::runtime_error(message), signal_(signal) {}
  int signal() const { return signal_; }

private:
  int signal_;
};

// Runs `command` and returns its exit status (128 + N when signal N ended it); "" as `log_path`
// leaves its output on zinf's. Throws ChildStopped when zinf was asked to stop meanwhile, and
// std::runtime_error when it cannot start the child.
int run_child(const std::string& command, const std::string& log_path);

// "SIGINT", "SIGTERM", "SIGHUP", or "signal N".
std::string signal_name(int signal);

}  // namespace zinf::measure
