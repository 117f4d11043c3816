#include "hf/text_data.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "checkpoint/hash.h"
#include "comm/comm.h"
#include "core/error.h"
#include "core/json.h"
#include "core/logging.h"
#include "text/tokenizer.h"

namespace zrt::hf {
namespace {

namespace fs = std::filesystem;

using DocumentFn = std::function<void(std::string&& text, int64_t line)>;

std::string extension_of(const std::string& path) {
  std::string ext = fs::path(path).extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext;
}

// The length of the line break starting at s[i] (Python's str.splitlines breaks after "\r\n"
// and "\r" were made "\n" by universal newlines), or 0.
size_t line_break_at(const std::string& s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c == '\n' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E)) return 1;
  if (c == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x85) return 2;
  if (c == 0xE2 && i + 2 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x80 &&
      (static_cast<unsigned char>(s[i + 2]) == 0xA8 || static_cast<unsigned char>(s[i + 2]) == 0xA9))
    return 3;
  return 0;
}

// Note [run_clm's data] 1, .txt: `physical` is one '\n'-terminated line of the file (the '\n'
// included when there was one).
void split_text_line(const std::string& physical, int64_t line, bool keep_linebreaks,
                     const DocumentFn& fn) {
  std::string s;
  s.reserve(physical.size());
  for (size_t i = 0; i < physical.size(); ++i) {  // universal newlines
    if (physical[i] != '\r') {
      s += physical[i];
    } else if (i + 1 >= physical.size() || physical[i + 1] != '\n') {
      s += '\n';
    }
  }
  size_t begin = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t n = line_break_at(s, i);
    if (n == 0) {
      ++i;
      continue;
    }
    fn(s.substr(begin, (keep_linebreaks ? i + n : i) - begin), line);
    i += n;
    begin = i;
  }
  if (begin < s.size()) fn(s.substr(begin), line);
}

void for_each_text_document(const std::string& path, std::istream& in, bool keep_linebreaks,
                            const DocumentFn& fn) {
  std::string physical;
  for (int64_t line = 1; std::getline(in, physical); ++line) {
    if (!in.eof()) physical += '\n';
    ZRT_CHECK_AS(ConfigError, text::valid_utf8(physical), path, ":", line, ": not valid UTF-8");
    split_text_line(physical, line, keep_linebreaks, fn);
  }
}

std::string text_field(const Json& record, const std::string& column, const std::string& where) {
  ZRT_CHECK_AS(ConfigError, record.is_object(), where, ": a record must be a JSON object, got ",
               record.type_name());
  auto it = record.find(column);
  if (it == record.end()) {
    std::string fields;
    for (const auto& [k, v] : record.items()) fields += (fields.empty() ? "" : ", ") + k;
    ZRT_CHECK_AS(ConfigError, false, where, ": no \"", column,
                 "\" field (--text_column_name); the record has: ", fields);
  }
  ZRT_CHECK_AS(ConfigError, it->is_string(), where, ": \"", column, "\" must be a string, got ",
               it->type_name());
  return it->get<std::string>();
}

void for_each_json_document(const std::string& path, std::istream& in, const std::string& column,
                            const DocumentFn& fn) {
  std::string line;
  bool first = true;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    const size_t start = line.find_first_not_of(" \t\r");
    if (start == std::string::npos) continue;
    if (first && line[start] == '[' && extension_of(path) == ".json") {  // one array of records
      std::string rest((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const Json all = Json::parse(line + "\n" + rest, nullptr, /*allow_exceptions=*/false);
      ZRT_CHECK_AS(ConfigError, all.is_array(), path,
                   ": not JSON Lines and not one JSON array of records (it does not parse)");
      for (size_t i = 0; i < all.size(); ++i) {
        fn(text_field(all[i], column, path + ": record " + std::to_string(i)), n);
      }
      return;
    }
    first = false;
    const std::string where = path + ":" + std::to_string(n);
    ZRT_CHECK_AS(ConfigError, text::valid_utf8(line), where, ": not valid UTF-8");
    Json record;
    try {
      record = Json::parse(line);
    } catch (const Json::parse_error& e) {
      ZRT_CHECK_AS(ConfigError, false, where, ": not a JSON record (", e.what(), ")");
    }
    fn(text_field(record, column, where), n);
  }
}

// Every document of `path` in order (Note [run_clm's data] 1); refuses an empty file.
void for_each_document(const std::string& path, const TextDataOptions& options,
                       const DocumentFn& fn) {
  ZRT_CHECK_AS(ConfigError, is_text_data_file(path), path,
               ": run_clm reads .txt, .json and .jsonl files; this one is '",
               extension_of(path), "'");
  std::ifstream in(path, std::ios::binary);
  ZRT_CHECK_AS(ConfigError, in.good(), path, ": cannot read it");
  int64_t count = 0;
  const DocumentFn counted = [&](std::string&& text, int64_t line) {
    ++count;
    fn(std::move(text), line);
  };
  if (extension_of(path) == ".txt") {
    for_each_text_document(path, in, options.keep_linebreaks, counted);
  } else {
    for_each_json_document(path, in, options.text_column_name, counted);
  }
  ZRT_CHECK_AS(ConfigError, count > 0, path, ": the file has no documents (it is empty)");
}

// The cache key: SHA-1 of the format, the reading options, the tokenizer and the data.
std::string cache_key(const std::string& path, const TextDataOptions& options,
                      const DocumentTokenizer& tokenizer) {
  ckpt::Sha1 sha;
  const std::string head = "zrt-tokens 1\n" + options.text_column_name + "\n" +
                           (options.keep_linebreaks ? "keep\n" : "strip\n");
  sha.update(head.data(), head.size());
  sha.update(tokenizer.identity.data(), tokenizer.identity.size());
  std::ifstream in(path, std::ios::binary);
  ZRT_CHECK_AS(ConfigError, in.good(), path, ": cannot read it");
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    sha.update(buffer.data(), static_cast<size_t>(in.gcount()));
  }
  return ckpt::sha1_hex(sha.finish());
}

// The cache file: a 64-byte header ("ZRTTOK01", documents, tokens as u64, the 40-character key),
// the ids (i32, padded to 8 bytes), the document offsets (u64, documents + 1).
constexpr char kMagic[8] = {'Z', 'R', 'T', 'T', 'O', 'K', '0', '1'};
constexpr size_t kHeader = 64;

size_t ids_bytes(int64_t tokens) { return (static_cast<size_t>(tokens) * 4 + 7) / 8 * 8; }

void write_cache(const std::string& data, const std::string& cache, const std::string& key,
                 const TextDataOptions& options, const DocumentTokenizer& tokenizer) {
  const std::string tmp = cache + ".tmp." + std::to_string(::getpid());
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  ZRT_CHECK_AS(ConfigError, out.good(), "cannot write the token cache ", tmp,
               " next to the data (a read-only folder? copy the data somewhere writable)");
  out.write(std::string(kHeader, '\0').data(), kHeader);
  std::vector<uint64_t> offsets = {0};
  std::vector<int32_t> ids;
  try {
    for_each_document(data, options, [&](std::string&& text, int64_t line) {
      ids.clear();
      for (int64_t id : tokenizer.encode(text)) {
        ZRT_CHECK(id >= 0 && id <= INT32_MAX, data, ":", line, ": token id ", id, " out of range");
        ids.push_back(static_cast<int32_t>(id));
      }
      out.write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(ids.size() * 4));
      offsets.push_back(offsets.back() + ids.size());
    });
  } catch (...) {
    out.close();
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  const int64_t tokens = static_cast<int64_t>(offsets.back());
  out.write(std::string(ids_bytes(tokens) - static_cast<size_t>(tokens) * 4, '\0').data(),
            static_cast<std::streamsize>(ids_bytes(tokens) - static_cast<size_t>(tokens) * 4));
  out.write(reinterpret_cast<const char*>(offsets.data()),
            static_cast<std::streamsize>(offsets.size() * 8));
  char header[kHeader] = {};
  std::memcpy(header, kMagic, 8);
  const uint64_t counts[2] = {offsets.size() - 1, static_cast<uint64_t>(tokens)};
  std::memcpy(header + 8, counts, 16);
  std::memcpy(header + 24, key.data(), std::min<size_t>(key.size(), 40));
  out.seekp(0);
  out.write(header, kHeader);
  out.close();
  ZRT_CHECK_AS(ConfigError, !out.fail(), "writing the token cache ", tmp, " failed (disk full?)");
  fs::rename(tmp, cache);
  ZRT_LOG_INFO_ALL("tokenized ", data, ": ", offsets.size() - 1, " documents, ", tokens,
                   " tokens, cached in ", cache);
}

// Whether `cache` is a complete cache of `key`.
bool cache_valid(const std::string& cache, const std::string& key) {
  std::ifstream in(cache, std::ios::binary);
  char header[kHeader];
  if (!in.read(header, kHeader)) return false;
  uint64_t counts[2];
  std::memcpy(counts, header + 8, 16);
  std::error_code ec;
  const auto size = fs::file_size(cache, ec);
  return !ec && std::memcmp(header, kMagic, 8) == 0 && std::string(header + 24, 40) == key &&
         size == kHeader + ids_bytes(static_cast<int64_t>(counts[1])) + (counts[0] + 1) * 8;
}

// Rank 0's 40-character key and whether it could write the cache, to every rank.
std::pair<std::string, bool> share(comm::Comm& comm, const std::string& key, bool ok) {
  at::Tensor t = at::zeros({41}, at::kByte);
  if (comm.rank() == 0) {
    std::memcpy(t.data_ptr<uint8_t>(), key.data(), std::min<size_t>(key.size(), 40));
    t[40] = ok ? 1 : 0;
  }
  at::Tensor on_device = t.to(comm.device_type());
  comm.broadcast(on_device, 0);
  t = on_device.cpu();
  return {std::string(reinterpret_cast<const char*>(t.data_ptr<uint8_t>()), 40),
          t[40].item<int>() == 1};
}

}  // namespace

bool is_text_data_file(const std::string& path) {
  const std::string ext = extension_of(path);
  return ext == ".txt" || ext == ".json" || ext == ".jsonl";
}

std::vector<Document> read_documents(const std::string& path, const TextDataOptions& options) {
  std::vector<Document> docs;
  for_each_document(path, options, [&](std::string&& text, int64_t line) {
    docs.push_back({std::move(text), line});
  });
  return docs;
}

int64_t percent_boundary(int64_t percent, int64_t n) {
  const int64_t whole = percent * n / 100, rest = percent * n % 100;  // round half to even
  return whole + ((rest > 50 || (rest == 50 && whole % 2 == 1)) ? 1 : 0);
}

std::shared_ptr<TokenizedFile> TokenizedFile::open(const std::string& path,
                                                   const TextDataOptions& options,
                                                   const DocumentTokenizer& tokenizer,
                                                   comm::Comm& comm) {
  std::string key;
  bool ok = true;
  std::exception_ptr failure;
  const auto cache_of = [&](const std::string& k) { return path + "." + k.substr(0, 16) + ".zrt-tokens"; };
  if (comm.rank() == 0) {
    try {
      key = cache_key(path, options, tokenizer);
      if (!cache_valid(cache_of(key), key)) write_cache(path, cache_of(key), key, options, tokenizer);
    } catch (...) {
      failure = std::current_exception();
      ok = false;
    }
  }
  std::tie(key, ok) = share(comm, key, ok);
  if (failure) std::rethrow_exception(failure);
  ZRT_CHECK_AS(ConfigError, ok, "rank 0 could not tokenize ", path, " (its error says why)");
  if (!cache_valid(cache_of(key), key)) write_cache(path, cache_of(key), key, options, tokenizer);
  std::shared_ptr<TokenizedFile> file(new TokenizedFile());
  file->map(cache_of(key), key);
  return file;
}

void TokenizedFile::map(const std::string& cache_path, const std::string& key) {
  ZRT_CHECK_AS(ConfigError, cache_valid(cache_path, key), cache_path,
               ": the token cache is incomplete or not this data's (delete it to tokenize again)");
  const int fd = ::open(cache_path.c_str(), O_RDONLY);
  ZRT_CHECK_AS(ConfigError, fd >= 0, cache_path, ": cannot open it");
  mapped_bytes_ = fs::file_size(cache_path);
  mapping_ = ::mmap(nullptr, mapped_bytes_, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  ZRT_CHECK_AS(ConfigError, mapping_ != MAP_FAILED, cache_path, ": cannot map it");
  const char* base = static_cast<const char*>(mapping_);
  uint64_t counts[2];
  std::memcpy(counts, base + 8, 16);
  documents_ = static_cast<int64_t>(counts[0]);
  tokens_ = static_cast<int64_t>(counts[1]);
  ids_ = reinterpret_cast<const int32_t*>(base + kHeader);
  offsets_ = reinterpret_cast<const uint64_t*>(base + kHeader + ids_bytes(tokens_));
  for (int64_t d = 0; d < documents_; ++d) {
    ZRT_CHECK_AS(ConfigError, offsets_[d] <= offsets_[d + 1], cache_path, ": damaged offsets");
  }
  ZRT_CHECK_AS(ConfigError, offsets_[0] == 0 && offsets_[documents_] == counts[1], cache_path,
               ": damaged offsets");
}

TokenizedFile::~TokenizedFile() {
  if (mapping_ != nullptr && mapping_ != MAP_FAILED) ::munmap(mapping_, mapped_bytes_);
}

int64_t TokenizedFile::document_start(int64_t token) const {
  // offsets_ holds documents_ + 1 non-decreasing entries; empty documents repeat one.
  const uint64_t* after = std::upper_bound(offsets_, offsets_ + documents_ + 1,
                                           static_cast<uint64_t>(token));
  return static_cast<int64_t>(*(after - 1));
}

TokenBlocks::TokenBlocks(std::shared_ptr<TokenizedFile> file, int64_t first, int64_t last,
                         int64_t block_size, bool packed)
    : file_(std::move(file)), block_size_(block_size), packed_(packed) {
  constexpr int64_t kMapBatch = 1000;  // datasets' map(batched=True) batch size
  for (int64_t d = first; d < last; d += kMapBatch) {
    const int64_t lo = file_->offset(d), hi = file_->offset(std::min(last, d + kMapBatch));
    for (int64_t s = lo; s + block_size <= hi; s += block_size) starts_.push_back(s);
  }
}

std::pair<at::Tensor, at::Tensor> TokenBlocks::get(int64_t index) const {
  const int32_t* p = file_->ids() + starts_.at(static_cast<size_t>(index));
  at::Tensor ids = at::from_blob(const_cast<int32_t*>(p), {block_size_}, at::kInt).to(at::kLong);
  if (!packed_) return {ids, ids};
  const int64_t start = starts_.at(static_cast<size_t>(index));
  at::Tensor positions = at::empty({block_size_}, at::kLong);
  at::Tensor labels = ids.clone();
  int64_t* pos = positions.data_ptr<int64_t>();
  int64_t* label = labels.data_ptr<int64_t>();
  for (int64_t i = 0; i < block_size_; ++i) {
    pos[i] = start + i - std::max(start, file_->document_start(start + i));
    if (pos[i] == 0) label[i] = -100;  // a document's first token: no label
  }
  return {at::stack({ids, positions}), labels};
}

std::string TokenBlocks::digest() const {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the digest hashes little-endian ids");
  ckpt::Sha1 sha;
  for (int64_t s : starts_) sha.update(file_->ids() + s, static_cast<size_t>(block_size_) * 4);
  return ckpt::sha1_hex(sha.finish());
}

TextSplits load_text_data(const TextDataOptions& options, const DocumentTokenizer& tokenizer,
                          comm::Comm& comm) {
  ZRT_CHECK_AS(UsageError, options.validation_split_percentage >= 0 &&
                               options.validation_split_percentage <= 100,
               "--validation_split_percentage must be 0-100, got ",
               options.validation_split_percentage);
  auto train = TokenizedFile::open(options.train_file, options, tokenizer, comm);
  TextSplits s;
  if (options.validation_file) {
    auto val = TokenizedFile::open(*options.validation_file, options, tokenizer, comm);
    s.validation = std::make_shared<TokenBlocks>(val, 0, val->documents(), options.block_size,
                                                options.packed_documents);
    s.train = std::make_shared<TokenBlocks>(train, 0, train->documents(), options.block_size,
                                           options.packed_documents);
  } else {
    const int64_t cut = percent_boundary(options.validation_split_percentage, train->documents());
    s.validation = std::make_shared<TokenBlocks>(train, 0, cut, options.block_size,
                                                options.packed_documents);
    s.train = std::make_shared<TokenBlocks>(train, cut, train->documents(), options.block_size,
                                           options.packed_documents);
  }
  ZRT_CHECK_AS(ConfigError, s.train->size() > 0, options.train_file,
               ": the training split has no whole block of ", options.block_size, " tokens (",
               train->tokens(), " tokens in ", train->documents(),
               " documents, grouped 1000 documents at a time): use a smaller --block_size");
  return s;
}

}  // namespace zrt::hf
