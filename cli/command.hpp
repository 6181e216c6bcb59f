// Subcommands of `zinf` register themselves here: each cli/<name>.cpp defines one static
// Registration that adds its subcommand to the CLI11 app. main() parses and runs the chosen one.
#pragma once
#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace zinf::cli {

// Adds a subcommand to `app` and returns it; the callback set on it runs the command.
using CommandFactory = std::function<void(CLI::App& app)>;

struct Registration {
  Registration(int order, CommandFactory factory);
};

std::vector<std::pair<int, CommandFactory>>& registry();

// The source tree zinf was built from: the default home of models/, hwprofiles/, configs/.
std::string source_dir();

}  // namespace zinf::cli

namespace zinf::cli {

// Ends `zinf` with this exit code after printing `message` (when not empty) to stderr: how a
// command reports an outcome that is not a plain error (an interrupted run: 130 or 143).
struct ExitCode {
  int code;
  std::string message;
};

}  // namespace zinf::cli
