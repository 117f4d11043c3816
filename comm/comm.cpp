#include "comm/comm.h"

#include <algorithm>

#include "comm/blocking_call.h"
#include "core/error.h"

namespace zrt::comm {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
  }
  return "?";
}

const char* op_type_name(OpType op) {
  switch (op) {
    case OpType::kAllReduce:
      return "all_reduce";
    case OpType::kReduceScatter:
      return "reduce_scatter";
    case OpType::kAllGather:
      return "all_gather";
    case OpType::kBroadcast:
      return "broadcast";
    case OpType::kBarrier:
      return "barrier";
    case OpType::kReduceScatterV:
      return "reduce_scatter_v";
    case OpType::kAllGatherV:
      return "all_gather_v";
    case OpType::kAllToAll:
      return "all_to_all";
  }
  return "?";
}

std::string OpInfo::describe() const {
  std::string s = op_type_name(type);
  if (type == OpType::kAllReduce || type == OpType::kReduceScatter ||
      type == OpType::kReduceScatterV) {
    s += str("(", reduce_op_name(reduce_op), ")");
  } else if (type == OpType::kBroadcast) {
    s += str("(root=", root, ")");
  }
  s += str(" #", seq);
  if (type != OpType::kBarrier) s += str(" dtype=", c10::toString(dtype), " numel=", numel);
  if (!context.empty()) s += str(" for ", context);
  return s;
}

namespace {
thread_local const std::string* t_context = nullptr;
}  // namespace

CollectiveContext::CollectiveContext(const std::string& what) : previous_(t_context) {
  t_context = &what;
}
CollectiveContext::~CollectiveContext() { t_context = previous_; }
const std::string* CollectiveContext::current() { return t_context; }

bool is_supported_dtype(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
    case at::kDouble:
    case at::kBFloat16:
    case at::kHalf:
    case at::kInt:
    case at::kLong:
    case at::kByte:
    case at::kBool:
      return true;
    default:
      return false;
  }
}

namespace {

class CompletedWork final : public Work {
 public:
  void wait() override {}
  bool is_completed() override { return true; }
};

void check_tensor(const Comm& comm, const char* op, const char* what, const at::Tensor& t) {
  ZRT_CHECK_AS(CommError, t.defined(), op, ": ", what, " tensor is undefined");
  ZRT_CHECK_AS(CommError, t.is_contiguous(), op, ": ", what, " tensor must be contiguous (sizes ",
               t.sizes(), ", strides ", t.strides(), ")");
  ZRT_CHECK_AS(CommError, t.device().type() == comm.device_type(), op, ": ", what, " tensor is on ",
               t.device(), " but the ", comm.backend_name(), " communicator handles ",
               c10::DeviceTypeName(comm.device_type()), " tensors");
  ZRT_CHECK_AS(CommError, is_supported_dtype(t.scalar_type()), op, ": ", what,
               " tensor has unsupported dtype ", t.scalar_type(),
               " (supported: Float, Double, BFloat16, Half, Int, Long, Byte, Bool)");
  ZRT_CHECK_AS(CommError, !t.is_sparse(), op, ": sparse tensors are not supported");
}

void check_reduce_op(const char* op, const at::Tensor& t, ReduceOp rop) {
  ZRT_CHECK_AS(CommError, rop != ReduceOp::kAvg || at::isFloatingType(t.scalar_type()), op,
               ": ReduceOp avg needs a floating dtype, got ", t.scalar_type());
  ZRT_CHECK_AS(CommError,
               t.scalar_type() != at::kBool || rop == ReduceOp::kMax || rop == ReduceOp::kMin, op,
               ": Bool tensors support only max (logical or) and min (logical and)");
}

void check_same_dtype(const char* op, const at::Tensor& out, const at::Tensor& in) {
  ZRT_CHECK_AS(CommError, out.scalar_type() == in.scalar_type(), op, ": output dtype ",
               out.scalar_type(), " differs from input dtype ", in.scalar_type());
  ZRT_CHECK_AS(CommError, out.device() == in.device(), op, ": output is on ", out.device(),
               " but input is on ", in.device());
}

// Checks a *_v counts vector and returns its sum.
int64_t check_counts(const char* op, const std::vector<int64_t>& counts, int world) {
  ZRT_CHECK_AS(CommError, static_cast<int>(counts.size()) == world, op, ": got ", counts.size(),
               " counts for a world of size ", world);
  int64_t total = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    ZRT_CHECK_AS(CommError, counts[r] >= 0, op, ": counts[", r, "] = ", counts[r], " is negative");
    total += counts[r];
  }
  return total;
}

bool overlaps(const at::Tensor& a, const at::Tensor& b) {
  const auto* pa = static_cast<const char*>(a.data_ptr());
  const auto* pb = static_cast<const char*>(b.data_ptr());
  const int64_t na = a.numel() * static_cast<int64_t>(a.element_size());
  const int64_t nb = b.numel() * static_cast<int64_t>(b.element_size());
  return na > 0 && nb > 0 && pa < pb + nb && pb < pa + na;
}

}  // namespace

std::shared_ptr<Work> completed_work() { return std::make_shared<CompletedWork>(); }

double CommTimes::hidden_fraction() const {
  if (busy_seconds <= 0) return 0;
  return std::clamp(1.0 - exposed_seconds / busy_seconds, 0.0, 1.0);
}

OpInfo Comm::next_info(OpType type, const at::Tensor* tensor, ReduceOp op, int root) {
  OpInfo info;
  info.type = type;
  info.reduce_op = op;
  info.root = root;
  if (tensor != nullptr) {
    info.dtype = tensor->scalar_type();
    info.numel = tensor->numel();
  }
  info.seq = ++seq_;
  if (const std::string* context = CollectiveContext::current()) info.context = *context;
  return info;
}

std::shared_ptr<Work> Comm::all_reduce_async(const at::Tensor& tensor, ReduceOp op) {
  check_tensor(*this, "all_reduce", "the", tensor);
  check_reduce_op("all_reduce", tensor, op);
  const OpInfo info = next_info(OpType::kAllReduce, &tensor, op);
  before_collective(info);
  return all_reduce_impl(tensor, info);
}

std::shared_ptr<Work> Comm::reduce_scatter_async(const at::Tensor& output, const at::Tensor& input,
                                                 ReduceOp op) {
  check_tensor(*this, "reduce_scatter", "output", output);
  check_tensor(*this, "reduce_scatter", "input", input);
  check_same_dtype("reduce_scatter", output, input);
  check_reduce_op("reduce_scatter", input, op);
  ZRT_CHECK_AS(CommError, input.numel() == output.numel() * size(),
               "reduce_scatter: input must have world_size x output elements: input numel ",
               input.numel(), ", output numel ", output.numel(), ", world size ", size());
  ZRT_CHECK_AS(CommError, !output.is_same(input) || size() == 1,
               "reduce_scatter: output and input must be different tensors");
  const OpInfo info = next_info(OpType::kReduceScatter, &input, op);
  before_collective(info);
  return reduce_scatter_impl(output, input, info);
}

std::shared_ptr<Work> Comm::all_gather_async(const at::Tensor& output, const at::Tensor& input) {
  check_tensor(*this, "all_gather", "output", output);
  check_tensor(*this, "all_gather", "input", input);
  check_same_dtype("all_gather", output, input);
  ZRT_CHECK_AS(CommError, output.numel() == input.numel() * size(),
               "all_gather: output must have world_size x input elements: output numel ",
               output.numel(), ", input numel ", input.numel(), ", world size ", size());
  if (overlaps(output, input)) {
    const auto* expected = static_cast<const char*>(output.data_ptr()) +
                           rank() * input.numel() * static_cast<int64_t>(output.element_size());
    ZRT_CHECK_AS(CommError, input.data_ptr() == expected,
                 "all_gather: an input that overlaps the output must be the output's view at this "
                 "rank's chunk (offset ",
                 rank() * input.numel(), ")");
  }
  const OpInfo info = next_info(OpType::kAllGather, &input, ReduceOp::kSum);
  before_collective(info);
  return all_gather_impl(output, input, info);
}

std::shared_ptr<Work> Comm::reduce_scatter_v_async(const at::Tensor& output,
                                                   const at::Tensor& input,
                                                   std::vector<int64_t> counts, ReduceOp op) {
  const char* name = "reduce_scatter_v";
  check_tensor(*this, name, "output", output);
  check_tensor(*this, name, "input", input);
  check_same_dtype(name, output, input);
  check_reduce_op(name, input, op);
  const int64_t total = check_counts(name, counts, size());
  ZRT_CHECK_AS(CommError, total == input.numel(), name, ": counts sum to ", total,
               " but the input has ", input.numel(), " elements");
  ZRT_CHECK_AS(CommError, output.numel() == counts[rank()], name, ": output has ", output.numel(),
               " elements but counts[", rank(), "] = ", counts[rank()]);
  if (overlaps(output, input)) {
    int64_t offset = 0;
    for (int r = 0; r < rank(); ++r) offset += counts[r];
    const auto* expected = static_cast<const char*>(input.data_ptr()) +
                           offset * static_cast<int64_t>(input.element_size());
    ZRT_CHECK_AS(CommError, output.data_ptr() == expected, name,
                 ": an output that overlaps the input must be the input's view at this rank's "
                 "offset ",
                 offset);
  }
  OpInfo info = next_info(OpType::kReduceScatterV, &input, op);
  info.counts = std::move(counts);
  before_collective(info);
  return reduce_scatter_v_impl(output, input, info);
}

std::shared_ptr<Work> Comm::all_gather_v_async(const at::Tensor& output, const at::Tensor& input,
                                               std::vector<int64_t> counts) {
  const char* name = "all_gather_v";
  check_tensor(*this, name, "output", output);
  check_tensor(*this, name, "input", input);
  check_same_dtype(name, output, input);
  const int64_t total = check_counts(name, counts, size());
  ZRT_CHECK_AS(CommError, total == output.numel(), name, ": counts sum to ", total,
               " but the output has ", output.numel(), " elements");
  ZRT_CHECK_AS(CommError, input.numel() == counts[rank()], name, ": input has ", input.numel(),
               " elements but counts[", rank(), "] = ", counts[rank()]);
  if (overlaps(output, input)) {
    int64_t offset = 0;
    for (int r = 0; r < rank(); ++r) offset += counts[r];
    const auto* expected = static_cast<const char*>(output.data_ptr()) +
                           offset * static_cast<int64_t>(output.element_size());
    ZRT_CHECK_AS(CommError, input.data_ptr() == expected, name,
                 ": an input that overlaps the output must be the output's view at this rank's "
                 "offset ",
                 offset);
  }
  OpInfo info = next_info(OpType::kAllGatherV, &output, ReduceOp::kSum);
  info.counts = std::move(counts);
  before_collective(info);
  return all_gather_v_impl(output, input, info);
}

std::shared_ptr<Work> Comm::all_to_all_async(const at::Tensor& output, const at::Tensor& input) {
  const char* name = "all_to_all";
  check_tensor(*this, name, "output", output);
  check_tensor(*this, name, "input", input);
  check_same_dtype(name, output, input);
  ZRT_CHECK_AS(CommError, output.numel() == input.numel() && input.numel() % size() == 0, name,
               ": input and output must have the same number of elements, a multiple of the world "
               "size: input numel ",
               input.numel(), ", output numel ", output.numel(), ", world size ", size());
  ZRT_CHECK_AS(CommError, !overlaps(output, input), name, ": output and input must not overlap");
  const OpInfo info = next_info(OpType::kAllToAll, &input, ReduceOp::kSum);
  before_collective(info);
  return all_to_all_impl(output, input, info);
}

std::shared_ptr<Comm> Comm::split(int color, int key) {
  ZRT_CHECK_AS(CommError, color >= 0, "split: color must be >= 0, got ", color);
  return split_impl(color, key);
}

std::shared_ptr<Comm> Comm::split_by_host() { return split_by_host_impl(); }

std::shared_ptr<Comm> Comm::split_impl(int, int) {
  throw CommError(str("split: the ", backend_name(), " communicator has no sub-communicators"));
}

std::shared_ptr<Comm> Comm::split_by_host_impl() {
  throw CommError(
      str("split_by_host: the ", backend_name(), " communicator has no sub-communicators"));
}

std::shared_ptr<Work> Comm::broadcast_async(const at::Tensor& tensor, int root) {
  check_tensor(*this, "broadcast", "the", tensor);
  ZRT_CHECK_AS(CommError, root >= 0 && root < size(), "broadcast: root ", root,
               " is not a rank of a world of size ", size());
  const OpInfo info = next_info(OpType::kBroadcast, &tensor, ReduceOp::kSum, root);
  before_collective(info);
  return broadcast_impl(tensor, info);
}

std::shared_ptr<Work> Comm::barrier_async() {
  const OpInfo info = next_info(OpType::kBarrier, nullptr);
  before_collective(info);
  return barrier_impl(info);
}

namespace {
thread_local int t_blocking_calls = 0;
}  // namespace

BlockingCall::BlockingCall() { ++t_blocking_calls; }
BlockingCall::~BlockingCall() { --t_blocking_calls; }
bool BlockingCall::active() { return t_blocking_calls > 0; }

void Comm::all_reduce(const at::Tensor& tensor, ReduceOp op) {
  const BlockingCall blocking;
  all_reduce_async(tensor, op)->wait();
}
void Comm::reduce_scatter(const at::Tensor& output, const at::Tensor& input, ReduceOp op) {
  const BlockingCall blocking;
  reduce_scatter_async(output, input, op)->wait();
}
void Comm::all_gather(const at::Tensor& output, const at::Tensor& input) {
  const BlockingCall blocking;
  all_gather_async(output, input)->wait();
}
void Comm::reduce_scatter_v(const at::Tensor& output, const at::Tensor& input,
                            std::vector<int64_t> counts, ReduceOp op) {
  const BlockingCall blocking;
  reduce_scatter_v_async(output, input, std::move(counts), op)->wait();
}
void Comm::all_gather_v(const at::Tensor& output, const at::Tensor& input,
                        std::vector<int64_t> counts) {
  const BlockingCall blocking;
  all_gather_v_async(output, input, std::move(counts))->wait();
}
void Comm::all_to_all(const at::Tensor& output, const at::Tensor& input) {
  const BlockingCall blocking;
  all_to_all_async(output, input)->wait();
}
void Comm::broadcast(const at::Tensor& tensor, int root) {
  const BlockingCall blocking;
  broadcast_async(tensor, root)->wait();
}
void Comm::barrier() {
  const BlockingCall blocking;
  barrier_async()->wait();
}

}  // namespace zrt::comm
