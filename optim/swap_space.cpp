// SwapSpace: files, buffer sets, the streamed sub-group pipeline and bounded whole-state access
// (Note [Swap folders], Note [Sub-group pipeline]).
#include "optim/swap_space.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include <ATen/ATen.h>

#include "aio/aligned_buffer.h"
#include "aio/file_map.h"
#include "aio/io_engine.h"
#include "aio/swap_file.h"
#include "aio/windowed_io.h"
#include "core/error.h"
#include "core/logging.h"

namespace zrt::optim {
namespace {

constexpr int64_t kFloatsPerPage = aio::kIoAlignment / static_cast<int64_t>(sizeof(float));

int64_t align_elements(int64_t n) {
  return (n + kFloatsPerPage - 1) / kFloatsPerPage * kFloatsPerPage;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

const char* swap_state_name(SwapState s) {
  switch (s) {
    case SwapState::kMaster:
      return "fp32";
    case SwapState::kExpAvg:
      return "exp_avg";
    case SwapState::kExpAvgSq:
      return "exp_avg_sq";
  }
  return "?";
}

// One sub-group's buffers (one per state) and the I/O in flight on them.
struct SwapSpace::BufferSet {
  std::array<aio::AlignedBuffer, kNumSwapStates> buffers;
  std::vector<aio::IoTicket> reads;
  std::vector<aio::IoTicket> writes;

  void wait(std::vector<aio::IoTicket>& tickets) {
    for (aio::IoTicket& t : tickets) t.wait();
    tickets.clear();
  }
  // After an error: lets every request finish (the buffers must outlive them), keeps quiet.
  void drain() noexcept {
    for (auto* list : {&reads, &writes}) {
      for (aio::IoTicket& t : *list) {
        try {
          t.wait();
        } catch (...) {
        }
      }
      list->clear();
    }
  }
};

SwapSpace::SwapSpace(const SwapSpaceOptions& options, const std::vector<int64_t>& group_numels)
    : options_(options), numels_(group_numels) {
  ZRT_CHECK(options.sub_group_size >= 1, "zero_optimization.sub_group_size must be >= 1, got ",
            options.sub_group_size);
  ZRT_CHECK(options.buffer_count >= kNumSwapStates,
            "offload_optimizer.buffer_count: ", options.buffer_count,
            " buffers cannot hold one sub-group's ", kNumSwapStates,
            " Adam states (fp32 master, exp_avg, exp_avg_sq); use at least ", kNumSwapStates);
  int64_t largest = 1;
  for (int64_t n : numels_) largest = std::max(largest, n);
  sub_numel_ = align_elements(std::min(options.sub_group_size, largest));
  const int wanted = 1 + (options.pipeline_read ? 1 : 0) + (options.pipeline_write ? 1 : 0);
  sets_ = static_cast<int>(std::min<int64_t>(wanted, options.buffer_count / kNumSwapStates));
  if (sets_ < wanted) {
    ZRT_LOG_WARN("offload_optimizer: pipeline_read/pipeline_write need buffer_count >= ",
                 wanted * kNumSwapStates, " (", kNumSwapStates, " buffers per sub-group in flight)",
                 ", got ", options.buffer_count, ": ", sets_, " sub-group(s) in flight");
  }
  engine_ = std::make_unique<aio::IoEngine>(options.aio, options.backend);
  folder_ =
      aio::make_swap_folder(options.nvme_path, "swap", options.rank, "offload_optimizer.nvme_path");
  try {
    for (size_t g = 0; g < numels_.size(); ++g) {
      files_.emplace_back();
      for (int s = 0; s < kNumSwapStates; ++s) {
        const std::string path = folder_ + "/g" + std::to_string(g) + "." +
                                 swap_state_name(static_cast<SwapState>(s)) + ".swp";
        files_.back()[s] = std::make_unique<aio::SwapFile>(
            aio::SwapFile::create(path, align_elements(numels_[g]) * int64_t{sizeof(float)}));
      }
    }
  } catch (...) {
    for (auto& group : files_) {
      for (auto& f : group) {
        if (f) f->remove();
      }
    }
    aio::remove_swap_folder(folder_);
    throw;
  }
}

SwapSpace::~SwapSpace() {
  for (auto& set : buffers_) set->drain();
  for (auto& group : files_) {
    for (auto& f : group) f->remove();
  }
  files_.clear();
  aio::remove_swap_folder(folder_);
}

int64_t SwapSpace::numel(int group) const {
  ZRT_CHECK(group >= 0 && group < num_groups(), "swap group ", group, " does not exist (",
            num_groups(), " groups)");
  return numels_[group];
}

const char* SwapSpace::backend_name() const { return engine_->backend_name(); }

const std::string& SwapSpace::file_path(int group, SwapState s) const {
  numel(group);
  return files_[group][static_cast<int>(s)]->path();
}

aio::SwapFile& SwapSpace::file(int group, SwapState s) {
  numel(group);
  return *files_[group][static_cast<int>(s)];
}

void SwapSpace::ensure_buffers(int sets) {
  while (static_cast<int>(buffers_.size()) < sets) {
    auto set = std::make_unique<BufferSet>();
    for (auto& b : set->buffers) b = aio::AlignedBuffer(sub_numel_ * int64_t{sizeof(float)});
    buffers_.push_back(std::move(set));
  }
}

void SwapSpace::check_files() const {
  for (const auto& group : files_) {
    for (const auto& f : group) f->check_present();
  }
}

// Note [Sub-group pipeline]:
// Sub-group k uses buffer set k % sets. Its reads are issued once that set's previous writes
// completed: with pipeline_read before sub-group k - 1 is computed, otherwise after it was written
// back. Its writes are issued right after the callback; without pipeline_write they are waited at
// once, with it they complete while the next sub-groups are read and computed, and are waited
// before the set is read into again and at the end. Every byte a callback sees was read after the
// previous write of the same bytes completed; the result is bitwise independent of the pipeline.
void SwapSpace::stream(int group, const std::function<void(SwapChunk&)>& fn) {
  const auto start = std::chrono::steady_clock::now();
  check_files();
  const int64_t n = numel(group);
  const int64_t subs = (n + sub_numel_ - 1) / sub_numel_;
  ensure_buffers(sets_);
  auto count_of = [&](int64_t k) { return std::min(sub_numel_, n - k * sub_numel_); };
  auto wait_timed = [&](BufferSet& set, std::vector<aio::IoTicket>& tickets) {
    const auto t0 = std::chrono::steady_clock::now();
    set.wait(tickets);
    io_wait_seconds_ += seconds_since(t0);
  };
  auto issue = [&](int64_t k, bool read) {
    BufferSet& set = *buffers_[k % sets_];
    const int64_t offset = k * sub_numel_ * int64_t{sizeof(float)};
    const int64_t bytes = align_elements(count_of(k)) * int64_t{sizeof(float)};
    for (int s = 0; s < kNumSwapStates; ++s) {
      aio::SwapFile& f = file(group, static_cast<SwapState>(s));
      if (read) {
        set.reads.push_back(engine_->read(f, offset, set.buffers[s].data(), bytes));
      } else {
        set.writes.push_back(engine_->write(f, offset, set.buffers[s].data(), bytes));
      }
    }
  };
  auto issue_read = [&](int64_t k) {
    BufferSet& set = *buffers_[k % sets_];
    wait_timed(set, set.writes);
    issue(k, /*read=*/true);
  };
  const bool read_ahead = options_.pipeline_read && sets_ > 1;
  try {
    if (subs > 0) issue_read(0);
    for (int64_t k = 0; k < subs; ++k) {
      if (read_ahead && k + 1 < subs) issue_read(k + 1);
      BufferSet& set = *buffers_[k % sets_];
      wait_timed(set, set.reads);
      SwapChunk chunk;
      chunk.offset = k * sub_numel_;
      chunk.numel = count_of(k);
      for (int s = 0; s < kNumSwapStates; ++s) {
        chunk.states[s] = at::from_blob(set.buffers[s].data(), {chunk.numel},
                                        at::TensorOptions().dtype(at::kFloat));
      }
      fn(chunk);
      issue(k, /*read=*/false);
      if (!options_.pipeline_write || sets_ == 1) wait_timed(set, set.writes);
      if (!read_ahead && k + 1 < subs) issue_read(k + 1);
    }
    for (auto& set : buffers_) wait_timed(*set, set->writes);
  } catch (...) {
    for (auto& set : buffers_) set->drain();
    stream_seconds_ += seconds_since(start);
    throw;
  }
  stream_seconds_ += seconds_since(start);
}

aio::AlignedBuffer& SwapSpace::window_buffer(int group, int64_t offset, int64_t n,
                                             const char* what) {
  ZRT_CHECK(offset >= 0 && offset + n <= numel(group), "SwapSpace::", what, ": elements [", offset,
            ", ", offset + n, ") of group ", group, " (", numel(group), " elements)");
  check_files();
  ensure_buffers(1);
  return buffers_[0]->buffers[0];
}

void SwapSpace::read(int group, SwapState s, int64_t offset, const at::Tensor& dst) {
  ZRT_CHECK(dst.scalar_type() == at::kFloat && dst.device().is_cpu() && dst.is_contiguous(),
            "SwapSpace::read: the destination must be a contiguous fp32 CPU tensor");
  const int64_t n = dst.numel();
  aio::AlignedBuffer& buf = window_buffer(group, offset, n, "read");
  aio::read_range(*engine_, file(group, s), offset * 4, dst.data_ptr<float>(), n * 4, buf);
}

void SwapSpace::write(int group, SwapState s, int64_t offset, const at::Tensor& src) {
  const at::Tensor values = src.reshape({-1}).to(at::kCPU, at::kFloat).contiguous();
  const int64_t n = values.numel();
  aio::AlignedBuffer& buf = window_buffer(group, offset, n, "write");
  aio::write_range(*engine_, file(group, s), offset * 4, values.data_ptr<float>(), n * 4, buf);
}

at::Tensor SwapSpace::read_all(int group, SwapState s) {
  at::Tensor out = at::empty({numel(group)}, at::TensorOptions().dtype(at::kFloat));
  read(group, s, 0, out);
  return out;
}

at::Tensor SwapSpace::map_state(int group, SwapState s) {
  check_files();
  aio::SwapFile& f = file(group, s);
  const int64_t n = numel(group);
  std::shared_ptr<aio::FileMap> map = aio::FileMap::of_fd(f.fd(), 0, n * 4, f.path());
  void* data = map->data();
  return at::from_blob(
      data, {n}, [map](void*) {}, at::TensorOptions().dtype(at::kFloat));
}

void SwapSpace::fill_zero(int group, SwapState s) {
  const int64_t n = numel(group);
  for (int64_t pos = 0; pos < n; pos += sub_numel_) {
    write(group, s, pos, at::zeros({std::min(sub_numel_, n - pos)}, at::kFloat));
  }
}

void SwapSpace::write_param_copy(int group, int64_t offset, const at::Tensor& values) {
  ZRT_INTERNAL_ASSERT(copy_sink_ != nullptr, "a swapped param copy without a sink");
  copy_sink_(group, offset, values);
}

SwapStats SwapSpace::stats() const {
  SwapStats st;
  st.bytes_read = engine_->bytes_read();
  st.bytes_written = engine_->bytes_written();
  for (const auto& set : buffers_) {
    for (const auto& b : set->buffers) st.buffer_bytes += static_cast<int64_t>(b.size());
  }
  st.stream_seconds = stream_seconds_;
  st.io_wait_seconds = io_wait_seconds_;
  return st;
}

}  // namespace zrt::optim
