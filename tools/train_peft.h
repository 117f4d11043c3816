// zrt-train's parameter-efficient fine-tuning: TRL's LoRA flags (--use_peft, --lora_r, ...) and
// --adapter_name_or_path (a PEFT adapter folder to continue from), the adapters applied to the
// LLaMA family before the engine partitions it (peft/lora.h), and saving the model as HF's Trainer
// saves a PEFT model: the adapter folder (hf/adapter.h) where a full model would go.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "hf/trainer.h"
#include "models/llama_config.h"
#include "peft/lora.h"
#include "runtime/engine.h"

namespace zrt::tools {

void add_peft_options(cxxopts::Options& options);
// UsageError naming the first LoRA flag given with a `model` other than the LLaMA family.
void refuse_peft_options(const cxxopts::ParseResult& result, const std::string& model);
// TRL's nargs="+" flags written as separate words ("--lora_target_modules q_proj v_proj") joined
// into one comma-separated value, which cxxopts reads as a list.
std::vector<std::string> join_list_flag_values(const std::vector<std::string>& args);
// UsageError for --merge_adapter on a command line that does not train (`do_train` false): it
// merges the trained adapter, and nothing would be written.
void refuse_merge_without_training(const cxxopts::ParseResult& result, bool do_train);
// The adapters to train: --use_peft (from the --lora_* flags, TRL's defaults) or
// --adapter_name_or_path (its adapter_config.json); nullopt without either. UsageError for
// --lora_* flags without --use_peft, or with --adapter_name_or_path.
std::optional<lora::LoraConfig> peft_config(const cxxopts::ParseResult& result,
                                            const models::LlamaConfig& model);
// lora::apply, and PEFT's print_trainable_parameters line on rank 0.
void apply_peft(torch::nn::Module& model, const lora::LoraConfig& config, int rank);
// `loss`, with a check at its first call that every adapter ran (lora::unused_adapters): an
// adapter no forward reaches would train nothing while the run looks fine.
LossFn checked_adapter_loss(LossFn loss, std::shared_ptr<torch::nn::Module> model);

// transformers' save_model(dir): config.json (a LLaMA-family model's), the weights and the source
// folder's tokenizer and generation files; with adapters (`peft`), PEFT's adapter folder instead
// of the weights and config.json (with --merge_adapter, the final model merged and the adapter
// folder in output_dir/adapter). In a checkpoint-N under ZeRO-3 without
// stage3_gather_16bit_weights_on_model_save the weights are left to the engine checkpoint, as HF
// does, and it says so; the final model in output_dir always gets them (`final_model`).
void save_model(Engine& engine, const cxxopts::ParseResult& result,
                const std::optional<models::LlamaConfig>& config,
                const std::optional<lora::LoraConfig>& peft, const std::string& output_dir,
                bool final_model = false);

}  // namespace zrt::tools
