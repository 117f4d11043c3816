// Engine construction: dtype cast, cross-rank model check and broadcast, ZeRO components,
// optimizer, scheduler, loss scaler. The per-step data path is in runtime/engine_step.cpp.
#include "runtime/engine.h"

#include <algorithm>
#include <functional>
#include <optional>

#include "comm/counting_comm.h"
#include "comm/desync_check.h"
#include "config/resolved.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/shard.h"
#include "core/strings.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"
#include "runtime/checkpoint_access.h"
#include "runtime/engine_checkpointer.h"
#include "runtime/fault_injection.h"
#include "runtime/flat_model_states.h"
#include "runtime/memory_report.h"
#include "runtime/model_states.h"
#include "runtime/stage3_model_states.h"
#include "runtime/step_report.h"
#include "sched/lr_scheduler.h"
#include "zero/activation_checkpoint.h"
#include "zero/flat_layout.h"
#include "zero/scalar_type.h"
#include "zero/shard_unit.h"
#include "zero/stage3_layout.h"
#include "zrt/build_config.h"

namespace zrt {
namespace {

// A 64-bit FNV-1a hash of every parameter's and buffer's name, shape and dtype.
int64_t architecture_fingerprint(torch::nn::Module& model) {
  uint64_t h = 1469598103934665603ULL;
  auto mix = [&h](const std::string& s) {
    for (unsigned char c : s) {
      h ^= c;
      h *= 1099511628211ULL;
    }
  };
  for (const auto& p : model.named_parameters()) {
    mix(p.key());
    mix(zrt::str(p.value().sizes(), p.value().scalar_type(), p.value().requires_grad(),
                 zero::storage_allocated(p.value())));
  }
  for (const auto& b : model.named_buffers()) {
    mix(b.key());
    mix(zrt::str(b.value().sizes(), b.value().scalar_type()));
  }
  return static_cast<int64_t>(h);
}

// Module::to(dtype), except for parameters built without storage (zrt::defer_parameters), which
// change dtype without data (Note [Deferred parameters] in zero/stage3_layout.cpp); those need
// ZeRO-3, which partitions shapes alone.
void cast_model(torch::nn::Module& model, at::ScalarType dtype, int stage) {
  std::vector<std::string> deferred;
  for (const auto& p : model.named_parameters()) {
    if (!zero::storage_allocated(p.value())) deferred.push_back(p.key());
  }
  if (deferred.empty()) {
    model.to(dtype);
    return;
  }
  ZRT_CHECK_AS(ConfigError, stage == 3, "the model's parameters were built without storage (",
               deferred.size(), " of them, e.g. '", deferred.front(),
               "': zrt::defer_parameters); only ZeRO stage 3 partitions such a model, the config "
               "asks for stage ",
               stage);
  at::NoGradGuard no_grad;
  for (const auto& p : model.named_parameters()) {
    at::Tensor t = p.value();
    if (!t.is_floating_point() || t.scalar_type() == dtype) continue;
    if (zero::storage_allocated(t)) {
      t.set_data(t.to(dtype));
    } else {
      at::Tensor shell = at::empty({0}, t.options().dtype(dtype));
      shell.unsafeGetTensorImpl()->set_sizes_contiguous(t.sizes());
      t.set_data(shell);
      zero::release_storage(t);
    }
  }
  for (const auto& b : model.named_buffers()) {
    if (b.value().is_floating_point()) b.value().set_data(b.value().to(dtype));
  }
}

// fp16 on CPU parameters needs fp16 CPU kernels: refuse the job up front (a ConfigError, exit 2)
// instead of failing inside the first forward.
void check_dtype_supported(at::ScalarType dtype, torch::nn::Module& model) {
  if (dtype != at::kHalf || cpu_half_matmul_supported()) return;
  for (const auto& p : model.parameters()) {
    ZRT_CHECK_AS(ConfigError, !p.device().is_cpu(),
                 "fp16 (\"fp16\": {\"enabled\": true} / --fp16) on the CPU needs fp16 CPU "
                 "kernels, which this LibTorch (",
                 ZRT_TORCH_VERSION,
                 ") does not have: use bf16 (\"bf16\": {\"enabled\": true} / --bf16), "
                 "or build ZeroRT against LibTorch 2.x");
  }
}

}  // namespace

// Probed once with a 1x1 product, so it follows the LibTorch actually loaded (1.13 has no Half
// addmm kernel on the CPU).
bool cpu_half_matmul_supported() {
  static const bool ok = [] {
    try {
      const at::Tensor a = at::ones({1, 1}, at::kHalf);
      at::addmm(a, a, a);
      return true;
    } catch (const c10::Error&) {
      return false;
    }
  }();
  return ok;
}

ParamGroupRule no_weight_decay_for(std::vector<std::string> name_substrings) {
  ParamGroupRule rule;
  rule.match = [subs = std::move(name_substrings)](const std::string& name) {
    for (const auto& s : subs) {
      if (name.find(s) != std::string::npos) return true;
    }
    return false;
  };
  rule.weight_decay = 0.0;
  return rule;
}

Engine::Engine(std::shared_ptr<torch::nn::Module> model, config::ResolvedConfig config,
               std::shared_ptr<comm::Comm> comm, EngineOptions options)
    : model_(std::move(model)), config_(std::move(config)) {
  ZRT_CHECK(model_ != nullptr, "initialize: the model is null");
  ZRT_CHECK(comm != nullptr, "initialize: the communicator is null");
  if (config_.comm.debug_collectives &&
      dynamic_cast<comm::DesyncCheckComm*>(comm.get()) == nullptr) {
    comm = std::make_shared<comm::DesyncCheckComm>(std::move(comm));
  }
  comm_ = std::make_shared<comm::CountingComm>(std::move(comm));
  storage_ = runtime::maybe_kill_in_save(std::make_shared<ckpt::PosixStorage>(), comm_->rank());
  set_log_rank(comm_->rank());
  reporter_ = std::make_unique<runtime::StepReporter>(config_, comm_->rank());
  ZRT_CHECK_AS(ConfigError,
               config_.batch.world_size * config_.sequence_parallel_size == comm_->size(),
               "the config was resolved for world size ",
               config_.batch.world_size * config_.sequence_parallel_size,
               " but the communicator has ", comm_->size(), " ranks");
  ZRT_CHECK_AS(ConfigError, config_.zero.stage >= 0 && config_.zero.stage <= 3,
               "zero_optimization.stage must be 0, 1, 2 or 3, got ", config_.zero.stage);
  model_dtype_ = zero::scalar_type_of(config_.model_dtype);
  check_dtype_supported(model_dtype_, *model_);
  see_memory_usage("ZeroRT Engine: before partitioning the model");
  cast_model(*model_, model_dtype_, config_.zero.stage);
  check_and_broadcast_model();

  std::vector<zero::NamedParam> named;
  for (const auto& p : model_->named_parameters()) named.push_back({p.key(), p.value()});
  zero::CollectedParams collected = zero::collect_params(named);
  aliases_ = collected.aliases;
  ZRT_CHECK(!collected.trainable.empty(), "the model has no trainable parameters");
  std::vector<zero::GroupRule> rules;
  for (const ParamGroupRule& r : options.param_groups) rules.push_back({r.match});
  std::vector<int> rule_of_group;
  auto groups = zero::assign_groups(collected.trainable, rules, &rule_of_group);

  if (config_.zero.stage == 3) {
    // Without an optimizer the engine only runs forwards (backward() and step() refuse).
    build_stage3(std::move(groups), collected,
                 /*inference=*/!config_.optimizer && !options.client_optimizer);
  } else {
    build_flat(std::move(groups));
  }

  // Per-group overrides of the rules that formed each group.
  std::vector<ParamGroupRule> group_rules;
  for (int r : rule_of_group) {
    group_rules.push_back(r >= 0 ? options.param_groups[r] : ParamGroupRule{});
  }
  options.param_groups = std::move(group_rules);
  build_optimizer(options);
  loss_scaler_ = std::make_unique<optim::LossScaler>(config_.effective_loss_scale());
  set_activation_checkpointing(
      config_.activation_checkpointing);  // Note [Activation checkpointing]
  config::log_resolved_config(config_);
  see_memory_usage("ZeroRT Engine: after building the model states and the optimizer");
  if (config_.dump_state) dump_state();
}

void Engine::see_memory_usage(const char* where) {
  if (!config_.memory_breakdown) return;
  const runtime::ModelStateBytes bytes = states_ ? model_state_bytes() : runtime::ModelStateBytes{};
  for (const std::string& line :
       runtime::format_memory_report(where, runtime::read_memory_usage(), bytes)) {
    ZRT_LOG_INFO_ALL(line);
  }
  runtime::reset_peak_rss();
}

void Engine::dump_state() const {
  if (comm_->rank() != 0) return;
  const auto& b = config_.batch;
  const runtime::ModelStateBytes bytes = model_state_bytes();
  std::vector<std::pair<std::string, std::string>> items = {
      {"zero_stage", str(config_.zero.stage)},
      {"world_size", str(comm_->size())},
      {"communicator", str(comm_->backend_name(), ", timeout ", comm_->timeout_seconds(), " s")},
      {"model_dtype", std::string(c10::toString(model_dtype_))},
      {"communication_data_type", dtype_name(config_.effective_communication_data_type())},
      {"train_batch_size", str(b.train_batch_size)},
      {"train_micro_batch_size_per_gpu", str(b.train_micro_batch_size_per_gpu)},
      {"gradient_accumulation_steps", str(b.gradient_accumulation_steps)},
      {"gradient_clipping", str(config_.gradient_clipping)},
      {"optimizer", optimizer_ ? optimizer_->name() : "none (inference)"},
      {"lr_scheduler", scheduler_ ? scheduler_->name() : "none"},
      {"loss_scale", str(loss_scale())},
      {"overlap_comm", config_.zero.effective_overlap_comm() ? "true" : "false"},
      {"reduce_bucket_size", str(config_.zero.reduce_bucket_size)},
      {"allgather_bucket_size", str(config_.zero.allgather_bucket_size)},
      {"offload_optimizer", config_.zero.offload_optimizer_enabled() ? "cpu" : "none"},
      {"model_state_bytes_rank0", str("params ", bytes.params, ", grads ", bytes.grads, ", master ",
                                      bytes.master, ", optimizer ", bytes.optimizer)},
      {"global_steps", str(global_steps_)},
      {"global_samples", str(global_samples_)},
      {"micro_steps", str(micro_steps_)},
      {"skipped_steps", str(skipped_steps_)},
  };
  for (const std::string& line : runtime::format_state_dump("ZeroRT Engine", std::move(items))) {
    ZRT_LOG_INFO(line);
  }
}

void Engine::build_flat(std::vector<std::vector<zero::NamedParam>> groups) {
  states_ = std::make_unique<runtime::FlatModelStates>(std::move(groups), comm_, config_.zero,
                                                       config_.gradient_options(), config_.aio);
}

namespace {

// ZeRO-3 with most of the trainable parameters in no ShardUnit would silently be ZeRO-2 for
// them: LibTorch modules have no forward hooks, so only the program's units are gathered and
// released (Note [ShardUnit], zero/shard_unit.h). Said once per job.
void warn_unpartitioned(const zero::Stage3Layout& layout, int world_size) {
  if (world_size < 2) return;
  int64_t trainable = 0, outside = 0;
  for (const zero::Stage3Param& p : layout.params()) {
    if (p.group < 0) continue;
    trainable += p.numel;
    if (p.unit == layout.num_units()) outside += p.numel;
  }
  if (trainable == 0 || outside * 2 <= trainable) return;
  ZRT_LOG_WARN("ZeRO-3: ", outside, " of the ", trainable, " trainable parameter elements (",
               (outside * 100) / trainable, "%) are in no zrt::ShardUnit",
               layout.num_units() == 0 ? " (the model has none)" : "",
               ", so they stay whole on every rank; only their gradients and optimizer states ",
               "are partitioned. Declare the repeated blocks as zrt::ShardUnit<Block> to ",
               "partition them (README, \"Using ZeroRT from C++\"; models/gpt.h)");
}

// zero_optimization.leaf_module (Note [Leaf modules], zero/leaf_modules.h).
LeafModules leaf_modules(const config::ResolvedConfig& config) {
  const config::ZeroExtraOptions& z = config.zero_extra;
  return {z.leaf_module_classes, z.leaf_module_names, z.leaf_module_name_suffixes};
}

// Says which leaves were found (rank 0), and warns as DeepSpeed does about configured names and
// suffixes that match nothing, and about leaves whose parameters therefore stay whole.
void report_leaves(const zero::ShardUnits& found, const config::ResolvedConfig& config, int rank) {
  if (rank != 0) return;
  const config::ZeroExtraOptions& z = config.zero_extra;
  auto matched = [&](const std::string& name) {
    return std::find(found.leaves.begin(), found.leaves.end(), name) != found.leaves.end();
  };
  for (const std::string& name : z.leaf_module_names) {
    if (!matched(name)) {
      ZRT_LOG_WARN("zero_optimization.leaf_module.names: the model has no module named '", name,
                   "'");
    }
  }
  for (const std::string& suffix : z.leaf_module_name_suffixes) {
    const bool any = std::any_of(found.leaves.begin(), found.leaves.end(),
                                 [&](const std::string& n) { return ends_with(n, suffix); });
    if (!any) {
      ZRT_LOG_WARN("zero_optimization.leaf_module.name_suffixes: no module name ends in '",
                   suffix, "'");
    }
  }
  if (found.leaves.empty() && z.leaf_module_classes != config::ZeroExtraOptions{}.leaf_module_classes) {
    ZRT_LOG_WARN("zero_optimization.leaf_module: no module of the model is of the classes given");
  }
  auto label = [](const std::string& name) {
    return name.empty() ? std::string("the model") : "'" + name + "'";
  };
  for (const std::string& name : found.leaves) {
    const bool whole = std::find(found.leaves_in_no_unit.begin(), found.leaves_in_no_unit.end(),
                                 name) != found.leaves_in_no_unit.end();
    if (whole) {
      ZRT_LOG_WARN("ZeRO-3: leaf module ", label(name), " is neither a zrt::ShardUnit nor inside ",
                   "one, so its parameters stay whole on every rank; declare it as ",
                   "zrt::ShardUnit<M> to partition it as one unit (Note [Leaf modules], ",
                   "zero/leaf_modules.h)");
    } else {
      ZRT_LOG_INFO("ZeRO-3: leaf module ", label(name), ": gathered with its unit, whole");
    }
  }
}

}  // namespace

void Engine::build_stage3(std::vector<std::vector<zero::NamedParam>> groups,
                          const zero::CollectedParams& collected, bool inference) {
  zero::ShardUnits found = zero::find_shard_units(*model_, collected.aliases, leaf_modules(config_));
  report_leaves(found, config_, comm_->rank());
  for (const auto& [alias, owner] : collected.aliases) {
    ZRT_LOG_INFO("ZeRO-3: '", owner, "' is also registered as '", alias,
                 "' and stays whole on every rank; to partition it, register it once and use it ",
                 "again through its unit's run() (zero/shard_unit.h)");
  }
  const zero::ZeroOptions& z = config_.zero;
  std::optional<zero::ParamSwapOptions> swap;
  if (z.offload_param.device == zero::OffloadDevice::kNvme) {
    swap.emplace();
    swap->nvme_path = z.offload_param.nvme_path;
    swap->rank = comm_->rank();
    swap->aio = config_.aio;
    swap->buffer_count = z.offload_param.buffer_count;
    swap->buffer_size = z.offload_param.buffer_size;
    swap->max_in_cpu = z.offload_param.max_in_cpu;
  }
  auto layout = std::make_unique<zero::Stage3Layout>(
      groups, collected.frozen, found.unit_of, static_cast<int>(found.units.size()), comm_->size(),
      comm_->rank(), z.param_persistence_threshold, z.model_persistence_threshold,
      z.offload_param_enabled(), swap ? &*swap : nullptr, z.zeropp.quantized_nontrainable_weights);
  layout->partition();
  warn_unpartitioned(*layout, comm_->size());
  states_ = std::make_unique<runtime::Stage3ModelStates>(std::move(layout), std::move(found.units),
                                                         comm_, z, config_.gradient_options(),
                                                         inference, config_.aio);
}

Engine::~Engine() = default;

void Engine::check_and_broadcast_model() {
  at::NoGradGuard no_grad;
  const int n = comm_->size();
  at::Tensor mine = at::tensor({architecture_fingerprint(*model_)}, at::kLong);
  at::Tensor all = at::empty({n}, at::kLong);
  comm_->all_gather(all, mine);
  for (int r = 1; r < n; ++r) {
    ZRT_CHECK(all[r].item<int64_t>() == all[0].item<int64_t>(), "the model on rank ", r,
              " differs from the model on rank 0 (parameter or buffer names, shapes, dtypes or "
              "requires_grad); every rank must build the same model");
  }
  if (n == 1) return;
  for (const auto& p : model_->named_parameters()) {
    if (!zero::storage_allocated(p.value())) continue;  // deferred: no values yet, on any rank
    at::Tensor t = p.value().detach();
    if (t.is_contiguous()) {
      comm_->broadcast(t, 0);
    } else {
      at::Tensor c = t.contiguous();
      comm_->broadcast(c, 0);
      t.copy_(c);
    }
  }
  for (const auto& b : model_->named_buffers()) {
    at::Tensor t = b.value().contiguous();
    comm_->broadcast(t, 0);
    if (!t.is_same(b.value())) b.value().copy_(t);
  }
}

void Engine::build_optimizer(const EngineOptions& options) {
  std::optional<optim::OptimizerSpec> spec = config_.optimizer;
  if (!spec) spec = options.client_optimizer;
  if (!spec) {
    ZRT_CHECK_AS(ConfigError, config_.zero.stage == 0 || config_.zero.stage == 3, "zero stage ",
                 config_.zero.stage, " requires an optimizer");
    return;  // inference only: backward()/step() say so
  }
  std::vector<optim::ParamGroup> groups;
  auto& targets = states_->targets();
  for (size_t g = 0; g < targets.size(); ++g) {
    optim::ParamGroup pg;
    pg.params.push_back({targets[g].master, targets[g].grad, targets[g].lp});
    pg.lr = options.param_groups[g].lr;
    pg.weight_decay = options.param_groups[g].weight_decay;
    groups.push_back(std::move(pg));
  }
  optimizer_ = optim::make_optimizer(*spec, std::move(groups), states_->swap_space());

  std::optional<sched::SchedulerSpec> sched_spec = config_.scheduler;
  if (!sched_spec) sched_spec = options.client_scheduler;
  if (!sched_spec) return;
  std::vector<double> base_lrs;
  for (size_t g = 0; g < optimizer_->num_groups(); ++g) base_lrs.push_back(optimizer_->lr(g));
  scheduler_ = std::make_unique<sched::LRScheduler>(*sched_spec, base_lrs, optimizer_->has_betas());
  // DeepSpeed's schedulers write the initial lr into the optimizer at construction.
  apply_schedule();
}

// The schedule's current lr (and OneCycle's betas) into the optimizer's groups.
void Engine::apply_schedule() {
  const std::vector<double> lrs = scheduler_->get_lr();
  for (size_t g = 0; g < lrs.size() && g < optimizer_->num_groups(); ++g) {
    optimizer_->set_lr(g, lrs[g]);
  }
  if (const auto& betas = scheduler_->get_momentum()) {
    for (size_t g = 0; g < betas->size(); ++g) {
      optimizer_->set_betas(g, (*betas)[g].beta1, (*betas)[g].beta2);
    }
  }
}

std::vector<double> Engine::get_lr() const {
  std::vector<double> lrs;
  if (!optimizer_) return lrs;
  for (size_t g = 0; g < optimizer_->num_groups(); ++g) lrs.push_back(optimizer_->lr(g));
  return lrs;
}

double Engine::loss_scale() const { return loss_scaler_->cur_scale(); }

void Engine::train(bool on) { model_->train(on); }

at::Tensor Engine::to_model_dtype(const at::Tensor& t) const {
  return at::isFloatingType(t.scalar_type()) ? t.to(model_dtype_) : t;
}

runtime::ModelStateBytes Engine::model_state_bytes() const {
  runtime::ModelStateBytes m = states_->memory();
  // Swapped moments are on disk (counted in m.swapped); reading them back here would move them all.
  if (optimizer_ && states_->swap_space() == nullptr) {
    const optim::OptimizerState st = optimizer_->state_dict();
    for (const auto& [index, ps] : st.state) {
      for (const at::Tensor* t : {&ps.exp_avg, &ps.exp_avg_sq, &ps.momentum_buffer}) {
        if (t->defined()) m.optimizer += t->nbytes();
      }
    }
  }
  return m;
}

// ---- checkpoints: runtime/engine_checkpointer.h ----

std::string Engine::save_checkpoint(const std::string& save_dir,
                                    const std::optional<std::string>& tag,
                                    const ckpt::Value& client_state, bool save_latest) {
  return runtime::EngineCheckpointer(*this).save(save_dir, tag, client_state, save_latest);
}

std::optional<LoadedCheckpoint> Engine::load_checkpoint(const std::string& load_dir,
                                                        const std::optional<std::string>& tag,
                                                        const LoadCheckpointOptions& options) {
  return runtime::EngineCheckpointer(*this).load(load_dir, tag, options);
}

void Engine::load_module_file(const std::string& path, bool strict) {
  runtime::EngineCheckpointer(*this).load_module_file(path, strict);
}

bool Engine::save_16bit_model(const std::string& dir, const std::string& name) {
  return runtime::EngineCheckpointer(*this).save_16bit_model(dir, name);
}

comm::Comm& Engine::comm() { return *comm_; }

comm::CommStats Engine::comm_stats() const { return comm_->stats(); }

void Engine::reset_comm_stats() { comm_->reset(); }

namespace runtime {

ckpt::Storage& CheckpointAccess::storage() const { return *engine_.storage_; }

bool CheckpointAccess::backward_pending() const { return engine_.backward_pending_; }

void CheckpointAccess::restore_counters(int64_t global_steps, int64_t global_samples,
                                        int64_t skipped_steps) const {
  engine_.restore_counters(global_steps, global_samples, skipped_steps);
}

void CheckpointAccess::load_lr_scheduler_state(const Json& state) const {
  engine_.load_lr_scheduler_state(state);
}

}  // namespace runtime

void Engine::restore_counters(int64_t global_steps, int64_t global_samples, int64_t skipped_steps) {
  global_steps_ = global_steps;
  global_samples_ = global_samples;
  skipped_steps_ = skipped_steps;
}

void Engine::load_lr_scheduler_state(const Json& state) {
  ZRT_CHECK(scheduler_ != nullptr, "load_lr_scheduler_state: the engine has no LR scheduler");
  scheduler_->load_state_dict(state);
  apply_schedule();
}

void Engine::begin_parameter_access() { states_->gather_all_params(); }

void Engine::end_parameter_access(std::optional<int> modifier_rank) {
  at::NoGradGuard no_grad;
  if (modifier_rank) {
    ZRT_CHECK(*modifier_rank >= 0 && *modifier_rank < comm_->size(), "modifier rank ",
              *modifier_rank, " is not a rank of a world of size ", comm_->size());
    for (const auto& p : model_->named_parameters())
      comm_->broadcast(p.value().detach(), *modifier_rank);
    // The (broadcast) whole values go back into this rank's partitions; masters that are
    // separate copies follow them.
    states_->write_whole_params(
        [](const std::string&, const at::Tensor& param) { return param.detach(); });
    runtime::masters_from_params(*states_);
  }
  states_->release_gathered_params();
}

}  // namespace zrt
