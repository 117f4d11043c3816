// The Trainer without training: building the engine for inference, loading weights from a
// checkpoint folder or a weights file, and prediction with HF's predict metrics.
#include <algorithm>
#include <filesystem>
#include <string>

#include "checkpoint/layout.h"
#include "config/resolved.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/strings.h"
#include "hf/pretrained.h"
#include "hf/sampler.h"
#include "hf/trainer.h"

namespace zrt {
namespace fs = std::filesystem;

bool Trainer::stage3_config() const {
  return options_.deepspeed_config && config::resolve_zero_stage(*options_.deepspeed_config) == 3;
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
  ZRT_CHECK_AS(UsageError, sequence_parallel_ == 1,
               "predict() under sequence parallelism (sequence_parallel_size ", sequence_parallel_,
               ") is not supported: each rank's forward gives a slice of the logits; evaluate() "
               "is");
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

WeightsFormat weights_format_of(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    ZRT_CHECK_AS(CheckpointError,
                 ends_with(path, ".safetensors") || ends_with(path, ".pt") ||
                     ends_with(path, ".bin") || ends_with(path, ".pth"),
                 path, ": a weights file must be .safetensors, .pt, .pth or .bin");
    return WeightsFormat::kStateDictFile;
  }
  ZRT_CHECK_AS(CheckpointError, fs::is_directory(path, ec), path, ": no such file or folder");
  if (ckpt::read_latest(path)) return WeightsFormat::kCheckpoint;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    if (ends_with(entry.path().filename().string(), "_model_states.pt")) {
      return WeightsFormat::kCheckpointTag;
    }
  }
  for (const char* name : {"model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                           "pytorch_model.bin.index.json"}) {
    if (fs::is_regular_file(fs::path(path) / name, ec)) return WeightsFormat::kPretrainedFolder;
  }
  throw CheckpointError(
      str(path,
          ": no weights found: the folder has no `latest` file, no "
          "*_model_states.pt (a checkpoint tag), no model.safetensors(.index.json) "
          "and no pytorch_model.bin(.index.json)"));
}

void Trainer::load_model_weights(const std::string& path, WeightsFormat format, bool inference,
                                 const PretrainedLoadOptions& pretrained) {
  if (!engine_) ensure_engine(inference && stage3_config());
  LoadCheckpointOptions only_module;
  only_module.load_module_only = true;
  switch (format) {
    case WeightsFormat::kStateDictFile:
      engine_->load_module_file(path);
      return;
    case WeightsFormat::kCheckpoint:
      ZRT_CHECK_AS(CheckpointError, ckpt::read_latest(path).has_value(), path,
                   ": not a checkpoint folder (no `latest` file)");
      engine_->load_checkpoint(path, std::nullopt, only_module);
      return;
    case WeightsFormat::kCheckpointTag: {
      const fs::path p = fs::absolute(path).lexically_normal();
      const fs::path dir = p.filename().empty() ? p.parent_path() : p;
      engine_->load_checkpoint(dir.parent_path().string(), dir.filename().string(), only_module);
      return;
    }
    case WeightsFormat::kPretrainedFolder:
      load_pretrained(*engine_, path, pretrained);  // each rank reads its partitions' elements
      return;
  }
  ZRT_INTERNAL_ASSERT(false, "unknown WeightsFormat ", static_cast<int>(format));
}

}  // namespace zrt
