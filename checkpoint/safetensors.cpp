#include "checkpoint/safetensors.h"

#include <algorithm>
#include <set>
#include <unordered_set>

#include <ATen/ATen.h>

#include "checkpoint/tensor_types.h"
#include "core/error.h"
#include "core/json.h"

namespace zrt::ckpt {
namespace {

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
  return s;
}

// Header JSON with its own checks: nesting of at most 4 levels and no duplicate keys in any
// object (nlohmann would silently keep the last one).
Json parse_header(const std::string& file, const std::string& text) {
  std::vector<std::set<std::string>> open_objects;
  int depth = 0;
  auto callback = [&](int, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        ZRT_CHECK_AS(CheckpointError, ++depth <= 4, file,
                     ": safetensors header nests deeper than 4 levels");
        if (event == Json::parse_event_t::object_start) open_objects.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        open_objects.pop_back();
        --depth;
        break;
      case Json::parse_event_t::array_end:
        --depth;
        break;
      case Json::parse_event_t::key:
        ZRT_CHECK_AS(CheckpointError, open_objects.back().insert(parsed.get<std::string>()).second,
                     file, ": safetensors header repeats the key '", parsed.get<std::string>(),
                     "'");
        break;
      default:
        break;
    }
    return true;
  };
  try {
    return Json::parse(text, callback);
  } catch (const Json::exception& e) {
    throw CheckpointError(str(file, ": safetensors header is not valid JSON: ", e.what()));
  }
}

// A header entry with its byte range relative to the start of the data.
struct Entry {
  SafetensorsEntry tensor;
  uint64_t begin = 0, end = 0;
};

uint64_t checked_byte_size(const std::string& file, const std::string& name,
                           const std::vector<int64_t>& shape, at::ScalarType dtype) {
  constexpr uint64_t kLimit = uint64_t{1} << 62;
  uint64_t bytes = static_cast<uint64_t>(dtype_itemsize(dtype));
  for (int64_t d : shape) {
    ZRT_CHECK_AS(CheckpointError, d == 0 || bytes <= kLimit / static_cast<uint64_t>(d), file,
                 ": tensor '", name, "' is too large (overflow)");
    bytes *= static_cast<uint64_t>(d);
  }
  return bytes;
}

}  // namespace

void write_safetensors(const NamedTensors& tensors, ByteSink& sink, const StringPairs& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) {
    Json meta = Json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = meta;
  }
  std::unordered_set<std::string> names;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    ZRT_CHECK_AS(CheckpointError, !name.empty() && name != "__metadata__", "safetensors: invalid ",
                 "tensor name '", name, "'");
    ZRT_CHECK_AS(CheckpointError, names.insert(name).second, "safetensors: duplicate tensor name '",
                 name, "'");
    ZRT_CHECK_AS(CheckpointError, t.defined() && t.device().is_cpu() && t.layout() == at::kStrided,
                 "safetensors: tensor '", name, "' must be a dense CPU tensor");
    const uint64_t bytes = static_cast<uint64_t>(t.numel()) * dtype_itemsize(t.scalar_type());
    header[name] = {{"dtype", safetensors_dtype_name(t.scalar_type())},
                    {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const Json::exception& e) {
    throw CheckpointError(str("safetensors: cannot encode the header: ", e.what()));
  }
  // The data start at 8 + header length; pad the header with spaces to a multiple of 8.
  text.append((8 - text.size() % 8) % 8, ' ');
  sink.write(le64(text.size()).data(), 8);
  sink.write(text.data(), text.size());
  for (const auto& [name, t] : tensors) {
    const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
    if (bytes == 0) continue;
    if (t.is_contiguous()) {
      sink.write_borrowed(t.data_ptr(), bytes);  // the caller's tensor outlives this call
    } else {
      const at::Tensor c = t.contiguous();
      sink.write(c.data_ptr(), bytes);
    }
  }
  sink.sync_borrowed();
}

FileInfo save_safetensors(const NamedTensors& tensors, const std::string& path,
                          const StringPairs& metadata, Storage* storage) {
  PosixStorage posix;
  Storage& s = storage ? *storage : posix;
  return s.write_file_atomic(path,
                             [&](ByteSink& sink) { write_safetensors(tensors, sink, metadata); });
}

SafetensorsIndex index_safetensors(const ByteSource& source, const SafetensorsReadOptions& options) {
  const std::string& file = source.name();
  const uint64_t size = source.size();
  ZRT_CHECK_AS(CheckpointError, size >= 8, file, ": ", size,
               " bytes is too small for a safetensors file");
  const std::string len_bytes = source.read_string(0, 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(len_bytes[i]);
  ZRT_CHECK_AS(CheckpointError, n <= options.max_header_bytes, file, ": safetensors header of ", n,
               " bytes exceeds the limit of ", options.max_header_bytes);
  ZRT_CHECK_AS(CheckpointError, n <= size - 8, file, ": safetensors header of ", n,
               " bytes runs past the end of the file (", size, " bytes)");
  const std::string text = source.read_string(8, n);
  ZRT_CHECK_AS(CheckpointError, !text.empty() && text[0] == '{', file,
               ": safetensors header does not start with '{'");
  const Json header = parse_header(file, text);
  ZRT_CHECK_AS(CheckpointError, header.is_object(), file, ": safetensors header is not an object");
  ZRT_CHECK_AS(CheckpointError, header.size() <= options.max_tensors + 1, file, ": ", header.size(),
               " tensors exceed the limit of ", options.max_tensors);
  const uint64_t data_start = 8 + n, data_size = size - data_start;

  SafetensorsIndex out;
  std::vector<Entry> entries;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      ZRT_CHECK_AS(CheckpointError, info.is_object(), file, ": __metadata__ is not an object");
      for (const auto& [k, v] : info.items()) {
        ZRT_CHECK_AS(CheckpointError, v.is_string(), file, ": __metadata__['", k,
                     "'] is not a string");
        out.metadata.emplace_back(k, v.get<std::string>());
      }
      continue;
    }
    // A named copy: C++17 lambdas cannot capture a structured binding (clang refuses it).
    const std::string& tensor_name = name;
    auto bad = [&](const std::string& what) {
      throw CheckpointError(str(file, ": tensor '", tensor_name, "': ", what));
    };
    if (!info.is_object() || info.size() != 3 || !info.contains("dtype") ||
        !info.contains("shape") || !info.contains("data_offsets")) {
      bad("expected exactly {dtype, shape, data_offsets}");
    }
    Entry e;
    e.tensor.name = name;
    const Json& dtype = info["dtype"];
    auto dt =
        dtype.is_string() ? dtype_of_safetensors_name(dtype.get<std::string>()) : std::nullopt;
    if (!dt) bad(str("unsupported dtype ", dtype.dump()));
    e.tensor.dtype = *dt;
    const Json& shape = info["shape"];
    if (!shape.is_array() || shape.size() > 64) bad("shape must be a list of at most 64 ints");
    for (const Json& d : shape) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t{1} << 62)) {
        bad("shape entries must be non-negative ints");
      }
      e.tensor.shape.push_back(d.get<int64_t>());
    }
    const Json& offs = info["data_offsets"];
    if (!offs.is_array() || offs.size() != 2 || !offs[0].is_number_unsigned() ||
        !offs[1].is_number_unsigned()) {
      bad("data_offsets must be two non-negative ints");
    }
    e.begin = offs[0].get<uint64_t>();
    e.end = offs[1].get<uint64_t>();
    if (e.begin > e.end || e.end > data_size) {
      bad(str("data_offsets [", e.begin, ", ", e.end, ") outside the ", data_size, " data bytes"));
    }
    const uint64_t bytes = checked_byte_size(file, name, e.tensor.shape, e.tensor.dtype);
    if (bytes != e.end - e.begin) {
      bad(str("shape and dtype give ", bytes, " bytes but data_offsets span ", e.end - e.begin));
    }
    entries.push_back(std::move(e));
  }
  // The byte ranges must tile the data exactly: no gaps, no overlaps, nothing left over.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected = 0;
  for (const Entry& e : entries) {
    ZRT_CHECK_AS(CheckpointError, e.begin == expected, file, ": tensor '", e.tensor.name,
                 "' starts at byte ", e.begin, " but the previous data end at ", expected,
                 " (gap or overlap)");
    expected = e.end;
  }
  ZRT_CHECK_AS(CheckpointError, expected == data_size, file, ": tensors cover ", expected,
               " bytes but the file holds ", data_size, " data bytes");
  for (Entry& e : entries) {
    e.tensor.offset = data_start + e.begin;
    e.tensor.nbytes = e.end - e.begin;
    out.tensors.push_back(std::move(e.tensor));
  }
  return out;
}

int64_t SafetensorsEntry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

at::Tensor read_safetensors_range(const ByteSource& source, const SafetensorsEntry& entry,
                                  int64_t begin, int64_t count) {
  const int64_t numel = entry.numel();
  ZRT_CHECK_AS(CheckpointError, begin >= 0 && count >= 0 && begin <= numel && count <= numel - begin,
               source.name(), ": tensor '", entry.name, "': elements [", begin, ", ", begin + count,
               ") lie outside its ", numel);
  const uint64_t item = dtype_itemsize(entry.dtype);
  at::Tensor t = at::empty({count}, at::TensorOptions().dtype(entry.dtype));
  if (count > 0) {
    source.read_at(entry.offset + static_cast<uint64_t>(begin) * item, t.data_ptr(),
                   static_cast<uint64_t>(count) * item);
  }
  if (entry.dtype == at::kBool) {
    const auto* b = static_cast<const uint8_t*>(t.data_ptr());
    for (int64_t i = 0; i < count; ++i) {
      ZRT_CHECK_AS(CheckpointError, b[i] <= 1, source.name(), ": bool tensor '", entry.name,
                   "' holds the byte ", int(b[i]));
    }
  }
  return t;
}

SafetensorsFile read_safetensors(const ByteSource& source, const SafetensorsReadOptions& options) {
  SafetensorsIndex index = index_safetensors(source, options);
  SafetensorsFile out;
  out.metadata = std::move(index.metadata);
  for (const SafetensorsEntry& e : index.tensors) {
    out.tensors.emplace_back(e.name, read_safetensors_range(source, e, 0, e.numel()).view(e.shape));
  }
  return out;
}

SafetensorsFile load_safetensors(const std::string& path, const SafetensorsReadOptions& options) {
  FileSource source(path);
  return read_safetensors(source, options);
}

}  // namespace zrt::ckpt
