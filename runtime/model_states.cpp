#include "runtime/model_states.h"

namespace zrt::runtime {

void masters_from_params(ModelStates& states) {
  at::NoGradGuard no_grad;
  const std::vector<GroupPartition> groups = states.group_partitions();
  auto& targets = states.targets();
  for (size_t g = 0; g < targets.size(); ++g) {
    if (!targets[g].master.is_same(groups.at(g).lp)) targets[g].master.copy_(groups[g].lp);
  }
}

void params_from_masters(ModelStates& states) {
  at::NoGradGuard no_grad;
  const std::vector<GroupPartition> groups = states.group_partitions();
  auto& targets = states.targets();
  for (size_t g = 0; g < targets.size(); ++g) {
    at::Tensor lp = groups.at(g).lp;
    if (!targets[g].master.is_same(lp)) lp.copy_(targets[g].master);
    // A staging copy of the low-precision partition (offloaded masters with the partition on a
    // device) is what after_optimizer_step copies to the device: it must hold the same values.
    const at::Tensor& staged = targets[g].lp;
    if (staged.defined() && !staged.is_same(lp) && !staged.is_same(targets[g].master)) {
      staged.copy_(targets[g].master);
    }
  }
  states.after_optimizer_step();
}

}  // namespace zrt::runtime
