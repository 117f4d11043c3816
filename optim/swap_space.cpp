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
#include "aio/io_engine.h"
#include "aio/swap_file.h"
#include "core/error.h"
#include "core/logging.h"
#include <sys/stat.h>
#include <unistd.h>

namespace zrt::optim {
namespace {

constexpr int64_t kFloatsPerPage = aio::kIoAlignment / static_cast<int64_t>(sizeof(float));

int64_t align_elements(int64_t n) {
  return (n + kFloatsPerPage - 1) / kFloatsPerPage * kFloatsPerPage;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string make_rank_folder(const std::string& parent, int rank) {
  struct stat st {};
  ZRT_CHECK(!parent.empty(), "offload_optimizer.nvme_path is required with device \"nvme\"");
  ZRT_CHECK(::stat(parent.c_str(), &st) == 0, "offload_optimizer.nvme_path ", parent, ": ",
            std::strerror(errno));
  ZRT_CHECK(S_ISDIR(st.st_mode), "offload_optimizer.nvme_path ", parent, " is not a folder");
  std::string pattern = parent + (parent.back() == '/' ? "" : "/") + "zerort-swap-rank" +
                        std::to_string(rank) + "-XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  ZRT_CHECK(::mkdtemp(buf.data()) != nullptr, "offload_optimizer.nvme_path ", parent,
            ": cannot make this rank's swap folder: ", std::strerror(errno));
  return std::string(buf.data());
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
  folder_ = make_rank_folder(options.nvme_path, options.rank);
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
    ::rmdir(folder_.c_str());
    throw;
  }
}

SwapSpace::~SwapSpace() {
  for (auto& set : buffers_) set->drain();
  for (auto& group : files_) {
    for (auto& f : group) f->remove();
  }
  files_.clear();
  if (!folder_.empty() && ::rmdir(folder_.c_str()) != 0 && errno != ENOENT) {
    ZRT_LOG_WARN("could not remove the swap folder ", folder_, ": ", std::strerror(errno));
  }
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

namespace {

// The aligned windows covering elements [offset, offset + n): calls fn(window_start, window_len,
// first, count) with window_len a multiple of a page of floats and at most `window` elements.
template <typename Fn>
void for_each_window(int64_t offset, int64_t n, int64_t window, Fn&& fn) {
  int64_t pos = offset;
  const int64_t end = offset + n;
  while (pos < end) {
    const int64_t start = pos / kFloatsPerPage * kFloatsPerPage;
    const int64_t len = std::min(window, align_elements(end) - start);
    const int64_t take = std::min(end, start + len) - pos;
    fn(start, len, pos - start, take);
    pos += take;
  }
}

}  // namespace

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
  float* out = dst.data_ptr<float>();
  for_each_window(
      offset, n, sub_numel_, [&](int64_t start, int64_t len, int64_t first, int64_t take) {
        engine_->read(file(group, s), start * 4, buf.data(), len * 4).wait();
        std::memcpy(out, static_cast<const float*>(buf.data()) + first, take * sizeof(float));
        out += take;
      });
}

void SwapSpace::write(int group, SwapState s, int64_t offset, const at::Tensor& src) {
  const at::Tensor values = src.reshape({-1}).to(at::kCPU, at::kFloat).contiguous();
  const int64_t n = values.numel();
  aio::AlignedBuffer& buf = window_buffer(group, offset, n, "write");
  const float* in = values.data_ptr<float>();
  for_each_window(offset, n, sub_numel_,
                  [&](int64_t start, int64_t len, int64_t first, int64_t take) {
                    aio::SwapFile& f = file(group, s);
                    if (first != 0 || take != len)
                      engine_->read(f, start * 4, buf.data(), len * 4).wait();
                    std::memcpy(static_cast<float*>(buf.data()) + first, in, take * sizeof(float));
                    engine_->write(f, start * 4, buf.data(), len * 4).wait();
                    in += take;
                  });
}

at::Tensor SwapSpace::read_all(int group, SwapState s) {
  at::Tensor out = at::empty({numel(group)}, at::TensorOptions().dtype(at::kFloat));
  read(group, s, 0, out);
  return out;
}

void SwapSpace::fill_zero(int group, SwapState s) {
  const int64_t n = numel(group);
  for (int64_t pos = 0; pos < n; pos += sub_numel_) {
    write(group, s, pos, at::zeros({std::min(sub_numel_, n - pos)}, at::kFloat));
  }
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
