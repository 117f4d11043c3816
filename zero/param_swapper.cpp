// ParamSwapper: resident prefixes, swap files, unit plans and buffers (Note [Swapped partitions]).
#include "zero/param_swapper.h"

#include <algorithm>
#include <exception>

#include "aio/aligned_buffer.h"
#include "aio/io_engine.h"
#include "aio/swap_file.h"
#include "aio/windowed_io.h"
#include "core/error.h"

namespace zrt::zero {
namespace {

constexpr int64_t kWindowBytes = int64_t{4} << 20;  // synchronous read()/write() requests

int64_t element_size(at::ScalarType t) { return static_cast<int64_t>(c10::elementSize(t)); }

}  // namespace

// One contiguous range of a swap file, widened to whole pages, and where it lands in a buffer.
struct ParamSwapper::Run {
  int group = 0;
  int64_t file_offset = 0;  // aligned
  int64_t bytes = 0;        // aligned
  int64_t buffer_offset = 0;
};

struct ParamSwapper::UnitPlan {
  std::vector<SwapPiece> pieces;
  std::vector<int64_t> piece_buffer_offset;  // -1: in the resident prefix
  std::vector<Run> runs;
  int64_t bytes = 0;  // of buffer the runs need
};

struct ParamSwapper::Buffer {
  aio::AlignedBuffer memory;
  int unit = -1;          // the unit read (or being read) into it
  bool acquired = false;  // handed out by acquire()
  bool ahead = false;     // read by read_ahead()
  std::vector<aio::IoTicket> reads;

  // Waits for every read; rethrows the first failure once all are done (the memory must outlive
  // every request).
  void wait_reads() {
    std::exception_ptr failure;
    for (aio::IoTicket& t : reads) {
      try {
        t.wait();
      } catch (...) {
        if (!failure) failure = std::current_exception();
      }
    }
    reads.clear();
    if (failure) std::rethrow_exception(failure);
  }
  void drain() noexcept {
    try {
      wait_reads();
    } catch (...) {
    }
  }
};

ParamSwapper::ParamSwapper(const ParamSwapOptions& options, std::vector<int64_t> group_numels,
                           std::vector<at::ScalarType> dtypes,
                           std::vector<std::vector<SwapPiece>> unit_pieces)
    : options_(options), numels_(std::move(group_numels)), dtypes_(std::move(dtypes)) {
  ZRT_CHECK(options.buffer_count >= 1, "offload_param.buffer_count must be >= 1, got ",
            options.buffer_count);
  ZRT_CHECK(options.buffer_size >= 1, "offload_param.buffer_size must be >= 1, got ",
            options.buffer_size);
  ZRT_CHECK(options.max_in_cpu >= 0, "offload_param.max_in_cpu must be >= 0, got ",
            options.max_in_cpu);
  ZRT_INTERNAL_ASSERT(dtypes_.size() == numels_.size(), "one dtype per group");
  // The resident prefixes: whole parameters in flattening order while max_in_cpu lasts. A unit's
  // pieces are its gathered parameters; the persistent ones are not in any unit, so the prefix
  // is cut at the boundaries every parameter has: the pieces' starts and the group's end.
  std::vector<std::vector<int64_t>> starts(numels_.size());
  for (const auto& pieces : unit_pieces) {
    for (const SwapPiece& p : pieces) starts.at(static_cast<size_t>(p.group)).push_back(p.offset);
  }
  int64_t budget = options.max_in_cpu;
  int64_t esz_max = 1;
  for (size_t g = 0; g < numels_.size(); ++g) {
    esz_max = std::max(esz_max, element_size(dtypes_[g]));
    int64_t keep = 0;
    if (numels_[g] <= budget) {
      keep = numels_[g];
    } else {
      for (int64_t s : starts[g]) {
        if (s <= budget) keep = std::max(keep, s);
      }
    }
    budget -= keep;
    resident_numel_.push_back(keep);
    resident_.push_back(at::zeros({keep}, at::TensorOptions().dtype(dtypes_[g])));
  }
  buffer_bytes_ = aio::align_up(options.buffer_size * esz_max);
  buffer_of_.assign(unit_pieces.size(), -1);
  for (size_t u = 0; u < unit_pieces.size(); ++u) {
    plans_.push_back(plan_unit(std::move(unit_pieces[u])));
    const int64_t bytes = plans_.back().bytes;
    ZRT_CHECK_AS(ConfigError, bytes <= buffer_bytes_, "offload_param.buffer_size: unit ", u,
                 "'s parameter partitions need ", (bytes + esz_max - 1) / esz_max,
                 " elements (page-aligned) in one buffer, buffer_size is ", options.buffer_size,
                 "; raise buffer_size to at least that");
  }
  engine_ = std::make_unique<aio::IoEngine>(options.aio, options.backend);
  folder_ =
      aio::make_swap_folder(options.nvme_path, "param", options.rank, "offload_param.nvme_path");
  try {
    for (size_t g = 0; g < numels_.size(); ++g) {
      const int64_t bytes = (numels_[g] - resident_numel_[g]) * element_size(dtypes_[g]);
      files_.push_back(bytes == 0 ? nullptr
                                  : std::make_unique<aio::SwapFile>(aio::SwapFile::create(
                                        folder_ + "/g" + std::to_string(g) + ".param.swp", bytes)));
    }
  } catch (...) {
    for (auto& f : files_) {
      if (f) f->remove();
    }
    aio::remove_swap_folder(folder_);
    throw;
  }
  for (int64_t b = 0; b < options.buffer_count; ++b) buffers_.push_back(std::make_unique<Buffer>());
}

ParamSwapper::~ParamSwapper() {
  for (auto& b : buffers_) b->drain();
  for (auto& f : files_) {
    if (f) f->remove();
  }
  files_.clear();
  aio::remove_swap_folder(folder_);
}

// The unit's pieces on disk, by contiguous runs of one file widened to whole pages, laid out one
// after the other in a buffer.
ParamSwapper::UnitPlan ParamSwapper::plan_unit(std::vector<SwapPiece> pieces) const {
  UnitPlan plan;
  plan.pieces = std::move(pieces);
  int64_t run_end = -1;  // unaligned file end of the current run
  for (const SwapPiece& p : plan.pieces) {
    if (p.offset + p.numel <= resident_numel_[p.group]) {
      plan.piece_buffer_offset.push_back(-1);
      continue;
    }
    const int64_t start = file_offset(p.group, p.offset);
    if (plan.runs.empty() || plan.runs.back().group != p.group || start != run_end) {
      Run r;
      r.group = p.group;
      r.file_offset = start / aio::kIoAlignment * aio::kIoAlignment;
      r.buffer_offset = plan.bytes;
      plan.runs.push_back(r);
    }
    Run& r = plan.runs.back();
    run_end = start + p.numel * element_size(dtypes_[p.group]);
    r.bytes = aio::align_up(run_end) - r.file_offset;
    plan.bytes = r.buffer_offset + r.bytes;
    plan.piece_buffer_offset.push_back(r.buffer_offset + start - r.file_offset);
  }
  return plan;
}

const char* ParamSwapper::backend_name() const { return engine_->backend_name(); }

int64_t ParamSwapper::numel(int group) const {
  ZRT_CHECK(group >= 0 && group < num_groups(), "parameter swap group ", group, " does not exist (",
            num_groups(), " groups)");
  return numels_[group];
}

int64_t ParamSwapper::resident_numel(int group) const {
  numel(group);
  return resident_numel_[group];
}

const std::string& ParamSwapper::file_path(int group) const {
  numel(group);
  ZRT_CHECK(files_[group] != nullptr, "parameter group ", group, " is wholly in memory");
  return files_[group]->path();
}

int64_t ParamSwapper::file_offset(int group, int64_t element) const {
  return (element - resident_numel_[group]) * element_size(dtypes_[group]);
}

void ParamSwapper::read(int group, int64_t offset, const at::Tensor& dst) {
  const int64_t n = dst.numel();
  ZRT_CHECK(offset >= 0 && offset + n <= numel(group), "ParamSwapper::read: elements [", offset,
            ", ", offset + n, ") of group ", group, " (", numel(group), " elements)");
  ZRT_CHECK(dst.scalar_type() == dtypes_[group] && dst.device().is_cpu() && dst.is_contiguous(),
            "ParamSwapper::read: the destination must be a contiguous CPU tensor of ",
            dtypes_[group]);
  const int64_t keep = std::clamp<int64_t>(resident_numel_[group] - offset, 0, n);
  if (keep > 0) dst.narrow(0, 0, keep).copy_(resident_[group].narrow(0, offset, keep));
  if (keep == n) return;
  check_files();
  if (!window_) window_ = std::make_unique<aio::AlignedBuffer>(kWindowBytes);
  const int64_t esz = element_size(dtypes_[group]);
  aio::read_range(*engine_, *files_[group], file_offset(group, offset + keep),
                  static_cast<char*>(dst.data_ptr()) + keep * esz, (n - keep) * esz, *window_);
}

void ParamSwapper::write(int group, int64_t offset, const at::Tensor& src) {
  const at::Tensor values = src.reshape({-1}).to(at::kCPU, dtypes_.at(group)).contiguous();
  const int64_t n = values.numel();
  ZRT_CHECK(offset >= 0 && offset + n <= numel(group), "ParamSwapper::write: elements [", offset,
            ", ", offset + n, ") of group ", group, " (", numel(group), " elements)");
  drop_read_ahead();
  const int64_t keep = std::clamp<int64_t>(resident_numel_[group] - offset, 0, n);
  if (keep > 0) resident_[group].narrow(0, offset, keep).copy_(values.narrow(0, 0, keep));
  if (keep == n) return;
  check_files();
  if (!window_) window_ = std::make_unique<aio::AlignedBuffer>(kWindowBytes);
  const int64_t esz = element_size(dtypes_[group]);
  aio::write_range(*engine_, *files_[group], file_offset(group, offset + keep),
                   static_cast<const char*>(values.data_ptr()) + keep * esz, (n - keep) * esz,
                   *window_);
}

int ParamSwapper::free_buffer() const {
  for (size_t b = 0; b < buffers_.size(); ++b) {
    if (buffers_[b]->unit < 0) return static_cast<int>(b);
  }
  return -1;
}

void ParamSwapper::issue(int unit, int b) {
  const UnitPlan& plan = plans_[unit];
  Buffer& buffer = *buffers_[b];
  if (buffer.memory.capacity() < buffer_bytes_) {
    buffer.memory = aio::AlignedBuffer(buffer_bytes_, aio::BufferInit::kUninitialized);
  }
  buffer.unit = unit;
  buffer_of_[unit] = b;
  for (const Run& r : plan.runs) {
    buffer.reads.push_back(engine_->read(*files_[r.group], r.file_offset,
                                         buffer.memory.as<char>() + r.buffer_offset, r.bytes));
  }
  ++unit_reads_;
}

bool ParamSwapper::read_ahead(int unit) {
  if (buffer_of_.at(unit) >= 0 || plans_[unit].runs.empty()) return true;
  int free = 0;
  for (const auto& b : buffers_) free += b->unit < 0 ? 1 : 0;
  if (free <= 1) return false;
  check_files();
  const int b = free_buffer();
  buffers_[b]->ahead = true;
  issue(unit, b);
  return true;
}

std::vector<at::Tensor> ParamSwapper::acquire(int unit) {
  const UnitPlan& plan = plans_.at(unit);
  char* base = nullptr;
  if (!plan.runs.empty()) {
    if (buffer_of_[unit] < 0) {
      check_files();
      const int b = free_buffer();
      ZRT_INTERNAL_ASSERT(b >= 0, "no parameter swap buffer is free for unit ", unit);
      buffers_[b]->ahead = false;
      issue(unit, b);
    }
    Buffer& buffer = *buffers_[buffer_of_[unit]];
    try {
      buffer.wait_reads();
    } catch (...) {
      buffer.unit = -1;
      buffer_of_[unit] = -1;
      throw;
    }
    if (buffer.ahead) ++read_ahead_hits_;
    buffer.ahead = false;
    buffer.acquired = true;
    base = buffer.memory.as<char>();
  }
  std::vector<at::Tensor> parts;
  for (size_t k = 0; k < plan.pieces.size(); ++k) {
    const SwapPiece& p = plan.pieces[k];
    if (plan.piece_buffer_offset[k] < 0) {
      parts.push_back(resident_[p.group].narrow(0, p.offset, p.numel));
    } else {
      parts.push_back(at::from_blob(base + plan.piece_buffer_offset[k], {p.numel},
                                    at::TensorOptions().dtype(dtypes_[p.group])));
    }
  }
  return parts;
}

void ParamSwapper::release(int unit) {
  const int b = buffer_of_.at(unit);
  if (b < 0) return;
  buffers_[b]->acquired = false;
  buffers_[b]->unit = -1;
  buffer_of_[unit] = -1;
}

void ParamSwapper::drop_read_ahead() {
  for (auto& b : buffers_) {
    if (b->unit < 0 || b->acquired) continue;
    b->drain();  // a failed read ahead is read again, and fails again, when the unit is needed
    buffer_of_[b->unit] = -1;
    b->unit = -1;
    b->ahead = false;
  }
}

void ParamSwapper::check_files() const {
  for (const auto& f : files_) {
    if (f) f->check_present();
  }
}

ParamSwapStats ParamSwapper::stats() const {
  ParamSwapStats st;
  st.bytes_read = engine_->bytes_read();
  st.bytes_written = engine_->bytes_written();
  for (const auto& b : buffers_) st.buffer_bytes += b->memory.capacity();
  if (window_) st.buffer_bytes += window_->capacity();
  for (size_t g = 0; g < numels_.size(); ++g) {
    const int64_t esz = element_size(dtypes_[g]);
    st.resident_bytes += resident_numel_[g] * esz;
    st.swapped_bytes += (numels_[g] - resident_numel_[g]) * esz;
  }
  st.unit_reads = unit_reads_;
  st.read_ahead_hits = read_ahead_hits_;
  return st;
}

}  // namespace zrt::zero
