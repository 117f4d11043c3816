#include "config/hf_plan.h"

#include "config/hf_accelerate.h"
#include "config/section_reader.h"
#include "core/error.h"
#include "core/logging.h"

namespace zrt::config {

const char* optim_sched_case_name(OptimSchedCase c) {
  switch (c) {
    case OptimSchedCase::kConfigOptimizerConfigScheduler:
      return "DeepSpeed optimizer + DeepSpeed scheduler (both from the config)";
    case OptimSchedCase::kConfigOptimizerHfScheduler:
      return "DeepSpeed optimizer (config) + HF scheduler (--lr_scheduler_type)";
    case OptimSchedCase::kHfOptimizerConfigScheduler:
      return "HF optimizer (--optim) + DeepSpeed scheduler (config)";
    case OptimSchedCase::kHfOptimizerHfScheduler:
      return "HF optimizer (--optim) + HF scheduler (--lr_scheduler_type)";
  }
  return "?";
}

optim::OptimizerSpec hf_optimizer_from_args(const TrainingArguments& args) {
  optim::OptimizerSpec spec;
  if (args.optim == "adamw_torch" || args.optim == "adamw_torch_fused") {
    spec.kind = optim::OptimizerKind::kAdamW;
    spec.type_name = "AdamW";
    spec.adam.lr = args.learning_rate;
    spec.adam.beta1 = args.adam_beta1;
    spec.adam.beta2 = args.adam_beta2;
    spec.adam.eps = args.adam_epsilon;
    spec.adam.weight_decay = args.weight_decay;
    spec.adam.adam_w_mode = true;
    spec.adam.torch_adam = true;
    return spec;
  }
  if (args.optim == "sgd") {
    spec.kind = optim::OptimizerKind::kSgd;
    spec.type_name = "SGD";
    spec.sgd.lr = args.learning_rate;
    spec.sgd.weight_decay = args.weight_decay;
    return spec;
  }
  if (args.optim == "adafactor") {
    throw ConfigError(
        "--adafactor / --optim adafactor: Adafactor is not implemented by ZeroRT; use --optim "
        "adamw_torch or an \"optimizer\" section in the DeepSpeed config");
  }
  throw ConfigError(str("--optim ", args.optim,
                        ": not implemented by ZeroRT (use adamw_torch, adamw_torch_fused or sgd, "
                        "or an \"optimizer\" section in the DeepSpeed config)"));
}

sched::HfScheduleOptions hf_schedule_from_args(const TrainingArguments& args,
                                               int64_t num_training_steps) {
  using sched::HfScheduleType;
  sched::HfScheduleOptions o;
  std::vector<std::string_view> kwargs;
  const std::string& type = args.lr_scheduler_type;
  if (type == "linear") {
    o.type = HfScheduleType::kLinear;
  } else if (type == "cosine") {
    o.type = HfScheduleType::kCosine;
    kwargs = {"num_cycles"};
  } else if (type == "cosine_with_restarts") {
    o.type = HfScheduleType::kCosineWithRestarts;
    o.num_cycles = 1;
    kwargs = {"num_cycles"};
  } else if (type == "polynomial") {
    o.type = HfScheduleType::kPolynomial;
    kwargs = {"lr_end", "power"};
  } else if (type == "constant") {
    o.type = HfScheduleType::kConstant;
  } else if (type == "constant_with_warmup") {
    o.type = HfScheduleType::kConstantWithWarmup;
  } else {
    throw ConfigError(str("--lr_scheduler_type ", type,
                          ": not implemented by ZeroRT (use linear, cosine, cosine_with_restarts, "
                          "polynomial, constant or constant_with_warmup)"));
  }
  Diagnostics diag;
  SectionReader r(args.lr_scheduler_kwargs.is_object() ? args.lr_scheduler_kwargs : empty_object(),
                  "lr_scheduler_kwargs", diag);
  // get_scheduler passes no kwargs to the two constant schedules (so nothing there is refused).
  if (o.type != HfScheduleType::kConstant && o.type != HfScheduleType::kConstantWithWarmup) {
    r.check_unknown_keys(kwargs, /*strict=*/true);
  }
  if (type == "cosine_with_restarts") {
    if (auto v = r.get_int("num_cycles", 1)) o.num_cycles = static_cast<double>(*v);
  } else if (auto v = r.get_number("num_cycles", NumberRange::positive()); v && type == "cosine") {
    o.num_cycles = *v;
  }
  if (type == "polynomial") {
    if (auto v = r.get_number("lr_end", NumberRange::non_negative())) o.lr_end = *v;
    if (auto v = r.get_number("power", NumberRange::positive())) o.power = *v;
  }
  diag.throw_if_errors();
  o.num_training_steps = num_training_steps;
  o.num_warmup_steps = args.get_warmup_steps(num_training_steps);
  return o;
}

OptimSchedPlan deepspeed_optim_sched(HfTrainerDeepSpeedConfig& hf, const TrainingArguments& args,
                                     std::optional<int64_t> num_training_steps) {
  Json& config = hf.config().json();
  OptimSchedPlan plan;
  const bool config_optimizer = config.contains("optimizer");
  const bool config_scheduler = config.contains("scheduler");
  if (config_optimizer) {
    if (args.adafactor) {
      throw ConfigError(
          "--adafactor was passed, but also found `optimizer` configured in the DeepSpeed "
          "config. Only one optimizer can be configured.");
    }
  } else {
    if (hf.config().is_offload()) {
      plan.notes.push_back(
          "Detected ZeRO Offload and non-DeepSpeed optimizers: This combination should work as "
          "long as the custom optimizer has both CPU and GPU implementation (except LAMB)");
    }
    plan.hf_optimizer = hf_optimizer_from_args(args);
    config["zero_allow_untested_optimizer"] = true;
    const Json device = hf.config().get_value("zero_optimization.offload_optimizer.device", "none");
    const Json force = config.value("zero_force_ds_cpu_optimizer", Json(true));
    if (device != "none" && !device.is_null() && force != false) {
      plan.notes.push_back(
          "accelerate replaces an HF optimizer with DeepSpeedCPUAdam when the optimizer is "
          "offloaded (set \"zero_force_ds_cpu_optimizer\": false to keep it)");
    }
  }
  if (!config_scheduler) {
    if (!num_training_steps) {
      plan.notes.push_back(
          "num_training_steps is unknown: the HF schedule is shown with 0 training steps");
    }
    plan.hf_scheduler = hf_schedule_from_args(args, num_training_steps.value_or(0));
  }
  plan.which = config_optimizer
                   ? (config_scheduler ? OptimSchedCase::kConfigOptimizerConfigScheduler
                                       : OptimSchedCase::kConfigOptimizerHfScheduler)
                   : (config_scheduler ? OptimSchedCase::kHfOptimizerConfigScheduler
                                       : OptimSchedCase::kHfOptimizerHfScheduler);
  return plan;
}

void prepare_inference(HfTrainerDeepSpeedConfig& hf) {
  if (!hf.config().is_zero3()) {
    throw ConfigError(
        "ZeRO inference only makes sense with ZeRO Stage 3 - please adjust your config");
  }
  hf.config().del_config_sub_tree("optimizer");
  // transformers deletes "lr_scheduler", a key DeepSpeed never reads; "scheduler" survives.
  hf.config().del_config_sub_tree("lr_scheduler");
}

TrainerConfig prepare_trainer_config(const TrainingArguments& args,
                                     const TrainerConfigOptions& options,
                                     std::optional<DeepSpeedConfig> ds) {
  if (!ds) {
    if (!args.deepspeed) throw UsageError("--deepspeed is required (a DeepSpeed config file)");
    ds = DeepSpeedConfig::from_source(*args.deepspeed);
  }
  HfTrainerDeepSpeedConfig hf(std::move(*ds));
  // Batch sizes count data-parallel ranks: the job's / sequence_parallel_size.
  const int data_parallel =
      options.world_size / sequence_parallel_size(hf.json(), options.world_size);
  hf.trainer_config_process(args, data_parallel, args.auto_find_batch_size);
  accelerate_plugin_rules(hf);
  accelerate_mixed_precision(hf, args);
  std::optional<int64_t> steps = options.num_training_steps;
  if (!steps && args.max_steps > 0) steps = args.max_steps;
  if (!steps && options.inference) steps = 0;  // the Trainer's evaluate/predict path
  try {
    hf.trainer_config_finalize(args, options.model, steps);
  } catch (const ConfigError& mismatch) {
    // transformers stops at the mismatches; DeepSpeed would then find the config's other
    // errors one run later. Report them together: resolve what the config says as it is.
    ResolveOptions as_is;
    as_is.world_size = options.world_size;
    as_is.client_optimizer = true;  // whether an optimizer is needed is not the question here
    as_is.hf_trainer = true;
    try {
      resolve_config(hf.json(), as_is);
    } catch (const ConfigError& others) {
      throw ConfigError(
          str(mismatch.what(), "\nThe DeepSpeed config also has these problems:\n", others.what()));
    }
    throw;
  }

  TrainerConfig out;
  AcceleratePrepareInputs prepare;
  prepare.world_size = data_parallel;
  prepare.model = options.model;
  prepare.num_training_steps_known = steps.has_value();
  if (options.inference) {
    prepare_inference(hf);
  } else {
    prepare.config_optimizer = hf.json().contains("optimizer");
    prepare.config_scheduler = hf.json().contains("scheduler");
    out.plan = deepspeed_optim_sched(hf, args, steps);
    ZRT_LOG_INFO("optimizer/scheduler: ", optim_sched_case_name(out.plan->which));
    for (const auto& note : out.plan->notes) ZRT_LOG_INFO(note);
    // The lr of the optimizer the Trainer hands to accelerate: DummyOptim's 0.001, or HF's.
    prepare.optimizer_lr = prepare.config_optimizer ? 0.001 : args.learning_rate;
  }
  accelerate_prepare_fill(hf, args, prepare);
  out.filled = hf.json();
  ResolveOptions resolve_options;
  resolve_options.world_size = options.world_size;
  resolve_options.client_optimizer = out.plan && out.plan->hf_optimizer.has_value();
  resolve_options.hf_trainer = true;
  out.resolved = resolve_config(out.filled, resolve_options);
  return out;
}

}  // namespace zrt::config
