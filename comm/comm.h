// The communication seam of ZeroRT: an abstract communicator over at::Tensors with the
// collectives ZeRO needs, and the Work handle of asynchronous operations.
//
// Backends: MPI (CPU tensors, comm/mpi_comm.h), NCCL (CUDA tensors, comm/nccl_comm.h),
// in-process threads (comm/local_comm.h); decorators: byte counting (comm/counting_comm.h).
// Inputs are validated here, once, for every backend (see Note [Comm argument validation]).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

namespace zrt::comm {

enum class ReduceOp { kSum, kAvg, kMax, kMin };
const char* reduce_op_name(ReduceOp op);

enum class OpType {
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kBarrier,
  kReduceScatterV,
  kAllGatherV,
  kAllToAll,
};
inline constexpr int kNumOpTypes = 8;
const char* op_type_name(OpType op);

// What one collective call is, for error messages, byte counting and desync checks.
struct OpInfo {
  OpType type = OpType::kBarrier;
  ReduceOp reduce_op = ReduceOp::kSum;  // reductions only
  at::ScalarType dtype = at::kFloat;
  int64_t numel = 0;            // elements of the input tensor
  int root = 0;                 // broadcast only
  uint64_t seq = 0;             // per-communicator sequence number, from 1
  std::vector<int64_t> counts;  // the *_v collectives: elements per rank
  std::string context;          // what the caller issued it for (CollectiveContext); may be empty

  // "all_reduce(sum) #3 dtype=Float numel=1024", then " for <context>" when there is one.
  std::string describe() const;
};

// Names what the calling thread's collectives are for while it lives, e.g. "ZeRO-3 unit 3
// (layers.1)": every collective this thread issues meanwhile carries it in OpInfo::context, so
// error messages (and the stall check of Note [Stalled collectives], comm/op_queue.h) say which
// part of the program a rank was in. `what` must outlive the object. Nests.
class CollectiveContext {
 public:
  explicit CollectiveContext(const std::string& what);
  ~CollectiveContext();
  CollectiveContext(const CollectiveContext&) = delete;
  CollectiveContext& operator=(const CollectiveContext&) = delete;
  // The innermost context of the calling thread, or nullptr.
  static const std::string* current();

 private:
  const std::string* previous_;
};

// Handle of an asynchronous collective.
//
// Contract of wait(): it returns once the collective has completed on this rank: the output
// tensor holds the result, and the input and output tensors may be read, modified or freed. On
// CPU backends the host thread blocks; on NCCL it instead makes the caller's current CUDA stream
// wait for the collective (no host synchronisation). wait() throws CommError when the collective
// failed or did not complete within the communicator's timeout. Until wait() returns the caller
// must neither modify the input nor read or modify the output. Calling wait() again is allowed and
// returns (or throws) the same way.
//
// Collectives on one communicator run in the order they were issued, on every rank; all ranks
// must issue the same collectives in the same order.
// Where a communicator's time went, summed since it was created: `busy` is the time collectives
// spent executing (on the backend's own thread, for the queued CPU backends), `exposed` the time
// callers spent blocked in wait() on collectives that had not finished. busy − exposed is the
// communication hidden behind the caller's compute. Backends that cannot tell report zeros.
struct CommTimes {
  double busy_seconds = 0;
  double exposed_seconds = 0;
  uint64_t collectives = 0;
  // Fraction of busy time the caller did not wait for, in [0, 1] (0 without communication).
  double hidden_fraction() const;
};

class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  // Non-blocking: true once the collective finished (successfully or not).
  virtual bool is_completed() = 0;
};

// Note [Comm argument validation]
// The public collective functions are non-virtual: they validate their tensors (defined,
// contiguous, same device as the backend, supported dtype, matching dtypes, divisible sizes) with
// ZRT_CHECK_AS(CommError, ...) messages naming the op and the offending value, assign the sequence
// number, then call the backend's *_impl. Backends may assume valid arguments.
class Comm {
 public:
  virtual ~Comm() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  // "mpi", "nccl", "local", ... (decorators add their name: "counting(mpi)").
  virtual std::string backend_name() const = 0;
  // The device type of the tensors this communicator accepts (CPU for MPI and local).
  virtual at::DeviceType device_type() const = 0;
  // Seconds a blocking wait may take before it becomes a CommError.
  virtual double timeout_seconds() const = 0;
  // Time spent communicating and waiting (see CommTimes); decorators forward it.
  virtual CommTimes times() const { return {}; }

  // Collective: every rank must call this. In-place reduction of `tensor` over all ranks.
  // kAvg is only defined for floating dtypes.
  std::shared_ptr<Work> all_reduce_async(const at::Tensor& tensor, ReduceOp op = ReduceOp::kSum);
  // Collective. `input` has size()·k elements; rank r receives the reduction of every rank's
  // chunk r (elements [r·k, (r+1)·k)) in `output`, which has k elements.
  std::shared_ptr<Work> reduce_scatter_async(const at::Tensor& output, const at::Tensor& input,
                                             ReduceOp op = ReduceOp::kSum);
  // Collective. `output` has size()·k elements; chunk r of it receives rank r's `input` (k).
  // `input` may be the view of `output` at this rank's chunk (in place).
  std::shared_ptr<Work> all_gather_async(const at::Tensor& output, const at::Tensor& input);
  // Collective. The variable-size reduce-scatter: `input` is cut into consecutive pieces of
  // counts[0], ..., counts[n−1] elements and rank r receives, in `output` (counts[r] elements),
  // the reduction over ranks of piece r. Every rank passes the same counts. `output` may be the
  // input's own piece (in place). This is the primitive for ZeRO's contiguous flat buffers, where
  // a bucket straddles partition boundaries.
  std::shared_ptr<Work> reduce_scatter_v_async(const at::Tensor& output, const at::Tensor& input,
                                               std::vector<int64_t> counts,
                                               ReduceOp op = ReduceOp::kSum);
  // Collective. The variable-size all-gather: rank r contributes `input` (counts[r] elements) and
  // `output` (sum of counts) receives rank k's input at offset counts[0] + ... + counts[k−1].
  // `input` may be the view of `output` at this rank's offset (in-place).
  std::shared_ptr<Work> all_gather_v_async(const at::Tensor& output, const at::Tensor& input,
                                           std::vector<int64_t> counts);
  // Collective. `input` and `output` have size()·k elements; chunk r of this rank's input goes to
  // rank r, and chunk q of the output receives rank q's chunk for this rank (MPI_Alltoall). The
  // two must not overlap.
  std::shared_ptr<Work> all_to_all_async(const at::Tensor& output, const at::Tensor& input);
  // Collective. Copies `tensor` of rank `root` into `tensor` on every other rank.
  std::shared_ptr<Work> broadcast_async(const at::Tensor& tensor, int root = 0);
  // Collective. Completes once every rank has entered it.
  std::shared_ptr<Work> barrier_async();

  // Blocking forms: the async call followed by wait().
  void all_reduce(const at::Tensor& tensor, ReduceOp op = ReduceOp::kSum);
  void reduce_scatter(const at::Tensor& output, const at::Tensor& input,
                      ReduceOp op = ReduceOp::kSum);
  void all_gather(const at::Tensor& output, const at::Tensor& input);
  void reduce_scatter_v(const at::Tensor& output, const at::Tensor& input,
                        std::vector<int64_t> counts, ReduceOp op = ReduceOp::kSum);
  void all_gather_v(const at::Tensor& output, const at::Tensor& input, std::vector<int64_t> counts);
  void all_to_all(const at::Tensor& output, const at::Tensor& input);
  void broadcast(const at::Tensor& tensor, int root = 0);
  void barrier();

  // Note [Sub-communicators]
  // split() and split_by_host() are collectives over this communicator (every rank calls them,
  // with no collective of its own in flight) and return this rank's new communicator: the ranks
  // that passed the same `color`, ranked by (key, rank), or the ranks on this rank's host as the
  // backend sees hosts (MPI: MPI_COMM_TYPE_SHARED; ZeRO++'s node-local groups come from here,
  // not from an assumption about how ranks are numbered). A sub-communicator's collectives are
  // ordered with its parent's on each rank (the MPI backend runs both on one queue), so a
  // program that issues the same sequence on every rank cannot deadlock across them. It may
  // outlive nothing: destroy it before its parent. Backends without sub-communicators throw
  // CommError.
  std::shared_ptr<Comm> split(int color, int key);
  std::shared_ptr<Comm> split_by_host();

 protected:
  virtual std::shared_ptr<Work> all_reduce_impl(const at::Tensor& tensor, const OpInfo& info) = 0;
  virtual std::shared_ptr<Work> reduce_scatter_impl(const at::Tensor& output,
                                                    const at::Tensor& input,
                                                    const OpInfo& info) = 0;
  virtual std::shared_ptr<Work> all_gather_impl(const at::Tensor& output, const at::Tensor& input,
                                                const OpInfo& info) = 0;
  // info.counts holds the per-rank counts.
  virtual std::shared_ptr<Work> reduce_scatter_v_impl(const at::Tensor& output,
                                                      const at::Tensor& input,
                                                      const OpInfo& info) = 0;
  virtual std::shared_ptr<Work> all_gather_v_impl(const at::Tensor& output, const at::Tensor& input,
                                                  const OpInfo& info) = 0;
  virtual std::shared_ptr<Work> all_to_all_impl(const at::Tensor& output, const at::Tensor& input,
                                                const OpInfo& info) = 0;
  virtual std::shared_ptr<Work> broadcast_impl(const at::Tensor& tensor, const OpInfo& info) = 0;
  // Sub-communicators (Note [Sub-communicators]); the defaults throw CommError.
  virtual std::shared_ptr<Comm> split_impl(int color, int key);
  virtual std::shared_ptr<Comm> split_by_host_impl();
  virtual std::shared_ptr<Work> barrier_impl(const OpInfo& info) = 0;

  // Hook run after validation and before *_impl: the desync checker (issue: debug collectives)
  // overrides it. The default does nothing.
  virtual void before_collective(const OpInfo& info) { (void)info; }

 private:
  OpInfo next_info(OpType type, const at::Tensor* tensor, ReduceOp op = ReduceOp::kSum,
                   int root = 0);
  uint64_t seq_ = 0;
};

// A Work that is already complete (for no-op collectives, e.g. on a world of one).
std::shared_ptr<Work> completed_work();

// Whether `dtype` can be communicated (float32/64, bfloat16, float16, int32, int64, uint8, bool).
bool is_supported_dtype(at::ScalarType dtype);

}  // namespace zrt::comm
