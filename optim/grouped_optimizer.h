// GroupedOptimizer<Options>: what every update rule shares on top of the Optimizer seam — one
// options struct and one step count per parameter group, the setters the schedulers use, and the
// torch-style state_dict skeleton (param indices per group, the group's options). FusedAdam and
// SGD add their update and their per-parameter state.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "optim/optimizer.h"

namespace zrt::optim {

// A group as an optimizer is built from: its params and its full options.
template <typename Options>
struct OptimizerGroup {
  std::vector<OptimParam> params;
  Options options;
};

// The first problem with a group's options, or "" (construction, setters and loading use it).
std::string options_problem(const AdamOptions& options);
std::string options_problem(const SgdOptions& options);
// Where a group's options sit in a ParamGroupState.
inline AdamOptions& options_in(ParamGroupState& g, const AdamOptions*) { return g.adam; }
inline SgdOptions& options_in(ParamGroupState& g, const SgdOptions*) { return g.sgd; }
inline const AdamOptions& options_in(const ParamGroupState& g, const AdamOptions*) {
  return g.adam;
}
inline const SgdOptions& options_in(const ParamGroupState& g, const SgdOptions*) { return g.sgd; }
inline const char* optimizer_name(const AdamOptions*) { return "FusedAdam"; }
inline const char* optimizer_name(const SgdOptions*) { return "SGD"; }

template <typename Options>
class GroupedOptimizer : public Optimizer {
 public:
  const char* name() const override { return optimizer_name(static_cast<const Options*>(nullptr)); }
  double lr(size_t group) const override { return options(group).lr; }
  void set_lr(size_t group, double lr) override {
    Options o = options(group);
    o.lr = lr;
    set_options(group, o);
  }
  double weight_decay(size_t group) const override { return options(group).weight_decay; }
  void set_weight_decay(size_t group, double weight_decay) override {
    Options o = options(group);
    o.weight_decay = weight_decay;
    set_options(group, o);
  }
  int64_t step_count(size_t group) const override {
    check_group(group);
    return steps_[group];
  }

  const Options& options(size_t group) const {
    check_group(group);
    return options_[group];
  }
  // Throws zrt::Error naming the problem (and leaves the group as it was).
  void set_options(size_t group, const Options& options) {
    check_group(group);
    check(options);
    options_[group] = options;
  }

 protected:
  GroupedOptimizer(std::vector<OptimizerGroup<Options>> groups, bool fp32_params_only)
      : Optimizer(take_params(groups), fp32_params_only) {
    for (const auto& g : groups) options_.push_back(g.options);
    steps_.assign(groups.size(), 0);
  }

  // torch's state_dict: every group with its options and param indices; `state(g, i, out)` fills
  // the saved state of param i of group g and returns false when it has none yet.
  template <typename StateOf>
  OptimizerState state_dict_with(StateOf&& state) const {
    OptimizerState out;
    out.optimizer = name();
    for (size_t g = 0; g < groups_.size(); ++g) {
      ParamGroupState group;
      options_in(group, static_cast<const Options*>(nullptr)) = options_[g];
      const int64_t first = first_index(g);
      for (size_t i = 0; i < groups_[g].size(); ++i) {
        const int64_t index = first + static_cast<int64_t>(i);
        group.params.push_back(index);
        ParamState s;
        s.step = steps_[g];
        if (state(g, i, s)) out.state[index] = std::move(s);
      }
      out.param_groups.push_back(std::move(group));
    }
    return out;
  }
  // The first part of load_state_dict: match_state and every group's options checked; throws
  // CheckpointError before anything changes.
  std::vector<std::vector<const ParamState*>> match_and_check(const OptimizerState& state) const {
    auto matched = match_state(state);
    for (size_t g = 0; g < groups_.size(); ++g) {
      const std::string problem =
          options_problem(options_in(state.param_groups[g], static_cast<const Options*>(nullptr)));
      ZRT_CHECK_AS(CheckpointError, problem.empty(), "param group ", g,
                   " of the optimizer state: ", problem);
    }
    return matched;
  }
  // The saved options of group g (after match_and_check).
  static const Options& saved_options(const OptimizerState& state, size_t g) {
    return options_in(state.param_groups[g], static_cast<const Options*>(nullptr));
  }

  std::vector<Options> options_;
  std::vector<int64_t> steps_;

 private:
  void check(const Options& options) const {
    const std::string problem = options_problem(options);
    ZRT_CHECK(problem.empty(), name(), ": ", problem);
  }
  static std::vector<std::vector<OptimParam>> take_params(
      std::vector<OptimizerGroup<Options>>& groups) {
    std::vector<std::vector<OptimParam>> out;
    for (auto& g : groups) {
      const std::string problem = options_problem(g.options);
      ZRT_CHECK(problem.empty(), optimizer_name(static_cast<const Options*>(nullptr)), ": ",
                problem);
      out.push_back(std::move(g.params));
    }
    return out;
  }
};

}  // namespace zrt::optim
