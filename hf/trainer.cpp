#include "hf/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "checkpoint/layout.h"
#include "checkpoint/manifest.h"
#include "checkpoint/storage.h"
#include "comm/init.h"
#include "config/hf_plan.h"
#include "config/load.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/logging.h"
#include "report/event_file.h"
#include "report/svg_plot.h"
#include "hf/initialize.h"
#include "hf/sampler.h"
#include "zero/shard_unit.h"
#include <unistd.h>

namespace zrt {
namespace fs = std::filesystem;

namespace {

int64_t step_of(const std::string& dir_name) {
  const std::string prefix = "checkpoint-";
  if (dir_name.rfind(prefix, 0) != 0) return -1;
  try {
    return std::stoll(dir_name.substr(prefix.size()));
  } catch (...) {
    return -1;
  }
}

}  // namespace

bool progress_bar_wanted() {
  const char* mode = std::getenv("ZRT_PROGRESS");
  if (mode != nullptr && std::string(mode) == "bar") return true;
  if (mode != nullptr && std::string(mode) == "lines") return false;
  ZRT_CHECK_AS(ConfigError, mode == nullptr || *mode == '\0',
               "ZRT_PROGRESS must be 'bar' or 'lines', got '", mode, "'");
  return isatty(STDOUT_FILENO) != 0;
}

Trainer::~Trainer() = default;

Trainer::Trainer(std::shared_ptr<torch::nn::Module> model, config::TrainingArguments args,
                 std::shared_ptr<Dataset> train_dataset, std::shared_ptr<Dataset> eval_dataset,
                 LossFn loss_fn, TrainerOptions options)
    : model_(std::move(model)),
      args_(std::move(args)),
      train_(std::move(train_dataset)),
      eval_(std::move(eval_dataset)),
      loss_fn_(std::move(loss_fn)),
      options_(std::move(options)) {
  ZRT_CHECK(model_ != nullptr, "Trainer: the model is null");
  ZRT_CHECK(loss_fn_ != nullptr, "Trainer: no loss function");
  args_.validate();  // HF's __post_init__ rules and defaults, for arguments built in code too
  const std::vector<at::Tensor> params = model_->parameters();
  if (!params.empty()) batch_device_ = params.front().device();
  for (const auto& p : params) {
    if (p.requires_grad()) num_params_ += p.numel();
  }
  comm_ = options_.comm ? options_.comm : comm::init_from_env();
  // HF's Trainer sets the process's log level: --log_level on rank 0, --log_level_replica on the
  // others ("passive" leaves ZRT_LOG_LEVEL's; ZeroRT's highest level, error, stands for critical).
  const std::string& level = comm_->rank() == 0 ? args_.log_level : args_.log_level_replica;
  if (level != "passive") set_log_level(parse_log_level(level == "critical" ? "error" : level));
  // Read once, here: a bad file fails the constructor, and every later question about the
  // config (stage3_config, initialize) reads this copy.
  if (!options_.deepspeed_config) {
    options_.deepspeed_config = args_.deepspeed ? config::load_config_source(*args_.deepspeed)
                                                : config_without_deepspeed();
  }
  // A bad value reads as 1 here; the engine's resolve_config refuses it.
  sequence_parallel_ = config::sequence_parallel_size(*options_.deepspeed_config, comm_->size());
}

Json config_without_deepspeed() {
  return Json::parse(R"({
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
    "bf16": {"enabled": "auto"}, "fp16": {"enabled": "auto"},
    "zero_optimization": {"stage": 0}
  })");
}

DistributedSampler Trainer::train_sampler() const {
  const auto seed = static_cast<uint64_t>(args_.data_seed.value_or(args_.seed));
  if (options_.batch_order == TrainerOptions::BatchOrder::kHfTrainer) {
    return DistributedSampler::hf_trainer(train_->size(), dp_size(), dp_rank(), true, seed,
                                          args_.dataloader_drop_last,
                                          args_.per_device_train_batch_size);
  }
  return DistributedSampler(train_->size(), dp_size(), dp_rank(), true, seed,
                            args_.dataloader_drop_last);
}

int64_t Trainer::batches_per_epoch() const {
  ZRT_CHECK(train_ != nullptr, "Trainer: no training dataset");
  const DistributedSampler sampler = train_sampler();
  const int64_t micro = args_.per_device_train_batch_size;
  return args_.dataloader_drop_last ? sampler.num_samples() / micro
                                    : (sampler.num_samples() + micro - 1) / micro;
}

int64_t Trainer::num_training_steps() const {
  if (args_.max_steps > 0) return args_.max_steps;
  // HF: an epoch's last optimizer step takes the remainder micro-batches, so an epoch has
  // ceil(batches / gradient_accumulation_steps) steps.
  const int64_t ga = args_.gradient_accumulation_steps;
  const int64_t per_epoch = std::max<int64_t>(1, (batches_per_epoch() + ga - 1) / ga);
  return static_cast<int64_t>(std::ceil(args_.num_train_epochs * per_epoch));
}

void Trainer::ensure_engine(bool inference) {
  if (engine_) return;
  if (args_.gradient_checkpointing) {
    // HF's model.gradient_checkpointing_enable(): every layer (ShardUnit) a checkpointed region.
    ZRT_CHECK_AS(UsageError, zero::enable_activation_checkpointing(*model_) > 0,
                 "--gradient_checkpointing: the model has no layer to checkpoint; declare its "
                 "layers as zrt::ShardUnit<Layer> (zero/shard_unit.h) or call zrt::checkpoint "
                 "in its forward");
    if (args_.gradient_checkpointing_kwargs.value("use_reentrant", false)) {
      ZRT_LOG_INFO(
          "--gradient_checkpointing_kwargs use_reentrant=true: ZeroRT's checkpoint has "
          "one implementation, with non-reentrant semantics (the gradients are the same)");
    }
  }
  TrainerInitializeOptions io;
  io.comm = comm_;
  io.model_dims = options_.model_dims;
  io.param_groups = options_.param_groups;
  io.inference = inference;
  io.num_training_steps = inference ? 0 : num_training_steps();
  io.deepspeed_config = options_.deepspeed_config;
  engine_ = initialize(model_, args_, io);
}

Engine& Trainer::engine() {
  ensure_engine(false);
  return *engine_;
}

std::pair<at::Tensor, at::Tensor> Trainer::collate(const Dataset& data,
                                                   const std::vector<int64_t>& indices) const {
  std::vector<at::Tensor> xs, ys;
  for (int64_t i : indices) {
    auto [x, y] = data.get(i);
    xs.push_back(x);
    ys.push_back(y);
  }
  return {at::stack(xs).to(batch_device_), at::stack(ys).to(batch_device_)};
}

std::vector<std::string> Trainer::checkpoints() const {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(args_.output_dir, ec)) return {};
  for (const auto& entry : fs::directory_iterator(args_.output_dir, ec)) {
    const int64_t step = step_of(entry.path().filename().string());
    if (step < 0 || !entry.is_directory()) continue;
    const auto tag = ckpt::read_latest(entry.path().string());
    // save_only_model folders hold no engine checkpoint: trainer_state.json, written last, marks
    // them complete (they count for save_total_limit; a resume from one is refused as not
    // resumable).
    const bool model_only = args_.save_only_model && !tag &&
                            fs::exists(entry.path() / "trainer_state.json", ec);
    if (!model_only &&
        (!tag ||
         ckpt::check_tag(entry.path().string(), *tag, ckpt::VerifyLevel::kSizes).size() != 0)) {
      continue;  // incomplete (a crash during save)
    }
    found.emplace_back(step, entry.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(f.second);
  return out;
}

std::optional<std::string> Trainer::resume_path() const {
  if (!args_.resume_from_checkpoint) return std::nullopt;
  const std::string& r = *args_.resume_from_checkpoint;
  if (r == "last" || r == "true" || r == "True") {
    const auto all = checkpoints();
    if (all.empty()) {
      throw CheckpointError(
          str("resume_from_checkpoint=", r, ": no valid checkpoint found in ", args_.output_dir));
    }
    return all.back();
  }
  if (r == "false" || r == "False" || r.empty()) return std::nullopt;
  return r;
}

void Trainer::save(int64_t epoch, int64_t batches_in_epoch, double epoch_f) {
  const int64_t step = engine_->global_steps();
  if (comm_->rank() == 0) {
    // output_dir/checkpoint-N/global_stepN/: temp files of an earlier save killed mid-write.
    ckpt::PosixStorage storage;
    const size_t left = ckpt::remove_leftover_temps(storage, args_.output_dir, 2);
    if (left > 0) {
      ZRT_LOG_INFO("removed ", left, " temp file(s) of an unfinished save in ", args_.output_dir);
    }
  }
  const std::string dir =
      (fs::path(args_.output_dir) / ("checkpoint-" + std::to_string(step))).string();
  ckpt::Value position = ckpt::Value::dict();
  position.set("epoch", epoch);
  position.set("batches_in_epoch", batches_in_epoch);
  position.set("world_size", dp_size());  // the ranks the data is drawn for (the job's / K)
  ckpt::Value client = ckpt::Value::dict();
  client.set("zrt_trainer", std::move(position));
  // HF's _save_checkpoint: save_model(checkpoint-N), then the optimizer and schedule (here the
  // engine checkpoint), skipped with save_only_model unless the model could not be saved whole
  // (ZeRO-3 without gathering 16-bit weights: HF's save_model then saves the engine checkpoint).
  if (options_.save_model) options_.save_model(*engine_, dir);
  const bool weights_in_engine_only =
      engine_->zero_stage() == 3 && !engine_->config().zero.gather_16bit_weights_on_model_save;
  if (!args_.save_only_model || weights_in_engine_only || !options_.save_model) {
    engine_->save_checkpoint(dir, std::nullopt, client);
  }
  epoch_ = epoch_f;
  if (best_global_step_ && *best_global_step_ == step) best_model_checkpoint_ = dir;
  save_state(dir);
  comm_->barrier();
  rotate_checkpoints();
}

void Trainer::rotate_checkpoints() {
  if (!args_.save_total_limit || *args_.save_total_limit <= 0) return;
  if (comm_->rank() == 0) {
    const auto all = checkpoints();
    // Oldest first; never the newest (the one a resume would pick) nor, as HF, the best model's
    // (then a limit of 1 keeps 2).
    auto is_best = [&](const std::string& dir) {
      std::error_code ec;
      return best_model_checkpoint_ && fs::equivalent(dir, *best_model_checkpoint_, ec);
    };
    int64_t keep = *args_.save_total_limit;
    if (keep == 1 && !all.empty() && best_model_checkpoint_ && !is_best(all.back())) keep = 2;
    int64_t excess = static_cast<int64_t>(all.size()) - keep;
    for (size_t i = 0; excess > 0 && i + 1 < all.size(); ++i) {
      if (is_best(all[i])) continue;
      std::error_code ec;
      fs::remove_all(all[i], ec);
      --excess;
      ZRT_LOG_INFO("deleted older checkpoint ", all[i],
                   " (save_total_limit=", *args_.save_total_limit, ")");
    }
  }
  comm_->barrier();
}

double Trainer::evaluate() {
  ZRT_CHECK(eval_ != nullptr, "evaluate(): the Trainer has no evaluation dataset");
  if (!engine_) ensure_engine(stage3_config());  // evaluation alone: as predict()
  const bool was_training = model_->is_training();
  engine_->eval();
  torch::NoGradGuard no_grad;
  const int64_t micro = args_.per_device_eval_batch_size;
  const bool hf_order = options_.batch_order == TrainerOptions::BatchOrder::kHfTrainer;
  const DistributedSampler sampler =
      hf_order ? DistributedSampler::hf_trainer(eval_->size(), dp_size(), dp_rank(), false,
                                                0, args_.dataloader_drop_last, micro)
               : DistributedSampler(eval_->size(), dp_size(), dp_rank(), false, 0, false);
  const std::vector<int64_t> idx = sampler.indices();
  double sum = 0;
  double count = 0;
  const size_t batches = (idx.size() + micro - 1) / micro;
  const double start = now_seconds();
  double last_report = start;
  for (size_t b = 0; b < idx.size(); b += micro) {
    // Progress on rank 0 every 10 s, so a long evaluation is never silent.
    if (comm_->rank() == 0 && now_seconds() - last_report >= 10.0) {
      last_report = now_seconds();
      std::printf("eval: batch %zu/%zu (%.0f s)\n", b / micro, batches, last_report - start);
      std::fflush(stdout);
    }
    std::vector<int64_t> batch(idx.begin() + b, idx.begin() + std::min(idx.size(), b + micro));
    auto [x, y] = collate(*eval_, batch);
    const double loss = loss_fn_(*model_, engine_->to_model_dtype(x), y).item<double>();
    // The HF order gathers the ranks' batches round by round and drops the padding past the
    // dataset's end; each example weighs its batch's mean loss.
    const int64_t start = (static_cast<int64_t>(b / micro) * dp_size() + dp_rank()) * micro;
    const double weight =
        hf_order ? static_cast<double>(std::clamp<int64_t>(eval_->size() - start, 0, micro))
                 : static_cast<double>(batch.size());
    sum += loss * weight;
    count += weight;
  }
  at::Tensor t = at::tensor({sum, count}, at::kDouble);
  comm_->all_reduce(t);
  engine_->train(was_training);
  return t[0].item<double>() / std::max(1.0, t[1].item<double>());
}

void Trainer::write_curves() const {
  if (comm_->rank() != 0 || log_history_.empty()) return;
  PlotSeries loss{"train loss", {}, {}};
  PlotSeries eval{"eval loss", {}, {}};
  PlotSeries lr{"learning rate", {}, {}};
  for (const LogEntry& e : log_history_) {
    if (e.loss) {
      loss.xs.push_back(e.step);
      loss.ys.push_back(*e.loss);
    }
    if (e.eval_loss) {
      eval.xs.push_back(e.step);
      eval.ys.push_back(*e.eval_loss);
    }
    if (e.learning_rate) {
      lr.xs.push_back(e.step);
      lr.ys.push_back(*e.learning_rate);
    }
  }
  std::error_code ec;
  fs::create_directories(args_.output_dir, ec);
  write_svg_line_chart((fs::path(args_.output_dir) / "training_loss.svg").string(), "Loss",
                       "optimizer step", {loss, eval}, "loss");
  write_svg_line_chart((fs::path(args_.output_dir) / "learning_rate.svg").string(), "Learning rate",
                       "optimizer step", {lr}, "lr");
}

}  // namespace zrt
