// zrt-train: trains a GPT-style byte-level language model (default), an MLP regression model, or
// fine-tunes a LLaMA-architecture model from a Hugging Face folder (--model llama
// --model_name_or_path DIR, or --config_name CONFIG to train one from scratch; the result is saved
// in output_dir in HF format, as trainer.save_model() does) with ZeroRT's Trainer, from HF-style
// TrainingArguments and a DeepSpeed config. Launch with zrt-launch (or mpirun):
//
//   zrt-launch --np 2 -- build/bin/zrt-train --deepspeed examples/configs/zero3.json \
//       --output_dir /tmp/run --max_steps 100 --save_steps 50
//
// As HF's example scripts: --do_train trains, --do_eval evaluates on the held-out tenth of the
// data, --do_predict writes predictions for it (output_dir/predictions.safetensors and
// predict_results.json); with none of the three given it trains (and evaluates as
// --eval_strategy says). --model_name_or_path starts from
// weights: a checkpoint folder (ZeroRT's or DeepSpeed's, any stage and world size) or a
// .safetensors/.pt state dict. Prediction alone with a ZeRO-3 config runs ZeRO-3 inference.
//
// A LLaMA's --train_file .txt/.json/.jsonl is read as run_clm.py reads it (hf/text_data.h:
// the folder tokenizer's blocks, drawn in the HF Trainer's order). Otherwise the corpus is
// generated in-process (a small grammar, so the loss visibly falls in a minute on two CPU cores)
// or --train_file's bytes are the token ids. Without --deepspeed the
// ranks run plain data parallel (ZeRO stage 0) with HF's optimizer and schedule; without
// --model a folder with a config.json is a LLaMA. A saved LLaMA gets its source folder's tokenizer
// and generation files.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <sstream>
#include <tuple>

#include <cxxopts.hpp>
#include <torch/torch.h>

#include "checkpoint/safetensors.h"
#include "comm/init.h"
#include "comm/nccl_comm.h"
#include "config/load.h"
#include "config/resolved.h"
#include "config/training_args_flags.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/malloc_tuning.h"
#include "core/tool_main.h"
#include "hf/text_data.h"
#include "models/gpt.h"
#include "models/llama.h"
#include "models/mlp.h"
#include "models/tiled_loss.h"
#include "runtime/initialize.h"
#include "hf/adapter.h"
#include "hf/pretrained.h"
#include "hf/trainer.h"
#include "tools/clm_data.h"
#include "tools/moe_loss.h"
#include "tools/train_long.h"
#include "tools/train_peft.h"

namespace zrt::tools {
namespace {

using models::GptConfig;
using models::GptImpl;
using models::LlamaConfig;
using models::LlamaForCausalLMImpl;
using models::MlpImpl;

// Byte windows: input bytes [i, i+context), target bytes [i+1, i+context+1).
class ByteDataset : public Dataset {
 public:
  ByteDataset(std::string text, int64_t context) : context_(context) {
    ZRT_CHECK(static_cast<int64_t>(text.size()) > context + 1, "the corpus has ", text.size(),
              " bytes, fewer than the context of ", context + 1);
    bytes_ = torch::from_blob(text.data(), {static_cast<int64_t>(text.size())}, torch::kUInt8)
                 .to(torch::kLong)
                 .clone();
  }
  int64_t size() const override { return (bytes_.numel() - 1) / context_; }
  std::pair<at::Tensor, at::Tensor> get(int64_t i) const override {
    const int64_t start = i * context_;
    return {bytes_.narrow(0, start, context_), bytes_.narrow(0, start + 1, context_)};
  }

 private:
  int64_t context_;
  at::Tensor bytes_;
};

// zrt-train's MLP training and evaluation sets (models/mlp.h regression_data).
class RegressionDataset : public Dataset {
 public:
  RegressionDataset(int64_t n, uint64_t seed) { std::tie(x_, y_) = models::regression_data(n, seed); }
  int64_t size() const override { return x_.size(0); }
  std::pair<at::Tensor, at::Tensor> get(int64_t i) const override { return {x_[i], y_[i]}; }

 private:
  at::Tensor x_, y_;
};

struct ModelSetup {
  std::shared_ptr<torch::nn::Module> model;
  LossFn loss_fn;
  OutputLossFn output_loss;
  std::function<at::Tensor(const at::Tensor&)> forward;
  std::optional<LlamaConfig> llama;  // set for --model llama (saved with save_pretrained)
  bool text_data = false;            // run_clm's data (Note [run_clm's data])
  // A MoE model with output_router_logits: its auxiliary loss's weights (tools/moe_loss.h).
  std::shared_ptr<AuxLossScale> aux_scale;
  std::optional<lora::LoraConfig> peft;  // --use_peft / --adapter_name_or_path (train_peft.h)
};

// --model, or without it "llama" for a --model_name_or_path / --config_name folder whose
// config.json names a model_type (a Hugging Face model folder, as run_clm.py takes it; LlamaConfig
// refuses another type by name), else "gpt".
std::string model_kind(const cxxopts::ParseResult& result) {
  if (result.count("model")) return result["model"].as<std::string>();
  for (const char* flag : {"config_name", "model_name_or_path"}) {
    if (!result.count(flag)) continue;
    std::ifstream in(std::filesystem::path(result[flag].as<std::string>()) / "config.json");
    if (!in.good()) continue;
    const Json config = Json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (config.is_object() && config.contains("model_type")) return "llama";
  }
  return "gpt";
}

// The context (block) length: --block_size (run_clm.py's name) or --context.
int64_t block_size(const cxxopts::ParseResult& result) {
  const int64_t n = result.count("block_size") ? result["block_size"].as<int64_t>()
                                                : result["context"].as<int64_t>();
  ZRT_CHECK_AS(UsageError, n >= 1, "--block_size must be at least 1, got ", n);
  return n;
}

// --model llama: transformers' LlamaForCausalLM from --config_name (a config.json or a folder with
// one: trained from scratch) or --model_name_or_path's config.json (fine-tuned from its weights).
// A .txt/.json/.jsonl --train_file is read as run_clm.py reads it (Note [run_clm's data]): blocks
// of the folder tokenizer's ids, labels = inputs, the loss on the next token. Another file (or the
// generated corpus) is taken as bytes, example i the bytes [i*context, (i+1)*context] modulo the
// vocabulary. Under ZeRO-3 the model is built without values (partitioned construction); the
// weights load into the partitions, or init_deferred gives them transformers' initialisation, the
// same at every world size.
// A language model's loss over [tokens, vocab] logits: cross entropy, with HF's LabelSmoother
// when --label_smoothing_factor e > 0 ((1 - e) x nll + e x the vocabulary's mean -log p per
// token, which is torch's label_smoothing), averaged over the tokens.
at::Tensor lm_loss(const at::Tensor& logits, const at::Tensor& target, double smoothing) {
  return torch::cross_entropy_loss(logits, target, /*weight=*/{}, at::Reduction::Mean,
                                   /*ignore_index=*/-100, smoothing);
}

ModelSetup setup_llama(const cxxopts::ParseResult& result, const Json& ds_config, int64_t context,
                       comm::Comm& comm, std::shared_ptr<Dataset>* train,
                       std::shared_ptr<Dataset>* eval, double smoothing) {
  ZRT_CHECK_AS(UsageError, result.count("model_name_or_path") || result.count("config_name"),
               "--model llama needs --model_name_or_path DIR (a Hugging Face LLaMA folder) or "
               "--config_name CONFIG (a config.json, to train from scratch)");
  const std::string dir = result[result.count("config_name") ? "config_name" : "model_name_or_path"].as<std::string>();
  ModelSetup m;
  m.llama = LlamaConfig::from_file(dir);
  if (result.count("attn_implementation")) {
    models::set_attn_implementation(*m.llama, result["attn_implementation"].as<std::string>(),
                                    "--attn_implementation");
  }
  m.llama->mlp_tile_tokens = tile_tokens(result, "tiled_mlp_tokens");
  m.text_data = result.count("train_file") && hf::is_text_data_file(result["train_file"].as<std::string>());
  if (m.text_data) {
    const std::optional<int64_t> asked =
        result.count("block_size") || result.count("context") ? std::optional<int64_t>(block_size(result)) : std::nullopt;
    context = clm_block_size(result, asked, dir, m.llama->max_position_embeddings);
  }
  ZRT_CHECK_AS(UsageError, context <= m.llama->max_position_embeddings, "--block_size ", context,
               " is larger than the model's max_position_embeddings ",
               m.llama->max_position_embeddings, " (", dir,
               "): the positions past it were never trained");
  const int64_t vocab = m.llama->vocab_size;
  const bool stage3 = config::resolve_zero_stage(ds_config) == 3;
  auto llama = std::make_shared<LlamaForCausalLMImpl>(*m.llama, /*deferred=*/stage3);
  ZRT_LOG_INFO(models::family_name(*m.llama), " from ", dir, ": ", m.llama->num_hidden_layers,
               " layers, hidden ",
               m.llama->hidden_size, ", ", llama->num_params(), " parameters",
               stage3 ? " (built partitioned: no rank holds the whole model)" : "");
  m.model = llama;
  if (m.text_data) {
    load_clm_data(result, data_tokenizer(result, dir, vocab), context, comm, train, eval);
    m.output_loss = [smoothing](const at::Tensor& logits, const at::Tensor& y) {
      const int64_t n = logits.size(-2) - 1;  // position t scores t + 1
      return lm_loss(logits.narrow(-2, 0, n).reshape({-1, logits.size(-1)}).to(torch::kFloat),
                     y.narrow(-1, 1, n).reshape({-1}), smoothing);
    };
    m.forward = [llama](const at::Tensor& x) {
      return std::apply([&](const auto& ids, const auto& pos) { return llama->forward(ids, nullptr, nullptr, pos); }, clm_input(x));
    };
  } else {
    if (result.count("train_file")) {
      ZRT_LOG_WARN("--train_file ", result["train_file"].as<std::string>(),
                   " is not .txt/.json/.jsonl: its bytes are the token ids (modulo the vocabulary)");
    }
    const std::string text = read_corpus(result);
    const size_t split = text.size() * 9 / 10;
    *train = std::make_shared<ByteDataset>(text.substr(0, split), context);
    *eval = std::make_shared<ByteDataset>(text.substr(split), context);
    m.output_loss = [vocab, smoothing](const at::Tensor& logits, const at::Tensor& y) {
      return lm_loss(logits.reshape({-1, logits.size(-1)}).to(torch::kFloat),
                     y.remainder(vocab).reshape({-1}), smoothing);
    };
    m.forward = [llama, vocab](const at::Tensor& x) { return llama->forward(x.remainder(vocab)); };
  }
  m.loss_fn = [m](torch::nn::Module&, const at::Tensor& x, const at::Tensor& y) {
    return m.output_loss(m.forward(x), y);
  };
  if (m.llama->moe.enabled() && m.llama->moe.output_router_logits) {
    // As transformers' *MoeForCausalLM with labels (Note [Mixture of experts] in models/moe.h).
    m.aux_scale = std::make_shared<AuxLossScale>();
    const bool text = m.text_data;
    m.loss_fn = moe_causal_lm_loss(
        llama, [text, vocab](const at::Tensor& x) {
          return text ? clm_input(x) : std::pair<at::Tensor, at::Tensor>{x.remainder(vocab), {}};
        },
        m.output_loss, m.aux_scale);
  }
  m.loss_fn = long_sequence_loss(result, ds_config, comm, m.loss_fn, m.text_data && !m.aux_scale,
                                 llama, smoothing);
  m.peft = peft_config(result, *m.llama);
  if (m.peft) {
    apply_peft(*llama, *m.peft, comm.rank());
    m.loss_fn = checked_adapter_loss(m.loss_fn, llama);
  }
  return m;
}

// The model, data and losses `--model` names.
struct ExampleModel {
  std::shared_ptr<torch::nn::Module> model;
  std::shared_ptr<Dataset> train, eval;
  LossFn loss_fn;
  OutputLossFn output_loss;  // one example's output against its target
  int64_t hidden_size = 0;   // for the config's hidden-size "auto" keys
  std::optional<ModelSetup> llama;
};

ExampleModel build_gpt(const cxxopts::ParseResult& result, double smoothing) {
  GptConfig c;
  c.width = result["width"].as<int64_t>();
  c.layers = result["layers"].as<int64_t>();
  c.heads = result["heads"].as<int64_t>();
  c.context = block_size(result);
  ZRT_CHECK_AS(UsageError, c.width % c.heads == 0, "--width ", c.width,
               " must be a multiple of --heads ", c.heads);
  ExampleModel m;
  const std::string text = read_corpus(result);
  const size_t split = text.size() * 9 / 10;
  m.train = std::make_shared<ByteDataset>(text.substr(0, split), c.context);
  m.eval = std::make_shared<ByteDataset>(text.substr(split), c.context);
  auto gpt = std::make_shared<GptImpl>(c);
  ZRT_LOG_INFO("GPT: ", c.layers, " layers, width ", c.width, ", ", c.heads, " heads, context ",
               c.context, ", ", gpt->num_params(), " parameters; ", m.train->size(),
               " training examples");
  m.model = gpt;
  m.hidden_size = c.width;
  m.output_loss = [smoothing](const at::Tensor& logits, const at::Tensor& y) {
    return lm_loss(logits.view({-1, logits.size(-1)}), y.reshape({-1}), smoothing);
  };
  m.loss_fn = [gpt, loss = m.output_loss](torch::nn::Module&, const at::Tensor& x,
                                          const at::Tensor& y) { return loss(gpt->forward(x), y); };
  return m;
}

// `smoothing`: --label_smoothing_factor, for the language models' loss.
ExampleModel build_model(const cxxopts::ParseResult& result, const Json& ds_config,
                         comm::Comm& comm, double smoothing) {
  const std::string kind = model_kind(result);
  if (kind != "llama") refuse_peft_options(result, kind);
  if (kind != "llama") refuse_text_options(result, kind);
  const int sp = config::sequence_parallel_size(ds_config);
  ZRT_CHECK_AS(UsageError, kind == "llama" || sp == 1, "sequence_parallel_size ", sp,
               " (sequence parallelism) is for --model llama's text data, not --model ", kind);
  if (kind == "gpt") return build_gpt(result, smoothing);
  ExampleModel m;
  if (kind == "mlp") {
    ZRT_CHECK_AS(UsageError, smoothing == 0.0,
                 "--label_smoothing_factor smooths a language model's token labels; --model mlp "
                 "is a regression (mean squared error)");
    const int64_t width = result["width"].as<int64_t>();
    m.train = std::make_shared<RegressionDataset>(4096, 1);
    m.eval = std::make_shared<RegressionDataset>(512, 2);
    auto mlp = std::make_shared<MlpImpl>(width, result["layers"].as<int64_t>());
    m.model = mlp;
    m.hidden_size = width;
    m.loss_fn = [mlp](torch::nn::Module&, const at::Tensor& x, const at::Tensor& y) {
      return torch::mse_loss(mlp->forward(x), y);
    };
    m.output_loss = [](const at::Tensor& out, const at::Tensor& y) {
      return torch::mse_loss(out, y);
    };
    return m;
  }
  ZRT_CHECK_AS(UsageError, kind == "llama", "--model must be gpt, mlp or llama, got '", kind, "'");
  m.llama =
      setup_llama(result, ds_config, block_size(result), comm, &m.train, &m.eval, smoothing);
  m.hidden_size = m.llama->llama->hidden_size;
  m.model = m.llama->model;
  m.loss_fn = m.llama->loss_fn;
  m.output_loss = m.llama->output_loss;
  return m;
}

// HF's device rule: a CUDA device when LibTorch sees one, unless --use_cpu; ZeroRT also needs
// its NCCL backend there (the ranks' collectives run on the GPU).
at::DeviceType training_device(const config::TrainingArguments& args) {
  if (args.use_cpu || !torch::cuda::is_available()) return at::kCPU;
  if (!comm::nccl_available()) {
    ZRT_LOG_WARN("a CUDA device is visible but this build has no NCCL backend: training on the CPU");
    return at::kCPU;
  }
  return at::kCUDA;
}

// The model onto this rank's GPU (the NCCL backend picked it: local rank modulo the devices).
void move_to_device(ExampleModel& m, const comm::Comm& comm, const Json& ds_config) {
  ZRT_CHECK_AS(UsageError, !(m.llama && config::resolve_zero_stage(ds_config) == 3),
               "--model llama at ZeRO-3 is built partitioned on the CPU and cannot move to the "
               "GPU yet: use --use_cpu, or ZeRO stage 0-2 on the GPU");
  const auto devices = static_cast<int>(torch::cuda::device_count());
  m.model->to(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(comm.local_rank() % devices)));
}

// Rank 0's summary of a train() call and of its communication (the comm thread's timers).
void print_training(const TrainOutput& out, const comm::CommTimes& before,
                    const comm::CommTimes& after) {
  if (out.steps_this_run == 0) {
    std::printf("train: nothing to train, already at step %lld of %lld\n",
                static_cast<long long>(out.global_step), static_cast<long long>(out.global_step));
    return;
  }
  std::printf("train: %lld steps (%lld to %lld) in %.1f s (%.1f samples/s), mean loss %.4f\n",
              static_cast<long long>(out.steps_this_run),
              static_cast<long long>(out.global_step - out.steps_this_run + 1),
              static_cast<long long>(out.global_step), out.train_runtime_s,
              out.samples_per_second, out.training_loss);
  comm::CommTimes c;
  c.busy_seconds = after.busy_seconds - before.busy_seconds;
  c.exposed_seconds = after.exposed_seconds - before.exposed_seconds;
  c.collectives = after.collectives - before.collectives;
  std::printf("train: communication %.3f s in %llu collectives, %.3f s of it waited for "
              "(%.0f%% hidden behind compute)\n",
              c.busy_seconds, static_cast<unsigned long long>(c.collectives), c.exposed_seconds,
              100 * c.hidden_fraction());
}

// --do_predict: the evaluation split's predictions (rank 0 writes predictions.safetensors) and
// HF's predict metrics.
void predict_and_save(Trainer& trainer, const ExampleModel& m, const std::string& output_dir,
                      int rank) {
  PredictionOutput pred = trainer.predict(
      *m.eval,
      [&m](torch::nn::Module&, const at::Tensor& x) {
        // The models' forward through the same module tree the engine manages.
        if (m.llama) return m.llama->forward(x);
        return m.model->as<GptImpl>() != nullptr ? m.model->as<GptImpl>()->forward(x)
                                               : m.model->as<MlpImpl>()->forward(x);
      },
      m.output_loss);
  if (rank == 0) {
    const std::string path =
        (std::filesystem::path(output_dir) / "predictions.safetensors").string();
    std::filesystem::create_directories(output_dir);
    ckpt::save_safetensors({{"predictions", at::stack(pred.predictions)},
                            {"label_ids", at::stack(pred.label_ids)}},
                           path);
    std::printf("predict: %zu predictions written to %s\n", pred.predictions.size(),
                path.c_str());
  }
  trainer.save_metrics("predict", pred.metrics);
  if (rank != 0) return;
  std::printf("***** predict metrics *****\n");
  for (const auto& [k, v] : pred.metrics) std::printf("  %-28s = %.6g\n", k.c_str(), v);
  std::fflush(stdout);
}

// The Trainer's options for the model: its batch order, and checkpoint-N folders that are model
// folders (save_model).
TrainerOptions trainer_options(const cxxopts::ParseResult& result, const ExampleModel& m,
                               std::shared_ptr<comm::Comm> comm, const Json& ds_config) {
  TrainerOptions topts;
  topts.comm = std::move(comm);
  topts.deepspeed_config = ds_config;
  topts.model_dims.hidden_size = m.hidden_size;
  if (m.llama && m.llama->text_data) topts.batch_order = TrainerOptions::BatchOrder::kHfTrainer;
  std::optional<LlamaConfig> llama_config;
  std::optional<lora::LoraConfig> peft;
  if (m.llama) llama_config = *m.llama->llama;
  if (m.llama) peft = m.llama->peft;
  topts.save_model = [&result, llama_config, peft](Engine& engine, const std::string& dir) {
    save_model(engine, result, llama_config, peft, dir);
  };
  return topts;
}

// zrt-train's own flags (the model) and transformers' TrainingArguments.
cxxopts::Options train_options() {
  cxxopts::Options options("zrt-train",
                           "Train or fine-tune with ZeroRT: a LLaMA from a Hugging Face folder or "
                           "config, or the example GPT byte-level LM or MLP.");
  options.add_options("model")("model",
                               "gpt, mlp or llama (llama: --model_name_or_path a Hugging Face "
                               "folder, or --config_name to train from scratch); default: llama "
                               "for a folder with a config.json, else gpt",
                               cxxopts::value<std::string>())(
      "layers", "transformer blocks / MLP blocks", cxxopts::value<int64_t>()->default_value("2"))(
      "heads", "attention heads", cxxopts::value<int64_t>()->default_value("4"))(
      "width", "hidden width", cxxopts::value<int64_t>()->default_value("64"))(
      "context", "tokens per example", cxxopts::value<int64_t>()->default_value("32"))(
      "attn_implementation",
      "--model llama: sdpa (default: LibTorch's fused attention) or eager, as transformers' "
      "argument",
      cxxopts::value<std::string>())(
      "block_size",
      "tokens per example (run_clm.py's name for --context; for a LLaMA's text --train_file, "
      "default as run_clm.py: the tokenizer's model_max_length, or min(1024, "
      "max_position_embeddings) when that is larger)",
      cxxopts::value<int64_t>())(
      "train_file",
      "data to train on: --model llama: a .txt (a document per line) or .json/.jsonl file "
      "(--text_column_name field), tokenized as run_clm.py does; --model gpt (and other files): "
      "bytes; default: a generated corpus",
      cxxopts::value<std::string>())(
      "validation_file", "--model llama: evaluation data (.txt/.json/.jsonl); no effect otherwise",
      cxxopts::value<std::string>())(
      "validation_split_percentage",
      "--model llama without --validation_file: the percentage of --train_file's documents held "
      "out for evaluation; no effect otherwise",
      cxxopts::value<int64_t>()->default_value("5"))(
      "text_column_name", "the .json/.jsonl field holding a document's text (--model llama; no effect otherwise)",
      cxxopts::value<std::string>()->default_value("text"))(
      "keep_linebreaks", "keep each .txt line's line break (--model llama; no effect otherwise)",
      cxxopts::value<bool>()->default_value("true"))(
      "tiled_mlp_tokens", "--model llama: each dense MLP over this many positions at a time, each tile recomputed in backward (Note [Tiled MLP]); 0: off",
      cxxopts::value<int64_t>()->default_value("0"))(
      "tiled_loss_tokens", "--model llama text data: the LM head and loss this many tokens at a time, recomputed in backward, so the (tokens, vocab) logits never exist whole (Note [Tiled logits and loss]); 0: off",
      cxxopts::value<int64_t>()->default_value("0"))(
      "packed_documents", "--model llama text data: positions restart and attention stays within each document of a block (Note [run_clm's data] 5)",
      cxxopts::value<bool>()->default_value("false"))(
      "tokenizer_name", "--model llama: the folder of the tokenizer (default: the model's); no effect otherwise",
      cxxopts::value<std::string>())("corpus_bytes", "size of the generated corpus",
                                     cxxopts::value<int64_t>()->default_value("200000"))(
      "model_name_or_path",
      "weights to start from: --model llama: a Hugging Face folder (config.json with "
      "model.safetensors, shards + index, or pytorch_model.bin); any model: a checkpoint folder "
      "(checkpoint-N, a save_dir with `latest`, a global_stepN tag) or a .safetensors/.pt state "
      "dict",
      cxxopts::value<std::string>())(
      "config_name",
      "--model llama: a config.json (or a folder with one) to train from scratch; with "
      "--model_name_or_path too, this configuration with that folder's weights",
      cxxopts::value<std::string>())(
      "max_shard_size", "--model llama: bytes per safetensors file of the saved model",
      cxxopts::value<int64_t>()->default_value("5000000000"))("h,help", "show this help");
  add_peft_options(options);
  add_sequence_parallel_options(options);
  config::add_training_arguments(options);
  return options;
}

// --do_eval: the evaluation loss and run_clm's perplexity, saved as HF's scripts save them.
void evaluate_and_save(Trainer& trainer, const ExampleModel& m, int rank) {
  ZRT_CHECK_AS(UsageError, m.eval != nullptr,
               "--do_eval: the validation split has no whole block (give --validation_file or a "
               "larger --validation_split_percentage)");
  const double eval_loss = trainer.evaluate();
  // run_clm's perplexity: exp(eval_loss), infinite when that overflows.
  const double perplexity = std::exp(eval_loss);
  trainer.save_metrics("eval", {{"eval_loss", eval_loss},
                                {"perplexity", perplexity},
                                {"eval_samples", static_cast<double>(m.eval->size())}});
  if (rank == 0) std::printf("eval loss %.6f perplexity %.4f\n", eval_loss, perplexity);
}

// The command line parsed (HF's "--flag true" and TRL's list flags joined first); nullopt after
// printing --help.
std::optional<cxxopts::ParseResult> parse_command_line(int argc, char** argv) {
  cxxopts::Options options = train_options();
  std::vector<std::string> args(argv + 1, argv + argc);
  std::vector<std::string> joined = config::join_bool_flag_values(join_list_flag_values(args));
  std::vector<const char*> cargv = {argv[0]};
  for (const auto& a : joined) cargv.push_back(a.c_str());
  cxxopts::ParseResult result;
  try {
    result = options.parse(static_cast<int>(cargv.size()), cargv.data());
  } catch (const cxxopts::exceptions::exception& e) {
    throw UsageError(e.what());
  }
  if (result.count("help")) {
    std::printf("%s", options.help().c_str());
    return std::nullopt;
  }
  ZRT_CHECK_AS(UsageError, result.unmatched().empty(), "unexpected argument '",
               result.unmatched().empty() ? "" : result.unmatched().front(), "'");
  return result;
}

int run(int argc, char** argv) {
  const std::optional<cxxopts::ParseResult> parsed = parse_command_line(argc, argv);
  if (!parsed) return 0;
  const cxxopts::ParseResult& result = *parsed;
  config::TrainingArguments targs = config::parse_training_arguments(result);
  // Loaded once: the communicator's "zrt" options from it here, the rest by the Trainer.
  Json ds_config = targs.deepspeed ? config::load_config_source(*targs.deepspeed)
                                   : config_without_deepspeed();
  apply_sequence_parallel_flag(result, targs.do_predict, ds_config);
  // This program, not the library, opts in to glibc's tuning (core/malloc_tuning.h) under ZeRO-3
  // only: below it, activations stay mapped between steps (docs/PERFORMANCE.md, the LLaMA step).
  if (config::resolve_zero_stage(ds_config) == 3) tune_malloc_for_large_models();
  const at::DeviceType device = training_device(targs);
  auto comm = comm::init_from_env(comm_options_for_config(ds_config), device);
  torch::manual_seed(static_cast<uint64_t>(targs.seed));
  ExampleModel m = build_model(result, ds_config, *comm, targs.label_smoothing_factor);
  if (device == at::kCUDA) move_to_device(m, *comm, ds_config);
  const TrainerOptions topts = trainer_options(result, m, comm, ds_config);
  std::optional<ModelSetup>& llama = m.llama;
  Trainer trainer(m.model, targs, m.train, m.eval, m.loss_fn, topts);
  if (llama && llama->peft) {  // checkpoints named as DeepSpeed's of a PeftModel: both resume
    trainer.engine().set_checkpoint_names(lora::peft_model_names(*m.model));
  }
  if (llama && llama->aux_scale) {
    *llama->aux_scale =
        hf_trainer_aux_scale(targs, comm->size(), trainer.engine().gradient_accumulation_steps());
  }
  warn_packed_loss_weights(result, targs.average_tokens_across_devices, comm->size(),
                           trainer.engine().gradient_accumulation_steps());
  // HF's example scripts: each phase only when asked. With no --do_* flag on the command line,
  // training (--eval_strategy alone, which makes do_eval true as in HF's __post_init__, trains
  // and evaluates on its schedule).
  const bool phase_given =
      result.count("do_train") + result.count("do_eval") + result.count("do_predict") > 0;
  const bool do_train = targs.do_train || !phase_given;
  refuse_merge_without_training(result, do_train);
  std::optional<std::string> weights;
  if (result.count("model_name_or_path")) weights = result["model_name_or_path"].as<std::string>();
  if (!do_train && !weights && targs.resume_from_checkpoint) {
    // Without training there is nothing to resume: the checkpoint's weights are the model.
    weights = trainer.resume_path();
  }
  const bool peft = llama && llama->peft;
  if (weights) {
    PretrainedLoadOptions base;  // with adapters: the base model's tensors, the adapters stay new
    if (peft) base.only = [](const std::string& n) { return n.find(".lora_") == std::string::npos; };
    trainer.load_model_weights(*weights, weights_format_of(*weights), /*inference=*/!do_train, base);
  } else if (llama) {  // from scratch: transformers' initialisation, the same at every world size
    const LlamaConfig cfg = *llama->llama;
    init_deferred(trainer.engine(), static_cast<uint64_t>(targs.seed),
                  [cfg](const std::string& name, at::Tensor& t, at::Generator& gen) {
                    models::llama_init_parameter(cfg, name, t, gen);
                  });
  }
  if (result.count("adapter_name_or_path"))
    load_adapter(trainer.engine(), result["adapter_name_or_path"].as<std::string>());
  if (do_train) {
    const comm::CommTimes comm_before = comm->times();
    const TrainOutput out = trainer.train();
    const comm::CommTimes comm_after = comm->times();
    trainer.save_state();  // output_dir/trainer_state.json, as HF's scripts do
    if (llama) {
      save_model(trainer.engine(), result, *llama->llama, llama->peft, targs.output_dir,
                 /*final_model=*/true);
    }
    trainer.save_metrics("train", {{"train_loss", out.training_loss},
                                   {"train_runtime", out.train_runtime_s},
                                   {"train_samples_per_second", out.samples_per_second},
                                   {"global_step", static_cast<double>(out.global_step)}});
    if (comm->rank() == 0) print_training(out, comm_before, comm_after);
  }
  if (targs.do_eval) evaluate_and_save(trainer, m, comm->rank());
  if (targs.do_predict) predict_and_save(trainer, m, targs.output_dir, comm->rank());
  return 0;
}

}  // namespace
}  // namespace zrt::tools

int main(int argc, char** argv) {
  return zrt::run_tool("zrt-train", [&] { return zrt::tools::run(argc, argv); });
}
