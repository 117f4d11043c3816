// to_json(ResolvedConfig): writes every effective value back as a DeepSpeed config (canonical
// key names, defaults included) so users can see exactly what a run will use and feed it back.
#include <cmath>

#include "config/resolved.h"
#include "core/error.h"
#include "core/logging.h"

namespace zrt::config {
namespace {

Json number_or_list(const std::vector<double>& values) {
  if (values.size() == 1) return values.front();
  return Json(values);
}

const char* device_name(zero::OffloadDevice device) {
  switch (device) {
    case zero::OffloadDevice::kNone:
      return "none";
    case zero::OffloadDevice::kCpu:
      return "cpu";
    case zero::OffloadDevice::kNvme:
      return "nvme";
  }
  return "none";
}

Json optional_string(const std::string& s) { return s.empty() ? Json(nullptr) : Json(s); }

Json fp16_json(const Fp16Config& fp16) {
  const optim::LossScaleOptions& ls = fp16.loss_scale;
  int exponent = 0;
  std::frexp(ls.initial_scale, &exponent);  // initial_scale = 2^(exponent - 1)
  Json j = Json::object();
  j["enabled"] = fp16.enabled;
  j["auto_cast"] = fp16.auto_cast;
  j["loss_scale"] = ls.dynamic ? 0.0 : ls.static_scale;
  j["initial_scale_power"] = exponent - 1;
  j["loss_scale_window"] = ls.scale_window;
  j["hysteresis"] = ls.hysteresis;
  j["consecutive_hysteresis"] = ls.consecutive_hysteresis;
  j["min_loss_scale"] = ls.min_scale;
  return j;
}

Json zero_json(const zero::ZeroOptions& z, const ZeroExtraOptions& extra) {
  Json j = Json::object();
  j["stage"] = z.stage;
  j["contiguous_gradients"] = z.contiguous_gradients;
  j["reduce_scatter"] = z.reduce_scatter;
  j["reduce_bucket_size"] = z.reduce_bucket_size;
  j["use_multi_rank_bucket_allreduce"] = z.use_multi_rank_bucket_allreduce;
  j["allgather_partitions"] = z.allgather_partitions;
  j["allgather_bucket_size"] = z.allgather_bucket_size;
  j["overlap_comm"] = z.effective_overlap_comm();
  j["load_from_fp32_weights"] = z.load_from_fp32_weights;
  j["offload_param"] = {{"device", device_name(z.offload_param.device)},
                        {"nvme_path", optional_string(z.offload_param.nvme_path)},
                        {"buffer_count", z.offload_param.buffer_count},
                        {"buffer_size", z.offload_param.buffer_size},
                        {"max_in_cpu", z.offload_param.max_in_cpu},
                        {"pin_memory", z.offload_param.pin_memory}};
  const auto& oo = z.offload_optimizer;
  j["offload_optimizer"] = {
      {"device", device_name(oo.device)},  {"nvme_path", optional_string(oo.nvme_path)},
      {"buffer_count", oo.buffer_count},   {"pin_memory", oo.pin_memory},
      {"pipeline_read", oo.pipeline_read}, {"pipeline_write", oo.pipeline_write},
      {"fast_init", oo.fast_init},         {"ratio", oo.ratio}};
  j["sub_group_size"] = z.sub_group_size;
  j["stage3_prefetch_bucket_size"] = z.prefetch_bucket_size;
  j["stage3_param_persistence_threshold"] = z.param_persistence_threshold;
  j["stage3_model_persistence_threshold"] = z.model_persistence_threshold;
  j["stage3_max_live_parameters"] = z.max_live_parameters;
  j["stage3_max_reuse_distance"] = z.max_reuse_distance;
  j["stage3_gather_16bit_weights_on_model_save"] = z.gather_16bit_weights_on_model_save;
  j["stage3_module_granularity_threshold"] = extra.module_granularity_threshold;
  j["stage3_use_all_reduce_for_fetch_params"] = extra.use_all_reduce_for_fetch_params;
  j["ignore_unused_parameters"] = z.ignore_unused_parameters;
  j["round_robin_gradients"] = z.round_robin_gradients;
  j["memory_efficient_linear"] = extra.memory_efficient_linear;
  j["pipeline_loading_checkpoint"] = extra.pipeline_loading_checkpoint;
  j["override_module_apply"] = extra.override_module_apply;
  j["log_trace_cache_warnings"] = extra.log_trace_cache_warnings;
  // Features ZeroRT does not implement, at the only values it accepts.
  j["elastic_checkpoint"] = false;
  j["legacy_stage1"] = extra.legacy_stage1;
  // ZeRO++.
  j["zero_hpz_partition_size"] = z.zeropp.hpz_partition_size;
  j["zero_quantized_weights"] = z.zeropp.quantized_weights;
  j["zero_quantized_nontrainable_weights"] = z.zeropp.quantized_nontrainable_weights;
  j["zero_quantized_gradients"] = z.zeropp.quantized_gradients;
  return j;
}

Json optimizer_json(const optim::OptimizerSpec& spec) {
  Json params = Json::object();
  if (spec.kind == optim::OptimizerKind::kSgd) {
    params = {{"lr", spec.sgd.lr},
              {"momentum", spec.sgd.momentum},
              {"dampening", spec.sgd.dampening},
              {"weight_decay", spec.sgd.weight_decay},
              {"nesterov", spec.sgd.nesterov}};
  } else {
    const optim::AdamOptions& a = spec.adam;
    params = {{"lr", a.lr},
              {"betas", {a.beta1, a.beta2}},
              {"eps", a.eps},
              {"weight_decay", a.weight_decay},
              {"bias_correction", a.bias_correction},
              {"adam_w_mode", a.adam_w_mode},
              {"torch_adam", a.torch_adam}};
    // torch.optim.AdamW / Adam have no bias_correction argument (they always correct).
    if (a.torch_adam) params.erase("bias_correction");
  }
  return {{"type", spec.type_name}, {"params", params}};
}

Json warmup_params(const sched::WarmupLROptions& o) {
  // An unset warmup_max_lr (WarmupLR) is each group's lr: null, as DeepSpeed's None.
  return {
      {"warmup_min_lr", number_or_list(o.warmup_min_lr)},
      {"warmup_max_lr", o.warmup_max_lr.empty() ? Json(nullptr) : number_or_list(o.warmup_max_lr)},
      {"warmup_num_steps", o.warmup_num_steps},
      {"warmup_type", sched::warmup_type_name(o.warmup_type)},
      {"last_batch_iteration", o.last_batch_iteration}};
}

Json scheduler_json(const sched::SchedulerSpec& spec) {
  if (auto* o = std::get_if<sched::WarmupLROptions>(&spec)) {
    return {{"type", "WarmupLR"}, {"params", warmup_params(*o)}};
  }
  if (auto* o = std::get_if<sched::WarmupDecayLROptions>(&spec)) {
    Json params = warmup_params(o->warmup);
    params["total_num_steps"] = o->total_num_steps;
    return {{"type", "WarmupDecayLR"}, {"params", params}};
  }
  if (auto* o = std::get_if<sched::WarmupCosineLROptions>(&spec)) {
    return {{"type", "WarmupCosineLR"},
            {"params",
             {{"total_num_steps", o->total_num_steps},
              {"warmup_min_ratio", o->warmup_min_ratio},
              {"warmup_num_steps", o->warmup_num_steps},
              {"cos_min_ratio", o->cos_min_ratio},
              {"warmup_type", sched::warmup_type_name(o->warmup_type)},
              {"last_batch_iteration", o->last_batch_iteration}}}};
  }
  if (auto* o = std::get_if<sched::OneCycleOptions>(&spec)) {
    Json params = {{"cycle_min_lr", number_or_list(o->cycle_min_lr)},
                   {"cycle_max_lr", number_or_list(o->cycle_max_lr)},
                   {"decay_lr_rate", o->decay_lr_rate},
                   {"cycle_first_step_size", o->cycle_first_step_size},
                   {"cycle_second_step_size", nullptr},
                   {"cycle_first_stair_count", o->cycle_first_stair_count},
                   {"cycle_second_stair_count", nullptr},
                   {"decay_step_size", o->decay_step_size},
                   {"cycle_momentum", o->cycle_momentum},
                   {"cycle_min_mom", number_or_list(o->cycle_min_mom)},
                   {"cycle_max_mom", number_or_list(o->cycle_max_mom)},
                   {"decay_mom_rate", o->decay_mom_rate},
                   {"last_batch_iteration", o->last_batch_iteration}};
    if (o->cycle_second_step_size) params["cycle_second_step_size"] = *o->cycle_second_step_size;
    if (o->cycle_second_stair_count) {
      params["cycle_second_stair_count"] = *o->cycle_second_stair_count;
    }
    return {{"type", "OneCycle"}, {"params", params}};
  }
  if (auto* o = std::get_if<sched::LRRangeTestOptions>(&spec)) {
    return {{"type", "LRRangeTest"},
            {"params",
             {{"lr_range_test_min_lr", number_or_list(o->lr_range_test_min_lr)},
              {"lr_range_test_step_size", o->lr_range_test_step_size},
              {"lr_range_test_step_rate", o->lr_range_test_step_rate},
              {"lr_range_test_staircase", o->lr_range_test_staircase},
              {"last_batch_iteration", o->last_batch_iteration}}}};
  }
  ZRT_INTERNAL_ASSERT(false, "a config scheduler is always one of the five DeepSpeed schedules");
  return nullptr;
}

const char* tag_validation_name(ckpt::TagValidation mode) {
  switch (mode) {
    case ckpt::TagValidation::kIgnore:
      return "IGNORE";
    case ckpt::TagValidation::kWarn:
      return "WARN";
    case ckpt::TagValidation::kFail:
      return "FAIL";
  }
  return "WARN";
}

Json monitor_json(const MonitorConfig& m) {
  return {{"enabled", m.enabled}, {"output_path", m.output_path}, {"job_name", m.job_name}};
}

}  // namespace

Json to_json(const ResolvedConfig& rc) {
  Json j = Json::object();
  j["train_batch_size"] = rc.batch.train_batch_size;
  j["train_micro_batch_size_per_gpu"] = rc.batch.train_micro_batch_size_per_gpu;
  j["gradient_accumulation_steps"] = rc.batch.gradient_accumulation_steps;
  j["gradient_clipping"] = rc.gradient_clipping;
  j["steps_per_print"] = rc.steps_per_print ? Json(*rc.steps_per_print) : Json(nullptr);
  j["wall_clock_breakdown"] = rc.wall_clock_breakdown;
  j["memory_breakdown"] = rc.memory_breakdown;
  j["dump_state"] = rc.dump_state;
  j["prescale_gradients"] = rc.prescale_gradients;
  j["gradient_predivide_factor"] = rc.gradient_predivide_factor;
  j["communication_data_type"] = dtype_name(rc.effective_communication_data_type());
  j["data_types"] = {{"grad_accum_dtype", dtype_name(rc.effective_grad_accum_dtype())}};
  j["fp16"] = fp16_json(rc.fp16);
  j["bf16"] = {{"enabled", rc.bf16.enabled},
               {"immediate_grad_update", rc.bf16.immediate_grad_update}};
  j["zero_optimization"] = zero_json(rc.zero, rc.zero_extra);
  if (rc.optimizer) j["optimizer"] = optimizer_json(*rc.optimizer);
  if (rc.scheduler) j["scheduler"] = scheduler_json(*rc.scheduler);
  j["checkpoint"] = {
      {"tag_validation", tag_validation_name(rc.checkpoint.tag_validation)},
      {"use_node_local_storage", rc.checkpoint.use_node_local_storage},
      {"load_universal", rc.checkpoint.load_universal},
      {"parallel_write", {{"pipeline_stage", rc.checkpoint.parallel_write_pipeline_stage}}}};
  j["tensorboard"] = monitor_json(rc.tensorboard);
  j["csv_monitor"] = monitor_json(rc.csv_monitor);
  j["zero_allow_untested_optimizer"] = rc.zero_allow_untested_optimizer;
  j["zero_force_ds_cpu_optimizer"] = rc.zero_force_ds_cpu_optimizer;
  j["dataloader_drop_last"] = rc.dataloader_drop_last;
  if (rc.sequence_parallel_size > 1) j["sequence_parallel_size"] = rc.sequence_parallel_size;
  j["aio"] = {{"block_size", rc.aio.block_size},
              {"queue_depth", rc.aio.queue_depth},
              {"intra_op_parallelism", rc.aio.thread_count},
              {"single_submit", rc.aio.single_submit},
              {"overlap_events", rc.aio.overlap_events},
              {"use_gds", false}};
  j["zrt"] = {{"comm_timeout", rc.comm.timeout_seconds},
              {"debug_collectives", rc.comm.debug_collectives}};
  return j;
}

void log_resolved_config(const ResolvedConfig& resolved) {
  ZRT_LOG_DEBUG("DeepSpeed config (resolved):\n", to_json(resolved).dump(2));
}

}  // namespace zrt::config
