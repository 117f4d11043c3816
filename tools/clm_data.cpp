#include "tools/clm_data.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "core/error.h"
#include "core/json.h"
#include "core/logging.h"
#include "text/tokenizer.h"

namespace zrt::tools {

using hf::DocumentTokenizer;
using text::TextTokenizer;

DocumentTokenizer data_tokenizer(const cxxopts::ParseResult& result, const std::string& model_dir,
                                 int64_t vocab) {
  const std::string dir =
      result.count("tokenizer_name") ? result["tokenizer_name"].as<std::string>() : model_dir;
  std::string why;
  std::shared_ptr<TextTokenizer> tok = TextTokenizer::open(dir, &why);
  ZRT_CHECK_AS(ConfigError, tok != nullptr, "--train_file ", result["train_file"].as<std::string>(),
               " is tokenized with the model folder's tokenizer (or --tokenizer_name DIR), but ",
               dir, " has none usable: ", why);
  ZRT_CHECK_AS(ConfigError, tok->pieces() <= vocab, "the tokenizer of ", dir, " has ",
               tok->pieces(), " tokens, more than the model's vocab_size ", vocab);
  ZRT_LOG_INFO("tokenizer of ", dir, ": ", tok->describe());
  DocumentTokenizer d;
  d.encode = [tok](const std::string& text) { return tok->encode(text); };
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "tokenizer.model",
                           "special_tokens_map.json"}) {
    std::ifstream in(std::filesystem::path(dir) / name, std::ios::binary);
    if (in.good()) {
      d.identity += std::string(name) + "\n";
      d.identity.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
  }
  return d;
}

void load_clm_data(const cxxopts::ParseResult& result, const DocumentTokenizer& tokenizer,
                   int64_t context, comm::Comm& comm, std::shared_ptr<Dataset>* train,
                   std::shared_ptr<Dataset>* eval) {
  ZRT_CHECK_AS(UsageError, context >= 2, "--block_size must be at least 2 to predict a token, got ",
               context);
  hf::TextDataOptions o;
  o.train_file = result["train_file"].as<std::string>();
  if (result.count("validation_file")) o.validation_file = result["validation_file"].as<std::string>();
  o.text_column_name = result["text_column_name"].as<std::string>();
  o.validation_split_percentage = result["validation_split_percentage"].as<int64_t>();
  o.keep_linebreaks = result["keep_linebreaks"].as<bool>();
  o.block_size = context;
  o.packed_documents = result["packed_documents"].as<bool>();
  hf::TextSplits s = hf::load_text_data(o, tokenizer, comm);
  ZRT_LOG_INFO("data: ", s.train->size(), " training blocks (SHA-1 ", s.train->digest(), ") and ",
               s.validation->size(), " validation blocks (SHA-1 ", s.validation->digest(), ") of ",
               context, " tokens");
  if (o.packed_documents) ZRT_LOG_INFO("data: packed documents (positions restart per document)");
  *train = s.train;
  if (s.validation->size() > 0) *eval = s.validation;
}

// Sentences from a small grammar: learnable structure with some randomness.
std::string generate_corpus(int64_t bytes, uint64_t seed) {
  static const char* subjects[] = {"the cat", "a dog",       "my friend", "the old man",
                                   "a bird",  "the teacher", "our team",  "a child"};
  static const char* verbs[] = {"sees", "likes", "finds", "follows", "helps", "paints", "calls"};
  static const char* objects[] = {"the river", "a red ball", "the garden", "a small house",
                                  "the moon",  "an apple",   "the market"};
  static const char* endings[] = {" today.", " again.", " in the morning.", ".", " with care."};
  std::mt19937_64 rng(seed);
  std::string text;
  while (static_cast<int64_t>(text.size()) < bytes) {
    text += subjects[rng() % 8];
    text += ' ';
    text += verbs[rng() % 7];
    text += ' ';
    text += objects[rng() % 7];
    text += endings[rng() % 5];
    text += rng() % 4 == 0 ? '\n' : ' ';
  }
  text.resize(static_cast<size_t>(bytes));
  return text;
}

std::string read_corpus(const cxxopts::ParseResult& result) {
  ZRT_CHECK_AS(UsageError, !result["packed_documents"].as<bool>(),
               "--packed_documents needs --model llama with a .txt/.json/.jsonl --train_file");
  if (!result.count("train_file")) return generate_corpus(result["corpus_bytes"].as<int64_t>(), 1234);
  const std::string path = result["train_file"].as<std::string>();
  std::ifstream in(path, std::ios::binary);
  ZRT_CHECK(in.good(), "--train_file: cannot read ", path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void warn_packed_loss_weights(const cxxopts::ParseResult& result, bool average_tokens, int world,
                              int64_t accumulation) {
  if (!result["packed_documents"].as<bool>()) return;
  if (accumulation <= 1 && (!average_tokens || world <= 1)) return;
  ZRT_LOG_WARN("--packed_documents: each micro-batch's loss is the mean over its own labels and a "
               "step averages the micro-batches (DeepSpeed's weighting); transformers' Trainer "
               "weighs each label of the step equally (",
               accumulation > 1 ? "--gradient_accumulation_steps > 1" : "--average_tokens_across_devices true",
               "), so the two differ when the micro-batches' label counts do");
}

void refuse_text_options(const cxxopts::ParseResult& result, const std::string& kind) {
  ZRT_CHECK_AS(UsageError, !result["packed_documents"].as<bool>(),
               "--packed_documents is for --model llama's text data, not --model ", kind);
  ZRT_CHECK_AS(UsageError, result["tiled_loss_tokens"].as<int64_t>() == 0,
               "--tiled_loss_tokens is for --model llama's text data, not --model ", kind);
  ZRT_CHECK_AS(UsageError, result["tiled_mlp_tokens"].as<int64_t>() == 0,
               "--tiled_mlp_tokens is for --model llama, not --model ", kind);
}

int64_t tile_tokens(const cxxopts::ParseResult& result, const std::string& flag) {
  const int64_t n = result[flag].as<int64_t>();
  ZRT_CHECK_AS(UsageError, n >= 0, "--", flag, " must be 0 (off) or more, got ", n);
  return n;
}

std::pair<at::Tensor, at::Tensor> clm_input(const at::Tensor& x) {
  if (x.dim() != 3) return {x, at::Tensor()};
  return {x.select(1, 0), x.select(1, 1)};
}

int64_t clm_block_size(const cxxopts::ParseResult& result, std::optional<int64_t> asked_size,
                       const std::string& model_dir, int64_t max_position_embeddings) {
  const std::string dir =
      result.count("tokenizer_name") ? result["tokenizer_name"].as<std::string>() : model_dir;
  std::ifstream in(std::filesystem::path(dir) / "tokenizer_config.json");
  const Json config = in.good() ? Json::parse(in, nullptr, /*allow_exceptions=*/false) : Json();
  int64_t model_max = INT64_MAX;
  if (config.is_object() && config.contains("model_max_length") &&
      config["model_max_length"].is_number() && config["model_max_length"].get<double>() < 9e18) {
    model_max = config["model_max_length"].get<int64_t>();
  }
  if (!asked_size) {
    return model_max > max_position_embeddings ? std::min<int64_t>(1024, max_position_embeddings)
                                               : model_max;
  }
  const int64_t asked = *asked_size;
  if (asked > model_max) {
    ZRT_LOG_WARN("--block_size ", asked, " is larger than the tokenizer's model_max_length ",
                 model_max, " (", dir, "/tokenizer_config.json): using ", model_max,
                 ", as run_clm.py does");
  }
  return std::min(asked, model_max);
}

}  // namespace zrt::tools
