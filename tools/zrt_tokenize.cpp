// zrt-tokenize: a model folder's tokenizer (text/tokenizer.h: a byte-level BPE tokenizer.json
// or a SentencePiece tokenizer.model) over JSON lines, torch-free.
//
//   zrt-tokenize DIR [--no_special_tokens] [--stats]   {"text": "..."} lines -> {"ids": [...]}
//   zrt-tokenize DIR --decode [--keep_special_tokens]  {"ids": [...]} lines -> {"text": "..."}
//   zrt-tokenize DIR --describe                        the tokenizer in one line
//
// One output line per input line, in order. --no_special_tokens encodes without the BOS/EOS
// (tokenizers' add_special_tokens=False); --keep_special_tokens decodes special tokens too
// (skip_special_tokens=False). --stats writes {"texts", "tokens", "bytes", "encode_seconds"} to
// stderr at the end: the time spent in encode() alone, for benchmarks.
#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json.h"
#include "core/tool_main.h"
#include "text/tokenizer.h"

namespace {

using zrt::Json;
using zrt::str;
using zrt::UsageError;
using zrt::text::TextTokenizer;

constexpr const char* kUsage =
    "usage: zrt-tokenize DIR [--decode] [--no_special_tokens] [--keep_special_tokens] "
    "[--describe] [--stats]";

struct Args {
  std::string dir;
  bool decode = false, no_special = false, keep_special = false, describe = false;
  bool stats = false;
};

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--decode") {
      a.decode = true;
    } else if (arg == "--no_special_tokens") {
      a.no_special = true;
    } else if (arg == "--keep_special_tokens") {
      a.keep_special = true;
    } else if (arg == "--describe") {
      a.describe = true;
    } else if (arg == "--stats") {
      a.stats = true;
    } else if (arg == "-h" || arg == "--help") {
      std::cout << kUsage << "\n";
      std::exit(0);
    } else {
      ZRT_CHECK_AS(UsageError, arg.rfind("--", 0) != 0 && a.dir.empty(), "unexpected argument '",
                   arg, "'\n", kUsage);
      a.dir = arg;
    }
  }
  ZRT_CHECK_AS(UsageError, !a.dir.empty(), "no model folder given\n", kUsage);
  ZRT_CHECK_AS(UsageError, !(a.decode && a.no_special),
               "--no_special_tokens is for encoding; "
               "decoding leaves special tokens out unless --keep_special_tokens");
  ZRT_CHECK_AS(UsageError, a.decode || !a.keep_special, "--keep_special_tokens is for --decode");
  return a;
}

// The value of `key` in input line `n`, which must be a JSON object holding it.
Json field(const std::string& line, size_t n, const char* key) {
  Json j;
  try {
    j = Json::parse(line);
  } catch (const Json::exception& e) {
    throw UsageError(str("stdin line ", n, ": not valid JSON: ", e.what()));
  }
  ZRT_CHECK_AS(UsageError, j.is_object() && j.contains(key), "stdin line ", n,
               ": expected an object with \"", key, "\", got ", line.substr(0, 200));
  return j[key];
}

std::vector<int64_t> line_ids(const Json& ids, size_t n) {
  ZRT_CHECK_AS(UsageError, ids.is_array(), "stdin line ", n, ": \"ids\" is not a list");
  std::vector<int64_t> out;
  for (const Json& id : ids) {
    ZRT_CHECK_AS(UsageError, id.is_number_integer(), "stdin line ", n, ": the id ", id.dump(),
                 " is not an integer");
    out.push_back(id.get<int64_t>());
  }
  return out;
}

int run(const Args& a) {
  std::string why;
  const auto tok = TextTokenizer::open(a.dir, &why);
  ZRT_CHECK_AS(UsageError, tok != nullptr, "no tokenizer: ", why);
  if (a.describe) {
    std::cout << tok->describe() << "\n";
    return 0;
  }
  std::ios::sync_with_stdio(false);
  std::string line;
  size_t n = 0, tokens = 0, bytes = 0;
  double seconds = 0;
  while (std::getline(std::cin, line)) {
    ++n;
    if (a.decode) {
      const std::vector<int64_t> ids = line_ids(field(line, n, "ids"), n);
      const Json out = {{"text", tok->decode(ids, nullptr, !a.keep_special)}};
      std::cout << out.dump() << "\n";
      continue;
    }
    const Json text = field(line, n, "text");
    ZRT_CHECK_AS(UsageError, text.is_string(), "stdin line ", n, ": \"text\" is not a string");
    const auto& s = text.get_ref<const std::string&>();
    const auto start = std::chrono::steady_clock::now();
    const std::vector<int64_t> ids = tok->encode(s, !a.no_special);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    tokens += ids.size(), bytes += s.size();
    std::cout << Json{{"ids", ids}}.dump() << "\n";
  }
  if (a.stats) {
    std::cerr << Json{{"texts", n},
                      {"tokens", tokens},
                      {"bytes", bytes},
                      {"encode_seconds", seconds}}
                     .dump()
              << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return zrt::run_tool("zrt-tokenize", [&] { return run(parse_args(argc, argv)); });
}
