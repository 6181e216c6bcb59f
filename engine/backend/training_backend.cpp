#include "engine/backend/training_backend.hpp"

#include <stdexcept>

namespace zinf::engine {

void TrainingBackend::gather_group(int32_t, StateTensor, std::vector<float>&) {
  throw std::logic_error("this backend moves the optimizer state whole (streams_state() is false): use gather_state");
}

void TrainingBackend::load_state(const GroupReader&, const GroupReader&, const GroupReader&) {
  throw std::logic_error("this backend moves the optimizer state whole (streams_state() is false): use load_state(FullState)");
}

}  // namespace zinf::engine
