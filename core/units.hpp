// Parsing and printing of sizes, bandwidths and rates written the way datasheets write them:
// "32 GiB", "1.5 TB", "12 GB/s", "125 TFLOP/s", "3.4e9". Decimal prefixes are powers of 1000,
// binary prefixes (Ki, Mi, Gi, Ti, Pi) powers of 1024. Pure functions, thread-safe.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace zinf::core {

enum class UnitKind { Bytes, BytesPerSecond, FlopsPerSecond, Count, Seconds };

// Returns nullopt when `text` is not a number followed by a unit of the given kind.
std::optional<double> parse_quantity(std::string_view text, UnitKind kind);

// "1.50 TB", "12.0 GB/s", "125 TFLOP/s" — decimal prefixes, 3 significant digits.
std::string format_bytes(double bytes);
std::string format_bandwidth(double bytes_per_s);
std::string format_flops(double flops_per_s);
std::string format_count(double n);  // 1.4B, 70B, 1.0T (parameter counts)
std::string format_seconds(double s);

}  // namespace zinf::core
