// Flat parameter groups for ZeRO stages 0–2: the trainable parameters of each optimizer group are
// concatenated into one contiguous buffer, zero-padded to DeepSpeed's alignment (2·W elements),
// and the model's parameters become views into it (docs/DEEPSPEED.md §4.7, §5.1). Partitions of
// the padded buffer are equal across ranks, so files line up with DeepSpeed's.
//
// This file owns the layout only; gradients live in zero/grad_reducer.h.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "core/shard.h"

namespace zrt::zero {

// A named parameter as collected from the model (shared parameters appear once, under the first
// name; the other names are aliases).
struct NamedParam {
  std::string name;
  at::Tensor param;
};

// Parameters of the model split into trainable ones (requires_grad) and frozen ones, in
// registration order, with tied parameters deduplicated.
struct CollectedParams {
  std::vector<NamedParam> trainable;
  std::vector<NamedParam> frozen;
  std::vector<std::pair<std::string, std::string>> aliases;  // (alias name, owner name)
};

CollectedParams collect_params(const std::vector<NamedParam>& named_parameters);

// Assigns trainable parameters to optimizer groups: rule i takes the parameters its predicate
// accepts (first match wins); the rest go to a default group placed first. Empty groups are
// dropped. Returns the groups' parameter lists and, per group, the index of the rule (-1 for the
// default group).
struct GroupRule {
  std::function<bool(const std::string& name)> match;
};
std::vector<std::vector<NamedParam>> assign_groups(const std::vector<NamedParam>& trainable,
                                                   const std::vector<GroupRule>& rules,
                                                   std::vector<int>* rule_of_group = nullptr);

// One parameter's place in its group's flat buffer.
struct FlatParam {
  std::string name;
  at::Tensor param;  // the model's parameter; after bind(), a view of the flat buffer
  std::vector<int64_t> shape;
  int64_t offset = 0;  // element offset in the group's flat buffer
  int64_t numel = 0;
};

class FlatGroup {
 public:
  // Lays out `params` (all of one dtype and device) for a world of `world_size`.
  FlatGroup(std::vector<NamedParam> params, int world_size);

  // Allocates the flat buffer, copies the parameters in and makes them views of it
  // (Tensor::set_data; autograd is unaffected).
  void bind();

  const std::vector<FlatParam>& params() const { return params_; }
  const FlatPartition& partition() const { return partition_; }
  const at::Tensor& flat() const { return flat_; }
  int64_t numel() const { return partition_.numel; }
  int64_t padded_numel() const { return partition_.padded_numel; }
  at::ScalarType dtype() const { return dtype_; }
  at::Device device() const { return device_; }

  // This rank's partition of the flat buffer (a view).
  at::Tensor partition_view(int rank) const;
  // Element counts of [begin, end) falling into each rank's partition (for the *_v collectives).
  std::vector<int64_t> counts_by_rank(int64_t begin, int64_t end) const;

 private:
  std::vector<FlatParam> params_;
  FlatPartition partition_;
  at::ScalarType dtype_ = at::kFloat;
  at::Device device_ = at::kCPU;
  at::Tensor flat_;
};

}  // namespace zrt::zero
