// The stateful LR scheduler and its state dicts (see lr_scheduler.h).
#include "sched/lr_scheduler.h"

#include <string>
#include <type_traits>
#include <utility>

#include "core/error.h"
#include "core/logging.h"
#include "sched/hf_schedules.h"

namespace zrt::sched {
namespace {

template <typename T>
constexpr bool kIsHf = std::is_same_v<T, HfScheduleOptions>;

int64_t configured_iteration(const SchedulerSpec& spec) {
  return std::visit(
      [](const auto& o) -> int64_t {
        using T = std::decay_t<decltype(o)>;
        if constexpr (kIsHf<T>) {
          return 0;
        } else if constexpr (std::is_same_v<T, WarmupDecayLROptions>) {
          return o.warmup.last_batch_iteration;
        } else {
          return o.last_batch_iteration;
        }
      },
      spec);
}

// The values DeepSpeed's get_lr() returns at i.
std::vector<double> ds_lrs(const SchedulerSpec& spec, const std::vector<double>& base_lrs,
                           int64_t i) {
  const size_t n = base_lrs.size();
  return std::visit(
      [&](const auto& o) -> std::vector<double> {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, WarmupLROptions>) {
          return warmup_lr(o, base_lrs, i);
        } else if constexpr (std::is_same_v<T, WarmupDecayLROptions>) {
          return warmup_decay_lr(o, base_lrs, i);
        } else if constexpr (std::is_same_v<T, WarmupCosineLROptions>) {
          return warmup_cosine_lr(o, base_lrs, i);
        } else if constexpr (std::is_same_v<T, OneCycleOptions>) {
          return one_cycle_lr(o, n, i);
        } else if constexpr (std::is_same_v<T, LRRangeTestOptions>) {
          return lr_range_test_lr(o, n, i);
        } else {
          ZRT_INTERNAL_ASSERT(false, "not a DeepSpeed schedule");
          return {};
        }
      },
      spec);
}

constexpr const char* kDsKey = "last_batch_iteration";

std::vector<double> read_lr_list(const Json& state, const char* key, size_t num_groups) {
  const Json& value = state.at(key);
  ZRT_CHECK_AS(CheckpointError, value.is_array(), "scheduler state: '", key,
               "' must be a list of numbers, got ", value.dump());
  ZRT_CHECK_AS(CheckpointError, value.size() == num_groups, "scheduler state: '", key, "' has ",
               value.size(), " entries but the optimizer has ", num_groups, " parameter groups");
  std::vector<double> out;
  for (const Json& v : value) {
    ZRT_CHECK_AS(CheckpointError, v.is_number(), "scheduler state: '", key,
                 "' must hold numbers, got ", v.dump());
    out.push_back(v.get<double>());
  }
  return out;
}

int64_t read_int(const Json& state, const char* key, int64_t minimum) {
  ZRT_CHECK_AS(CheckpointError, state.contains(key), "scheduler state: missing '", key, "'");
  const Json& value = state.at(key);
  ZRT_CHECK_AS(CheckpointError, value.is_number_integer(), "scheduler state: '", key,
               "' must be an integer, got ", value.dump());
  const int64_t out = value.get<int64_t>();
  ZRT_CHECK_AS(CheckpointError, out >= minimum, "scheduler state: '", key, "' must be >= ", minimum,
               ", got ", out);
  return out;
}

}  // namespace

const char* schedule_name(const SchedulerSpec& spec) {
  return std::visit(
      [](const auto& o) -> const char* {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, WarmupLROptions>) {
          return "WarmupLR";
        } else if constexpr (std::is_same_v<T, WarmupDecayLROptions>) {
          return "WarmupDecayLR";
        } else if constexpr (std::is_same_v<T, WarmupCosineLROptions>) {
          return "WarmupCosineLR";
        } else if constexpr (std::is_same_v<T, OneCycleOptions>) {
          return "OneCycle";
        } else if constexpr (std::is_same_v<T, LRRangeTestOptions>) {
          return "LRRangeTest";
        } else {
          return hf_schedule_name(o.type);
        }
      },
      spec);
}

bool is_deepspeed_schedule(const SchedulerSpec& spec) {
  return !std::holds_alternative<HfScheduleOptions>(spec);
}

LRScheduler::LRScheduler(SchedulerSpec spec, std::vector<double> base_lrs, bool optimizer_has_betas)
    : spec_(std::move(spec)), base_lrs_(std::move(base_lrs)) {
  ZRT_CHECK_AS(ConfigError, !base_lrs_.empty(), name(), ": the optimizer has no parameter groups");
  lrs_ = base_lrs_;
  if (!is_deepspeed()) {
    const auto& o = std::get<HfScheduleOptions>(spec_);
    check_hf_options(o, base_lrs_[0]);
    // LambdaLR's constructor performs a first step: last_epoch -1 → 0, _step_count 0 → 1.
    iteration_ = 0;
    step_count_ = 1;
    write_hf_values();
    return;
  }
  std::visit(
      [&](const auto& o) {
        if constexpr (!kIsHf<std::decay_t<decltype(o)>>) check_options(o, base_lrs_.size());
      },
      spec_);
  if (const auto* one_cycle = std::get_if<OneCycleOptions>(&spec_);
      one_cycle != nullptr && one_cycle->cycle_momentum) {
    cycle_momentum_ = optimizer_has_betas;
    if (!optimizer_has_betas) {
      ZRT_LOG_WARN(
          "cycle_momentum is disabled because the optimizer does not support momentum, "
          "no betas attribute in defaults");
    }
  }
  iteration_ = configured_iteration(spec_);
  ZRT_CHECK_AS(ConfigError, iteration_ >= -1, name(), ": last_batch_iteration must be >= -1, got ",
               iteration_);
  if (iteration_ == -1) write_ds_values(-1, /*initial=*/true);
}

void LRScheduler::step() { step(iteration_ + 1); }

void LRScheduler::step(int64_t last_batch_iteration) {
  if (!is_deepspeed()) {
    ZRT_CHECK(last_batch_iteration >= 0, name(), " schedule: step must be >= 0, got ",
              last_batch_iteration);
    iteration_ = last_batch_iteration;
    ++step_count_;
    write_hf_values();
    return;
  }
  ZRT_CHECK(last_batch_iteration >= -1, name(), ": last_batch_iteration must be >= -1, got ",
            last_batch_iteration);
  iteration_ = last_batch_iteration;
  write_ds_values(iteration_, /*initial=*/false);
}

const std::vector<double>& LRScheduler::get_last_lr() const {
  ZRT_CHECK(lrs_written_, "need to call step() first");
  return lrs_;
}

void LRScheduler::write_ds_values(int64_t i, bool initial) {
  // DeepSpeed writes zip(groups, lrs): a shorter list leaves the remaining groups unchanged.
  const std::vector<double> lrs = ds_lrs(spec_, base_lrs_, i);
  for (size_t g = 0; g < lrs.size() && g < lrs_.size(); ++g) lrs_[g] = lrs[g];
  lrs_written_ = true;
  if (cycle_momentum_) {
    const auto& o = std::get<OneCycleOptions>(spec_);
    betas_ =
        initial ? one_cycle_initial_betas(o, num_groups()) : one_cycle_betas(o, num_groups(), i);
  }
}

void LRScheduler::write_hf_values() {
  const auto& o = std::get<HfScheduleOptions>(spec_);
  const double factor = hf_lr_lambda(o, iteration_, base_lrs_[0]);
  for (size_t g = 0; g < base_lrs_.size(); ++g) lrs_[g] = base_lrs_[g] * factor;
  lrs_written_ = true;
}

Json LRScheduler::state_dict() const {
  Json state = Json::object();
  if (is_deepspeed()) {
    state[kDsKey] = iteration_;
    return state;
  }
  state["base_lrs"] = base_lrs_;
  state["last_epoch"] = iteration_;
  state["_step_count"] = step_count_;
  state["verbose"] = false;
  state["_get_lr_called_within_step"] = false;
  state["_last_lr"] = lrs_;
  state["lr_lambdas"] = Json::array();
  for (size_t g = 0; g < num_groups(); ++g) state["lr_lambdas"].push_back(nullptr);
  return state;
}

void LRScheduler::load_state_dict(const Json& state) {
  ZRT_CHECK_AS(CheckpointError, state.is_object(),
               "scheduler state must be a dict, got: ", state.dump());
  if (is_deepspeed()) {
    load_ds_state(state);
  } else {
    load_hf_state(state);
  }
}

void LRScheduler::load_ds_state(const Json& state) {
  const bool looks_like_lambda_lr = state.contains("last_epoch") || state.contains("base_lrs");
  ZRT_CHECK_AS(CheckpointError, state.contains(kDsKey) || !looks_like_lambda_lr,
               "scheduler state is a torch LambdaLR state (an HF schedule) but the configured "
               "scheduler is DeepSpeed's ",
               name(), "; remove the scheduler state or configure the same schedule");
  const int64_t i = read_int(state, kDsKey, -1);
  iteration_ = i;
  // See Note [Scheduler resume]: the groups hold what an uninterrupted run wrote up to i.
  lrs_ = base_lrs_;
  betas_.reset();
  write_ds_values(i, /*initial=*/i == -1);
}

void LRScheduler::load_hf_state(const Json& state) {
  ZRT_CHECK_AS(CheckpointError, !state.contains(kDsKey),
               "scheduler state is a DeepSpeed scheduler state ({\"last_batch_iteration\": ...}) "
               "but the configured scheduler is transformers' ",
               name(),
               " (a torch LambdaLR); remove the scheduler state or configure the same schedule");
  for (const char* key : {"base_lrs", "last_epoch", "_step_count", "_last_lr"}) {
    ZRT_CHECK_AS(CheckpointError, state.contains(key), "scheduler state: LambdaLR state lacks '",
                 key, "'");
  }
  std::vector<double> base_lrs = read_lr_list(state, "base_lrs", num_groups());
  std::vector<double> last_lrs = read_lr_list(state, "_last_lr", num_groups());
  const int64_t last_epoch = read_int(state, "last_epoch", 0);
  const int64_t step_count = read_int(state, "_step_count", 0);
  // Optional in newer torch versions; checked when present.
  if (state.contains("lr_lambdas")) {
    const Json& lambdas = state.at("lr_lambdas");
    ZRT_CHECK_AS(
        CheckpointError, lambdas.is_array() && lambdas.size() == num_groups(),
        "scheduler state: 'lr_lambdas' must be a list with one entry per parameter group (",
        num_groups(), "), got ", lambdas.dump());
    for (const Json& l : lambdas) {
      ZRT_CHECK_AS(CheckpointError, l.is_null() || l.is_object(),
                   "scheduler state: 'lr_lambdas' entries must be null or dicts, got ", l.dump());
    }
  }
  for (const char* key : {"verbose", "_get_lr_called_within_step"}) {
    // torch >= 2.2 stores verbose as the string "deprecated".
    ZRT_CHECK_AS(CheckpointError,
                 !state.contains(key) || state.at(key).is_boolean() || state.at(key).is_string(),
                 "scheduler state: '", key, "' must be a bool, got ", state.at(key).dump());
  }
  base_lrs_ = std::move(base_lrs);
  lrs_ = std::move(last_lrs);
  iteration_ = last_epoch;
  step_count_ = step_count;
  lrs_written_ = true;
}

std::vector<double> lr_curve(const SchedulerSpec& spec, const std::vector<double>& base_lrs,
                             int64_t num_steps) {
  ZRT_CHECK(num_steps >= 0, "lr_curve: num_steps must be >= 0, got ", num_steps);
  LRScheduler scheduler(spec, base_lrs);
  std::vector<double> curve;
  curve.reserve(static_cast<size_t>(num_steps));
  for (int64_t k = 0; k < num_steps; ++k) {
    if (k > 0) scheduler.step();
    curve.push_back(scheduler.get_lr()[0]);
  }
  return curve;
}

}  // namespace zrt::sched
