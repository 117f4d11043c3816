// HfTrainerDeepSpeedConfig: the HF Trainer's side of a DeepSpeed config (transformers 5.24's
// HfTrainerDeepSpeedConfig, docs/DEEPSPEED.md §3.2-§3.4; tests/peers/config_differential.py
// checks it against the installed transformers). It replaces "auto" values from the
// TrainingArguments and records every explicit value that disagrees with them:
//
//   HfTrainerDeepSpeedConfig hf(DeepSpeedConfig::from_source(*args.deepspeed));
//   hf.trainer_config_process(args, world_size);          // when the arguments are known
//   hf.trainer_config_finalize(args, model_dims, steps);   // when model and step count are
//
// finalize throws one ConfigError listing all mismatches ("- ds KEY=VALUE vs hf ARG=VALUE",
// values printed as Python prints them) with the advice to use "auto". Keys are only ever
// filled where they already exist: a missing parent section is never created.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/ds_config.h"
#include "config/training_args.h"
#include "core/dtype.h"
#include "core/json.h"

namespace zrt::config {

// What the hidden-size "auto" rules need from the model (HF reads model.config).
struct ModelDims {
  std::optional<int64_t> hidden_size;
  std::vector<int64_t> hidden_sizes;  // used (its maximum) when hidden_size is unset
};

class HfTrainerDeepSpeedConfig {
 public:
  explicit HfTrainerDeepSpeedConfig(DeepSpeedConfig config);

  const DeepSpeedConfig& config() const { return config_; }
  DeepSpeedConfig& config() { return config_; }
  const Json& json() const { return config_.json(); }

  // bf16 if bf16.enabled is true, else fp16 if fp16.enabled is true, else fp32 (transformers 5).
  // Throws before trainer_config_process().
  DType dtype() const;

  bool is_auto(std::string_view dotted) const;

  // Parent missing: nothing. Value "auto": replaced by hf_value. Otherwise, with must_match, a
  // non-null value that differs from hf_value (Python ==) is recorded as a mismatch.
  void fill_match(std::string_view dotted, const Json& hf_value, std::string_view hf_key,
                  bool must_match = true);
  void fill_only(std::string_view dotted, const Json& hf_value) {
    fill_match(dotted, hf_value, "", /*must_match=*/false);
  }

  const std::vector<std::string>& mismatches() const { return mismatches_; }

  // spec §3.3: batch sizes, clipping, optimizer and scheduler params, precision, node-local
  // storage, and the dtype decision. Mismatches are only recorded here, reported by finalize.
  void trainer_config_process(const TrainingArguments& args, int world_size,
                              bool auto_find_batch_size = false);

  // spec §3.4: hidden-size "auto"s (h*h; under ZeRO-3 also int(0.9*h*h) and 10*h), scheduler
  // total/warmup steps, then the combined mismatch error. With num_training_steps unset the
  // scheduler step keys are left alone (resolve_config reports any that are still "auto").
  void trainer_config_finalize(const TrainingArguments& args, const ModelDims& model,
                               std::optional<int64_t> num_training_steps);

 private:
  DeepSpeedConfig config_;
  std::optional<DType> dtype_;
  std::vector<std::string> mismatches_;
};

}  // namespace zrt::config
