// ckpt_bench: save and load throughput of ZeroRT's .pt writer/reader for a ~1 GiB state (a few
// large fp32 tensors plus small ones) next to a plain sequential write/read of the same bytes and
// next to LibTorch's torch::save / torch::load, all in one run and interleaved:
//
//   build/bench/ckpt_bench [--dir /tmp] [--size-mib 1024] [--iters 5] [--json]
//
// Every save includes fsync (ours: temp file + fsync + rename + directory fsync, as a checkpoint
// commit does; plain: write + fsync; torch::save: its file, then fsync). Loads are timed warm (page
// cache) and cold (the file's pages dropped first with posix_fadvise(DONTNEED)). GB/s counts the
// tensor bytes (1e9 bytes/s). See bench/README.md.
#include <algorithm>
#include <cstdio>
#include <map>
#include <tuple>

#include <torch/torch.h>

#include "bench/harness.h"
#include "checkpoint/hash.h"
#include "checkpoint/pt/pt_file.h"
#include "checkpoint/storage.h"
#include "core/error.h"
#include <fcntl.h>
#include <unistd.h>

namespace zrt::bench {
namespace {

using ckpt::Value;

struct State {
  std::vector<at::Tensor> tensors;
  Value value;
  uint64_t bytes = 0;
};

State make_state(int64_t total_mib) {
  State s;
  const int64_t big = (total_mib << 20) / 4 / 4;  // four large fp32 tensors
  Value dict = Value::ordered_dict();
  for (int i = 0; i < 4; ++i) {
    at::Tensor t = torch::arange(big, torch::kFloat).mul_(0.5f + i);
    dict.set("big." + std::to_string(i), t);
    s.tensors.push_back(t);
  }
  for (int i = 0; i < 32; ++i) {  // small tensors: per-record overhead
    at::Tensor t = torch::full({16 * 1024}, static_cast<float>(i));
    dict.set("small." + std::to_string(i), t);
    s.tensors.push_back(t);
  }
  s.value = dict;
  for (const auto& t : s.tensors) s.bytes += static_cast<uint64_t>(t.numel()) * t.element_size();
  return s;
}

void check_errno(bool ok, const char* what, const std::string& path) {
  ZRT_CHECK(ok, what, " ", path, ": ", std::strerror(errno));
}

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  check_errno(fd >= 0, "open", path);
  check_errno(::fsync(fd) == 0, "fsync", path);
  ::close(fd);
}

void drop_cache(const std::string& path) {
  fsync_path(path);
  const int fd = ::open(path.c_str(), O_RDONLY);
  check_errno(fd >= 0, "open", path);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// The same bytes with plain write(2) calls, one per tensor; `kick` adds the early-writeback hint
// our writer uses (Note [Early writeback] in checkpoint/storage.cpp).
void plain_write(const State& s, const std::string& path, bool kick) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  check_errno(fd >= 0, "open", path);
  off_t done = 0, kicked = 0;
  for (const auto& t : s.tensors) {
    const char* p = static_cast<const char*>(t.data_ptr());
    size_t n = static_cast<size_t>(t.numel()) * t.element_size();
    while (n > 0) {
      const ssize_t w = ::write(fd, p, std::min(n, kick ? size_t{8} << 20 : n));
      check_errno(w > 0, "write", path);
      p += w;
      n -= static_cast<size_t>(w);
      done += w;
      if (kick && done - kicked >= (8 << 20)) {
        ::sync_file_range(fd, kicked, done - kicked, SYNC_FILE_RANGE_WRITE);
        kicked = done;
      }
    }
  }
  check_errno(::fsync(fd) == 0, "fsync", path);
  ::close(fd);
}

// Reads the bytes into `into`, or into new tensors like a loader must allocate (`into` empty).
void plain_read(std::vector<at::Tensor> into, const State& s, const std::string& path) {
  if (into.empty()) {
    for (const auto& x : s.tensors) into.push_back(torch::empty_like(x));
  }
  const int fd = ::open(path.c_str(), O_RDONLY);
  check_errno(fd >= 0, "open", path);
  off_t off = 0;
  for (auto& t : into) {
    char* p = static_cast<char*>(t.data_ptr());
    size_t n = static_cast<size_t>(t.numel()) * t.element_size();
    while (n > 0) {
      const ssize_t r = ::pread(fd, p, n, off);
      check_errno(r > 0, "read", path);
      p += r;
      n -= static_cast<size_t>(r);
      off += r;
    }
  }
  ::close(fd);
}

}  // namespace
}  // namespace zrt::bench

int main(int argc, char** argv) {
  using namespace zrt::bench;
  namespace ckpt = zrt::ckpt;
  const std::string dir = flag_value(argc, argv, "--dir", "/tmp");
  const int64_t mib = std::stoll(flag_value(argc, argv, "--size-mib", "1024"));
  const int iters = std::stoi(flag_value(argc, argv, "--iters", "5"));
  const bool json = has_flag(argc, argv, "--json");

  const State state = make_state(mib);
  const std::string ours = dir + "/zrt_ckpt_bench_ours.pt";
  const std::string plain = dir + "/zrt_ckpt_bench_plain.bin";
  const std::string theirs = dir + "/zrt_ckpt_bench_torch.pt";
  ckpt::PosixStorage storage;

  // Check once: what we write reads back equal, and torch::save / plain round trip too.
  ckpt::save_pt(state.value, ours, &storage);
  ZRT_CHECK(ckpt::load_pt(ours).equals(state.value), "ckpt_bench: round trip mismatch");

  std::map<std::string, std::vector<double>> t;
  auto timed = [&](const std::string& name, const std::function<void()>& fn) {
    const double s = now_seconds();
    fn();
    t[name].push_back(now_seconds() - s);
  };
  std::vector<at::Tensor> buffers;
  for (const auto& x : state.tensors) buffers.push_back(torch::empty_like(x));
  struct NullSink : ckpt::ByteSink {
    uint64_t n = 0;
    void write(const void*, size_t size) override { n += size; }
    uint64_t bytes_written() const override { return n; }
  };
  const std::vector<std::pair<std::string, std::function<void()>>> saves = {
      {"save plain write+fsync", [&] { plain_write(state, plain, false); }},
      {"save plain +kicks+fsync", [&] { plain_write(state, plain, true); }},
      {"save zrt .pt (atomic)", [&] { ckpt::save_pt(state.value, ours, &storage); }},
      {"save zrt .pt no dir fsync",
       [&] {
         storage.write_file_atomic(
             ours, [&](ckpt::ByteSink& sink) { ckpt::write_pt(state.value, sink); }, false);
       }},
      {"save torch::save+fsync", [&] {
         torch::save(state.tensors, theirs);
         fsync_path(theirs);
       }}};
  for (int i = 0; i < iters + 1; ++i) {  // the first round warms up and is dropped
    // Saves in a rotating order, each from a clean page cache.
    for (size_t j = 0; j < saves.size(); ++j) {
      const auto& [name, fn] = saves[(i + j) % saves.size()];
      std::remove(ours.c_str());
      std::remove(plain.c_str());
      std::remove(theirs.c_str());
      ::sync();
      timed(name, fn);
    }
    plain_write(state, plain, false);
    ckpt::save_pt(state.value, ours, &storage);
    torch::save(state.tensors, theirs);
    ::sync();
    timed("cpu  zrt .pt to null sink", [&] {
      NullSink sink;
      ckpt::write_pt(state.value, sink);
    });
    timed("cpu  crc32 of the bytes", [&] {
      uint32_t c = 0;
      for (const auto& x : state.tensors) {
        c = ckpt::crc32_update(c, x.data_ptr(), static_cast<size_t>(x.numel()) * 4);
      }
      if (c == 1) std::puts("");
    });
    for (const char* mode : {"warm", "cold"}) {
      // Loads in a rotating order too; cold ones first drop the file's cached pages.
      const bool cold = std::string(mode) == "cold";
      const std::string m = mode;
      std::vector<std::tuple<std::string, std::string, std::function<void()>>> loads = {
          {"load plain read " + m, plain, [&] { plain_read({}, state, plain); }},
          {"load zrt .pt " + m, ours, [&] { ckpt::load_pt(ours); }},
          {"load zrt .pt no-crc " + m, ours,
           [&] {
             ckpt::ReadOptions o;
             o.verify_crc = false;
             ckpt::load_pt(ours, o);
           }},
          {"load torch::load " + m, theirs, [&] {
             std::vector<at::Tensor> v;
             torch::load(v, theirs);
           }}};
      if (!cold) {
        loads.emplace_back("load plain read prealloc warm", plain,
                           [&] { plain_read(buffers, state, plain); });
      }
      for (size_t j = 0; j < loads.size(); ++j) {
        const auto& [name, file, fn] = loads[(i + j) % loads.size()];
        if (cold) drop_cache(file);
        timed(name, fn);
      }
    }
  }
  for (auto& [name, v] : t) v.erase(v.begin());
  std::remove(ours.c_str());
  std::remove(plain.c_str());
  std::remove(theirs.c_str());

  auto ref_of = [&](const std::string& name) -> std::string {
    if (name.rfind("save", 0) == 0 || name.rfind("cpu", 0) == 0) return "save plain write+fsync";
    return name.find("cold") != std::string::npos ? "load plain read cold" : "load plain read warm";
  };
  const double gb = static_cast<double>(state.bytes) / 1e9;
  if (json) {
    std::printf("{\"bytes\": %llu, \"iters\": %d, \"results\": {",
                static_cast<unsigned long long>(state.bytes), iters);
    bool first = true;
    for (const auto& [name, v] : t) {
      std::printf("%s\"%s\": {\"median_s\": %.4f, \"gbps\": %.3f}", first ? "" : ", ", name.c_str(),
                  median(v), gb / median(v));
      first = false;
    }
    std::printf("}}\n");
    return 0;
  }
  std::printf("ckpt_bench: %s of tensor data (%zu tensors), %d timed rounds, dir %s\n",
              format_bytes(static_cast<double>(state.bytes)).c_str(), state.tensors.size(), iters,
              dir.c_str());
  std::printf("%-28s %10s %10s %10s %10s %12s\n", "variant", "median s", "min s", "max s", "GB/s",
              "vs plain");
  const char* order[] = {
      "save plain write+fsync",    "save plain +kicks+fsync",  "save zrt .pt (atomic)",
      "save zrt .pt no dir fsync", "save torch::save+fsync",   "cpu  zrt .pt to null sink",
      "cpu  crc32 of the bytes",   "load plain read warm",     "load plain read prealloc warm",
      "load zrt .pt warm",         "load zrt .pt no-crc warm", "load torch::load warm",
      "load plain read cold",      "load zrt .pt cold",        "load zrt .pt no-crc cold",
      "load torch::load cold"};
  for (const char* name : order) {
    const auto& v = t[name];
    const double m = median(v);
    const double ref = median(t[ref_of(name)]);
    char vs[32] = "-";
    if (std::string(name).rfind("cpu", 0) != 0)
      std::snprintf(vs, sizeof(vs), "%.0f%%", 100.0 * ref / m);
    std::printf("%-28s %10.3f %10.3f %10.3f %10.2f %12s\n", name, m,
                *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()),
                gb / m, vs);
  }
  return 0;
}
