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

std::string format_entry(const LogEntry& e) {
  std::string s = "{";
  auto add = [&s](const std::string& k, double v) {
    s += str(s.size() > 1 ? ", " : "", "'", k, "': ", v);
  };
  if (e.loss) add("loss", *e.loss);
  if (e.grad_norm) add("grad_norm", *e.grad_norm);
  if (e.learning_rate) add("learning_rate", *e.learning_rate);
  if (e.eval_loss) add("eval_loss", *e.eval_loss);
  add("epoch", std::round(e.epoch * 100) / 100);
  add("step", static_cast<double>(e.step));
  return s + "}";
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
  const int64_t per_epoch =
      std::max<int64_t>(1, batches_per_epoch() / args_.gradient_accumulation_steps);
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

void Trainer::save(int64_t epoch, int64_t batches_in_epoch) {
  const int64_t step = engine_->global_steps();
  const std::string dir =
      (fs::path(args_.output_dir) / ("checkpoint-" + std::to_string(step))).string();
  ckpt::Value position = ckpt::Value::dict();
  position.set("epoch", epoch);
  position.set("batches_in_epoch", batches_in_epoch);
  position.set("world_size", comm_->size());
  ckpt::Value client = ckpt::Value::dict();
  client.set("zrt_trainer", std::move(position));
  engine_->save_checkpoint(dir, std::nullopt, client);
  if (comm_->rank() == 0) {
    Json history = Json::array();
    for (const LogEntry& e : log_history_) {
      Json j = {{"step", e.step}, {"epoch", e.epoch}};
      if (e.loss) j["loss"] = *e.loss;
      if (e.learning_rate) j["learning_rate"] = *e.learning_rate;
      if (e.eval_loss) j["eval_loss"] = *e.eval_loss;
      history.push_back(j);
    }
    const Json state = {{"global_step", step},
                        {"epoch", epoch},
                        {"max_steps", num_training_steps()},
                        {"log_history", history}};
    const std::string path = (fs::path(dir) / "trainer_state.json").string();
    {
      std::ofstream out(path + ".tmp");
      out << state.dump(2) << "\n";
    }
    fs::rename(path + ".tmp", path);
  }
  comm_->barrier();
  rotate_checkpoints();
}

void Trainer::rotate_checkpoints() {
  if (!args_.save_total_limit || *args_.save_total_limit <= 0) return;
  if (comm_->rank() == 0) {
    const auto all = checkpoints();
    const int64_t excess = static_cast<int64_t>(all.size()) - *args_.save_total_limit;
    // Oldest first; the newest checkpoint (the one a resume would pick) is never removed.
    for (int64_t i = 0; i < excess && i + 1 < static_cast<int64_t>(all.size()); ++i) {
      std::error_code ec;
      fs::remove_all(all[i], ec);
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

bool Trainer::stage3_config() const {
  try {
    config::TrainerConfigOptions probe_options;
    probe_options.world_size = comm_->size();
    probe_options.model = options_.model_dims;
    probe_options.num_training_steps = 0;
    probe_options.inference = true;
    auto probe = config::prepare_trainer_config(args_, probe_options);
    return probe.resolved.zero.stage == 3;
  } catch (const ConfigError&) {
    return false;
  }
}

std::vector<at::Tensor> Trainer::predict(const Dataset& data, const ForwardFn& forward) {
  return predict(data, forward, nullptr).predictions;
}

namespace {

// Rank r holds examples r, r + W, ... of `data` (the last ones padded): every rank's stack
// gathered, and on rank 0 the examples back in dataset order without the padding.
std::vector<at::Tensor> gather_in_order(comm::Comm& comm, const std::vector<at::Tensor>& mine,
                                        int64_t count) {
  at::Tensor local = at::stack(mine).contiguous();
  at::Tensor all = at::empty({local.numel() * comm.size()}, local.options());
  comm.all_gather(all, local.reshape({-1}));
  std::vector<at::Tensor> out;
  if (comm.rank() != 0) return out;
  std::vector<int64_t> shape = {comm.size()};
  for (int64_t d : local.sizes()) shape.push_back(d);
  all = all.view(shape);
  for (int64_t i = 0; i < count; ++i) out.push_back(all[i % comm.size()][i / comm.size()].clone());
  return out;
}

}  // namespace

PredictionOutput Trainer::predict(const Dataset& data, const ForwardFn& forward,
                                  const OutputLossFn& loss) {
  // HF refuses inference before training unless ZeRO-3; ZeroRT runs any stage forward-only
  // and uses ZeRO-3's parameter-partitioning-only mode when the config is stage 3.
  if (!engine_) ensure_engine(stage3_config());
  ZRT_CHECK(data.size() > 0, "predict(): the dataset is empty");
  const double start = now_seconds();
  const bool was_training = model_->is_training();
  engine_->eval();
  torch::NoGradGuard no_grad;
  DistributedSampler sampler(data.size(), comm_->size(), comm_->rank(), false, 0, false);
  const std::vector<int64_t> idx = sampler.indices();
  std::vector<at::Tensor> outputs, targets;
  const int64_t micro = args_.per_device_eval_batch_size;
  int64_t steps = 0;
  for (size_t b = 0; b < idx.size(); b += micro) {
    std::vector<int64_t> batch(idx.begin() + b, idx.begin() + std::min(idx.size(), b + micro));
    auto [x, y] = collate(data, batch);
    at::Tensor out = forward(*model_, engine_->to_model_dtype(x)).to(at::kFloat);
    for (int64_t i = 0; i < out.size(0); ++i) {
      outputs.push_back(out[i]);
      targets.push_back(y[i]);
    }
    ++steps;
  }
  engine_->train(was_training);
  PredictionOutput result;
  result.predictions = gather_in_order(*comm_, outputs, data.size());
  result.label_ids = gather_in_order(*comm_, targets, data.size());
  at::Tensor loss_sum = at::zeros({1}, at::kDouble);
  if (loss && comm_->rank() == 0) {
    for (size_t i = 0; i < result.predictions.size(); ++i) {
      loss_sum += loss(result.predictions[i], result.label_ids[i]).to(at::kDouble);
    }
  }
  if (loss) comm_->broadcast(loss_sum, 0);
  const double runtime = now_seconds() - start;
  const auto n = static_cast<double>(data.size());
  if (loss) result.metrics.emplace_back("predict_loss", loss_sum.item<double>() / n);
  result.metrics.emplace_back("predict_runtime", runtime);
  result.metrics.emplace_back("predict_samples", n);
  result.metrics.emplace_back("predict_samples_per_second", n / std::max(runtime, 1e-9));
  result.metrics.emplace_back("predict_steps_per_second",
                              static_cast<double>(steps) / std::max(runtime, 1e-9));
  return result;
}

void Trainer::load_model_weights(const std::string& path, bool inference) {
  if (!engine_) ensure_engine(inference && stage3_config());
  std::error_code ec;
  auto ends_with = [](const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (fs::is_regular_file(path, ec)) {
    ZRT_CHECK_AS(CheckpointError,
                 ends_with(path, ".safetensors") || ends_with(path, ".pt") ||
                     ends_with(path, ".bin") || ends_with(path, ".pth"),
                 path, ": a weights file must be .safetensors, .pt, .pth or .bin");
    engine_->load_module_file(path);
    return;
  }
  ZRT_CHECK_AS(CheckpointError, fs::is_directory(path, ec), path, ": no such file or folder");
  LoadCheckpointOptions only_module;
  only_module.load_module_only = true;
  if (ckpt::read_latest(path)) {
    engine_->load_checkpoint(path, std::nullopt, only_module);
    return;
  }
  bool tag_folder = false;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    const std::string name = entry.path().filename().string();
    tag_folder = tag_folder || ends_with(name, "_model_states.pt");
  }
  if (tag_folder) {
    const fs::path p = fs::absolute(path).lexically_normal();
    const fs::path dir = p.filename().empty() ? p.parent_path() : p;
    engine_->load_checkpoint(dir.parent_path().string(), dir.filename().string(), only_module);
    return;
  }
  for (const char* name : {"model.safetensors", "pytorch_model.bin"}) {
    const std::string file = (fs::path(path) / name).string();
    if (fs::is_regular_file(file, ec)) {
      engine_->load_module_file(file);
      return;
    }
  }
  throw CheckpointError(str(path, ": no weights found: the folder has no `latest` file, no "
                            "*_model_states.pt (a checkpoint tag), no model.safetensors and no "
                            "pytorch_model.bin"));
}

void Trainer::save_metrics(const std::string& split,
                           const std::vector<std::pair<std::string, double>>& metrics) const {
  if (comm_->rank() != 0) return;
  Json mine = Json::object();
  for (const auto& [k, v] : metrics) mine[k] = v;
  std::error_code ec;
  fs::create_directories(args_.output_dir, ec);
  auto write = [](const fs::path& path, const Json& j) {
    const std::string tmp = path.string() + ".tmp";
    {
      std::ofstream out(tmp);
      out << j.dump(4) << "\n";
      ZRT_CHECK(out.good(), "cannot write ", tmp);
    }
    fs::rename(tmp, path);
  };
  write(fs::path(args_.output_dir) / (split + "_results.json"), mine);
  const fs::path all_path = fs::path(args_.output_dir) / "all_results.json";
  Json all = Json::object();
  if (fs::exists(all_path, ec)) {
    try {
      std::ifstream in(all_path);
      all = Json::parse(in);
    } catch (const Json::exception&) {
      all = Json::object();
    }
    if (!all.is_object()) all = Json::object();
  }
  all.update(mine);
  write(all_path, all);
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
  const int rank = comm_->rank();
  const int64_t total = num_training_steps();
  const int64_t micro = args_.per_device_train_batch_size;
  const int64_t nb = batches_per_epoch();
  ZRT_CHECK(nb > 0, "the training set (", train_->size(), " examples) gives no micro-batch of ",
            micro, " on each of ", comm_->size(), " ranks");
  const int64_t log_every = every(args_.logging_steps, total);
  const int64_t eval_every = every(args_.eval_steps.value_or(args_.logging_steps), total);
  const int64_t save_every = every(args_.save_steps, total);
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
    }
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
  while (engine_->global_steps() < total) {
    sampler.set_epoch(epoch);
    const std::vector<int64_t> idx = sampler.indices();
    for (int64_t b = skip; b < nb && engine_->global_steps() < total; ++b) {
      const size_t lo = static_cast<size_t>(b * micro);
      std::vector<int64_t> batch(idx.begin() + lo, idx.begin() + std::min(idx.size(), lo + micro));
      auto [x, y] = collate(*train_, batch);
      const double t0 = now_seconds();
      at::Tensor loss = loss_fn_(*model_, engine_->to_model_dtype(x), y);
      engine_->record_forward_ms((now_seconds() - t0) * 1e3);
      const int64_t before = engine_->global_steps();
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
      if (log_every > 0 && step % log_every == 0) {
        at::Tensor mean =
            at::full({1}, loss_since_log / std::max<int64_t>(1, steps_since_log), at::kDouble);
        comm_->all_reduce(mean, comm::ReduceOp::kAvg);
        LogEntry e;
        e.step = step;
        e.epoch = epoch_f;
        e.loss = mean.item<double>();
        e.learning_rate = engine_->get_lr().front();
        e.grad_norm = engine_->global_grad_norm();
        log_history_.push_back(e);
        if (rank == 0) {
          if (bar) std::printf("\n");
          std::printf("%s\n", format_entry(e).c_str());
          std::fflush(stdout);
        }
        loss_since_log = 0;
        steps_since_log = 0;
      }
      if (args_.do_eval && eval_ && eval_every > 0 && step % eval_every == 0) {
        LogEntry e;
        e.step = step;
        e.epoch = epoch_f;
        e.eval_loss = evaluate();
        log_history_.push_back(e);
        if (rank == 0) std::printf("%s\n", format_entry(e).c_str());
      }
      if (save_every > 0 && step % save_every == 0) save(epoch, b + 1);
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
    skip = 0;
    ++epoch;
  }
  if (bar) std::printf("\n");
  TrainOutput out;
  out.global_step = engine_->global_steps();
  out.train_runtime_s = now_seconds() - start;
  const int64_t steps_run = out.global_step - start_step;
  out.steps_this_run = steps_run;
  out.training_loss = steps_run > 0 ? loss_total / steps_run : 0;
  out.samples_per_second =
      steps_run * engine_->train_batch_size() / std::max(1e-9, out.train_runtime_s);
  out.log_history = log_history_;
  write_curves();
  return out;
}

}  // namespace zrt
