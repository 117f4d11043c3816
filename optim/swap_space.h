// SwapSpace: the fp32 master partitions and Adam moments of one rank kept in files on a fast disk
// (ZeRO-Infinity's optimizer offload, DeepSpeed's offload_optimizer.device "nvme") and streamed
// through a few aligned buffers, one sub-group at a time, with asynchronous O_DIRECT I/O
// (aio/io_engine.h). SwappedAdam (optim/swapped_adam.h) steps them; the engine reads and writes
// them whole for checkpoints and loads.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "aio/options.h"

namespace zrt::aio {
class IoEngine;
class SwapFile;
class AlignedBuffer;
}  // namespace zrt::aio

namespace zrt::optim {

// The states a group keeps on disk, one file each.
enum class SwapState : int { kMaster = 0, kExpAvg = 1, kExpAvgSq = 2 };
constexpr int kNumSwapStates = 3;
const char* swap_state_name(SwapState s);  // "fp32", "exp_avg", "exp_avg_sq"

struct SwapSpaceOptions {
  std::string nvme_path;  // an existing folder; this rank's own folder is made inside it
  int rank = 0;
  aio::AioOptions aio;
  aio::IoBackend backend = aio::IoBackend::kAuto;
  int64_t sub_group_size = 1000000000;  // elements per streamed unit (rounded up to 1024)
  int64_t buffer_count = 4;             // sub-group-sized buffers (3 per sub-group in flight)
  bool pipeline_read = false;           // read the next sub-group while this one is computed
  bool pipeline_write = false;          // write a sub-group back while the next is computed
};

// One sub-group while it is streamed: elements [offset, offset + numel) of the group, each state
// an fp32 CPU tensor of numel elements in an aligned buffer. What the callback leaves in them is
// written back.
struct SwapChunk {
  int64_t offset = 0;
  int64_t numel = 0;
  std::array<at::Tensor, kNumSwapStates> states;
  at::Tensor& state(SwapState s) { return states[static_cast<int>(s)]; }
};

struct SwapStats {
  int64_t bytes_read = 0;  // counted by the I/O engine from completed requests
  int64_t bytes_written = 0;
  int64_t buffer_bytes = 0;    // aligned memory the buffers hold now
  double stream_seconds = 0;   // wall time inside stream()
  double io_wait_seconds = 0;  // of which waiting for reads and writes to complete
};

// Each SwapSpace makes its own folder `<nvme_path>/zerort-swap-rank<R>-XXXXXX` (Note [Swap folders]
// in aio/windowed_io.h) holding one file per group and state, `g<G>.<state>.swp`, reserved at
// construction (a full disk fails here, naming the file, not in the middle of a step); the
// destructor removes them. Files are read as zeros until written (fallocate), so the moments start
// at zero without writing them (DeepSpeed's fast_init has nothing left to skip). Every stream()
// first checks that no file was deleted while open.
class SwapSpace {
 public:
  // Throws zrt::Error naming the folder or file when nvme_path is missing or not writable, the
  // disk is full, or the options are invalid.
  SwapSpace(const SwapSpaceOptions& options, const std::vector<int64_t>& group_numels);
  ~SwapSpace();
  SwapSpace(const SwapSpace&) = delete;
  SwapSpace& operator=(const SwapSpace&) = delete;

  const std::string& folder() const { return folder_; }
  int num_groups() const { return static_cast<int>(numels_.size()); }
  int64_t numel(int group) const;
  int64_t sub_group_numel() const { return sub_numel_; }
  // Sub-groups of buffers held at once: 1, 2 with one of pipeline_read / pipeline_write, 3 with
  // both, at most buffer_count / 3.
  int buffer_sets() const { return sets_; }
  const char* backend_name() const;
  const std::string& file_path(int group, SwapState s) const;

  // Streams group g: for each sub-group in order, reads its states into a buffer set, calls fn,
  // writes them back. Returns when every write completed. An I/O error throws zrt::Error naming
  // the file and operation; the sub-groups before it were written, the failed one may be torn.
  void stream(int group, const std::function<void(SwapChunk&)>& fn);

  // Synchronous, through one sub-group buffer (memory stays bounded): elements [offset, offset +
  // dst.numel()) of a state into dst (fp32, CPU, contiguous), and the same from src (any floating
  // dtype, any device; converted).
  void read(int group, SwapState s, int64_t offset, const at::Tensor& dst);
  void write(int group, SwapState s, int64_t offset, const at::Tensor& src);
  // The whole state as a new fp32 CPU tensor (holds numel(g) floats: loads and tests).
  at::Tensor read_all(int group, SwapState s);
  // The whole state as an fp32 CPU tensor over a private mapping of its swap file
  // (aio/file_map.h): for a reader that goes through it once, e.g. a checkpoint being written,
  // so that it is never whole in anonymous memory. Read it before the group is streamed or
  // written again (what it shows afterwards is unspecified); writes to it never reach the file.
  at::Tensor map_state(int group, SwapState s);
  void fill_zero(int group, SwapState s);

  // Where the updated low-precision copy of a group goes when the parameters' partitions are
  // swapped too (Note [Swapped params] in optim/optimizer.h): elements [offset, offset +
  // values.numel()) of group g. Set by the owner of both, called by SwappedAdam per sub-group.
  using ParamCopySink = std::function<void(int group, int64_t offset, const at::Tensor& values)>;
  void set_param_copy_sink(ParamCopySink sink) { copy_sink_ = std::move(sink); }
  void write_param_copy(int group, int64_t offset, const at::Tensor& values);

  // Every file still present (throws naming the deleted one).
  void check_files() const;
  SwapStats stats() const;

 private:
  struct BufferSet;
  aio::SwapFile& file(int group, SwapState s);
  void ensure_buffers(int sets);
  // Checks [offset, offset + n) of a group and the files; the buffer read/write go through.
  aio::AlignedBuffer& window_buffer(int group, int64_t offset, int64_t n, const char* what);

  SwapSpaceOptions options_;
  std::vector<int64_t> numels_;
  int64_t sub_numel_ = 0;
  int sets_ = 1;
  std::string folder_;
  std::unique_ptr<aio::IoEngine> engine_;
  std::vector<std::array<std::unique_ptr<aio::SwapFile>, kNumSwapStates>> files_;
  std::vector<std::unique_ptr<BufferSet>> buffers_;
  double stream_seconds_ = 0;
  double io_wait_seconds_ = 0;
  ParamCopySink copy_sink_;
};

}  // namespace zrt::optim
