#include "runtime/gathered_parameters.h"

#include "runtime/engine.h"

namespace zrt {

GatheredParameters::GatheredParameters(Engine& engine, std::optional<int> modifier_rank)
    : engine_(engine), modifier_rank_(modifier_rank) {
  engine_.begin_parameter_access();
}

GatheredParameters::~GatheredParameters() noexcept(false) {
  engine_.end_parameter_access(modifier_rank_);
}

}  // namespace zrt
