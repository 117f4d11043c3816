// Whole-model access under ZeRO (DeepSpeed's zero.GatheredParameters): while a guard lives, every
// parameter of the model holds its full value on every rank — for initialisation, inspection or
// export. With a modifier rank, that rank's values (possibly changed by the program) are
// broadcast when the guard ends and written into the partitions and fp32 master weights, so
// training continues from them. Stages 0–2 always hold full parameters; the guard then only
// does the modifier part.
#pragma once

#include <optional>

namespace zrt {

class Engine;

class GatheredParameters {
 public:
  // Collective: every rank must create and destroy the guard at the same point.
  explicit GatheredParameters(Engine& engine, std::optional<int> modifier_rank = std::nullopt);
  // Collective. Broadcasts and writes back (with a modifier rank), then releases (stage 3).
  ~GatheredParameters() noexcept(false);
  GatheredParameters(const GatheredParameters&) = delete;
  GatheredParameters& operator=(const GatheredParameters&) = delete;

 private:
  Engine& engine_;
  std::optional<int> modifier_rank_;
};

}  // namespace zrt
