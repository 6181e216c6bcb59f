// How a command with nothing to save between its outputs (tune, sweep) stops on SIGINT, SIGTERM or
// SIGHUP: at once, with a line saying what it leaves, exit 128 + the signal; its forked children
// die with it (sim/isolate.hpp). While a StopDeferred lives (an output being written through its
// temporary), a signal waits for it to end, so no temporary is left behind. One stop message per
// process; call from the main thread.
#pragma once
#include <string>

namespace zinf::cli {

// Installs the handlers; `leaves` ends the line: "zinf tune: stopped by SIGINT; <leaves>".
void stop_at_once_on_signals(const std::string& command, const std::string& leaves);
// Changes what the line says zinf leaves (a sweep's CSV once it is known).
void set_stop_leaves(const std::string& leaves);

class StopDeferred {
public:
  StopDeferred();
  ~StopDeferred();  // a signal that came meanwhile stops the process here
  StopDeferred(const StopDeferred&) = delete;
  StopDeferred& operator=(const StopDeferred&) = delete;
};

}  // namespace zinf::cli
