#include "zero/flat_layout.h"

#include <unordered_map>

#include "core/error.h"

namespace zrt::zero {

CollectedParams collect_params(const std::vector<NamedParam>& named_parameters) {
  CollectedParams out;
  std::unordered_map<const void*, std::string> owner;  // TensorImpl → first name
  for (const NamedParam& np : named_parameters) {
    ZRT_CHECK(np.param.defined(), "parameter '", np.name, "' is undefined");
    const void* key = np.param.unsafeGetTensorImpl();
    auto it = owner.find(key);
    if (it != owner.end()) {
      out.aliases.emplace_back(np.name, it->second);
      continue;
    }
    owner.emplace(key, np.name);
    (np.param.requires_grad() ? out.trainable : out.frozen).push_back(np);
  }
  return out;
}

std::vector<std::vector<NamedParam>> assign_groups(const std::vector<NamedParam>& trainable,
                                                   const std::vector<GroupRule>& rules,
                                                   std::vector<int>* rule_of_group) {
  std::vector<std::vector<NamedParam>> by_rule(rules.size() + 1);
  for (const NamedParam& np : trainable) {
    size_t slot = 0;
    for (size_t i = 0; i < rules.size(); ++i) {
      if (rules[i].match && rules[i].match(np.name)) {
        slot = i + 1;
        break;
      }
    }
    by_rule[slot].push_back(np);
  }
  std::vector<std::vector<NamedParam>> groups;
  if (rule_of_group != nullptr) rule_of_group->clear();
  for (size_t slot = 0; slot < by_rule.size(); ++slot) {
    if (by_rule[slot].empty()) continue;
    groups.push_back(std::move(by_rule[slot]));
    if (rule_of_group != nullptr) rule_of_group->push_back(static_cast<int>(slot) - 1);
  }
  return groups;
}

FlatGroup::FlatGroup(std::vector<NamedParam> params, int world_size) {
  ZRT_INTERNAL_ASSERT(!params.empty(), "empty parameter group");
  dtype_ = params.front().param.scalar_type();
  device_ = params.front().param.device();
  int64_t offset = 0;
  for (NamedParam& np : params) {
    ZRT_CHECK(np.param.scalar_type() == dtype_ && np.param.device() == device_,
              "all trainable parameters of a group must share dtype and device: '", np.name,
              "' is ", np.param.scalar_type(), " on ", np.param.device(), ", the group is ", dtype_,
              " on ", device_);
    FlatParam fp;
    fp.name = std::move(np.name);
    fp.param = np.param;
    fp.shape = np.param.sizes().vec();
    fp.offset = offset;
    fp.numel = np.param.numel();
    offset += fp.numel;
    params_.push_back(std::move(fp));
  }
  partition_ = make_flat_partition(offset, world_size);
}

void FlatGroup::bind() {
  at::NoGradGuard no_grad;
  flat_ = at::zeros({partition_.padded_numel}, at::TensorOptions().dtype(dtype_).device(device_));
  for (FlatParam& fp : params_) {
    at::Tensor view = flat_.narrow(0, fp.offset, fp.numel).view(fp.shape);
    view.copy_(fp.param.detach());
    fp.param.set_data(view);
  }
}

at::Tensor FlatGroup::partition_view(int rank) const {
  const ShardInfo s = partition_.partition(rank);
  return flat_.narrow(0, s.offset, s.size);
}

std::vector<int64_t> FlatGroup::counts_by_rank(int64_t begin, int64_t end) const {
  std::vector<int64_t> counts(partition_.world_size);
  for (int r = 0; r < partition_.world_size; ++r) {
    counts[r] = intersect(partition_.partition(r), ShardInfo{begin, end - begin}).size;
  }
  return counts;
}

}  // namespace zrt::zero
