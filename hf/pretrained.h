// Hugging Face weights (checkpoint/hf_weights.h: model.safetensors, its shards with the index,
// pytorch_model.bin) loaded straight into an engine's partitions, and saved back the same way
// (save_pretrained). Loading: each rank reads only the
// elements it holds (stage 3: its slice of every parameter; stages 1/2: its range of each flat
// group; stage 0: everything), one parameter at a time, converting the file's dtype (e.g. bf16 on
// disk) to the fp32 masters and the model's dtype. Frozen parameters and buffers, which every
// rank keeps whole, are read whole. Tied weights: an alias name (engine.tied_parameters()) is
// neither required nor unexpected.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "core/json.h"

namespace zrt {

class Engine;

struct PretrainedLoadOptions {
  // Missing or unexpected names are errors; without it, warnings (a parameter the weights lack
  // keeps its value). A shape mismatch is always an error.
  bool strict = true;
  // Names in the weights that the model is known not to have, never reported: e.g. the
  // lm_head.weight of a tied model saved with both names (transformers' _tied_weights_keys).
  std::vector<std::string> ignore;
  // The model's name of a tensor of the weights, or "" for one that is not the model's (e.g.
  // PEFT's adapter keys, peft/lora.h param_name_of); unset: the names are the model's.
  std::function<std::string(const std::string&)> rename;
  // The model's tensors to load (e.g. an adapter's): the others are neither expected nor
  // touched. Unset: all of them.
  std::function<bool(const std::string&)> only;
};

struct PretrainedLoadReport {
  std::vector<std::string> missing;     // model names the weights lack
  std::vector<std::string> unexpected;  // weight names the model lacks
  uint64_t bytes_read = 0;              // tensor data bytes this rank read
};

// Collective: every rank calls it with the same path. Throws CheckpointError on every rank when
// the weights do not fit the model, naming every missing, unexpected and mis-shaped tensor at
// once (then nothing was changed), or when any rank fails to read its part (that rank's error
// names the file; the masters are restored from the parameters, except where they are the
// parameters' partitions themselves, which may then be partly overwritten: pure fp32 without
// offload, and every ZeRO-3 inference engine).
PretrainedLoadReport load_pretrained(Engine& engine, const std::string& path,
                                     const PretrainedLoadOptions& options = {});

// Fills one whole parameter (fp32, its shape) from `gen`, e.g. t.normal_(0, 0.02, gen).
using ParamInit = std::function<void(const std::string& name, at::Tensor& t, at::Generator& gen)>;

// Collective. Values for a model built with zrt::defer_parameters when there are no weights to
// load (training from scratch): `init` runs once per parameter with a generator seeded from `seed`
// and the parameter's name, so the values are the same at every world size; each rank computes one
// whole parameter at a time and keeps its partition (peak memory: the partitions plus the largest
// parameter). Frozen parameters are initialised the same way.
void init_deferred(Engine& engine, uint64_t seed, const ParamInit& init);

struct SavePretrainedOptions {
  // Bytes per safetensors file (transformers' default, "5GB"); above it the weights are sharded
  // into model-0000i-of-0000n.safetensors with model.safetensors.index.json. A tensor larger than
  // this gets a file of its own.
  int64_t max_shard_size = 5'000'000'000;
  Json config;  // written as config.json unless null
  // Files copied as they are from `extra_files_from` (a model folder) when it has them: what
  // transformers' Trainer.save_model writes besides the weights (the tokenizer's files and
  // generation_config.json), so that the saved folder serves text as the source did.
  std::string extra_files_from;
  std::vector<std::string> extra_files;
  // false: config.json and the extra files only, no weights (transformers' save_model under
  // ZeRO-3 without stage3_gather_16bit_weights_on_model_save); weight files already in `dir` are
  // removed, as HF removes its empty ones.
  bool weights = true;
  // The name a tensor is saved under, or "" to leave it out (e.g. an adapter: peft/lora.h
  // peft_key); unset: the model's names.
  std::function<std::string(const std::string&)> rename;
  // One weights file of this name (e.g. PEFT's "adapter_model.safetensors"), never sharded, and
  // no other weight file in `dir` is removed. Empty: transformers' names and sharding.
  std::string weights_name;
  // The value written for a tensor, computed from the model's tensors (e.g. a LoRA merge:
  // hf/adapter.h save_merged): called on every rank, in the order of the files, with the
  // tensor's model name, its whole value and `whole_of`, which gives any other tensor of the
  // model whole (collective under ZeRO-3: every rank makes the same calls). Unset: the value.
  std::function<at::Tensor(const std::string& name, const at::Tensor& value,
                           const std::function<at::Tensor(const std::string&)>& whole_of)>
      transform;
};

// The tokenizer and generation files of an HF model folder (tokenizer.model, tokenizer.json,
// tokenizer_config.json, special_tokens_map.json, added_tokens.json, chat_template.jinja,
// generation_config.json).
std::vector<std::string> hf_tokenizer_and_generation_files();

// Collective. Writes the model's parameters (each tied one once, under its owner's name) and
// buffers, in the model's dtype, to `dir` as transformers' save_pretrained does (the files
// from_pretrained reads), plus config.json. Under ZeRO-3 rank 0 gathers the partitions one shard
// at a time and writes it, so that no rank ever holds more than one shard of the model. Every file
// is written atomically (index and config last); shard files of an earlier save that this one does
// not use are removed afterwards. Throws CheckpointError on every rank if rank 0 fails to write.
void save_pretrained(Engine& engine, const std::string& dir,
                     const SavePretrainedOptions& options = {});

}  // namespace zrt
