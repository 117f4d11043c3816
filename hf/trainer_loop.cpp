// Trainer::train as named steps: begin (checks, schedule, resume), the epochs, one micro-batch,
// what follows an optimizer step (log, evaluate, save, progress), and the end of training.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "checkpoint/layout.h"
#include "checkpoint/manifest.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/logging.h"
#include "hf/sampler.h"
#include "hf/trainer.h"

namespace zrt {
namespace {

// HF: a value below 1 is a ratio of the total steps.
int64_t every(double steps, int64_t total) {
  if (steps <= 0) return 0;
  if (steps < 1) return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(steps * total)));
  return static_cast<int64_t>(steps);
}

}  // namespace

// The state of one train() call.
struct Trainer::Run {
  int64_t total = 0;      // optimizer steps to reach
  int64_t batches = 0;    // micro-batches per epoch on this rank
  int64_t log_every = 0;  // 0: not by steps
  int64_t eval_every = 0;
  int64_t save_every = 0;
  int64_t epoch = 0;  // the current epoch
  int64_t skip = 0;   // micro-batches of the current epoch done before a resume
  bool bar = false;   // a live progress bar on this rank
  // Without a terminal (a log file, a batch system): a progress line on stderr every 10 s and at
  // the end, as HF's tqdm bar writes its updates there. Rank 0 only.
  bool lines = false;
  double last_line = 0;
  double start = 0;   // seconds
  int64_t start_step = 0;
  double loss_since_log = 0;
  int64_t steps_since_log = 0;
  double loss_total = 0;
  double flos_since_report = 0;  // this rank's, since the last all-reduce (HF's current_flos)
};

void Trainer::check_trainable() const {
  ZRT_CHECK_AS(UsageError, engine_->optimizer() != nullptr,
               "train(): the engine was built for inference (by predict(), evaluate() or "
               "load_model_weights(path, format, true) before train()); load the weights with "
               "inference = false to fine-tune them");
  const std::optional<std::string> best_key = args_.best_metric_key();
  ZRT_CHECK_AS(ConfigError, !best_key || *best_key == "eval_loss",
               "The `metric_for_best_model` training argument is set to '", best_key.value_or(""),
               "', which is not found in the evaluation metrics. The available evaluation "
               "metrics are: ['eval_loss']. Consider changing the `metric_for_best_model` via "
               "the TrainingArguments.");
  // transformers refuses this under DeepSpeed; ZeroRT loads the best model from its engine
  // checkpoint always, which save_only_model leaves out.
  ZRT_CHECK_AS(UsageError, !(args_.save_only_model && args_.load_best_model_at_end),
               "DeepSpeed can't be used with `save_only_model` along with "
               "`load_best_model_at_end`.");
  ZRT_CHECK_AS(UsageError, args_.eval_strategy == "no" || eval_ != nullptr,
               "You have set `args.eval_strategy` to ", args_.eval_strategy,
               " but you didn't pass an `eval_dataset` to `Trainer`. Either set "
               "`args.eval_strategy` to `no` or pass an `eval_dataset`.");
}

Trainer::Run Trainer::begin_run(const std::optional<std::string>& resume) {
  Run run;
  run.total = num_training_steps();
  run.batches = batches_per_epoch();
  ZRT_CHECK(run.batches > 0, "the training set (", train_->size(),
            " examples) gives no micro-batch of ", args_.per_device_train_batch_size,
            " on each of ", comm_->size(), " ranks");
  run.log_every = args_.logging_strategy == "steps" ? every(args_.logging_steps, run.total) : 0;
  run.eval_every = args_.eval_strategy == "steps"
                       ? every(args_.eval_steps.value_or(args_.logging_steps), run.total)
                       : 0;
  run.save_every = args_.save_strategy == "steps" ? every(args_.save_steps, run.total) : 0;
  if (resume) resume_from(run, *resume);
  run.bar = options_.progress_bar && comm_->rank() == 0 && progress_bar_wanted();
  run.lines = options_.progress_bar && comm_->rank() == 0 && !run.bar;
  run.start = now_seconds();
  run.last_line = run.start;
  run.start_step = engine_->global_steps();
  return run;
}

void Trainer::resume_from(Run& run, const std::string& path) {
  ckpt::check_hf_resumable(path);
  auto loaded = engine_->load_checkpoint(path);
  if (!loaded) throw ckpt::hf_resume_failed(path);
  if (const ckpt::Value* pos = loaded->client_state.find("zrt_trainer")) {
    run.epoch = pos->at("epoch").as_int();
    run.skip = pos->at("batches_in_epoch").as_int();
    if (pos->at("world_size").as_int() != dp_size()) {
      ZRT_LOG_WARN("resuming with ", dp_size(), " data-parallel ranks from a checkpoint written "
                   "with ", pos->at("world_size").as_int(), ": the data order of the current "
                   "epoch changes");
    }
    if (run.skip >= run.batches) {
      ++run.epoch;
      run.skip = 0;
    }
  } else {
    // Written without ZeroRT's position (by the transformers Trainer or DeepSpeed): HF's rule
    // from the global step, whole epochs and then the epoch's steps x GA micro-batches.
    const int64_t ga = engine_->gradient_accumulation_steps();
    const int64_t per_epoch = std::max<int64_t>(1, (run.batches + ga - 1) / ga);
    run.epoch = engine_->global_steps() / per_epoch;
    run.skip = engine_->global_steps() % per_epoch * ga;
  }
  restore_state(path);
  // The loaded TrainerState's steps decide from here, as in transformers (the strategies stay the
  // arguments').
  const auto from_state = [&](int64_t& every_n, const std::optional<int64_t>& steps) {
    if (every_n > 0 && steps) every_n = every(static_cast<double>(*steps), run.total);
  };
  from_state(run.log_every, resumed_steps_.logging);
  from_state(run.eval_every, resumed_steps_.eval);
  from_state(run.save_every, resumed_steps_.save);
  ZRT_LOG_INFO("resumed from ", loaded->path, " at global step ", engine_->global_steps());
}

double Trainer::collect(Run& run, double loss_sum) {
  at::Tensor t = at::tensor({loss_sum, run.flos_since_report}, at::kDouble);
  comm_->all_reduce(t);
  run.flos_since_report = 0;
  total_flos_ += t[1].item<double>() / sequence_parallel_;  // a group's ranks count one sample
  return t[0].item<double>() / comm_->size();
}

bool Trainer::micro_step(Run& run, const std::vector<int64_t>& indices, bool epoch_end) {
  auto [x, y] = collate(*train_, indices);
  // HF's floating_point_ops: 6 x tokens (the input's elements for token ids, else its rows) x
  // trainable parameters. Token ids (b, 2, t) are ids and positions (Note [run_clm's data] 5).
  const bool ids = at::isIntegralType(x.scalar_type(), /*includeBool=*/false);
  const double tokens = static_cast<double>(
      !ids ? x.size(0) : (x.dim() == 3 ? x.size(0) * x.size(2) : x.numel()));
  run.flos_since_report += 6.0 * tokens * static_cast<double>(num_params_);
  const double t0 = now_seconds();
  at::Tensor loss = loss_fn_(*model_, engine_->to_model_dtype(x), y);
  engine_->record_forward_ms((now_seconds() - t0) * 1e3);
  const int64_t before = engine_->global_steps();
  // HF's accumulation: the engine's window of gradient_accumulation_steps micro-batches, and an
  // epoch's last micro-batch ends it early (the remainder), never across an epoch's end.
  if (epoch_end) engine_->end_accumulation_window();
  engine_->backward(loss);
  engine_->step();
  return engine_->global_steps() != before;
}

void Trainer::after_optimizer_step(Run& run, int64_t batches_done) {
  const int64_t step = engine_->global_steps();
  const double step_loss = engine_->last_step_loss().value_or(NAN);  // the engine's one sum
  run.loss_since_log += step_loss;
  run.loss_total += step_loss;
  ++run.steps_since_log;
  const double epoch_f = run.epoch + static_cast<double>(batches_done) / run.batches;
  const bool log =
      (run.log_every > 0 && step % run.log_every == 0) || (args_.logging_first_step && step == 1);
  const bool eval = run.eval_every > 0 && step % run.eval_every == 0;
  const bool save = run.save_every > 0 && step % run.save_every == 0;
  log_save_evaluate(run, {step, epoch_f, log, eval, save, batches_done});
  if (run.bar) draw_progress(run, step, step_loss);
  const double now = now_seconds();
  if (run.lines && (now - run.last_line >= 10.0 || step == run.total)) {
    run.last_line = now;
    const int64_t done = step - run.start_step;
    const double elapsed = now - run.start;
    const double eta = done > 0 ? elapsed * static_cast<double>(run.total - step) / done : 0;
    std::fprintf(stderr, "%3.0f%% | step %lld/%lld | %.0f s elapsed, ETA %.0f s | loss %.4f\n",
                 100.0 * static_cast<double>(step) / std::max<int64_t>(1, run.total),
                 static_cast<long long>(step), static_cast<long long>(run.total), elapsed, eta,
                 step_loss);
  }
}

// What HF's _maybe_log_save_evaluate does after an optimizer step or at an epoch's end.
void Trainer::log_save_evaluate(Run& run, const StepDecision& d) {
  epoch_ = d.epoch_f;
  if (d.log) {
    const double mean =
        collect(run, run.loss_since_log / std::max<int64_t>(1, run.steps_since_log));
    LogEntry e;
    e.step = d.step;
    e.epoch = d.epoch_f;
    e.loss = mean;
    e.learning_rate = engine_->get_lr().front();
    e.grad_norm = engine_->global_grad_norm();
    if (run.bar) std::printf("\n");
    report(e);
    run.loss_since_log = 0;
    run.steps_since_log = 0;
  }
  bool new_best = false;
  if (d.eval) {
    const double t0 = now_seconds();
    LogEntry e;
    e.step = d.step;
    e.epoch = d.epoch_f;
    e.eval_loss = evaluate();
    const double runtime = now_seconds() - t0;
    const double n = static_cast<double>(eval_->size());
    const double steps = std::ceil(n / dp_size() / args_.per_device_eval_batch_size);
    e.metrics = {{"eval_runtime", runtime},
                 {"eval_samples_per_second", n / std::max(runtime, 1e-9)},
                 {"eval_steps_per_second", steps / std::max(runtime, 1e-9)}};
    report(e);
    new_best = track_best(e);
  }
  const bool should_save = args_.save_strategy == "best" ? new_best : d.save;
  if (should_save) {
    collect(run, 0);
    save(run.epoch, d.batches_done, d.epoch_f);
  }
}

void Trainer::draw_progress(const Run& run, int64_t step, double step_loss) const {
  const double done =
      static_cast<double>(step - run.start_step) / std::max<int64_t>(1, run.total - run.start_step);
  const double eta = done > 0 ? (now_seconds() - run.start) * (1 - done) / done : 0;
  const int width = 30;
  std::string fill(static_cast<size_t>(done * width), '#');
  fill.resize(width, '.');
  std::printf("\r[%s] %lld/%lld loss %.4f lr %.3g ETA %.0fs   ", fill.c_str(),
              static_cast<long long>(step), static_cast<long long>(run.total), step_loss,
              engine_->get_lr().front(), eta);
  std::fflush(stdout);
}

void Trainer::train_epoch(Run& run, DistributedSampler& sampler) {
  sampler.set_epoch(run.epoch);
  const std::vector<int64_t> idx = sampler.indices();
  const int64_t micro = args_.per_device_train_batch_size;
  int64_t b = run.skip;
  for (; b < run.batches && engine_->global_steps() < run.total; ++b) {
    const size_t lo = static_cast<size_t>(b * micro);
    const std::vector<int64_t> batch(idx.begin() + lo,
                                     idx.begin() + std::min(idx.size(), lo + micro));
    if (micro_step(run, batch, /*epoch_end=*/b + 1 == run.batches))
      after_optimizer_step(run, b + 1);
  }
  if (b == run.batches) {  // the epoch ended (not max_steps in its middle): the epoch strategies
    const bool log = args_.logging_strategy == "epoch" && run.steps_since_log > 0;
    const bool eval = args_.eval_strategy == "epoch";
    const bool save = args_.save_strategy == "epoch";
    if (log || eval || save) {
      log_save_evaluate(run,
                        {engine_->global_steps(), run.epoch + 1.0, log, eval, save, run.batches});
    }
  }
  run.skip = 0;
  ++run.epoch;
}

TrainOutput Trainer::end_run(Run& run) {
  if (run.bar) std::printf("\n");
  collect(run, 0);
  if (args_.load_best_model_at_end && best_model_checkpoint_) {
    if (comm_->rank() == 0) {
      std::printf("Loading best model from %s (score: %g).\n", best_model_checkpoint_->c_str(),
                  best_metric_.value_or(0));
    }
    LoadCheckpointOptions weights_only;
    weights_only.load_module_only = true;
    engine_->load_checkpoint(*best_model_checkpoint_, std::nullopt, weights_only);
  }
  TrainOutput out;
  out.global_step = engine_->global_steps();
  out.train_runtime_s = now_seconds() - run.start;
  const int64_t steps_run = out.global_step - run.start_step;
  out.steps_this_run = steps_run;
  out.training_loss = steps_run > 0 ? run.loss_total / steps_run : 0;
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

TrainOutput Trainer::train() {
  ZRT_CHECK(train_ != nullptr, "train(): the Trainer has no training dataset");
  const std::optional<std::string> resume = resume_path();
  if (!resume) torch::manual_seed(static_cast<uint64_t>(args_.seed));
  ensure_engine(false);
  check_trainable();
  Run run = begin_run(resume);
  DistributedSampler sampler = train_sampler();
  while (engine_->global_steps() < run.total) train_epoch(run, sampler);
  return end_run(run);
}

}  // namespace zrt
