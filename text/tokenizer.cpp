#include "text/tokenizer.h"

#include <filesystem>
#include <optional>

#include "core/error.h"
#include "core/json.h"
#include "text/bpe_tokenizer.h"
#include "text/hf_tokenizer_files.h"
#include "zrt/build_config.h"

#if ZRT_WITH_SENTENCEPIECE
#include <sentencepiece_processor.h>
#endif

namespace zrt::text {

bool valid_utf8(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* end = p + s.size();
  while (p < end) {
    const unsigned char c = *p;
    int more = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++p;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      more = 1, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      more = 2, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      more = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (end - p <= more) return false;
    for (int i = 1; i <= more; ++i) {
      if ((p[i] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i] & 0x3F);
    }
    static constexpr uint32_t kSmallest[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kSmallest[more] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    p += more + 1;
  }
  return true;
}

#if ZRT_WITH_SENTENCEPIECE

namespace {

namespace fs = std::filesystem;

// The BOS/EOS ids put before and after every encoded text, and which file said so.
struct SpecialTokens {
  std::vector<int64_t> prefix, suffix;
  std::string source;
};

// Rule 1 (tokenizer.h): the special tokens around "$A" in tokenizer.json's `single` template.
SpecialTokens template_special(const Json& tokenizer, const fs::path& file,
                               const sentencepiece::SentencePieceProcessor& sp) {
  SpecialTokens out;
  out.source = str(file.filename().string(), "'s post_processor");
  const std::string where = str(file.string(), ": post_processor");
  const auto tokens = template_tokens(tokenizer["post_processor"], where);
  if (!tokens) return out;  // no template: transformers adds nothing either
  for (const TemplateToken& t : *tokens) {
    ZRT_CHECK_AS(ConfigError,
                 t.id >= sp.GetPieceSize() || sp.IdToPiece(static_cast<int>(t.id)) == t.name, where,
                 ": token '", t.name, "' has id ", t.id, ", which is '",
                 sp.IdToPiece(static_cast<int>(t.id)), "' in tokenizer.model");
    (t.after_text ? out.suffix : out.prefix).push_back(t.id);
  }
  return out;
}

// The model's BOS (or EOS) id, checked against the token tokenizer_config.json names.
int64_t model_special(const sentencepiece::SentencePieceProcessor& sp, const Json& config,
                      const fs::path& file, bool bos) {
  const char* what = bos ? "BOS" : "EOS";
  const int id = bos ? sp.bos_id() : sp.eos_id();
  ZRT_CHECK_AS(ConfigError, id >= 0, file.string(), " asks for a ", what,
               " token, but tokenizer.model defines none");
  if (const auto named = token_text(config, bos ? "bos_token" : "eos_token")) {
    ZRT_CHECK_AS(ConfigError, *named == sp.IdToPiece(id), file.string(), ": ",
                 bos ? "bos_token" : "eos_token", " is '", *named, "', but tokenizer.model's ",
                 what, " piece is '", sp.IdToPiece(id), "'");
  }
  return id;
}

SpecialTokens special_tokens(const fs::path& dir, const sentencepiece::SentencePieceProcessor& sp) {
  const fs::path tokenizer_json = dir / "tokenizer.json";
  const Json tokenizer = read_json(tokenizer_json);
  if (tokenizer.is_object() && tokenizer.contains("post_processor"))
    return template_special(tokenizer, tokenizer_json, sp);
  const fs::path config_file = dir / "tokenizer_config.json";
  const Json config = read_json(config_file);
  auto flag = [&](const char* key, bool fallback) {
    return config_flag(config, config_file, key, fallback);
  };
  SpecialTokens out;
  const bool ruled =
      config.is_object() && (config.contains("add_bos_token") || config.contains("add_eos_token"));
  out.source = ruled ? "tokenizer_config.json" : "the LLaMA default";
  if (flag("add_bos_token", true))
    out.prefix.push_back(model_special(sp, config, config_file, true));
  if (flag("add_eos_token", false))
    out.suffix.push_back(model_special(sp, config, config_file, false));
  return out;
}

// The SentencePiece side of TextTokenizer (the rules of tokenizer.h).
struct SentencePieceText {
  sentencepiece::SentencePieceProcessor sp;
  SpecialTokens special;
  std::string file;

  static std::unique_ptr<SentencePieceText> open(const std::string& dir, std::string* why) {
    const fs::path model = fs::path(dir) / "tokenizer.model";
    std::error_code ec;
    if (!fs::exists(model, ec)) {
      *why = str(dir, " has no tokenizer.model (SentencePiece)");
      return nullptr;
    }
    auto t = std::make_unique<SentencePieceText>();
    t->file = model.string();
    const auto status = t->sp.Load(t->file);
    if (!status.ok()) {
      *why = str(t->file, " is not a SentencePiece model (", status.ToString(), ")");
      return nullptr;
    }
    t->special = special_tokens(dir, t->sp);
    return t;
  }

  std::vector<int64_t> encode(const std::string& text, bool add_special_tokens) const {
    std::vector<int> pieces;
    const auto status = sp.Encode(text, &pieces);
    ZRT_CHECK_AS(UsageError, status.ok(), file, ": cannot encode the text: ", status.ToString());
    std::vector<int64_t> ids;
    if (add_special_tokens) ids = special.prefix;
    ids.insert(ids.end(), pieces.begin(), pieces.end());
    if (add_special_tokens) ids.insert(ids.end(), special.suffix.begin(), special.suffix.end());
    return ids;
  }

  std::string decode(const std::vector<int64_t>& ids, int64_t* dropped) const {
    // libsentencepiece 0.1.97 does not range-check ids in Decode: out-of-range ones are ours to
    // drop.
    std::vector<int> known;
    for (int64_t id : ids) {
      if (id >= 0 && id < sp.GetPieceSize()) {
        known.push_back(static_cast<int>(id));
      } else if (dropped != nullptr) {
        *dropped += 1;
      }
    }
    std::string text;
    const auto status = sp.Decode(known, &text);
    ZRT_CHECK(status.ok(), file, ": cannot decode ", ids_text(ids), ": ", status.ToString());
    return text;
  }

  std::string describe() const {
    return str(file, ": ", sp.GetPieceSize(), " pieces; each text gets ", ids_text(special.prefix),
               " before and ", ids_text(special.suffix), " after it (", special.source, ")");
  }
};

}  // namespace

#else  // !ZRT_WITH_SENTENCEPIECE

namespace {
// Stands in for the SentencePiece side in a build without it: open() never makes one.
struct SentencePieceText {
  static std::unique_ptr<SentencePieceText> open(const std::string&, std::string* why) {
    *why =
        "this build has no SentencePiece for tokenizer.model (install libsentencepiece-dev and "
        "reconfigure with -DZRT_WITH_SENTENCEPIECE=ON)";
    return nullptr;
  }
  std::vector<int64_t> encode(const std::string&, bool) const { return {}; }
  std::string decode(const std::vector<int64_t>&, int64_t*) const { return {}; }
  std::string describe() const { return {}; }
  struct Pieces {
    int GetPieceSize() const { return 0; }
  } sp;
};
}  // namespace

#endif  // ZRT_WITH_SENTENCEPIECE

struct TextTokenizer::Impl {
  std::unique_ptr<BpeTokenizer> bpe;      // the folder's byte-level BPE, or
  std::unique_ptr<SentencePieceText> sp;  // its SentencePiece model
};

std::unique_ptr<TextTokenizer> TextTokenizer::open(const std::string& dir, std::string* why) {
  auto impl = std::make_unique<Impl>();
  std::string bpe_why, sp_why;
  impl->bpe = BpeTokenizer::open(dir, &bpe_why);
  if (!impl->bpe) impl->sp = SentencePieceText::open(dir, &sp_why);
  if (!impl->bpe && !impl->sp) {
    *why = str(bpe_why, "; ", sp_why);
    return nullptr;
  }
  return std::unique_ptr<TextTokenizer>(new TextTokenizer(std::move(impl)));
}

std::vector<int64_t> TextTokenizer::encode(const std::string& text, bool add_special_tokens) const {
  if (impl_->bpe) return impl_->bpe->encode(text, add_special_tokens);
  return impl_->sp->encode(text, add_special_tokens);
}

std::string TextTokenizer::decode(const std::vector<int64_t>& ids, int64_t* dropped,
                                  bool skip_special_tokens) const {
  if (impl_->bpe) return impl_->bpe->decode(ids, skip_special_tokens, dropped);
  ZRT_CHECK_AS(UsageError, skip_special_tokens, impl_->sp->describe(),
               ": SentencePiece decoding always leaves out the control pieces (BOS, EOS)");
  return impl_->sp->decode(ids, dropped);
}

int64_t TextTokenizer::pieces() const {
  if (impl_->bpe) return impl_->bpe->vocab_size();
  return impl_->sp->sp.GetPieceSize();
}

std::string TextTokenizer::describe() const {
  if (impl_->bpe) return impl_->bpe->describe();
  return impl_->sp->describe();
}

TextTokenizer::TextTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TextTokenizer::~TextTokenizer() = default;

std::string TextTokenizer::continuation(const std::vector<int64_t>& prompt,
                                        const std::vector<int64_t>& generated,
                                        int64_t* dropped) const {
  std::vector<int64_t> all = prompt;
  all.insert(all.end(), generated.begin(), generated.end());
  const std::string full = decode(all, dropped);
  const std::string head = decode(prompt);
  // The prompt's own text is a prefix of the whole one unless a byte run or a merge crosses the
  // boundary; then the generated ids alone are decoded.
  if (full.compare(0, head.size(), head) == 0) return full.substr(head.size());
  return decode(generated);
}

}  // namespace zrt::text
