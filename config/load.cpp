#include "config/load.h"

#include <cctype>
#include <fstream>
#include <sstream>
#include <unordered_set>
#include <vector>

#include "config/py_format.h"
#include "core/error.h"
#include <sys/stat.h>

namespace zrt::config {
namespace {

const char* json_kind(const Json& value) {
  if (value.is_object()) return "an object";
  if (value.is_array()) return "an array";
  if (value.is_string()) return "a string";
  if (value.is_boolean()) return "a boolean";
  if (value.is_null()) return "null";
  return "a number";
}

// Tracks where the parser is, to report duplicate keys with their dotted path.
class DuplicateKeyTracker {
 public:
  explicit DuplicateKeyTracker(std::string source) : source_(std::move(source)) {}

  bool on_event(nlohmann::detail::parse_event_t event, const Json& parsed) {
    using Event = nlohmann::detail::parse_event_t;
    switch (event) {
      case Event::object_start:
      case Event::array_start:
        push(event == Event::object_start);
        break;
      case Event::object_end:
      case Event::array_end:
        if (!frames_.empty()) frames_.pop_back();
        break;
      case Event::key: {
        Frame& frame = frames_.back();
        frame.pending_key = parsed.get<std::string>();
        if (!frame.keys.insert(frame.pending_key).second) {
          duplicates_.push_back(path_of(frames_.size() - 1) + frame.pending_key);
        }
        break;
      }
      case Event::value:
        if (!frames_.empty() && !frames_.back().is_object) ++frames_.back().next_index;
        break;
    }
    return true;  // keep everything; duplicates are reported after parsing
  }

  const std::vector<std::string>& duplicates() const { return duplicates_; }

 private:
  struct Frame {
    bool is_object = true;
    std::string component;  // how the parent names this container ("key" or "[3]")
    std::unordered_set<std::string> keys;
    std::string pending_key;
    std::size_t next_index = 0;
  };

  void push(bool is_object) {
    if (static_cast<int>(frames_.size()) >= kMaxConfigDepth) {
      throw ConfigError(str(source_, ": nesting deeper than ", kMaxConfigDepth,
                            " levels; this is not a DeepSpeed config"));
    }
    Frame frame;
    frame.is_object = is_object;
    if (!frames_.empty()) {
      Frame& parent = frames_.back();
      frame.component = parent.is_object ? parent.pending_key : str("[", parent.next_index++, "]");
    }
    frames_.push_back(std::move(frame));
  }

  // Dotted path of frame `index` including a trailing "." when non-empty.
  std::string path_of(std::size_t index) const {
    std::string path;
    for (std::size_t i = 1; i <= index; ++i) {
      const std::string& c = frames_[i].component;
      if (!path.empty() && c.front() != '[') path += '.';
      path += c;
    }
    return path.empty() ? path : path + ".";
  }

  std::string source_;
  std::vector<Frame> frames_;
  std::vector<std::string> duplicates_;
};

// nlohmann's messages start with "[json.exception.parse_error.101] "; keep the readable part.
std::string strip_exception_prefix(const std::string& what) {
  if (what.rfind("[json.exception.", 0) == 0) {
    const auto pos = what.find("] ");
    if (pos != std::string::npos) return what.substr(pos + 2);
  }
  return what;
}

bool is_regular_file(const std::string& path, std::size_t* size) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  if (size) *size = static_cast<std::size_t>(st.st_size);
  return S_ISREG(st.st_mode);
}

bool path_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

bool looks_like_json(std::string_view text) {
  for (char c : text) {
    if (std::isspace(static_cast<unsigned char>(c))) continue;
    return c == '{' || c == '[';
  }
  return false;
}

std::string received(const std::string& text) {
  constexpr std::size_t kShown = 200;
  if (text.size() <= kShown) return text;
  return text.substr(0, kShown) + str("... (", text.size(), " characters)");
}

}  // namespace

Json parse_config_text(std::string_view text, const std::string& source) {
  if (text.size() > kMaxConfigBytes) {
    throw ConfigError(str(source, ": ", text.size(), " bytes is larger than the ", kMaxConfigBytes,
                          "-byte limit for a DeepSpeed config"));
  }
  DuplicateKeyTracker tracker(source);
  Json result;
  try {
    result = Json::parse(
        text.begin(), text.end(),
        [&tracker](int, nlohmann::detail::parse_event_t event, Json& parsed) {
          return tracker.on_event(event, parsed);
        },
        /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const Json::exception& e) {
    throw ConfigError(str(source, ": not valid JSON: ", strip_exception_prefix(e.what()),
                          " (ZeroRT reads JSON with // and /* */ comments; other hjson "
                          "relaxations such as unquoted keys or trailing commas are not "
                          "supported)"));
  }
  if (!tracker.duplicates().empty()) {
    throw ConfigError(
        str("Duplicate keys in DeepSpeed config: ", py_repr(Json(tracker.duplicates()))));
  }
  if (!result.is_object()) {
    throw ConfigError(
        str(source, ": a DeepSpeed config must be a JSON object, got ", json_kind(result)));
  }
  return result;
}

Json load_config_file(const std::string& path) {
  std::size_t size = 0;
  if (!is_regular_file(path, &size)) {
    throw ConfigError(str(path, ": ", path_exists(path) ? "not a regular file" : "no such file"));
  }
  if (size > kMaxConfigBytes) {
    throw ConfigError(str(path, ": ", size, " bytes is larger than the ", kMaxConfigBytes,
                          "-byte limit for a DeepSpeed config"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(str(path, ": cannot open for reading"));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) throw ConfigError(str(path, ": read error"));
  return parse_config_text(buffer.str(), path);
}

Json load_config_source(const std::string& text) {
  if (is_regular_file(text, nullptr)) return load_config_file(text);
  if (looks_like_json(text)) return parse_config_text(text, "<string>");
  const std::string failure =
      str("Expected a string path to an existing deepspeed config, or a dictionary, or a base64 "
          "encoded string. Received: ",
          received(text));
  if (path_exists(text)) throw ConfigError(str(text, ": not a regular file"));
  if (text.size() > 2 * kMaxConfigBytes) throw ConfigError(failure);
  auto decoded = decode_base64(text);
  if (!decoded) throw ConfigError(failure + " (not an existing file, JSON or base64)");
  try {
    return parse_config_text(*decoded, "<base64>");
  } catch (const ConfigError& e) {
    throw ConfigError(failure + " (decoded base64: " + e.what() + ")");
  }
}

Json load_config_json(const Json& config) {
  if (!config.is_object()) {
    throw ConfigError(str("a DeepSpeed config must be a JSON object, got ", json_kind(config)));
  }
  return config;
}

std::optional<std::string> decode_base64(std::string_view text) {
  auto value_of = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
  };
  std::string out;
  out.reserve(text.size() / 4 * 3 + 3);
  uint32_t accumulator = 0;
  int bits = 0;
  std::size_t symbols = 0;
  std::size_t padding = 0;
  for (char c : text) {
    if (std::isspace(static_cast<unsigned char>(c))) continue;
    if (c == '=') {
      ++padding;
      continue;
    }
    if (padding > 0) return std::nullopt;  // data after padding
    const int v = value_of(c);
    if (v < 0) return std::nullopt;
    ++symbols;
    accumulator = (accumulator << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((accumulator >> bits) & 0xFFu);
    }
  }
  if (symbols == 0 || symbols % 4 == 1 || padding > 2) return std::nullopt;
  if (padding > 0 && (symbols + padding) % 4 != 0) return std::nullopt;
  return out;
}

}  // namespace zrt::config
