// LRScheduler: the stateful scheduler the engine steps, for every schedule in SchedulerSpec. A
// thin shell over the pure functions of ds_schedules.h / hf_schedules.h that holds the step
// counter and the lrs (and OneCycle betas) it last "wrote" into the optimizer's groups. It does
// not own or touch an optimizer: the engine copies get_lr() / get_momentum() into its groups.
// State dicts carry DeepSpeed's keys (DeepSpeed schedules) or torch LambdaLR's (HF schedules).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/json.h"
#include "sched/ds_schedules.h"
#include "sched/options.h"

namespace zrt::sched {

// "WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle", "LRRangeTest", or transformers'
// name of an HF schedule ("linear", "cosine", ...).
const char* schedule_name(const SchedulerSpec& spec);
bool is_deepspeed_schedule(const SchedulerSpec& spec);

// Note [Scheduler step convention]:
// Like DeepSpeed's engine: the lrs present after construction are used by optimizer step 0; the
// engine calls step() after every optimizer step that was not skipped (fp16 overflow), so the
// lrs after k calls are used by optimizer step k (counting only non-skipped steps).
//   DeepSpeed schedules: i = last_batch_iteration starts at -1 (or the configured value) and
//     step() sets i += 1. Built with -1, the scheduler writes its initial values at once (Note
//     [Schedule at i = -1] in ds_schedules.h); built with another value it writes nothing until
//     the first step(), so the groups keep the optimizer's own lrs (DeepSpeed does the same).
//   HF schedules behave like torch's LambdaLR: construction already evaluates step 0
//     (last_epoch = 0, lr = base·λ(0)); step() sets last_epoch += 1.
//
// Note [Scheduler resume]:
// DeepSpeed schedulers save only {"last_batch_iteration": i}; the lrs they had written come back
// with the optimizer's param groups, and the scheduler recomputes lrs at its next step().
// load_state_dict therefore restores i and sets the lrs/betas to what the restored groups hold
// after an uninterrupted run to i (the values written by step i, or the construction values for
// i = -1), so that save → load → continue equals the uninterrupted run. LambdaLR states carry
// base_lrs, last_epoch, _step_count and _last_lr, which are restored as saved (torch overwrites
// base_lrs too: an lr changed in the config does not apply on resume).
//
// Not thread-safe; cheap to copy.
class LRScheduler {
 public:
  // `base_lrs`: each param group's lr at construction (one per group, at least one): the peak
  // for WarmupCosineLR, LambdaLR's base_lrs, and transformers' lr_init (base_lrs[0]) for
  // polynomial. `optimizer_has_betas`: whether the optimizer has Adam betas; without them
  // OneCycle does not cycle momentum (warning, as DeepSpeed). Throws ConfigError for invalid
  // options (see check_options / check_hf_options).
  LRScheduler(SchedulerSpec spec, std::vector<double> base_lrs, bool optimizer_has_betas = true);

  // i += 1 (LambdaLR: last_epoch += 1), then recomputes the lrs (and betas).
  void step();
  // Sets i (>= -1; LambdaLR: last_epoch >= 0) to the given value, then recomputes.
  void step(int64_t last_batch_iteration);

  // The lr of every group now: what the engine must use for its next optimizer step.
  const std::vector<double>& get_lr() const { return lrs_; }
  // The same lrs, named like DeepSpeed / torch; throws zrt::Error("need to call step() first")
  // when the scheduler has not written any lr yet (DeepSpeed schedule built with
  // last_batch_iteration != -1 and not stepped or loaded since).
  const std::vector<double>& get_last_lr() const;
  // OneCycle with momentum cycling: (beta1, beta2) of every group, once written. nullopt
  // otherwise, meaning "leave the optimizer's betas as they are".
  const std::optional<std::vector<Betas>>& get_momentum() const { return betas_; }
  // DeepSpeed schedules: i. HF schedules: LambdaLR's last_epoch.
  int64_t last_batch_iteration() const { return iteration_; }

  const SchedulerSpec& spec() const { return spec_; }
  const char* name() const { return schedule_name(spec_); }
  size_t num_groups() const { return base_lrs_.size(); }

  // DeepSpeed schedules: {"last_batch_iteration": i}. HF schedules: LambdaLR's state dict
  // ("base_lrs", "last_epoch", "_step_count", "verbose", "_get_lr_called_within_step",
  // "_last_lr", "lr_lambdas" with null per group).
  Json state_dict() const;
  // Validates and restores a state written by state_dict() or by Python. Throws CheckpointError
  // for a malformed state or one of the other family (a LambdaLR state given to a DeepSpeed
  // schedule or vice versa). DeepSpeed's five schedules share one state shape, so a WarmupLR
  // state loads into a WarmupCosineLR as it does in DeepSpeed. See Note [Scheduler resume].
  void load_state_dict(const Json& state);

 private:
  bool is_deepspeed() const { return is_deepspeed_schedule(spec_); }
  // Writes the DeepSpeed values at i (construction values when `initial`) over lrs_/betas_.
  void write_ds_values(int64_t i, bool initial);
  void write_hf_values();
  void load_ds_state(const Json& state);
  void load_hf_state(const Json& state);

  SchedulerSpec spec_;
  std::vector<double> base_lrs_;
  bool cycle_momentum_ = false;
  int64_t iteration_ = -1;  // DeepSpeed: last_batch_iteration; HF: LambdaLR.last_epoch
  int64_t step_count_ = 0;  // HF: LambdaLR._step_count
  std::vector<double> lrs_;
  bool lrs_written_ = false;
  std::optional<std::vector<Betas>> betas_;
};

// Group 0's lr used by optimizer steps 0..num_steps-1 (Note [Scheduler step convention]).
std::vector<double> lr_curve(const SchedulerSpec& spec, const std::vector<double>& base_lrs,
                             int64_t num_steps);

}  // namespace zrt::sched
