#include "checkpoint/commit.h"

#include <chrono>
#include <cstring>
#include <unordered_set>

#include <ATen/ATen.h>

#include "checkpoint/hash.h"
#include "checkpoint/layout.h"
#include "checkpoint/pt/pt_file.h"
#include "core/error.h"
#include "core/logging.h"
#include "zrt/build_config.h"
#include <unistd.h>

namespace zrt::ckpt {
namespace {

constexpr size_t kMaxMessage = size_t{1} << 20;

// A rank's vote: kOk, kFailed, or kFailedMarked (phase 5: the manifest was written, `latest`
// was not).
enum Code : int64_t { kOk = 0, kFailed = 1, kFailedMarked = 2 };

struct RankStatus {
  int64_t code = kOk;
  std::string message;  // the error, or the phase's payload
  bool ok() const { return code == kOk; }
};

// Collective: every rank must call this. All-gathers (code, message) of every rank.
std::vector<RankStatus> exchange(comm::Comm& comm, int64_t code, std::string message) {
  if (message.size() > kMaxMessage) message.resize(kMaxMessage);
  const int world = comm.size();
  at::Tensor head = at::empty({2}, at::kLong);
  head[0] = code;
  head[1] = static_cast<int64_t>(message.size());
  at::Tensor heads = at::empty({2 * world}, at::kLong);
  comm.all_gather(heads, head);
  const auto* h = heads.data_ptr<int64_t>();
  int64_t longest = 0;
  for (int r = 0; r < world; ++r) longest = std::max(longest, h[2 * r + 1]);
  std::vector<RankStatus> out(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) out[r].code = h[2 * r];
  if (longest > 0) {
    at::Tensor mine = at::zeros({longest}, at::kByte);
    std::memcpy(mine.data_ptr(), message.data(), message.size());
    at::Tensor all = at::empty({world * longest}, at::kByte);
    comm.all_gather(all, mine);
    const auto* bytes = static_cast<const char*>(all.data_ptr());
    for (int r = 0; r < world; ++r) {
      out[r].message.assign(bytes + r * longest, static_cast<size_t>(h[2 * r + 1]));
    }
  }
  return out;
}

std::string failures(const std::vector<RankStatus>& statuses) {
  std::string msg;
  for (size_t r = 0; r < statuses.size(); ++r) {
    if (statuses[r].ok()) continue;
    msg += str(msg.empty() ? "" : "; ", "rank ", r, ": ", statuses[r].message);
  }
  return msg;
}

bool all_ok(const std::vector<RankStatus>& statuses) {
  for (const auto& s : statuses) {
    if (!s.ok()) return false;
  }
  return true;
}

std::string host_name() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "?";
  return buf;
}

// Collective: every rank must call this. Runs this rank's part of a phase and votes; on a
// failed vote runs `cleanup` and throws.
std::vector<RankStatus> run_phase(comm::Comm& comm, const CommitSpec& spec, const char* phase,
                                  const std::function<std::string()>& body,
                                  const std::function<void()>& cleanup) {
  bool ok = true;
  std::string message;
  try {
    message = body();
  } catch (const std::exception& e) {
    ok = false;
    message = e.what();
  }
  std::vector<RankStatus> statuses = exchange(comm, ok ? kOk : kFailed, message);
  if (!all_ok(statuses)) {
    cleanup();
    throw CheckpointError(str("saving checkpoint tag '", spec.tag, "' in ", spec.save_dir,
                              " failed (", phase, "): ", failures(statuses)));
  }
  return statuses;
}

void remove_quietly(Storage& storage, const std::string& path) {
  try {
    storage.remove(path);
  } catch (const std::exception& e) {
    ZRT_LOG_WARN_ALL("checkpoint cleanup: ", e.what());
  }
}

int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

PendingFile PendingFile::pt(std::string name, Value value) {
  PendingFile f;
  f.name = std::move(name);
  f.produce = [v = std::move(value)](ByteSink& sink) { write_pt(v, sink); };
  return f;
}

bool check_tag_consistent(comm::Comm& comm, const std::string& tag, TagValidation mode) {
  if (mode == TagValidation::kIgnore) return true;
  const std::array<uint8_t, 20> digest = sha1(tag);
  at::Tensor hi = at::empty({20}, at::kLong);
  for (int i = 0; i < 20; ++i) hi[i] = static_cast<int64_t>(digest[i]);
  at::Tensor lo = hi.clone();
  comm.all_reduce(hi, comm::ReduceOp::kMax);
  comm.all_reduce(lo, comm::ReduceOp::kMin);
  if (at::equal(hi, lo)) return true;
  const std::string msg = str("The checkpoint tag name '", tag,
                              "' is not consistent across all ranks. Every rank must pass the "
                              "same tag; a per-rank tag cannot be loaded at another world size.");
  ZRT_CHECK_AS(CheckpointError, mode != TagValidation::kFail, msg);
  ZRT_LOG_WARN_ALL(msg);
  return false;
}

CommitResult commit_checkpoint(comm::Comm& comm, Storage& storage, const CommitSpec& spec,
                               const CheckpointOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  check_tag_consistent(comm, spec.tag, options.tag_validation);
  const bool marker_writer =
      options.use_node_local_storage ? comm.local_rank() == 0 : comm.rank() == 0;
  const std::string tag_dir = join_path(spec.save_dir, spec.tag);
  const std::string manifest_path = join_path(tag_dir, kManifestFile);
  auto nothing = [] {};

  // 1. prepare
  run_phase(
      comm, spec, "prepare",
      [&] {
        validate_tag(spec.tag);
        std::unordered_set<std::string> names;
        for (const PendingFile& f : spec.files) {
          validate_file_name(f.name);
          ZRT_CHECK_AS(CheckpointError, f.name != kManifestFile && f.name != kLatestFile,
                       "file name '", f.name, "' is reserved");
          ZRT_CHECK_AS(CheckpointError, names.insert(f.name).second, "file '", f.name,
                       "' is written twice");
        }
        if (marker_writer) {
          storage.make_dirs(tag_dir);
          storage.sync_dir(spec.save_dir);
          // Temp files of saves killed before their rename, in save_dir (`latest`) and in any
          // tag folder: no save of this job is writing now, every rank is here.
          const size_t left = remove_leftover_temps(storage, spec.save_dir, 1);
          if (left > 0) {
            ZRT_LOG_INFO("removed ", left, " temp file(s) left in ", spec.save_dir,
                         " by an unfinished save");
          }
        }
        return std::string();
      },
      nothing);

  // 2. write temp files
  std::vector<std::string> temps;  // parallel to spec.files once written
  std::vector<FileInfo> infos;
  auto remove_temps = [&] {
    for (const std::string& t : temps) remove_quietly(storage, t);
  };
  run_phase(
      comm, spec, "write",
      [&] {
        for (const PendingFile& f : spec.files) {
          std::string tmp;
          infos.push_back(storage.write_temp(join_path(tag_dir, f.name), f.produce, &tmp));
          temps.push_back(tmp);
        }
        return std::string();
      },
      remove_temps);

  // 3. unmark a previous save of this tag
  run_phase(
      comm, spec, "unmark",
      [&] {
        if (marker_writer && storage.remove(manifest_path)) storage.sync_dir(tag_dir);
        return std::string();
      },
      remove_temps);

  // 4. rename; the vote carries every rank's file list
  size_t renamed = 0;
  const std::string host = host_name();
  std::vector<RankStatus> lists = run_phase(
      comm, spec, "rename",
      [&] {
        for (; renamed < temps.size(); ++renamed)
          storage.rename(temps[renamed], infos[renamed].path);
        if (!temps.empty()) storage.sync_dir(tag_dir);
        Json mine = {{"host", host}, {"files", Json::array()}};
        for (size_t i = 0; i < infos.size(); ++i) {
          mine["files"].push_back(
              {{"name", spec.files[i].name}, {"size", infos[i].size}, {"crc32", infos[i].crc32}});
        }
        return mine.dump();
      },
      [&] {
        for (size_t i = 0; i < temps.size(); ++i) {
          remove_quietly(storage, i < renamed ? infos[i].path : temps[i]);
        }
      });

  Manifest manifest;
  manifest.tag = spec.tag;
  manifest.world_size = comm.size();
  manifest.zero_stage = spec.zero_stage;
  manifest.zrt_version = ZRT_VERSION;
  manifest.created_unix_ms = now_unix_ms();
  manifest.engine = spec.engine;
  Manifest local = manifest;  // the files on this node's storage
  for (size_t r = 0; r < lists.size(); ++r) {
    const Json j = Json::parse(lists[r].message);
    for (const Json& f : j.at("files")) {
      ManifestEntry e{f.at("name").get<std::string>(), f.at("size").get<uint64_t>(),
                      f.at("crc32").get<uint32_t>(), static_cast<int>(r)};
      manifest.files.push_back(e);
      if (!options.use_node_local_storage || j.at("host").get<std::string>() == host) {
        local.files.push_back(e);
      }
    }
  }

  // 5. mark complete, then point `latest` at the tag
  int64_t code = kOk;
  std::string message;
  if (marker_writer) {
    try {
      storage.write_file_atomic(manifest_path, local.to_json().dump(2) + "\n");
      code = kFailedMarked;
      if (spec.save_latest) {
        storage.write_file_atomic(join_path(spec.save_dir, kLatestFile), spec.tag);
      }
      code = kOk;
    } catch (const std::exception& e) {
      message = e.what();
      if (code == kFailedMarked) message += " (the tag itself is complete)";
      if (code == kOk) {
        code = kFailed;
        remove_quietly(storage, manifest_path);
      }
    }
  }
  const std::vector<RankStatus> final_vote = exchange(comm, code, message);
  if (!all_ok(final_vote)) {
    // Without a marker the files are an incomplete tag: remove them. With one, keep the tag.
    bool marked = false;
    for (const auto& s : final_vote) marked = marked || s.code == kFailedMarked;
    if (!marked) {
      for (const FileInfo& f : infos) remove_quietly(storage, f.path);
    }
    throw CheckpointError(str("saving checkpoint tag '", spec.tag, "' in ", spec.save_dir,
                              " failed (mark): ", failures(final_vote)));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  uint64_t bytes = 0;
  for (const auto& f : manifest.files) bytes += f.size;
  ZRT_LOG_INFO("saved checkpoint ", tag_dir, ": ", manifest.files.size(), " files, ", bytes,
               " bytes in ", seconds, " s");
  return CommitResult{tag_dir, infos, manifest};
}

}  // namespace zrt::ckpt
