#include "runtime/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <filesystem>
#include <fstream>

#include "checkpoint/layout.h"
#include "checkpoint/manifest.h"
#include "checkpoint/storage.h"
#include "comm/init.h"
#include "config/hf_plan.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/svg_plot.h"
#include "runtime/initialize.h"
#include "runtime/sampler.h"
#include <unistd.h>

namespace zrt {
namespace fs = std::filesystem;

namespace {

// HF: a value below 1 is a ratio of the total steps.
int64_t every(double steps, int64_t total) {
  if (steps <= 0) return 0;
  if (steps < 1) return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(steps * total)));
  return static_cast<int64_t>(steps);
}

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
  for (const auto& p : model_->parameters()) {
    if (p.requires_grad()) num_params_ += p.numel();
  }
  comm_ = options_.comm ? options_.comm : comm::init_from_env();
}

int64_t Trainer::batches_per_epoch() const {
  ZRT_CHECK(train_ != nullptr, "Trainer: no training dataset");
  const DistributedSampler sampler(train_->size(), comm_->size(), comm_->rank(), true, 0,
                                   args_.dataloader_drop_last);
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
  return {at::stack(xs), at::stack(ys)};
}

std::vector<std::string> Trainer::checkpoints() const {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(args_.output_dir, ec)) return {};
  for (const auto& entry : fs::directory_iterator(args_.output_dir, ec)) {
    const int64_t step = step_of(entry.path().filename().string());
    if (step < 0 || !entry.is_directory()) continue;
    const auto tag = ckpt::read_latest(entry.path().string());
    if (!tag ||
        ckpt::check_tag(entry.path().string(), *tag, ckpt::VerifyLevel::kSizes).size() != 0) {
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
  position.set("world_size", comm_->size());
  ckpt::Value client = ckpt::Value::dict();
  client.set("zrt_trainer", std::move(position));
  engine_->save_checkpoint(dir, std::nullopt, client);
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
  DistributedSampler sampler(eval_->size(), comm_->size(), comm_->rank(), false, 0, false);
  const std::vector<int64_t> idx = sampler.indices();
  const int64_t micro = args_.per_device_eval_batch_size;
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
    sum += loss * batch.size();
    count += batch.size();
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

TrainOutput Trainer::train() {
  ZRT_CHECK(train_ != nullptr, "train(): the Trainer has no training dataset");
  const std::optional<std::string> resume = resume_path();
  if (!resume) torch::manual_seed(static_cast<uint64_t>(args_.seed));
  ensure_engine(false);
  ZRT_CHECK_AS(UsageError, engine_->optimizer() != nullptr,
               "train(): the engine was built for inference (by predict(), evaluate() or "
               "load_model_weights(path, true) before train()); load the weights with "
               "inference = false to fine-tune them");
  const std::optional<std::string> best_key = args_.best_metric_key();
  ZRT_CHECK_AS(ConfigError, !best_key || *best_key == "eval_loss",
               "The `metric_for_best_model` training argument is set to '", best_key.value_or(""),
               "', which is not found in the evaluation metrics. The available evaluation "
               "metrics are: ['eval_loss']. Consider changing the `metric_for_best_model` via "
               "the TrainingArguments.");
  const bool evaluating = args_.eval_strategy != "no";
  ZRT_CHECK_AS(UsageError, !evaluating || eval_ != nullptr, "You have set `args.eval_strategy` to ",
               args_.eval_strategy, " but you didn't pass an `eval_dataset` to `Trainer`. Either "
               "set `args.eval_strategy` to `no` or pass an `eval_dataset`.");
  const int rank = comm_->rank();
  const int64_t total = num_training_steps();
  const int64_t micro = args_.per_device_train_batch_size;
  const int64_t nb = batches_per_epoch();
  ZRT_CHECK(nb > 0, "the training set (", train_->size(), " examples) gives no micro-batch of ",
            micro, " on each of ", comm_->size(), " ranks");
  const int64_t log_every = args_.logging_strategy == "steps" ? every(args_.logging_steps, total) : 0;
  const int64_t eval_every =
      args_.eval_strategy == "steps" ? every(args_.eval_steps.value_or(args_.logging_steps), total) : 0;
  const int64_t save_every = args_.save_strategy == "steps" ? every(args_.save_steps, total) : 0;
  DistributedSampler sampler(train_->size(), comm_->size(), rank, true,
                             static_cast<uint64_t>(args_.data_seed.value_or(args_.seed)),
                             args_.dataloader_drop_last);
  int64_t epoch = 0;
  int64_t skip = 0;
  if (resume) {
    ckpt::check_hf_resumable(*resume);
    auto loaded = engine_->load_checkpoint(*resume);
    if (!loaded) throw ckpt::hf_resume_failed(*resume);
    if (const ckpt::Value* pos = loaded->client_state.find("zrt_trainer")) {
      epoch = pos->at("epoch").as_int();
      skip = pos->at("batches_in_epoch").as_int();
      if (pos->at("world_size").as_int() != comm_->size()) {
        ZRT_LOG_WARN("resuming at world size ", comm_->size(), " from a checkpoint written at ",
                     pos->at("world_size").as_int(),
                     ": the data order of the current epoch "
                     "changes");
      }
      if (skip >= nb) {
        ++epoch;
        skip = 0;
      }
    } else {
      // Written without ZeroRT's position (by the transformers Trainer or DeepSpeed): HF's rule
      // from the global step, whole epochs and then the epoch's steps x GA micro-batches.
      const int64_t ga = args_.gradient_accumulation_steps;
      const int64_t per_epoch = std::max<int64_t>(1, (nb + ga - 1) / ga);
      epoch = engine_->global_steps() / per_epoch;
      skip = engine_->global_steps() % per_epoch * ga;
    }
    restore_state(*resume);
    ZRT_LOG_INFO("resumed from ", loaded->path, " at global step ", engine_->global_steps());
  }
  const bool bar = options_.progress_bar && rank == 0 && progress_bar_wanted();
  const double start = now_seconds();
  const int64_t start_step = engine_->global_steps();
  double loss_since_log = 0;
  int64_t steps_since_log = 0;
  double loss_total = 0;
  double micro_loss_sum = 0;  // micro-batches of the current optimizer step
  int64_t micro_count = 0;
  double flos_since_report = 0;  // this rank's, since the last all-reduce (HF's current_flos)
  // Summed over the ranks into total_flos_ whenever HF does it: at a log, a save and the end.
  auto collect = [&](double loss_sum) {
    at::Tensor t = at::tensor({loss_sum, flos_since_report}, at::kDouble);
    comm_->all_reduce(t);
    flos_since_report = 0;
    total_flos_ += t[1].item<double>();
    return t[0].item<double>() / comm_->size();
  };
  // What HF's _maybe_log_save_evaluate does after an optimizer step or at an epoch's end.
  auto log_save_evaluate = [&](int64_t step, double epoch_f, bool log, bool eval,
                               bool should_save, int64_t epoch_index, int64_t batches_done) {
    epoch_ = epoch_f;
    if (log) {
      const double mean = collect(loss_since_log / std::max<int64_t>(1, steps_since_log));
      LogEntry e;
      e.step = step;
      e.epoch = epoch_f;
      e.loss = mean;
      e.learning_rate = engine_->get_lr().front();
      e.grad_norm = engine_->global_grad_norm();
      if (bar) std::printf("\n");
      report(e);
      loss_since_log = 0;
      steps_since_log = 0;
    }
    bool new_best = false;
    if (eval) {
      const double t0 = now_seconds();
      LogEntry e;
      e.step = step;
      e.epoch = epoch_f;
      e.eval_loss = evaluate();
      const double runtime = now_seconds() - t0;
      const double n = static_cast<double>(eval_->size());
      const double steps = std::ceil(n / comm_->size() / args_.per_device_eval_batch_size);
      e.metrics = {{"eval_runtime", runtime},
                   {"eval_samples_per_second", n / std::max(runtime, 1e-9)},
                   {"eval_steps_per_second", steps / std::max(runtime, 1e-9)}};
      report(e);
      new_best = track_best(e);
    }
    if (args_.save_strategy == "best") should_save = new_best;
    if (should_save) {
      collect(0);
      save(epoch_index, batches_done, epoch_f);
    }
  };
  while (engine_->global_steps() < total) {
    sampler.set_epoch(epoch);
    const std::vector<int64_t> idx = sampler.indices();
    int64_t b = skip;
    for (; b < nb && engine_->global_steps() < total; ++b) {
      const size_t lo = static_cast<size_t>(b * micro);
      std::vector<int64_t> batch(idx.begin() + lo, idx.begin() + std::min(idx.size(), lo + micro));
      auto [x, y] = collate(*train_, batch);
      // HF's floating_point_ops: 6 x tokens (the input's elements for token ids, else its rows)
      // x trainable parameters.
      const double tokens = at::isIntegralType(x.scalar_type(), /*includeBool=*/false)
                                ? static_cast<double>(x.numel())
                                : static_cast<double>(x.size(0));
      flos_since_report += 6.0 * tokens * static_cast<double>(num_params_);
      const double t0 = now_seconds();
      at::Tensor loss = loss_fn_(*model_, engine_->to_model_dtype(x), y);
      engine_->record_forward_ms((now_seconds() - t0) * 1e3);
      const int64_t before = engine_->global_steps();
      // HF's accumulation: steps after every gradient_accumulation_steps micro-batches of the
      // epoch and after its last one (the remainder), never across an epoch's end.
      engine_->set_gradient_accumulation_boundary(
          (b + 1) % args_.gradient_accumulation_steps == 0 || b + 1 == nb);
      engine_->backward(loss);
      engine_->step();
      micro_loss_sum += loss.item<double>();
      ++micro_count;
      if (engine_->global_steps() == before) continue;
      const int64_t step = engine_->global_steps();
      const double step_loss = micro_loss_sum / micro_count;
      micro_loss_sum = 0;
      micro_count = 0;
      loss_since_log += step_loss;
      loss_total += step_loss;
      ++steps_since_log;
      const double epoch_f = epoch + static_cast<double>(b + 1) / nb;
      const bool log =
          (log_every > 0 && step % log_every == 0) || (args_.logging_first_step && step == 1);
      const bool eval = eval_every > 0 && step % eval_every == 0;
      const bool save = save_every > 0 && step % save_every == 0;
      log_save_evaluate(step, epoch_f, log, eval, save, epoch, b + 1);
      if (bar) {
        const double done =
            static_cast<double>(step - start_step) / std::max<int64_t>(1, total - start_step);
        const double eta = done > 0 ? (now_seconds() - start) * (1 - done) / done : 0;
        const int width = 30;
        std::string fill(static_cast<size_t>(done * width), '#');
        fill.resize(width, '.');
        std::printf("\r[%s] %lld/%lld loss %.4f lr %.3g ETA %.0fs   ", fill.c_str(),
                    static_cast<long long>(step), static_cast<long long>(total), step_loss,
                    engine_->get_lr().front(), eta);
        std::fflush(stdout);
      }
    }
    if (b == nb) {  // the epoch ended (not max_steps in its middle): the epoch strategies
      const bool log = args_.logging_strategy == "epoch" && steps_since_log > 0;
      const bool eval = args_.eval_strategy == "epoch";
      const bool save = args_.save_strategy == "epoch";
      if (log || eval || save) {
        log_save_evaluate(engine_->global_steps(), epoch + 1.0, log, eval, save, epoch, nb);
      }
    }
    skip = 0;
    ++epoch;
  }
  if (bar) std::printf("\n");
  collect(0);
  if (args_.load_best_model_at_end && best_model_checkpoint_) {
    if (rank == 0) {
      std::printf("Loading best model from %s (score: %g).\n", best_model_checkpoint_->c_str(),
                  best_metric_.value_or(0));
    }
    LoadCheckpointOptions weights_only;
    weights_only.load_module_only = true;
    engine_->load_checkpoint(*best_model_checkpoint_, std::nullopt, weights_only);
  }
  TrainOutput out;
  out.global_step = engine_->global_steps();
  out.train_runtime_s = now_seconds() - start;
  const int64_t steps_run = out.global_step - start_step;
  out.steps_this_run = steps_run;
  out.training_loss = steps_run > 0 ? loss_total / steps_run : 0;
  out.samples_per_second =
      steps_run * engine_->train_batch_size() / std::max(1e-9, out.train_runtime_s);
  LogEntry summary;  // HF appends the run's summary to the log history
  summary.step = out.global_step;
  summary.epoch = epoch_;
  summary.metrics = {{"train_runtime", out.train_runtime_s},
                     {"train_samples_per_second", out.samples_per_second},
                     {"train_steps_per_second", steps_run / std::max(1e-9, out.train_runtime_s)},
                     {"total_flos", total_flos_},
                     {"train_loss", out.training_loss}};
  report(summary);
  out.log_history = log_history_;
  write_curves();
  return out;
}

}  // namespace zrt
