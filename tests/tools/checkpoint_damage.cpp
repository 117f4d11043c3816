// The damage operations of the bad-input corpus (see checkpoint_damage.h).
#include "tests/tools/checkpoint_damage.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <stdexcept>

#include <ATen/ATen.h>

#include "checkpoint/hash.h"
#include "checkpoint/io.h"
#include "checkpoint/manifest.h"
#include "checkpoint/pt/pt_file.h"
#include "checkpoint/pt/zip_reader.h"
#include <caffe2/serialize/inline_container.h>
#include <sys/stat.h>

namespace zrt::test {
namespace {

namespace fs = std::filesystem;
using ckpt::Value;

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error("damage: " + what); }

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read " + path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) fail("cannot write " + path);
}

uint32_t get_u32(const std::string& b, size_t at) {
  if (at + 4 > b.size()) fail("zip field out of range");
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(b[at + i]);
  return v;
}
uint32_t get_u16(const std::string& b, size_t at) {
  if (at + 2 > b.size()) fail("zip field out of range");
  return static_cast<uint8_t>(b[at]) |
         (static_cast<uint32_t>(static_cast<uint8_t>(b[at + 1])) << 8);
}
void put_u32(std::string& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<char>((v >> (8 * i)) & 0xFF);
}

// Adds `delta` to the stored sizes of the zip entry whose name ends with `entry`.
void zip_size(std::string& b, const std::string& entry, int64_t delta, const std::string& where) {
  bool found = false;
  for (size_t pos = 0; pos + 46 <= b.size(); ++pos) {
    if (get_u32(b, pos) != 0x02014b50) continue;
    const uint32_t name_len = get_u16(b, pos + 28);
    const std::string name = b.substr(pos + 46, name_len);
    if (name.size() < entry.size() ||
        name.compare(name.size() - entry.size(), entry.size(), entry)) {
      continue;
    }
    found = true;
    auto patch = [&](size_t at) {
      const uint32_t v = get_u32(b, at);
      if (v == 0xFFFFFFFFu) fail("zip64 sizes are not patched");
      put_u32(b, at, static_cast<uint32_t>(static_cast<int64_t>(v) + delta));
    };
    if (where == "central" || where == "both") {
      patch(pos + 20);
      patch(pos + 24);
    }
    if (where == "local" || where == "both") {
      const uint32_t local = get_u32(b, pos + 42);
      if (get_u32(b, local) != 0x04034b50) fail("no local header for " + name);
      patch(local + 18);
      patch(local + 22);
    }
    break;
  }
  if (!found) fail("no zip entry ending with " + entry);
}

// The offset of the stored bytes of the zip entry whose name ends with `entry`.
// "@central" names the first central directory header itself.
size_t record_offset(const std::string& b, const std::string& entry) {
  for (size_t pos = 0; pos + 46 <= b.size(); ++pos) {
    if (get_u32(b, pos) != 0x02014b50) continue;
    if (entry == "@central") return pos;
    const std::string name = b.substr(pos + 46, get_u16(b, pos + 28));
    if (name.size() < entry.size() ||
        name.compare(name.size() - entry.size(), entry.size(), entry)) {
      continue;
    }
    const uint32_t local = get_u32(b, pos + 42);
    return local + 30 + get_u16(b, local + 26) + get_u16(b, local + 28);
  }
  fail("no zip entry ending with " + entry);
}

// Rewrites a .pt archive with an edited pickle and records.
void rezip(const std::string& path, const Json& op) {
  ckpt::FileSource source(path);
  ckpt::ZipReader zip(source, 1 << 20);
  std::vector<std::pair<std::string, std::string>> records;  // name without the folder
  for (const ckpt::ZipEntry& e : zip.entries()) {
    const std::string name = e.name.substr(e.name.find('/') + 1);
    if (name == "version") continue;  // the writer adds it
    records.emplace_back(name, zip.read_string(e, uint64_t{1} << 30, false));
  }
  for (auto& [name, bytes] : records) {
    if (name == "data.pkl" && op.contains("pickle_replace")) {
      for (const Json& pair : op["pickle_replace"]) {
        const std::string from = latin1_bytes(pair[0].get<std::string>());
        const std::string to = latin1_bytes(pair[1].get<std::string>());
        const size_t at = bytes.find(from);
        if (at == std::string::npos) fail("pickle pattern not found in " + path);
        bytes.replace(at, from.size(), to);
      }
    }
    if (op.contains("truncate_record") && op["truncate_record"]["name"] == name) {
      bytes.resize(op["truncate_record"]["size"].get<size_t>());
    }
  }
  std::string out;
  caffe2::serialize::PyTorchStreamWriter w([&](const void* p, size_t n) {
    out.append(static_cast<const char*>(p), n);
    return n;
  });
  for (const auto& [name, bytes] : records) {
    if (op.value("drop_record", "") == name) continue;
    w.writeRecord(name, bytes.data(), bytes.size());
  }
  w.writeEndOfFile();
  write_bytes(path, out);
}

// The Value at `path` inside `root` (dict keys: strings or ints; list indices: ints).
Value& value_at(Value& root, const Json& path, size_t depth) {
  Value* v = &root;
  for (size_t i = 0; i < depth; ++i) {
    const Json& k = path[i];
    if (v->is_dict()) {
      Value* next = k.is_string() ? v->as_dict().find(k.get<std::string>())
                                  : v->as_dict().find(k.get<int64_t>());
      if (next == nullptr) fail("no key " + k.dump());
      v = next;
    } else if (v->is_sequence() && k.is_number_integer()) {
      v = &v->items().at(k.get<size_t>());
    } else {
      fail("cannot descend into a " + std::string(v->kind_name()) + " with " + k.dump());
    }
  }
  return *v;
}

void edit(const std::string& path, const Json& op) {
  Value root = ckpt::load_pt(path);
  const Json& keys = op.at("path");
  if (keys.empty()) fail("edit needs a path");
  Value& parent = value_at(root, keys, keys.size() - 1);
  const Json& last = keys.back();
  if (op.value("remove", false)) {
    if (!parent.is_dict()) fail("remove needs a dict");
    Value copy = parent.is_ordered_dict() ? Value::ordered_dict() : Value::dict();
    for (const auto& [k, v] : parent.as_dict()) {
      const bool match = last.is_string() ? k.is_str() && k.as_str() == last.get<std::string>()
                                          : k.is_int() && k.as_int() == last.get<int64_t>();
      if (!match) copy.set(k, v);
    }
    parent = std::move(copy);
  } else {
    Value& target = value_at(root, keys, keys.size());
    if (op.contains("set")) {
      target = ckpt::from_json(op["set"]);
    } else if (op.contains("shape")) {
      target = Value::torch_size(op["shape"].get<std::vector<int64_t>>());
    } else if (op.contains("narrow")) {
      target = target.as_tensor().reshape({-1}).narrow(0, 0, op["narrow"].get<int64_t>()).clone();
    } else {
      fail("edit needs set, shape, narrow or remove");
    }
  }
  ckpt::save_pt(root, path);
}

std::string manifest_path(const std::string& save_dir, const Json& op) {
  return save_dir + "/" + op.at("tag").get<std::string>() + "/" + ckpt::kManifestFile;
}

void rewrite_manifest(const std::string& save_dir, const Json& op,
                      const std::function<void(Json&)>& change) {
  const std::string path = manifest_path(save_dir, op);
  Json j = Json::parse(read_bytes(path));
  change(j);
  write_bytes(path, j.dump(2));
}

// Sizes and CRCs of the tag's files as they are now; entries for removed files dropped, files
// not listed added (as rank 0's).
void fix_manifest(const std::string& save_dir, const Json& op) {
  const std::string dir = save_dir + "/" + op.at("tag").get<std::string>();
  rewrite_manifest(save_dir, op, [&](Json& j) {
    Json files = Json::array();
    std::set<std::string> listed;
    for (Json f : j["files"]) {
      const std::string p = dir + "/" + f["name"].get<std::string>();
      listed.insert(f["name"].get<std::string>());
      if (!fs::is_regular_file(p)) continue;
      ckpt::FileSource s(p);
      f["size"] = s.size();
      f["crc32"] = ckpt::crc32_hex(ckpt::file_crc32(s));
      files.push_back(f);
    }
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      if (name == ckpt::kManifestFile || listed.count(name) || !e.is_regular_file()) continue;
      ckpt::FileSource s(e.path().string());
      files.push_back({{"name", name},
                       {"size", s.size()},
                       {"crc32", ckpt::crc32_hex(ckpt::file_crc32(s))},
                       {"rank", 0}});
    }
    j["files"] = files;
  });
}

}  // namespace

std::string latin1_bytes(const std::string& utf8) {
  std::string out;
  for (size_t i = 0; i < utf8.size();) {
    const auto c = static_cast<uint8_t>(utf8[i]);
    if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < utf8.size()) {
      const uint32_t cp = ((c & 0x1F) << 6) | (static_cast<uint8_t>(utf8[i + 1]) & 0x3F);
      if (cp > 0xFF) fail("byte strings use code points up to U+00FF");
      out += static_cast<char>(cp);
      i += 2;
    } else {
      fail("byte strings use code points up to U+00FF");
    }
  }
  return out;
}

void apply_damage(const std::string& save_dir, const Json& op, const std::string& corpus_dir) {
  const std::string kind = op.at("op").get<std::string>();
  auto file = [&](const char* key = "file") {
    return save_dir + "/" + op.at(key).get<std::string>();
  };
  if (kind == "remove") {
    if (!fs::remove(file())) fail("nothing to remove at " + file());
  } else if (kind == "truncate") {
    std::string b = read_bytes(file());
    const size_t keep = op.contains("keep")
                            ? op["keep"].get<size_t>()
                            : static_cast<size_t>(b.size() * op["keep_fraction"].get<double>());
    if (keep >= b.size()) fail("truncate keeps everything");
    b.resize(keep);
    write_bytes(file(), b);
  } else if (kind == "flip") {
    std::string b = read_bytes(file());
    const size_t base =
        op.contains("record") ? record_offset(b, op["record"].get<std::string>()) : 0;
    const size_t at = op.contains("offset")
                          ? base + op["offset"].get<size_t>()
                          : static_cast<size_t>(b.size() * op["offset_fraction"].get<double>());
    if (at >= b.size()) fail("flip offset beyond the file");
    b[at] = static_cast<char>(b[at] ^ op.value("mask", 1));
    write_bytes(file(), b);
  } else if (kind == "write") {
    std::string text;
    for (int i = 0; i < op.value("repeat", 1); ++i)
      text += latin1_bytes(op.at("text").get<std::string>());
    write_bytes(file(), text);
  } else if (kind == "copy") {
    fs::copy_file(file("from"), file("to"), fs::copy_options::overwrite_existing);
  } else if (kind == "install") {
    fs::copy_file(corpus_dir + "/" + op.at("from").get<std::string>(), file("to"),
                  fs::copy_options::overwrite_existing);
  } else if (kind == "mkfifo") {
    fs::remove(file());
    if (::mkfifo(file().c_str(), 0600) != 0) fail("mkfifo failed");
  } else if (kind == "rezip") {
    rezip(file(), op);
  } else if (kind == "zip_size") {
    std::string b = read_bytes(file());
    zip_size(b, op.at("entry").get<std::string>(), op.at("add").get<int64_t>(),
             op.value("where", "both"));
    write_bytes(file(), b);
  } else if (kind == "edit") {
    edit(file(), op);
  } else if (kind == "fix_manifest") {
    fix_manifest(save_dir, op);
  } else if (kind == "manifest_set") {
    rewrite_manifest(save_dir, op,
                     [&](Json& j) { j[op.at("key").get<std::string>()] = op.at("value"); });
  } else if (kind == "manifest_file") {
    rewrite_manifest(save_dir, op, [&](Json& j) {
      for (Json& f : j["files"]) {
        if (f["name"] != op.at("file")) continue;
        if (op.contains("size_add"))
          f["size"] = f["size"].get<int64_t>() + op["size_add"].get<int64_t>();
        if (op.contains("crc")) f["crc32"] = op["crc"];
        return;
      }
      fail("manifest lists no " + op.at("file").get<std::string>());
    });
  } else {
    fail("unknown operation '" + kind + "'");
  }
}

}  // namespace zrt::test
