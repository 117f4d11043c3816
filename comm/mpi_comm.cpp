#include "comm/mpi_comm.h"

#include "zrt/build_config.h"

#if ZRT_WITH_MPI

#define OMPI_SKIP_MPICXX 1
#include <algorithm>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include <mpi.h>

#include "comm/mpi_stall_check.h"
#include "comm/op_queue.h"
#include "comm/setup_deadline.h"
#include "comm/reduce_kernels.h"
#include "core/env.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/tool_main.h"

// The one checking macro for MPI return codes (DESIGN.md, style rule 4).
#define ZRT_MPI_CHECK(call)                                                \
  do {                                                                     \
    const int zrt_mpi_rc = (call);                                         \
    if (zrt_mpi_rc != MPI_SUCCESS)                                         \
      ::zrt::comm::throw_mpi_error(#call, zrt_mpi_rc, __FILE__, __LINE__); \
  } while (false)

namespace zrt::comm {

[[noreturn]] void throw_mpi_error(const char* call, int rc, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  int error_class = MPI_SUCCESS;
  MPI_Error_class(rc, &error_class);
  // A collective receiving more than it expects: the ranks passed different sizes to it, or are
  // in different collectives (Note [Stalled collectives] in comm/op_queue.h).
  const char* hint = error_class == MPI_ERR_TRUNCATE
                         ? "; the ranks are out of step: another rank is in a different "
                           "collective, or in this one with another size"
                         : "";
  throw CommError(str("MPI call ", call, " failed at ", file, ":", line, ": ", text, hint));
}

namespace {

// See Note [Failing fast in a multi-process job] (core/tool_main.h).
void abort_mpi_job(int exit_code) {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  int size = 1;
  if (initialized && !finalized) MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size <= 1) return;
  // Ranks failing for the same reason (e.g. all timing out on one collective) get a moment to
  // print their own error before the abort kills them.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  MPI_Abort(MPI_COMM_WORLD, exit_code == 0 ? 1 : exit_code);
}

// ---- Reduced-precision reductions as user-defined MPI ops -------------------------------------

template <at::ScalarType kType, ReduceOp kOp>
void user_reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  detail::reduce_inplace(inout, in, *len, kType, kOp);
}

// Owns MPI initialisation for the process. Finalizes at exit unless a communicator broke (a
// thread may then be stuck inside MPI and MPI_Finalize would hang; see Note [Collective
// deadlines]).
class MpiRuntime {
 public:
  static MpiRuntime& get() {
    static MpiRuntime runtime;
    return runtime;
  }

  ~MpiRuntime() {
    if (!initialized_by_us_ || any_comm_broken()) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    for (MPI_Op& op : ops_) MPI_Op_free(&op);
    MPI_Finalize();
  }

  // Lower-precision dtypes travel as 16-bit words with these ops; others use MPI's built-ins.
  MPI_Op op_for(at::ScalarType dtype, ReduceOp op) const {
    if (dtype == at::kBFloat16 || dtype == at::kHalf) {
      const int base = dtype == at::kBFloat16 ? 0 : 3;
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg:
          return ops_[base + 0];
        case ReduceOp::kMax:
          return ops_[base + 1];
        case ReduceOp::kMin:
          return ops_[base + 2];
      }
    }
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        return MPI_SUM;
      case ReduceOp::kMax:
        return MPI_MAX;
      case ReduceOp::kMin:
        return MPI_MIN;
    }
    return MPI_SUM;
  }

  // Whether MPI may be called by two threads at once (the stall check needs it).
  bool thread_multiple() const { return thread_multiple_; }

 private:
  MpiRuntime() {
    int initialized = 0;
    ZRT_MPI_CHECK(MPI_Initialized(&initialized));
    if (!initialized) {
      int provided = 0;
      ZRT_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
      initialized_by_us_ = true;
      ZRT_CHECK_AS(CommError, provided >= MPI_THREAD_SERIALIZED,
                   "the MPI library provides thread level ", provided,
                   "; ZeroRT needs at least MPI_THREAD_SERIALIZED");
    }
    int level = 0;
    ZRT_MPI_CHECK(MPI_Query_thread(&level));
    thread_multiple_ = level >= MPI_THREAD_MULTIPLE;
    ZRT_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    set_abort_hook(&abort_mpi_job);
    ZRT_MPI_CHECK(MPI_Op_create(&user_reduce<at::kBFloat16, ReduceOp::kSum>, 1, &ops_[0]));
    ZRT_MPI_CHECK(MPI_Op_create(&user_reduce<at::kBFloat16, ReduceOp::kMax>, 1, &ops_[1]));
    ZRT_MPI_CHECK(MPI_Op_create(&user_reduce<at::kBFloat16, ReduceOp::kMin>, 1, &ops_[2]));
    ZRT_MPI_CHECK(MPI_Op_create(&user_reduce<at::kHalf, ReduceOp::kSum>, 1, &ops_[3]));
    ZRT_MPI_CHECK(MPI_Op_create(&user_reduce<at::kHalf, ReduceOp::kMax>, 1, &ops_[4]));
    ZRT_MPI_CHECK(MPI_Op_create(&user_reduce<at::kHalf, ReduceOp::kMin>, 1, &ops_[5]));
  }

  bool initialized_by_us_ = false;
  bool thread_multiple_ = false;
  MPI_Op ops_[6] = {};
};

MPI_Datatype mpi_type(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return MPI_FLOAT;
    case at::kDouble:
      return MPI_DOUBLE;
    case at::kBFloat16:
    case at::kHalf:
      return MPI_UINT16_T;
    case at::kInt:
      return MPI_INT32_T;
    case at::kLong:
      return MPI_INT64_T;
    case at::kByte:
    case at::kBool:
      return MPI_UINT8_T;
    default:
      ZRT_INTERNAL_ASSERT(false, "no MPI type for ", dtype);
  }
  return MPI_BYTE;
}

MpiAlgo algo_from_env() {
  auto v = env::get_string("ZRT_MPI_ALGO");
  if (!v || *v == "auto") return MpiAlgo::kAuto;
  if (*v == "native") return MpiAlgo::kNative;
  if (*v == "ring") return MpiAlgo::kRing;
  throw ConfigError(str("ZRT_MPI_ALGO='", *v, "': expected auto, native or ring"));
}

constexpr int kTagRing = 7301;
constexpr int kTagAllToAll = 7302;
// ZRT_MPI_ALGO=auto uses the point-to-point ring for reduce-scatters and all-gathers of at least
// these many bytes (whole array) and Open MPI's own collectives below. Measured with
// bench/comm_bench on the 2-core development machine, Open MPI 4.1.4 (docs/PERFORMANCE.md,
// "Collectives"): Open MPI's reduce-scatter is 2-4x slower than the ring from 256 KiB on, its
// all-gather is as fast as the ring for large arrays and faster below a few MiB.
constexpr int64_t kRingMinBytesReduceScatter = 32 * 1024;
constexpr int64_t kRingMinBytesAllGather = 4 * 1024 * 1024;
constexpr int64_t kRingMinBytesAllReduce = 1024 * 1024;

class MpiComm final : public Comm {
 public:
  explicit MpiComm(const CommOptions& options)
      : runtime_(MpiRuntime::get()), algo_(algo_from_env()) {
    int world_rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    const SetupDeadline deadline(world_rank, options.timeout_seconds);
    ZRT_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
    ZRT_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    ZRT_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    ZRT_MPI_CHECK(MPI_Comm_size(comm_, &size_));
    set_local_layout();
    const int64_t max_count = env::get_int("ZRT_MPI_MAX_COUNT").value_or(INT_MAX);
    ZRT_CHECK_AS(ConfigError, max_count > 0 && max_count <= INT_MAX,
                 "ZRT_MPI_MAX_COUNT must be in [1, ", INT_MAX, "], got ", max_count);
    max_count_ = max_count;
    // Note [The caller runs what it waits for] (comm/op_queue.h); ZRT_MPI_CALLER_RUNS=0 hands
    // every collective to the queue's thread (for comparison).
    const bool caller_runs = env::get_bool("ZRT_MPI_CALLER_RUNS").value_or(true);
    queue_ = std::make_shared<OpQueue>("mpi", rank_, options.timeout_seconds, caller_runs);
    set_stall_check();
  }

  // A sub-communicator over `comm` (owned), run on its parent's queue (Note [Sub-communicators]).
  MpiComm(const MpiComm& parent, MPI_Comm comm)
      : runtime_(parent.runtime_),
        algo_(parent.algo_),
        comm_(comm),
        max_count_(parent.max_count_),
        queue_(parent.queue_) {
    ZRT_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    ZRT_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    ZRT_MPI_CHECK(MPI_Comm_size(comm_, &size_));
    set_local_layout();
    set_stall_check();
  }

  ~MpiComm() override {
    queue_.reset();  // joins the thread (or detaches it if a collective hung) once unshared
    stall_.reset();
    if (!any_comm_broken()) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  std::string backend_name() const override { return "mpi"; }
  at::DeviceType device_type() const override { return at::kCPU; }
  double timeout_seconds() const override { return queue_->timeout_seconds(); }
  CommTimes times() const override { return queue_->times(); }

 protected:
  std::shared_ptr<Work> all_reduce_impl(const at::Tensor& t, const OpInfo& info) override {
    return submit(info, [this, t, info] { run_all_reduce(t, info); }, {t});
  }
  std::shared_ptr<Work> reduce_scatter_impl(const at::Tensor& out, const at::Tensor& in,
                                            const OpInfo& info) override {
    std::vector<int64_t> counts(size_, out.numel());
    return submit(
        info, [this, out, in, info, counts] { run_reduce_scatter(out, in, info, counts); },
        {out, in});
  }
  std::shared_ptr<Work> reduce_scatter_v_impl(const at::Tensor& out, const at::Tensor& in,
                                              const OpInfo& info) override {
    return submit(
        info, [this, out, in, info] { run_reduce_scatter(out, in, info, info.counts); }, {out, in});
  }
  std::shared_ptr<Work> all_gather_impl(const at::Tensor& out, const at::Tensor& in,
                                        const OpInfo& info) override {
    std::vector<int64_t> counts(size_, in.numel());
    return submit(
        info, [this, out, in, info, counts] { run_all_gather(out, in, info, counts); }, {out, in});
  }
  std::shared_ptr<Work> all_gather_v_impl(const at::Tensor& out, const at::Tensor& in,
                                          const OpInfo& info) override {
    return submit(
        info, [this, out, in, info] { run_all_gather(out, in, info, info.counts); }, {out, in});
  }
  std::shared_ptr<Work> broadcast_impl(const at::Tensor& t, const OpInfo& info) override {
    return submit(info, [this, t, info] { run_broadcast(t, info); }, {t});
  }
  std::shared_ptr<Work> barrier_impl(const OpInfo& info) override {
    return submit(info, [this] { ZRT_MPI_CHECK(MPI_Barrier(comm_)); }, {});
  }
  std::shared_ptr<Work> all_to_all_impl(const at::Tensor& out, const at::Tensor& in,
                                        const OpInfo& info) override {
    return submit(info, [this, out, in] { run_all_to_all(out, in); }, {out, in});
  }
  std::shared_ptr<Comm> split_impl(int color, int key) override {
    return make_sub([color, key](MPI_Comm parent, MPI_Comm* sub) {
      return MPI_Comm_split(parent, color, key, sub);
    });
  }
  std::shared_ptr<Comm> split_by_host_impl() override {
    return make_sub([rank = rank_](MPI_Comm parent, MPI_Comm* sub) {
      return MPI_Comm_split_type(parent, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, sub);
    });
  }

 private:
  std::shared_ptr<Work> submit(const OpInfo& info, std::function<void()> body,
                               std::vector<at::Tensor> keep_alive) {
    return queue_->submit(info, std::move(body), std::move(keep_alive), stall_);
  }

  // Note [Stalled collectives] (comm/op_queue.h): only where MPI allows a second thread in.
  void set_stall_check() {
    if (size_ > 1 && runtime_.thread_multiple() && stall_check_seconds_from_env() > 0) {
      stall_ = make_mpi_stall_check(comm_, rank_, size_, "mpi");
    }
  }

  // The ranks on this rank's host (MPI_COMM_TYPE_SHARED).
  void set_local_layout() {
    MPI_Comm node = MPI_COMM_NULL;
    ZRT_MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
    ZRT_MPI_CHECK(MPI_Comm_rank(node, &local_rank_));
    ZRT_MPI_CHECK(MPI_Comm_size(node, &local_size_));
    ZRT_MPI_CHECK(MPI_Comm_free(&node));
  }

  // Runs `create(comm_, &sub)` on the queue, in order with this communicator's collectives.
  template <typename F>
  std::shared_ptr<Comm> make_sub(F create) {
    OpInfo info;
    info.type = OpType::kBarrier;
    MPI_Comm sub = MPI_COMM_NULL;
    queue_->submit(info, [this, &sub, create] { ZRT_MPI_CHECK(create(comm_, &sub)); }, {})->wait();
    return std::make_shared<MpiComm>(*this, sub);
  }

  // Pairwise exchange of point-to-point messages (MPI_Alltoall's counts are int; this is not,
  // and every byte it moves is a send that the PMPI counter attributes to its peer).
  void run_all_to_all(const at::Tensor& out, const at::Tensor& in) {
    const int64_t chunk = in.numel() / size_ * static_cast<int64_t>(in.element_size());
    const auto* src = static_cast<const uint8_t*>(in.data_ptr());
    auto* dst = static_cast<uint8_t*>(out.data_ptr());
    if (chunk > 0) std::memcpy(dst + rank_ * chunk, src + rank_ * chunk, chunk);
    requests_.clear();
    for (int step = 1; step < size_ && chunk > 0; ++step) {
      const int to = (rank_ + step) % size_;
      const int from = (rank_ - step + size_) % size_;
      for (int64_t off = 0; off < chunk; off += max_count_) {
        const int n = static_cast<int>(std::min(max_count_, chunk - off));
        requests_.emplace_back();
        ZRT_MPI_CHECK(MPI_Irecv(dst + from * chunk + off, n, MPI_BYTE, from, kTagAllToAll, comm_,
                                &requests_.back()));
        requests_.emplace_back();
        ZRT_MPI_CHECK(MPI_Isend(src + to * chunk + off, n, MPI_BYTE, to, kTagAllToAll, comm_,
                                &requests_.back()));
      }
    }
    ZRT_MPI_CHECK(
        MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE));
  }

  // ---- run by whichever thread runs the collective (one at a time, Note [The caller runs what
  // it waits for]) ----

  void run_all_reduce(const at::Tensor& t, const OpInfo& info) {
    auto* p = static_cast<uint8_t*>(t.data_ptr());
    const int64_t es = t.element_size();
    if (size_ > 1 && info.numel >= size_ &&
        use_ring(info.numel / size_ + 1, info.numel * es, kRingMinBytesAllReduce)) {
      ring_all_reduce(p, es, info);
      return;
    }
    const MPI_Datatype dt = mpi_type(info.dtype);
    const MPI_Op op = runtime_.op_for(info.dtype, info.reduce_op);
    for (int64_t off = 0; off < info.numel; off += max_count_) {
      const int count = static_cast<int>(std::min(max_count_, info.numel - off));
      ZRT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, p + off * es, count, dt, op, comm_));
    }
    if (info.reduce_op == ReduceOp::kAvg) detail::divide_inplace(p, info.numel, info.dtype, size_);
  }

  // `max_piece`: the largest per-rank element count; `total_bytes`: the whole array.
  bool use_ring(int64_t max_piece, int64_t total_bytes, int64_t ring_min_bytes) const {
    if (algo_ == MpiAlgo::kRing) return true;
    if (max_piece > max_count_) return true;  // MPI counts and displacements are int
    if (algo_ == MpiAlgo::kNative) return false;
    return total_bytes >= ring_min_bytes;
  }

  static std::vector<int64_t> offsets_of(const std::vector<int64_t>& counts) {
    std::vector<int64_t> offsets(counts.size() + 1, 0);
    for (size_t r = 0; r < counts.size(); ++r) offsets[r + 1] = offsets[r] + counts[r];
    return offsets;
  }

  // Both reduce-scatters. `counts` are the per-rank piece sizes (equal for reduce_scatter).
  void run_reduce_scatter(const at::Tensor& out, const at::Tensor& in, const OpInfo& info,
                          const std::vector<int64_t>& counts) {
    const int64_t es = out.element_size();
    const auto* src = static_cast<const uint8_t*>(in.data_ptr());
    auto* dst = static_cast<uint8_t*>(out.data_ptr());
    const int64_t c = counts[rank_];
    const int64_t max_piece = *std::max_element(counts.begin(), counts.end());
    if (max_piece == 0) return;
    if (size_ == 1) {
      if (c > 0) std::memmove(dst, src, c * es);
    } else if (use_ring(max_piece, info.numel * es, kRingMinBytesReduceScatter)) {
      ring_reduce_scatter(src, dst, counts, es, info);
    } else {
      // MPI forbids overlapping send and receive buffers: an in-place output goes via scratch.
      const bool in_place = dst >= src && dst < src + info.numel * es;
      uint8_t* recv = dst;
      if (in_place) {
        recv_buf_.resize(static_cast<size_t>(c * es));
        recv = recv_buf_.data();
      }
      if (info.type == OpType::kReduceScatter) {
        ZRT_MPI_CHECK(MPI_Reduce_scatter_block(src, recv, static_cast<int>(c), mpi_type(info.dtype),
                                               runtime_.op_for(info.dtype, info.reduce_op), comm_));
      } else {
        std::vector<int> icounts(counts.begin(), counts.end());
        ZRT_MPI_CHECK(MPI_Reduce_scatter(src, recv, icounts.data(), mpi_type(info.dtype),
                                         runtime_.op_for(info.dtype, info.reduce_op), comm_));
      }
      if (in_place && c > 0) std::memcpy(dst, recv, c * es);
    }
    if (info.reduce_op == ReduceOp::kAvg && c > 0) {
      detail::divide_inplace(dst, c, info.dtype, size_);
    }
  }

  // Both all-gathers; `in` may be the view of `out` at this rank's offset.
  void run_all_gather(const at::Tensor& out, const at::Tensor& in, const OpInfo& info,
                      const std::vector<int64_t>& counts) {
    const int64_t es = in.element_size();
    const auto* src = static_cast<const uint8_t*>(in.data_ptr());
    auto* dst = static_cast<uint8_t*>(out.data_ptr());
    const std::vector<int64_t> offsets = offsets_of(counts);
    const int64_t max_piece = *std::max_element(counts.begin(), counts.end());
    if (max_piece == 0) return;
    uint8_t* mine = dst + offsets[rank_] * es;
    if (size_ == 1) {
      if (mine != src && counts[rank_] > 0) std::memmove(mine, src, counts[rank_] * es);
    } else if (use_ring(max_piece, out.numel() * es, kRingMinBytesAllGather)) {
      if (mine != src && counts[rank_] > 0) std::memmove(mine, src, counts[rank_] * es);
      ring_all_gather(dst, counts, offsets, es);
    } else {
      const MPI_Datatype dt = mpi_type(info.dtype);
      const void* send = mine == src ? MPI_IN_PLACE : static_cast<const void*>(src);
      if (info.type == OpType::kAllGather) {
        ZRT_MPI_CHECK(MPI_Allgather(send, static_cast<int>(counts[rank_]), dt, dst,
                                    static_cast<int>(counts[rank_]), dt, comm_));
      } else {
        std::vector<int> icounts(counts.begin(), counts.end());
        std::vector<int> idispls(offsets.begin(), offsets.end() - 1);
        ZRT_MPI_CHECK(MPI_Allgatherv(send, static_cast<int>(counts[rank_]), dt, dst, icounts.data(),
                                     idispls.data(), dt, comm_));
      }
    }
  }

  void run_broadcast(const at::Tensor& t, const OpInfo& info) {
    auto* p = static_cast<uint8_t*>(t.data_ptr());
    const int64_t es = t.element_size();
    for (int64_t off = 0; off < info.numel; off += max_count_) {
      const int count = static_cast<int>(std::min(max_count_, info.numel - off));
      ZRT_MPI_CHECK(MPI_Bcast(p + off * es, count, mpi_type(info.dtype), info.root, comm_));
    }
  }

  // Sends `send_bytes` from `send` to the right neighbour while receiving `recv_bytes` into
  // `recv` from the left one, in messages of at most max_count_ bytes (MPI counts are int).
  void ring_exchange(const uint8_t* send, int64_t send_bytes, uint8_t* recv, int64_t recv_bytes) {
    const int right = (rank_ + 1) % size_;
    const int left = (rank_ - 1 + size_) % size_;
    requests_.clear();
    for (int64_t off = 0; off < recv_bytes; off += max_count_) {
      const int n = static_cast<int>(std::min(max_count_, recv_bytes - off));
      requests_.emplace_back();
      ZRT_MPI_CHECK(MPI_Irecv(recv + off, n, MPI_BYTE, left, kTagRing, comm_, &requests_.back()));
    }
    for (int64_t off = 0; off < send_bytes; off += max_count_) {
      const int n = static_cast<int>(std::min(max_count_, send_bytes - off));
      requests_.emplace_back();
      ZRT_MPI_CHECK(MPI_Isend(send + off, n, MPI_BYTE, right, kTagRing, comm_, &requests_.back()));
    }
    ZRT_MPI_CHECK(
        MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE));
  }

  // Note [Ring reduce-scatter]
  // Step s (0 ≤ s < n−1): send the running partial sum of piece (r−s−1) mod n to the right and
  // receive the partial of piece (r−s−2) mod n from the left, adding this rank's own input piece
  // to it. After n−1 steps the piece received is piece r, complete. Each rank sends every piece
  // but its own once: the bandwidth-optimal (n−1)/n of the input for equal pieces. Pieces may
  // differ in size (reduce_scatter_v); buffers are sized for the largest.
  void ring_reduce_scatter(const uint8_t* in, uint8_t* out, const std::vector<int64_t>& counts,
                           int64_t es, const OpInfo& info) {
    const int n = size_;
    const std::vector<int64_t> offsets = offsets_of(counts);
    const int64_t max_bytes = *std::max_element(counts.begin(), counts.end()) * es;
    send_buf_.resize(static_cast<size_t>(max_bytes));
    recv_buf_.resize(static_cast<size_t>(max_bytes));
    for (int s = 0; s < n - 1; ++s) {
      const int b_send = ((rank_ - s - 1) % n + n) % n;
      const int b_recv = ((rank_ - s - 2) % n + n) % n;
      const uint8_t* src = s == 0 ? in + offsets[b_send] * es : send_buf_.data();
      ring_exchange(src, counts[b_send] * es, recv_buf_.data(), counts[b_recv] * es);
      uint8_t* dst = s == n - 2 ? out : send_buf_.data();
      detail::reduce_into(dst, in + offsets[b_recv] * es, recv_buf_.data(), counts[b_recv],
                          info.dtype, info.reduce_op);
    }
  }

  // Note [Ring all-reduce]
  // A ring reduce-scatter of the array into n near-equal pieces, in place (rank r's piece
  // becomes the sum), then a ring all-gather of the pieces: each rank sends and receives
  // 2(n−1)/n of the array, the bandwidth-optimal amount, and reduces with the same vectorised
  // kernels as the reduce-scatter (bf16 included, which MPI_Allreduce can only do through a
  // user-defined op). An average divides only this rank's piece, before the gather.
  void ring_all_reduce(uint8_t* p, int64_t es, const OpInfo& info) {
    std::vector<int64_t> counts(size_, info.numel / size_);
    for (int64_t r = 0; r < info.numel % size_; ++r) ++counts[r];
    const std::vector<int64_t> offsets = offsets_of(counts);
    uint8_t* mine = p + offsets[rank_] * es;
    // The last step of the reduce-scatter writes piece r (= `mine`) from the input's piece r
    // plus the partial received; no earlier step reads that piece, so in place is safe.
    ring_reduce_scatter(p, mine, counts, es, info);
    if (info.reduce_op == ReduceOp::kAvg) {
      detail::divide_inplace(mine, counts[rank_], info.dtype, size_);
    }
    ring_all_gather(p, counts, offsets, es);
  }

  // Step s: forward piece (r−s) mod n to the right, receive piece (r−s−1) mod n from the left,
  // directly into the output (which already holds this rank's piece).
  void ring_all_gather(uint8_t* out, const std::vector<int64_t>& counts,
                       const std::vector<int64_t>& offsets, int64_t es) {
    const int n = size_;
    for (int s = 0; s < n - 1; ++s) {
      const int b_send = ((rank_ - s) % n + n) % n;
      const int b_recv = ((rank_ - s - 1) % n + n) % n;
      ring_exchange(out + offsets[b_send] * es, counts[b_send] * es, out + offsets[b_recv] * es,
                    counts[b_recv] * es);
    }
  }

  MpiRuntime& runtime_;
  MpiAlgo algo_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  int64_t max_count_ = INT_MAX;
  // Reused across calls (one collective at a time) to avoid page faults on every collective.
  std::vector<uint8_t> send_buf_;
  std::vector<uint8_t> recv_buf_;
  std::vector<MPI_Request> requests_;
  std::shared_ptr<OpQueue> queue_;  // shared with sub-communicators
  std::shared_ptr<StallCheck> stall_;
};

}  // namespace

std::shared_ptr<Comm> make_mpi_comm(const CommOptions& options) {
  return std::make_shared<MpiComm>(options);
}

bool mpi_available() { return true; }

std::string mpi_library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  MPI_Get_library_version(text, &len);
  // Open MPI counts the terminating NUL in len: keep what precedes the first NUL or line break.
  std::string s(text, static_cast<size_t>(len));
  const auto nl = s.find_first_of(std::string("\r\n\0", 3));
  if (nl != std::string::npos) s.resize(nl);
  while (!s.empty() && (s.back() == ',' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace zrt::comm

#else  // !ZRT_WITH_MPI

#include "core/error.h"

namespace zrt::comm {

std::shared_ptr<Comm> make_mpi_comm(const CommOptions&) {
  throw CommError(
      "this ZeroRT build has no MPI support (configure with libopenmpi-dev installed, "
      "ZRT_WITH_MPI=ON)");
}
bool mpi_available() { return false; }
std::string mpi_library_version() { return "not compiled in"; }

}  // namespace zrt::comm

#endif  // ZRT_WITH_MPI
