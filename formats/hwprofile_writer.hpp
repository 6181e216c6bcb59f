// Writes a HwProfile as the YAML core::load_hwprofile reads (the schema in hwprofiles/README.md):
// every field, so that what is written and read back is the same profile (a test holds the two
// together field by field). Numbers are written exactly (the shortest text that reads back as the
// same double) unless `significant_digits` rounds them. Notes, keyed by a field's path
// ("node.gpu.peak_flops", "node.nvme", ...), become comments on that line; `header` lines become
// comments at the top. Written with yaml-cpp's emitter. Used by `zinf profile-hw`; pure function.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/hwprofile.hpp"

namespace zinf::core {

struct HwProfileNotes {
  std::vector<std::string> header;             // comment lines at the top, without '#'
  std::vector<std::string> sources;            // the `sources:` list
  std::map<std::string, std::string> fields;   // field path -> comment on its line
  int significant_digits = 0;                  // 0: exact
};

std::string hwprofile_to_yaml(const HwProfile& hw, const HwProfileNotes& notes = {});

}  // namespace zinf::core
