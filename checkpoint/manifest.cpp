#include "checkpoint/manifest.h"

#include <algorithm>
#include <map>
#include <regex>
#include <unordered_set>

#include "checkpoint/hash.h"
#include "checkpoint/layout.h"
#include "checkpoint/pt/pt_file.h"
#include "checkpoint/value_view.h"
#include "core/error.h"

namespace zrt::ckpt {
namespace {

PosixStorage& default_storage() {
  static PosixStorage storage;
  return storage;
}

uint32_t parse_crc(const std::string& hex, const std::string& context) {
  ZRT_CHECK_AS(CheckpointError, hex.size() == 8, context, ": crc32 '", hex,
               "' is not 8 hex digits");
  uint32_t v = 0;
  for (char c : hex) {
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else {
      throw CheckpointError(str(context, ": crc32 '", hex, "' is not 8 lowercase hex digits"));
    }
    v = (v << 4) | static_cast<uint32_t>(d);
  }
  return v;
}

}  // namespace

const ManifestEntry* Manifest::find(const std::string& name) const {
  for (const auto& f : files) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

Json Manifest::to_json() const {
  Json files_json = Json::array();
  for (const auto& f : files) {
    files_json.push_back(
        {{"name", f.name}, {"size", f.size}, {"crc32", crc32_hex(f.crc32)}, {"rank", f.rank}});
  }
  return Json{{"format", "zrt-checkpoint-manifest"},
              {"version", kManifestVersion},
              {"tag", tag},
              {"world_size", world_size},
              {"zero_stage", zero_stage},
              {"zrt_version", zrt_version},
              {"created_unix_ms", created_unix_ms},
              {"files", files_json},
              {"engine", engine}};
}

Manifest Manifest::from_json(const Json& j, const std::string& context) {
  auto fail = [&](const std::string& what) { throw CheckpointError(context + ": " + what); };
  if (!j.is_object()) fail("manifest is not a JSON object");
  if (j.value("format", "") != "zrt-checkpoint-manifest") fail("not a ZeroRT manifest");
  try {
    const int version = j.at("version").get<int>();
    if (version != kManifestVersion) fail(str("manifest version ", version, " is not supported"));
    Manifest m;
    m.tag = j.at("tag").get<std::string>();
    m.world_size = j.at("world_size").get<int>();
    m.zero_stage = j.at("zero_stage").get<int>();
    m.zrt_version = j.at("zrt_version").get<std::string>();
    m.created_unix_ms = j.value("created_unix_ms", int64_t{0});
    if (m.world_size < 1) fail(str("world_size ", m.world_size));
    std::unordered_set<std::string> names;
    for (const Json& f : j.at("files")) {
      ManifestEntry e;
      e.name = f.at("name").get<std::string>();
      validate_file_name(e.name);
      if (!names.insert(e.name).second) fail("file '" + e.name + "' listed twice");
      e.size = f.at("size").get<uint64_t>();
      e.crc32 = parse_crc(f.at("crc32").get<std::string>(), context);
      e.rank = f.at("rank").get<int>();
      m.files.push_back(std::move(e));
    }
    if (j.contains("engine")) m.engine = j.at("engine");
    return m;
  } catch (const Json::exception& e) {
    fail(str("malformed manifest: ", e.what()));
  }
  return {};
}

uint32_t file_crc32(const ByteSource& source) {
  constexpr uint64_t kBlock = uint64_t{4} << 20;
  std::string buf(static_cast<size_t>(std::min(kBlock, std::max<uint64_t>(source.size(), 1))),
                  '\0');
  uint32_t crc = 0;
  for (uint64_t off = 0; off < source.size();) {
    const uint64_t n = std::min<uint64_t>(kBlock, source.size() - off);
    source.read_at(off, &buf[0], n);
    crc = crc32_update(crc, buf.data(), n);
    off += n;
  }
  return crc;
}

Manifest read_manifest(const std::string& save_dir, const std::string& tag, Storage* storage) {
  Storage& s = storage ? *storage : default_storage();
  const std::string dir = tag_path(save_dir, tag);
  ZRT_CHECK_AS(CheckpointError, s.is_dir(dir), "checkpoint tag '", tag, "' not found in ",
               save_dir);
  const std::string path = join_path(dir, kManifestFile);
  ZRT_CHECK_AS(CheckpointError, s.exists(path), "checkpoint tag '", tag, "' in ", save_dir,
               " is incomplete: it has no ", kManifestFile,
               " (the save did not finish; checkpoints written by DeepSpeed have none either)");
  const std::string text = s.read_file(path, kMaxManifestBytes);
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::exception& e) {
    throw CheckpointError(str(path, ": not valid JSON: ", e.what()));
  }
  Manifest m = Manifest::from_json(j, path);
  ZRT_CHECK_AS(CheckpointError, m.tag == tag, path, " describes tag '", m.tag, "', not '", tag,
               "'");
  return m;
}

std::vector<std::string> check_tag(const std::string& save_dir, const std::string& tag,
                                   VerifyLevel level, Storage* storage) {
  Storage& s = storage ? *storage : default_storage();
  std::vector<std::string> problems;
  Manifest m;
  try {
    m = read_manifest(save_dir, tag, &s);
  } catch (const CheckpointError& e) {
    problems.push_back(e.what());
    return problems;
  }
  const std::string dir = join_path(save_dir, tag);
  for (const ManifestEntry& f : m.files) {
    const std::string path = join_path(dir, f.name);
    try {
      if (!s.exists(path)) {
        problems.push_back(path + ": missing");
        continue;
      }
      std::unique_ptr<ByteSource> src = s.open(path);
      if (src->size() != f.size) {
        problems.push_back(str(path, ": ", src->size(), " bytes, the manifest says ", f.size));
        continue;
      }
      if (level == VerifyLevel::kChecksums) {
        const uint32_t crc = file_crc32(*src);
        if (crc != f.crc32) {
          problems.push_back(str(path, ": CRC-32 ", crc32_hex(crc), ", the manifest says ",
                                 crc32_hex(f.crc32), " (corrupt)"));
        }
      }
    } catch (const CheckpointError& e) {
      problems.push_back(e.what());
    }
  }
  return problems;
}

Manifest verify_tag(const std::string& save_dir, const std::string& tag, VerifyLevel level,
                    Storage* storage) {
  const std::vector<std::string> problems = check_tag(save_dir, tag, level, storage);
  if (!problems.empty()) {
    std::string msg = str("checkpoint tag '", tag, "' in ", save_dir, " failed verification:");
    for (const auto& p : problems) msg += "\n  " + p;
    throw CheckpointError(msg);
  }
  return read_manifest(save_dir, tag, storage);
}

std::optional<Manifest> deepspeed_tag_manifest(const std::string& save_dir,
                                               const std::string& tag, Storage* storage) {
  Storage& s = storage ? *storage : default_storage();
  const std::string dir = tag_path(save_dir, tag);
  if (!s.is_dir(dir) || s.exists(join_path(dir, kManifestFile))) return std::nullopt;
  static const std::regex kPerRank(
      R"((bf16_)?zero_pp_rank_(\d{1,6})_mp_rank_00_(model|optim)_states\.pt)");
  Manifest m;
  m.tag = tag;
  m.derived = true;
  m.zrt_version = "deepspeed";
  std::map<int, int> model_ranks, optim_ranks;  // rank -> files
  bool has_model_states = false;
  for (const std::string& name : s.list(dir)) {
    const std::string path = join_path(dir, name);
    if (is_temp_name(name) || name.rfind("zrt_rng_state_", 0) == 0) return std::nullopt;
    if (s.is_dir(path)) continue;
    ManifestEntry e;
    e.name = name;
    e.size = s.open(path)->size();
    std::smatch match;
    if (std::regex_match(name, match, kPerRank)) {
      e.rank = std::stoi(match[2].str());
      ++(match[3].str() == "model" ? model_ranks : optim_ranks)[e.rank];
    }
    has_model_states = has_model_states || name == model_states_name();
    m.files.push_back(e);
  }
  if (!has_model_states && model_ranks.empty()) return std::nullopt;
  std::sort(m.files.begin(), m.files.end(), [](const ManifestEntry& a, const ManifestEntry& b) {
    return natural_less(a.name, b.name);
  });
  auto contiguous = [&](const std::map<int, int>& ranks) {
    int expect = 0;
    for (const auto& [r, n] : ranks) {
      ZRT_CHECK_AS(CheckpointError, r == expect && n == 1, dir,
                   ": the per-rank files of this DeepSpeed checkpoint are not ranks 0..N-1 once "
                   "each (rank ",
                   expect, " missing or doubled)");
      ++expect;
    }
    return expect;
  };
  const int optim_world = contiguous(optim_ranks);
  if (!model_ranks.empty()) {
    m.zero_stage = 3;
    m.world_size = contiguous(model_ranks);
    ZRT_CHECK_AS(CheckpointError, optim_world == 0 || optim_world == m.world_size, dir, ": ",
                 m.world_size, " model-state files but ", optim_world, " optimizer-state files");
    return m;
  }
  // Stages 0-2 share one model-states file; its ds_config says which stage wrote it.
  ReadOptions ro;
  ro.mode = ReadMode::kTolerant;
  ro.verify_crc = false;
  ro.only_keys = {"ds_config", "dp_world_size"};
  const std::string ms_path = join_path(dir, model_states_name());
  const Value ms = load_pt(ms_path, ro);
  const ValueView v(ms, ms_path);
  m.world_size = optim_world > 0 ? optim_world
                                 : (v.contains("dp_world_size") ? static_cast<int>(
                                                                      v["dp_world_size"].as_int())
                                                                : 1);
  m.zero_stage = optim_world > 0 ? 2 : 0;
  if (optim_world > 0 && v.contains("ds_config") && v["ds_config"].kind() == ValueKind::kDict &&
      v["ds_config"].contains("zero_optimization")) {
    const ValueView zo = v["ds_config"]["zero_optimization"];
    if (zo.kind() == ValueKind::kDict && zo.contains("stage")) {
      m.zero_stage = static_cast<int>(zo["stage"].as_int());
    }
  }
  ZRT_CHECK_AS(CheckpointError, m.world_size >= 1, ms_path, ": dp_world_size ", m.world_size);
  return m;
}

Manifest open_tag(const std::string& save_dir, const std::string& tag, VerifyLevel level,
                  Storage* storage) {
  if (std::optional<Manifest> ds = deepspeed_tag_manifest(save_dir, tag, storage)) return *ds;
  return verify_tag(save_dir, tag, level, storage);
}

std::vector<std::string> complete_tags(const std::string& save_dir, Storage* storage) {
  Storage& s = storage ? *storage : default_storage();
  std::vector<std::pair<int64_t, std::string>> found;
  for (const std::string& name : s.list(save_dir)) {
    if (!is_valid_tag(name) || !s.is_dir(join_path(save_dir, name))) continue;
    try {
      found.emplace_back(read_manifest(save_dir, name, &s).created_unix_ms, name);
    } catch (const CheckpointError&) {
    }
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> tags;
  for (auto& [_, name] : found) tags.push_back(std::move(name));
  return tags;
}

}  // namespace zrt::ckpt
