// The ranks of a job must be one run: the same model, run config, plan, steps, data and data
// order, and the same zinf. Started with different files or options they would train different
// things together (a different learning rate trains on silently; a different model or step count
// ends in an MPI error that names neither rank nor cause). require_agreement compares named fields
// across the ranks before anything trains: every rank sends all its fields to every rank (two
// all-gathers: the sizes, then the fields padded to the longest), and every rank finds the same
// differences, so all of them stop together and rank 0 says which fields differ on which ranks.
// Called by every rank of `comm` (a collective); not thread-safe.
#pragma once
#include <map>
#include <stdexcept>
#include <string>

#include "engine/comm/collectives.hpp"

namespace zinf::engine {

// The ranks disagree; what() lists each differing field with each rank's value.
class RanksDisagree : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// Throws RanksDisagree on every rank when any field differs between ranks (a field that only some
// ranks have counts as different). `stage` says when ("before planning", "after planning").
void require_agreement(Collectives& comm, const std::map<std::string, std::string>& fields, const std::string& stage);

}  // namespace zinf::engine
