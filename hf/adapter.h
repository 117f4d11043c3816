// PEFT adapter folders for a model adapted by zrt::lora::apply (peft/lora.h): what PEFT's
// save_pretrained writes and PeftModel.from_pretrained reads — adapter_config.json and
// adapter_model.safetensors with PEFT's key names — saved from and loaded into a running engine,
// under ZeRO-3 gathered and scattered like any pretrained weights (hf/pretrained.h).
#pragma once

#include <string>

#include "hf/pretrained.h"
#include "peft/lora.h"

namespace zrt {

class Engine;

// Collective. Writes `dir`/adapter_config.json (`config`, base_model_name_or_path) and
// `dir`/adapter_model.safetensors: the adapters' tensors and the modules_to_save's parameters in
// the model's dtype, under PEFT's names. Throws CheckpointError on every rank if rank 0 fails.
void save_adapter(Engine& engine, const std::string& dir, const lora::LoraConfig& config,
                  const std::string& base_model_name_or_path);

// Collective. transformers' save_pretrained of PEFT's merge_and_unload(): `options`' folder
// (config.json, weights, extra files) with every adapted layer's weight written as W +
// lora::delta_weight(A, B, scaling) in the weight's dtype (PEFT's merge on CPU) and no adapter
// tensors; the modules_to_save as trained. The running model is not changed; a partitioned
// adapted layer is gathered one tensor at a time, as save_pretrained gathers.
void save_merged(Engine& engine, const std::string& dir, SavePretrainedOptions options = {});

// Not collective. The adapter_config.json of the PEFT folder `dir` (lora::LoraConfig::
// from_peft_json's errors, naming the file).
lora::LoraConfig read_adapter_config(const std::string& dir);

// Collective. The adapter weights of the PEFT folder `dir` into a model adapted with its config
// (read_adapter_config): every adapter tensor and modules_to_save parameter must be there with its
// shape (the base model's shapes must be those the adapter was trained on); nothing else is
// touched. Throws CheckpointError naming the file and every mismatch.
PretrainedLoadReport load_adapter(Engine& engine, const std::string& dir);

}  // namespace zrt
