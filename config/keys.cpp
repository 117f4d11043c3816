#include "config/keys.h"

#include <algorithm>

namespace zrt::config {
namespace {

void add(std::vector<std::string>& out, const std::string& prefix, const keys::KeyList& list) {
  for (std::string_view key : list) out.push_back(prefix + std::string(key));
}

}  // namespace

std::vector<std::string> supported_keys() {
  std::vector<std::string> out;
  add(out, "", keys::kTopLevel);
  add(out, "", keys::kIgnoredTopLevel);
  add(out, "", keys::kUnsupportedWhenEnabled);
  for (const keys::NoEffectKey& k : keys::kNoEffectTopLevel) out.emplace_back(k.key);
  add(out, "fp16.", keys::kFp16);
  add(out, "bf16.", keys::kBf16);
  add(out, "bfloat16.", keys::kBf16);
  for (const keys::RemovedKey& r : keys::kRemovedTopLevel) out.emplace_back(r.key);
  for (const keys::RemovedKey& r : keys::kRemovedZero) {
    out.push_back("zero_optimization." + std::string(r.key));
  }
  add(out, "zero_optimization.", keys::kZero);
  add(out, "zero_optimization.leaf_module.", keys::kLeafModule);
  add(out, "zero_optimization.offload_param.", keys::kOffloadParam);
  add(out, "zero_optimization.offload_optimizer.", keys::kOffloadOptimizer);
  add(out, "optimizer.", keys::kOptimizer);
  add(out, "optimizer.params.", keys::kAdamParams);
  add(out, "optimizer.params.", keys::kSgdParams);
  add(out, "scheduler.", keys::kScheduler);
  for (const keys::KeyList* list :
       {&keys::kWarmupLRParams, &keys::kWarmupDecayLRParams, &keys::kWarmupCosineLRParams,
        &keys::kOneCycleParams, &keys::kLRRangeTestParams}) {
    add(out, "scheduler.params.", *list);
  }
  add(out, "checkpoint.", keys::kCheckpoint);
  add(out, "checkpoint.parallel_write.", keys::kCheckpointParallelWrite);
  add(out, "checkpoint.writer.", keys::kCheckpointWriter);
  add(out, "data_types.", keys::kDataTypes);
  add(out, "tensorboard.", keys::kMonitor);
  add(out, "csv_monitor.", keys::kMonitor);
  add(out, "activation_checkpointing.", keys::kActivationCheckpointing);
  add(out, "aio.", keys::kAio);
  add(out, "zrt.", keys::kZrt);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace zrt::config
