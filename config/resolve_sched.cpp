// Resolves "scheduler" (docs/DEEPSPEED.md §1.8): the five DeepSpeed LR schedules and their
// constructor parameters (unknown parameters are errors, as Python's keyword arguments would
// be; required ones must be present). torch.optim.lr_scheduler names, which DeepSpeed also
// accepts, are rejected as not implemented; any other name is DeepSpeed's "does not recognize".
#include <algorithm>
#include <string>

#include "config/keys.h"
#include "config/resolve_sections.h"
#include "config/section_reader.h"
#include "core/error.h"

namespace zrt::config::detail {
namespace {

const keys::KeyList kDeepSpeedSchedulers = {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR",
                                            "OneCycle", "LRRangeTest"};
const keys::KeyList kTorchSchedulers = {"LambdaLR",
                                        "MultiplicativeLR",
                                        "StepLR",
                                        "MultiStepLR",
                                        "ConstantLR",
                                        "LinearLR",
                                        "ExponentialLR",
                                        "SequentialLR",
                                        "CosineAnnealingLR",
                                        "ChainedScheduler",
                                        "ReduceLROnPlateau",
                                        "CyclicLR",
                                        "CosineAnnealingWarmRestarts",
                                        "OneCycleLR",
                                        "PolynomialLR",
                                        "LRScheduler"};

// warmup_type: "log" or "linear"; every warmup schedule falls back to log with a warning on
// anything else (DeepSpeed 0.19).
sched::WarmupType read_warmup_type(SectionReader& p) {
  auto type = p.get_string("warmup_type");
  if (!type || *type == "log") return sched::WarmupType::kLog;
  if (*type == "linear") return sched::WarmupType::kLinear;
  p.diag().warn(str(p.key_path("warmup_type"), ": unknown warmup type \"", *type,
                    "\"; DeepSpeed uses \"log\""));
  return sched::WarmupType::kLog;
}

// warmup_num_steps: a positive integer (DeepSpeed 0.19: "warmup_num_steps must be a positive
// integer").
void read_warmup_steps(SectionReader& p, int64_t& target) {
  if (auto v = p.get_int("warmup_num_steps", 1)) target = *v;
}

int64_t read_last_batch_iteration(SectionReader& p) {
  return p.get_int("last_batch_iteration", -1).value_or(-1);
}

std::optional<int64_t> required_steps(SectionReader& p, const char* key, const char* type) {
  if (!p.has(key)) {
    p.error(key, str("required by ", type));
    return std::nullopt;
  }
  return p.get_int(key, 0);
}

// WarmupLR's options over `o` (WarmupLR: warmup_max_lr unset means the groups' lr; WarmupDecayLR:
// 0.001).
sched::WarmupLROptions read_warmup(SectionReader& p, sched::WarmupLROptions o = {}) {
  if (auto v = p.get_number_list("warmup_min_lr", NumberRange::non_negative())) {
    o.warmup_min_lr = *v;
  }
  if (auto v = p.get_number_list("warmup_max_lr", NumberRange::non_negative())) {
    o.warmup_max_lr = *v;
  }
  read_warmup_steps(p, o.warmup_num_steps);
  o.warmup_type = read_warmup_type(p);
  o.last_batch_iteration = read_last_batch_iteration(p);
  return o;
}

std::optional<sched::SchedulerSpec> read_warmup_decay(SectionReader& p) {
  sched::WarmupDecayLROptions o;
  o.warmup = read_warmup(p, o.warmup);
  auto total = required_steps(p, "total_num_steps", "WarmupDecayLR");
  if (!total) return std::nullopt;
  o.total_num_steps = *total;
  if (o.total_num_steps < o.warmup.warmup_num_steps) {
    p.diag().warn(str(p.key_path("total_num_steps"), ": total_num_steps ", o.total_num_steps,
                      " is less than warmup_num_steps ", o.warmup.warmup_num_steps));
  }
  return o;
}

std::optional<sched::SchedulerSpec> read_warmup_cosine(SectionReader& p) {
  sched::WarmupCosineLROptions o;
  if (auto v = p.get_number("warmup_min_ratio", NumberRange::non_negative())) {
    o.warmup_min_ratio = *v;
  }
  read_warmup_steps(p, o.warmup_num_steps);
  if (auto v = p.get_number("cos_min_ratio", NumberRange::non_negative())) o.cos_min_ratio = *v;
  o.warmup_type = read_warmup_type(p);
  o.last_batch_iteration = read_last_batch_iteration(p);
  auto total = required_steps(p, "total_num_steps", "WarmupCosineLR");
  if (!total) return std::nullopt;
  o.total_num_steps = *total;
  if (o.total_num_steps < o.warmup_num_steps) {
    p.diag().warn(str(p.key_path("total_num_steps"), ": total_num_steps ", o.total_num_steps,
                      " is less than warmup_num_steps ", o.warmup_num_steps));
  }
  return o;
}

std::optional<sched::SchedulerSpec> read_one_cycle(SectionReader& p) {
  sched::OneCycleOptions o;
  bool ok = true;
  for (const char* key : {"cycle_min_lr", "cycle_max_lr"}) {
    if (!p.has(key)) {
      p.error(key, "required by OneCycle");
      ok = false;
    }
  }
  if (auto v = p.get_number_list("cycle_min_lr", NumberRange::non_negative())) {
    o.cycle_min_lr = *v;
  } else {
    ok = false;
  }
  if (auto v = p.get_number_list("cycle_max_lr", NumberRange::non_negative())) {
    o.cycle_max_lr = *v;
  } else {
    ok = false;
  }
  if (auto v = p.get_number("decay_lr_rate", NumberRange::non_negative())) o.decay_lr_rate = *v;
  if (auto v = p.get_number("cycle_first_step_size", NumberRange::positive())) {
    o.cycle_first_step_size = *v;
  }
  if (auto v = p.get_number("cycle_second_step_size", NumberRange::non_negative())) {
    o.cycle_second_step_size = *v;
  }
  if (auto v = p.get_int("cycle_first_stair_count", 0)) o.cycle_first_stair_count = *v;
  if (auto v = p.get_int("cycle_second_stair_count", 0)) o.cycle_second_stair_count = *v;
  if (auto v = p.get_number("decay_step_size", NumberRange::non_negative())) {
    o.decay_step_size = *v;
  }
  if (auto v = p.get_bool("cycle_momentum")) o.cycle_momentum = *v;
  if (auto v = p.get_number_list("cycle_min_mom", NumberRange::unit())) o.cycle_min_mom = *v;
  if (auto v = p.get_number_list("cycle_max_mom", NumberRange::unit())) o.cycle_max_mom = *v;
  if (auto v = p.get_number("decay_mom_rate", NumberRange::non_negative())) o.decay_mom_rate = *v;
  o.last_batch_iteration = read_last_batch_iteration(p);
  if (!ok) return std::nullopt;
  return o;
}

std::optional<sched::SchedulerSpec> read_range_test(SectionReader& p) {
  sched::LRRangeTestOptions o;
  if (auto v = p.get_number_list("lr_range_test_min_lr", NumberRange::non_negative())) {
    o.lr_range_test_min_lr = *v;
  }
  // A positive integer (DeepSpeed 0.19 checks isinstance(..., int)).
  if (auto v = p.get_int("lr_range_test_step_size", 1)) {
    o.lr_range_test_step_size = static_cast<double>(*v);
  }
  if (auto v = p.get_number("lr_range_test_step_rate", NumberRange::non_negative())) {
    o.lr_range_test_step_rate = *v;
  }
  if (auto v = p.get_bool("lr_range_test_staircase")) o.lr_range_test_staircase = *v;
  o.last_batch_iteration = read_last_batch_iteration(p);
  return o;
}

}  // namespace

void resolve_scheduler_section(const Json& root, Diagnostics& diag, ResolvedConfig& out) {
  auto it = root.find("scheduler");
  if (it == root.end() || it->is_null()) return;
  if (is_auto_value(*it)) {
    diag.auto_error("scheduler");
    return;
  }
  if (!it->is_object()) {
    diag.error("scheduler", str("expected an object, got ", describe_value(*it)));
    return;
  }
  SectionReader r(*it, "scheduler", diag);
  r.check_unknown_keys(keys::kScheduler, /*strict=*/true);
  const Json* params = r.get_object("params");
  if (!r.has("type")) {
    r.error("type",
            "missing (DeepSpeed would silently build no scheduler from this section); set one of "
            "WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest");
    return;
  }
  auto name = r.get_string("type");
  if (!name) return;
  if (std::find(kTorchSchedulers.begin(), kTorchSchedulers.end(), *name) !=
      kTorchSchedulers.end()) {
    r.error("type", str("torch.optim.lr_scheduler.", *name,
                        " is not implemented by ZeroRT (ZeroRT implements WarmupLR, "
                        "WarmupDecayLR, WarmupCosineLR, OneCycle and LRRangeTest)"));
    return;
  }
  if (std::find(kDeepSpeedSchedulers.begin(), kDeepSpeedSchedulers.end(), *name) ==
      kDeepSpeedSchedulers.end()) {
    r.error("type", str("DeepSpeed does not recognize LR scheduler ", *name,
                        did_you_mean_suffix(*name, kDeepSpeedSchedulers)));
    return;
  }
  SectionReader p(params ? *params : empty_object(), "scheduler.params", diag);
  std::optional<sched::SchedulerSpec> spec;
  if (*name == "WarmupLR") {
    p.check_unknown_keys(keys::kWarmupLRParams, true);
    spec = read_warmup(p);
  } else if (*name == "WarmupDecayLR") {
    p.check_unknown_keys(keys::kWarmupDecayLRParams, true);
    spec = read_warmup_decay(p);
  } else if (*name == "WarmupCosineLR") {
    p.check_unknown_keys(keys::kWarmupCosineLRParams, true);
    spec = read_warmup_cosine(p);
  } else if (*name == "OneCycle") {
    p.check_unknown_keys(keys::kOneCycleParams, true);
    spec = read_one_cycle(p);
  } else {
    p.check_unknown_keys(keys::kLRRangeTestParams, true);
    spec = read_range_test(p);
  }
  out.scheduler = spec;
}

}  // namespace zrt::config::detail
