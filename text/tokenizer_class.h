// Which tokenizer class transformers builds for a model folder whose tokenizer.json is a
// byte-level BPE, and what that class changes in tokenizer.json's pipeline.
//
// Note [The tokenizer class transformers picks]
// transformers 5.24's AutoTokenizer keeps tokenizer.json whole only for its generic class
// (TokenizersBackend, alias PreTrainedTokenizerFast). A model family's own class (Qwen2Tokenizer,
// GPT2Tokenizer, ...) keeps the file's vocabulary, merges, added tokens and post-processor but
// installs its own normalizer, pre-tokenizer, decoder and BPE options, whatever the file says.
// The class is picked from tokenizer_config.json's "tokenizer_class" (H, "Fast" stripped; else
// config.json's) and config.json's model_type (M, the family's class):
//   1. H is LlamaTokenizer, tokenizer.json holds a ByteLevel step and the model_type is not one
//      whose hub class transformers distrusts: the generic class;
//   2. M exists and H is given and differs: M when the model_type is a distrusted one (qwen2
//      among them), else H;
//   3. else H when given, else M, else the generic class.
// ZeroRT follows the rule for the byte-level classes it implements (Qwen2Tokenizer,
// GPT2Tokenizer, GPTNeoXTokenizer) and refuses, naming the class, one it does not (a real folder
// of such a family would give other ids than transformers). Real Qwen2 and GPT-2 folders already
// hold their class's pipeline; the rule matters for folders whose tokenizer.json says otherwise.
#pragma once

#include <string>

#include "core/json.h"

namespace zrt::text {

struct TokenizerClass {
  std::string name;     // "TokenizersBackend" for the generic class
  bool generic = true;  // tokenizer.json is used as written
  std::string why;      // where the choice came from, for describe()
};

// The class AutoTokenizer.from_pretrained(dir) builds (Note [The tokenizer class transformers
// picks]); `tokenizer_json` is dir's tokenizer.json.
TokenizerClass tokenizer_class_of(const std::string& dir, const Json& tokenizer_json);

// tokenizer.json as the class uses it: for a family's class, its normalizer, pre-tokenizer
// (ByteLevel's add_prefix_space from tokenizer_config.json, default false), decoder and BPE options
// in place of the file's. ConfigError naming the class when ZeroRT does not implement it.
Json with_class_pipeline(Json tokenizer_json, const TokenizerClass& c, const Json& tokenizer_config,
                         const std::string& where);

}  // namespace zrt::text
