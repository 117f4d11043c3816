// zrt-generate: generation with a LLaMA-architecture model (models/llama.h) from a Hugging Face
// model folder (config.json and the weights: model.safetensors, its shards with the index, or
// pytorch_model.bin), served by ZeRO-3 inference over the ranks of the job: the model is built
// without values (zrt::defer_parameters, one part at a time), each rank loads only the elements of
// its partitions (zrt::load_pretrained), and every layer is gathered for its forward, with
// prefetch, then released; parameters under the persistence threshold stay gathered.
//
//   zrt-launch --np 2 -- build/bin/zrt-generate --model_name_or_path DIR \
//       --prompt_ids "1,15,27;4,5,6" --max_new_tokens 20
//   zrt-launch --np 2 -- build/bin/zrt-generate --model_name_or_path DIR \
//       --prompt "The capital of France is" --prompt "Once upon a time"
//
// Prompts are token ids (--prompt_ids: ',' between ids, ';' between prompts) or text (--prompt,
// repeated, or --prompts_file: one JSON string per line) where the folder has a tokenizer: a
// byte-level BPE tokenizer.json or a SentencePiece tokenizer.model (text/tokenizer.h: how
// BOS/EOS are added, what differs from transformers).
// Generation is models/generate.h's: each rank generates its share of the prompts (prompt i on
// rank i mod N); --replicate_prompts makes every rank run every prompt instead (rank 0 picks the
// tokens; the logits are then the same at every N). Greedy by default; --do_sample samples as
// transformers' generate does, prompt i from a generator seeded with --seed + i. Generation of a
// prompt stops at --max_new_tokens or at the config's eos_token_id (one id or a list). Rank 0 writes one JSON line per prompt,
// {"prompt": [...], "generated": [...]}, to --output (default stdout), with "prompt_text" for a
// text prompt and "text", the generated continuation, wherever the folder has a tokenizer;
// --logits_out writes every prompt's logits from its first forward (fp32, "prompt.<i>":
// (length, vocab); for checking: every rank receives all of them) as safetensors; --metrics_out
// the timings and every rank's peak RSS as JSON. --adapter_name_or_path serves the folder with a
// PEFT LoRA adapter (hf/adapter.h) applied on the fly: the adapters sit in their layers' units,
// partitioned and gathered with the frozen weights they adapt.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include <cxxopts.hpp>
#include <torch/torch.h>

#include "checkpoint/safetensors.h"
#include "comm/init.h"
#include "config/load.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/malloc_tuning.h"
#include "core/tool_main.h"
#include "models/generate.h"
#include "models/llama.h"
#include "runtime/initialize.h"
#include "hf/adapter.h"
#include "hf/pretrained.h"
#include "peft/lora.h"
#include "text/tokenizer.h"

#include <sys/resource.h>

namespace zrt::tools {
namespace {

using models::GenerateOptions;
using models::LlamaConfig;
using models::LlamaForCausalLMImpl;
using text::TextTokenizer;
using text::valid_utf8;

std::vector<std::vector<int64_t>> parse_prompts(const std::string& text, int64_t vocab) {
  std::vector<std::vector<int64_t>> prompts;
  std::stringstream all(text);
  std::string one;
  while (std::getline(all, one, ';')) {
    std::vector<int64_t> ids;
    std::stringstream in(one);
    std::string item;
    while (std::getline(in, item, ',')) {
      size_t used = 0;
      int64_t id = -1;
      try {
        id = std::stoll(item, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      ZRT_CHECK_AS(UsageError, used > 0 && item.find_first_not_of(" ", used) == std::string::npos,
                   "--prompt_ids: '", item, "' in prompt ", prompts.size() + 1,
                   " is not an integer");
      ZRT_CHECK_AS(UsageError, id >= 0 && id < vocab, "--prompt_ids: token ", id, " in prompt ",
                   prompts.size() + 1, " is outside the vocabulary [0, ", vocab, ")");
      ids.push_back(id);
    }
    ZRT_CHECK_AS(UsageError, !ids.empty(), "--prompt_ids: prompt ", prompts.size() + 1,
                 " is empty");
    prompts.push_back(std::move(ids));
  }
  ZRT_CHECK_AS(UsageError, !prompts.empty(), "--prompt_ids: no prompt given");
  return prompts;
}

// The text prompts of --prompt (repeated, in order) or --prompts_file (one JSON string a line).
std::vector<std::string> prompt_texts(const cxxopts::ParseResult& r) {
  std::vector<std::string> texts;
  if (r.count("prompt")) {
    // Every occurrence, from the parsed arguments: cxxopts' vector values would split at ','.
    for (const auto& kv : r.arguments()) {
      if (kv.key() == "prompt") texts.push_back(kv.value());
    }
    return texts;
  }
  const std::string file = r["prompts_file"].as<std::string>();
  std::ifstream in(file);
  ZRT_CHECK_AS(UsageError, in.good(), "--prompts_file: cannot read ", file);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    ZRT_CHECK_AS(UsageError, j.is_string(), file, ":", n,
                 ": expected a prompt as a JSON string, got ", line.substr(0, 80));
    texts.push_back(j.get<std::string>());
  }
  ZRT_CHECK_AS(UsageError, !texts.empty(), "--prompts_file: ", file, " holds no prompt");
  return texts;
}

// The ids of text prompts, through the folder's tokenizer.
std::vector<std::vector<int64_t>> encode_prompts(const std::vector<std::string>& texts,
                                                 const TextTokenizer& tok, int64_t vocab) {
  ZRT_CHECK_AS(UsageError, tok.pieces() <= vocab, tok.describe(),
               ": more pieces than config.json's vocab_size ", vocab);
  std::vector<std::vector<int64_t>> prompts;
  for (size_t i = 0; i < texts.size(); ++i) {
    ZRT_CHECK_AS(UsageError, valid_utf8(texts[i]), "prompt ", i + 1, " is not valid UTF-8");
    prompts.push_back(tok.encode(texts[i]));
    ZRT_CHECK_AS(UsageError, !prompts.back().empty(), "prompt ", i + 1,
                 " is no token at all (empty, and the tokenizer adds no BOS)");
    for (int64_t id : prompts.back()) {  // e.g. a BOS id of tokenizer.json past the vocabulary
      ZRT_CHECK_AS(UsageError, id >= 0 && id < vocab, "prompt ", i + 1, " encodes to token ", id,
                   ", outside config.json's vocabulary [0, ", vocab, ")");
    }
  }
  return prompts;
}

std::string json_text(const std::string& s) {
  return Json(s).dump(-1, ' ', false, Json::error_handler_t::replace);
}


std::string json_ids(const std::vector<int64_t>& ids) {
  Json j = Json::array();
  for (int64_t id : ids) j.push_back(id);
  return j.dump();
}

// This process's resident and peak resident memory now, in MiB (/proc/self/status).
std::pair<double, double> rss_now_mib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  double rss = 0, hwm = 0;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) rss = std::stod(line.substr(6)) / 1024.0;
    if (line.rfind("VmHWM:", 0) == 0) hwm = std::stod(line.substr(6)) / 1024.0;
  }
  return {rss, hwm};
}

void log_memory(const char* phase) {
  const auto [rss, hwm] = rss_now_mib();
  ZRT_LOG_DEBUG("memory after ", phase, ": RSS ", static_cast<int64_t>(rss), " MiB, peak ",
                static_cast<int64_t>(hwm), " MiB");
}

// Every rank's peak RSS in MiB (getrusage), gathered on every rank.
std::vector<double> peak_rss_mib(comm::Comm& comm) {
  struct rusage ru {};
  ::getrusage(RUSAGE_SELF, &ru);
  at::Tensor mine = at::full({1}, static_cast<double>(ru.ru_maxrss) / 1024.0, at::kDouble);
  at::Tensor all = at::empty({comm.size()}, at::kDouble);
  comm.all_gather(all, mine);
  return std::vector<double>(all.data_ptr<double>(), all.data_ptr<double>() + comm.size());
}

// Elements of the parameters this rank holds whole now: the persistent ones (every one at 1 rank,
// where parameters are views of their partitions); a released one has no storage bytes.
int64_t resident_parameter_elements(torch::nn::Module& model) {
  int64_t n = 0;
  for (const auto& p : model.parameters()) {
    const auto bytes = static_cast<size_t>(p.numel()) * p.element_size();
    if (p.numel() > 0 && p.storage().nbytes() >= bytes) n += p.numel();
  }
  return n;
}

Json inference_config(const cxxopts::ParseResult& r, bool bf16) {
  if (r.count("deepspeed")) return config::load_config_source(r["deepspeed"].as<std::string>());
  return {{"train_micro_batch_size_per_gpu", 1},
          {"gradient_accumulation_steps", 1},
          {"bf16", {{"enabled", bf16}}},
          {"zero_optimization",
           {{"stage", 3},
            {"stage3_param_persistence_threshold", r["persistence_threshold"].as<int64_t>()},
            {"stage3_prefetch_bucket_size", r["prefetch_bucket_size"].as<int64_t>()},
            // Each forward of generation runs every layer once: a released layer is next needed
            // a whole model later, so keeping "reused" ones gathered would keep the whole model.
            {"stage3_max_reuse_distance", 0},
            {"stage3_max_live_parameters", r["max_live_parameters"].as<int64_t>()}}}};
}

cxxopts::Options make_options() {
  cxxopts::Options options("zrt-generate", "Generate with a LLaMA model under ZeRO-3 inference.");
  options.add_options()("model_name_or_path", "Hugging Face model folder (config.json + weights)",
                        cxxopts::value<std::string>())(
      "adapter_name_or_path",
      "a PEFT LoRA adapter folder (adapter_config.json, adapter_model.safetensors) trained on "
      "--model_name_or_path, applied on the fly",
      cxxopts::value<std::string>())(
      "attn_implementation",
      "sdpa (default: LibTorch's fused attention) or eager, as transformers' argument",
      cxxopts::value<std::string>())(
      "prompt_ids", "token ids, ',' between ids, ';' between prompts",
      cxxopts::value<std::string>())(
      "prompt", "a text prompt (repeat for more; needs the folder's tokenizer)",
      cxxopts::value<std::string>())("prompts_file", "text prompts, one JSON string per line",
                                     cxxopts::value<std::string>())(
      "max_new_tokens", "tokens to generate per prompt",
      cxxopts::value<int64_t>()->default_value("20"))("do_sample",
                                                      "sample instead of greedy decoding")(
      "replicate_prompts", "every rank runs every prompt (default: prompt i on rank i mod N)")(
      "temperature", "sampling temperature", cxxopts::value<double>()->default_value("1.0"))(
      "top_k", "sample among the k most likely (0: all)",
      cxxopts::value<int64_t>()->default_value("50"))(
      "top_p", "nucleus sampling mass", cxxopts::value<double>()->default_value("1.0"))(
      "seed", "seed of the sampling generator", cxxopts::value<uint64_t>()->default_value("0"))(
      "dtype", "fp32 or bf16", cxxopts::value<std::string>()->default_value("fp32"))(
      "persistence_threshold", "parameters of at most this many elements stay gathered",
      cxxopts::value<int64_t>()->default_value("100000"))(
      "prefetch_bucket_size", "elements to prefetch ahead of the forward",
      cxxopts::value<int64_t>()->default_value("50000000"))(
      "max_live_parameters", "at most this many gathered elements at a time",
      cxxopts::value<int64_t>()->default_value("1000000000"))(
      "deepspeed", "a DeepSpeed config (ZeRO-3, no auto values) instead of the above",
      cxxopts::value<std::string>())("output",
                                     "file for the generated ids (JSON lines; default stdout)",
                                     cxxopts::value<std::string>())(
      "logits_out", "safetensors file for the first batch's prompt logits",
      cxxopts::value<std::string>())("metrics_out", "JSON file for timings and per-rank peak RSS",
                                     cxxopts::value<std::string>())("h,help", "show this help");
  return options;
}

struct Args {
  std::string dir;
  LlamaConfig model;
  std::vector<std::vector<int64_t>> prompts;
  std::vector<std::string> prompt_texts;     // the text prompts, when given as text
  std::shared_ptr<TextTokenizer> tokenizer;  // null: the folder has none, no text out
  GenerateOptions generate;
  Json deepspeed;
  uint64_t seed = 0;
  std::optional<std::string> output, logits_out, metrics_out;
  std::optional<std::string> adapter_dir;  // --adapter_name_or_path
  lora::LoraConfig adapter;                // its adapter_config.json
};

// The prompts' ids (and texts), and the folder's tokenizer where it has one.
void read_prompts(const cxxopts::ParseResult& r, Args& a) {
  std::string why;
  if (r.count("prompt_ids")) {
    a.prompts = parse_prompts(r["prompt_ids"].as<std::string>(), a.model.vocab_size);
    try {  // the text out is a courtesy here: tokenizer files that do not read cost only it
      a.tokenizer = TextTokenizer::open(a.dir, &why);
    } catch (const ConfigError& e) {
      why = e.what();
    }
    std::error_code ec;
    if (!a.tokenizer && (std::filesystem::exists(a.dir + "/tokenizer.model", ec) ||
                         std::filesystem::exists(a.dir + "/tokenizer.json", ec)))
      ZRT_LOG_WARN("no \"text\" in the output: ", why);
    return;
  }
  a.tokenizer = TextTokenizer::open(a.dir, &why);
  ZRT_CHECK_AS(UsageError, a.tokenizer != nullptr,
               "text prompts need the folder's tokenizer: ", why,
               "; give token ids with --prompt_ids");
  a.prompt_texts = prompt_texts(r);
  a.prompts = encode_prompts(a.prompt_texts, *a.tokenizer, a.model.vocab_size);
  ZRT_LOG_DEBUG(a.tokenizer->describe());
}

// Parses and checks every argument; nullopt for --help.
std::optional<Args> parse_args(int argc, char** argv) {
  cxxopts::Options options = make_options();
  cxxopts::ParseResult r;
  try {
    r = options.parse(argc, argv);
  } catch (const cxxopts::exceptions::exception& e) {
    throw UsageError(e.what());
  }
  if (r.count("help")) {
    std::printf("%s", options.help().c_str());
    return std::nullopt;
  }
  ZRT_CHECK_AS(UsageError, r.unmatched().empty(), "unexpected argument '",
               r.unmatched().empty() ? "" : r.unmatched().front(), "'");
  ZRT_CHECK_AS(UsageError, r.count("model_name_or_path"), "--model_name_or_path is required");
  int sources = 0;
  for (const char* way : {"prompt_ids", "prompt", "prompts_file"}) sources += r.count(way) ? 1 : 0;
  ZRT_CHECK_AS(UsageError, sources == 1, "give the prompts one way: --prompt_ids, --prompt or ",
               "--prompts_file", sources ? " (got more than one)" : "");
  const std::string dtype = r["dtype"].as<std::string>();
  ZRT_CHECK_AS(UsageError, dtype == "fp32" || dtype == "bf16",
               "--dtype must be fp32 or bf16, got '", dtype, "'");
  Args a;
  a.dir = r["model_name_or_path"].as<std::string>();
  a.model = LlamaConfig::from_file(a.dir);
  if (r.count("attn_implementation")) {
    models::set_attn_implementation(a.model, r["attn_implementation"].as<std::string>(),
                                    "--attn_implementation");
  }
  if (r.count("adapter_name_or_path")) {
    a.adapter_dir = r["adapter_name_or_path"].as<std::string>();
    a.adapter = read_adapter_config(*a.adapter_dir);
  }
  const Json& hf = a.model.extra;
  read_prompts(r, a);
  GenerateOptions& go = a.generate;
  go.max_new_tokens = r["max_new_tokens"].as<int64_t>();
  ZRT_CHECK_AS(UsageError, go.max_new_tokens >= 1, "--max_new_tokens must be at least 1");
  size_t longest = 0;
  for (const auto& p : a.prompts) longest = std::max(longest, p.size());
  if (static_cast<int64_t>(longest) + go.max_new_tokens > a.model.max_position_embeddings) {
    // As transformers' generate: a warning, and the positions go on past the trained range.
    ZRT_LOG_WARN("the longest prompt (", longest, " tokens) plus --max_new_tokens ",
                 go.max_new_tokens, " exceeds the model's max_position_embeddings ",
                 a.model.max_position_embeddings, " (", a.dir,
                 "/config.json): positions past it are outside what the model was trained on");
  }
  go.sampling.do_sample = r.count("do_sample") > 0;
  go.sampling.temperature = r["temperature"].as<double>();
  go.sampling.top_k = r["top_k"].as<int64_t>();
  go.sampling.top_p = r["top_p"].as<double>();
  ZRT_CHECK_AS(UsageError, go.sampling.temperature > 0, "--temperature must be positive");
  ZRT_CHECK_AS(UsageError, go.sampling.top_p > 0 && go.sampling.top_p <= 1,
               "--top_p must be in (0, 1]");
  if (hf.contains("eos_token_id")) {  // one id or a list of them (e.g. LLaMA 3)
    const Json& eos = hf["eos_token_id"];
    for (const Json& id : eos.is_array() ? eos : Json::array({eos})) {
      if (id.is_number_integer()) go.eos.insert(id.get<int64_t>());
    }
  }
  a.deepspeed = inference_config(r, dtype == "bf16");
  a.seed = r["seed"].as<uint64_t>();
  if (r.count("output")) a.output = r["output"].as<std::string>();
  if (r.count("logits_out")) a.logits_out = r["logits_out"].as<std::string>();
  go.keep_logits = a.logits_out.has_value();
  go.replicate = r.count("replicate_prompts") > 0;
  go.vocab_size = a.model.vocab_size;
  if (r.count("metrics_out")) a.metrics_out = r["metrics_out"].as<std::string>();
  return a;
}

void write_results(const Args& a, const models::GenerateResult& res, const Json& metrics) {
  std::ostringstream lines;
  int64_t dropped = 0;
  for (size_t i = 0; i < a.prompts.size(); ++i) {
    lines << "{\"prompt\": " << json_ids(a.prompts[i]);
    if (!a.prompt_texts.empty()) lines << ", \"prompt_text\": " << json_text(a.prompt_texts[i]);
    lines << ", \"generated\": " << json_ids(res.generated[i]);
    if (a.tokenizer) {
      lines << ", \"text\": "
            << json_text(a.tokenizer->continuation(a.prompts[i], res.generated[i], &dropped));
    }
    lines << "}\n";
  }
  if (dropped > 0) {
    ZRT_LOG_WARN(dropped, " token ids lie past the tokenizer's ", a.tokenizer->pieces(),
                 " pieces and are left out of \"text\"");
  }
  if (a.output) {
    std::ofstream(*a.output) << lines.str();
  } else {
    std::printf("%s", lines.str().c_str());
  }
  if (a.logits_out) {
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (size_t i = 0; i < res.first_logits.size(); ++i)
      tensors.emplace_back(str("prompt.", i), res.first_logits[i].contiguous());
    ckpt::save_safetensors(tensors, *a.logits_out);
  }
  if (a.metrics_out) std::ofstream(*a.metrics_out) << metrics.dump(2) << "\n";
  std::fprintf(
      stderr,
      "zrt-generate: %d ranks, %lld parameters, loaded in %.2f s, %lld tokens in %.2f s "
      "(%.1f tokens/s), peak RSS per rank (MiB): %s\n",
      metrics["ranks"].get<int>(), static_cast<long long>(metrics["params"].get<int64_t>()),
      metrics["load_seconds"].get<double>(), static_cast<long long>(res.new_tokens),
      metrics["generate_seconds"].get<double>(), metrics["tokens_per_second"].get<double>(),
      metrics["peak_rss_mib_per_rank"].dump().c_str());
}

int run(int argc, char** argv) {
  const std::optional<Args> args = parse_args(argc, argv);
  if (!args) return 0;
  auto comm = comm::init_from_env(comm_options_for_config(args->deepspeed));
  const auto t0 = std::chrono::steady_clock::now();
  auto model = std::make_shared<LlamaForCausalLMImpl>(args->model, /*deferred=*/true);
  if (args->adapter_dir) {
    const lora::Applied applied = lora::apply(*model, args->adapter);
    if (comm->rank() == 0) {
      ZRT_LOG_INFO("LoRA adapter ", *args->adapter_dir, ": r ", args->adapter.r, " on ",
                   applied.adapted.size(), " layers");
    }
  }
  log_memory("building the model");
  InitializeOptions io;
  io.comm = comm;
  auto engine = initialize(model, args->deepspeed, io);
  ZRT_CHECK_AS(ConfigError, engine->zero_stage() == 3, "zrt-generate serves ZeRO-3 (the config ",
               "has stage ", engine->zero_stage(), ")");
  log_memory("partitioning");
  PretrainedLoadOptions lo;
  if (args->model.tie_word_embeddings) lo.ignore = {"lm_head.weight"};  // a copy of the embedding
  if (args->adapter_dir) {  // the base's tensors from the folder, the adapter's from its own
    lo.only = [](const std::string& n) { return n.find(".lora_") == std::string::npos; };
  }
  const PretrainedLoadReport loaded = load_pretrained(*engine, args->dir, lo);
  if (args->adapter_dir) load_adapter(*engine, *args->adapter_dir);
  log_memory("loading");
  engine->eval();
  const int64_t resident = resident_parameter_elements(*model);
  const auto t1 = std::chrono::steady_clock::now();
  const models::GenerateResult res =
      models::generate(*model, *comm, args->prompts, args->generate, args->seed);
  const auto t2 = std::chrono::steady_clock::now();
  const double gen_s = std::chrono::duration<double>(t2 - t1).count();
  const Json metrics = {{"ranks", comm->size()},
                        {"params", model->num_params()},
                        {"resident_parameter_elements_rank0", resident},
                        {"dtype", std::string(c10::toString(engine->model_dtype()))},
                        {"load_seconds", std::chrono::duration<double>(t1 - t0).count()},
                        {"generate_seconds", gen_s},
                        {"new_tokens", res.new_tokens},
                        {"tokens_per_second", static_cast<double>(res.new_tokens) / gen_s},
                        {"peak_rss_mib_per_rank", peak_rss_mib(*comm)},
                        {"bytes_read_rank0", loaded.bytes_read}};
  if (comm->rank() == 0) write_results(*args, res, metrics);
  return 0;
}

}  // namespace
}  // namespace zrt::tools

int main(int argc, char** argv) {
  // This program, not the library, opts in to returning large freed blocks to the system
  // (core/malloc_tuning.h): ZeRO-3's memory bound on models larger than one rank needs it.
  zrt::tune_malloc_for_large_models();
  return zrt::run_tool("zrt-generate", [&] { return zrt::tools::run(argc, argv); });
}
