// Bounded reading of the files a user names: run configs, DeepSpeed JSON, models, hardware
// profiles, sweep specs (and, through the engine, checkpoint metadata and data). A file is read only
// if it is a regular file no larger than its limit; a FIFO, a device such as /dev/zero or a
// directory is refused without blocking (the file is opened O_NONBLOCK and checked before any
// read), and the read stops one byte past the limit, so a file that grows while it is read is
// refused too. A YAML document is parsed and then walked with a budget: aliases let a few hundred
// bytes stand for billions of nodes (each `*a` is the whole anchored tree again), and every reader
// that walks the tree would pay for them, so a document whose expansion passes kMaxYamlNodes
// nodes, or nests deeper than kMaxYamlDepth, is refused. Errors are ConfigErrors naming the file.
// Stateless functions, safe from any thread.
#pragma once
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <string>

namespace zinf::core {

// The largest config, model, profile, sweep spec or DeepSpeed JSON zinf reads. The shipped ones
// are under 20 KiB.
inline constexpr uint64_t kMaxConfigBytes = 4ull << 20;
// Nodes a YAML document may stand for once every alias is expanded, and how deep it may nest.
// The shipped files have under 2000 nodes and nest 6 deep.
inline constexpr uint64_t kMaxYamlNodes = 200'000;
inline constexpr int kMaxYamlDepth = 64;

// The whole file at `path`, at most `limit` bytes; `what` says what the file is for in messages
// ("run config", "model"). Throws ConfigError naming the path: missing, not a regular file (and
// what it is instead), larger than the limit, or unreadable.
std::string read_bounded_file(const std::string& path, uint64_t limit, const std::string& what);

// Throws ConfigError naming `path` unless it is a regular file (checked without blocking on a
// FIFO); for readers that stream a file themselves (safetensors, token data).
void require_regular_file(const std::string& path, const std::string& what);
// The checks of read_bounded_file without the read: a regular file of at most `limit` bytes. A
// command runs it on each file it names before its work starts.
void check_bounded_file(const std::string& path, uint64_t limit, const std::string& what);

// YAML::Load with the expansion bound above; `name` is the file for messages. Throws ConfigError
// for a syntax error (with line and column) or a document beyond the bound.
YAML::Node load_bounded_yaml(const std::string& text, const std::string& name);

}  // namespace zinf::core
