// ParamSwapper: ZeRO-3's parameter partitions on a fast disk (ZeRO-Infinity's parameter offload,
// DeepSpeed's offload_param.device "nvme"). Each group's partition flat (Stage3Layout, model
// dtype) lives in a swap file, except a prefix kept in memory (max_in_cpu); a unit's partitions
// are read into one of buffer_count aligned buffers of buffer_size elements just before its
// gather, or earlier, while the units before it run (read_ahead, driven by the prefetch trace).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "aio/options.h"

namespace zrt::aio {
class IoEngine;
class SwapFile;
class AlignedBuffer;
}  // namespace zrt::aio

namespace zrt::zero {

struct ParamSwapOptions {
  std::string nvme_path;  // an existing folder; this rank's own folder is made inside it
  int rank = 0;
  aio::AioOptions aio;
  aio::IoBackend backend = aio::IoBackend::kAuto;
  int64_t buffer_count = 5;         // unit buffers (offload_param.buffer_count)
  int64_t buffer_size = 100000000;  // elements each (offload_param.buffer_size)
  int64_t max_in_cpu = 1000000000;  // partition elements kept in memory (offload_param.max_in_cpu)
};

// Elements [offset, offset + numel) of group `group`'s partition flat: one parameter's partition.
struct SwapPiece {
  int group = 0;
  int64_t offset = 0;
  int64_t numel = 0;
};

struct ParamSwapStats {
  int64_t bytes_read = 0;  // by the I/O engine, from completed requests
  int64_t bytes_written = 0;
  int64_t buffer_bytes = 0;     // the unit buffers and the window, allocated now
  int64_t resident_bytes = 0;   // the max_in_cpu prefixes
  int64_t swapped_bytes = 0;    // partition bytes on disk
  int64_t unit_reads = 0;       // units read from disk
  int64_t read_ahead_hits = 0;  // of which read ahead (issued before they were needed)
};

// Note [Swapped partitions]:
// Which bytes are where: group g's elements [0, resident_numel(g)) are a tensor in memory — the
// parameters, in flattening order, that fit in max_in_cpu elements counted over the groups in
// order, as DeepSpeed fills its CPU flat buffers — and the rest are in `g<G>.param.swp` (aligned
// to the first swapped element) in this rank's folder (Note [Swap folders] in aio/windowed_io.h).
// A unit's pieces on disk are read by contiguous runs, each widened to whole pages, into one unit
// buffer; acquire() hands out views of the parameters' partitions there (or in the resident
// prefix). Buffers are taken by read_ahead() while one stays free for acquire(), and go back when
// the unit is released. Every write first waits for the reads in flight and forgets the units read
// ahead, so no later acquire sees values from before it.
class ParamSwapper {
 public:
  // `unit_pieces[u]`: the partitions unit u gathers, in its gather order. Throws zrt::Error when a
  // unit's partitions on disk do not fit one buffer (naming the unit and the buffer_size it
  // needs), for invalid options, or when nvme_path is unusable or the disk full.
  ParamSwapper(const ParamSwapOptions& options, std::vector<int64_t> group_numels,
               std::vector<at::ScalarType> dtypes, std::vector<std::vector<SwapPiece>> unit_pieces);
  ~ParamSwapper();
  ParamSwapper(const ParamSwapper&) = delete;
  ParamSwapper& operator=(const ParamSwapper&) = delete;

  const std::string& folder() const { return folder_; }
  const char* backend_name() const;
  int num_groups() const { return static_cast<int>(numels_.size()); }
  int64_t numel(int group) const;
  int64_t resident_numel(int group) const;
  const std::string& file_path(int group) const;

  // Synchronous: elements [offset, offset + dst.numel()) of group g into dst (CPU, contiguous,
  // the group's dtype), and the same from src (converted to the group's dtype; any device).
  void read(int group, int64_t offset, const at::Tensor& dst);
  void write(int group, int64_t offset, const at::Tensor& src);

  // Starts reading unit u into a free buffer, unless it is read already or needs no disk. Returns
  // false when no buffer is left for it (one always stays free for acquire).
  bool read_ahead(int unit);
  // The partitions of unit u, one per piece, valid until release(u): read ahead, or read now.
  std::vector<at::Tensor> acquire(int unit);
  void release(int unit);
  // Waits for the reads in flight and forgets every unit read ahead.
  void drop_read_ahead();

  void check_files() const;
  ParamSwapStats stats() const;

 private:
  struct Run;
  struct UnitPlan;
  struct Buffer;
  UnitPlan plan_unit(std::vector<SwapPiece> pieces) const;
  int free_buffer() const;
  void issue(int unit, int buffer);
  int64_t file_offset(int group, int64_t element) const;

  ParamSwapOptions options_;
  std::vector<int64_t> numels_;
  std::vector<at::ScalarType> dtypes_;
  std::vector<int64_t> resident_numel_;
  std::vector<at::Tensor> resident_;
  std::vector<UnitPlan> plans_;
  int64_t buffer_bytes_ = 0;
  std::string folder_;
  std::unique_ptr<aio::IoEngine> engine_;
  std::vector<std::unique_ptr<aio::SwapFile>> files_;  // null where nothing is on disk
  std::vector<std::unique_ptr<Buffer>> buffers_;
  std::unique_ptr<aio::AlignedBuffer> window_;
  std::vector<int> buffer_of_;  // per unit: the buffer holding it, or -1
  int64_t unit_reads_ = 0;
  int64_t read_ahead_hits_ = 0;
};

}  // namespace zrt::zero
