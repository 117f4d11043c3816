#include "comm/nccl_comm.h"

#include "zrt/build_config.h"

#if ZRT_WITH_NCCL

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <type_traits>

#include <cuda_runtime.h>
#include <nccl.h>

#if ZRT_TORCH_HAS_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "comm/mpi_comm.h"
#include "core/error.h"
#include "core/logging.h"

// The one checking macro for NCCL return codes; CUDA runtime codes have their own below.
#define ZRT_NCCL_CHECK(call)                                                                     \
  do {                                                                                           \
    const ncclResult_t zrt_nccl_rc = (call);                                                     \
    if (zrt_nccl_rc != ncclSuccess) {                                                            \
      throw ::zrt::CommError(::zrt::str("NCCL call ", #call, " failed at ", __FILE__, ":",       \
                                        __LINE__, ": ", ncclGetErrorString(zrt_nccl_rc),         \
                                        " (NCCL ", NCCL_MAJOR, ".", NCCL_MINOR, ".", NCCL_PATCH, \
                                        ")"));                                                   \
    }                                                                                            \
  } while (false)

#define ZRT_CUDA_CHECK(call)                                                               \
  do {                                                                                     \
    const cudaError_t zrt_cuda_rc = (call);                                                \
    if (zrt_cuda_rc != cudaSuccess) {                                                      \
      throw ::zrt::CommError(::zrt::str("CUDA call ", #call, " failed at ", __FILE__, ":", \
                                        __LINE__, ": ", cudaGetErrorString(zrt_cuda_rc))); \
    }                                                                                      \
  } while (false)

namespace zrt::comm {
namespace {

using Clock = std::chrono::steady_clock;
// A CUDA event shared by a Work handle and the watchdog; destroyed when both let go.
using SharedEvent = std::shared_ptr<std::remove_pointer_t<cudaEvent_t>>;

ncclDataType_t nccl_type(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return ncclFloat32;
    case at::kDouble:
      return ncclFloat64;
    case at::kBFloat16:
      return ncclBfloat16;
    case at::kHalf:
      return ncclFloat16;
    case at::kInt:
      return ncclInt32;
    case at::kLong:
      return ncclInt64;
    case at::kByte:
    case at::kBool:
      return ncclUint8;
    default:
      ZRT_INTERNAL_ASSERT(false, "no NCCL type for ", dtype);
  }
  return ncclUint8;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
  }
  return ncclSum;
}

// The caller's current stream on `device` (LibTorch's notion when it has CUDA).
cudaStream_t current_stream(int device) {
#if ZRT_TORCH_HAS_CUDA
  return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
#else
  (void)device;
  return cudaStreamLegacy;
#endif
}

// Shared between the communicator, its Work handles and the watchdog thread.
struct NcclState {
  ncclComm_t comm = nullptr;
  int rank = 0;
  int device = 0;
  double timeout_seconds = 600;
  std::mutex mutex;
  std::condition_variable cv;
  struct Pending {
    OpInfo info;
    SharedEvent done;
    Clock::time_point launched;
  };
  std::deque<Pending> pending;  // launch order = completion order on the comm stream
  std::string fatal;
  bool stop = false;

  void throw_if_broken_locked() const {
    if (!fatal.empty()) throw CommError(fatal);
  }

  // Watchdog: retires completed events, aborts the communicator on a timeout.
  void watch() {
    std::unique_lock<std::mutex> lock(mutex);
    while (!stop) {
      cv.wait_for(lock, std::chrono::milliseconds(100));
      while (!pending.empty()) {
        Pending& p = pending.front();
        cudaSetDevice(device);
        const cudaError_t q = cudaEventQuery(p.done.get());
        if (q == cudaSuccess) {
          pending.pop_front();
          continue;
        }
        const double waited = std::chrono::duration<double>(Clock::now() - p.launched).count();
        ncclResult_t async_error = ncclSuccess;
        ncclCommGetAsyncError(comm, &async_error);
        if (q != cudaErrorNotReady || async_error != ncclSuccess || waited > timeout_seconds) {
          fatal = str(
              "[rank ", rank, "] communication ", waited > timeout_seconds ? "timeout" : "error",
              ": ", p.info.describe(), " on the nccl communicator ",
              waited > timeout_seconds
                  ? str("did not complete after ", waited, " s (timeout ", timeout_seconds, " s)")
                  : str("failed: ", async_error != ncclSuccess ? ncclGetErrorString(async_error)
                                                               : cudaGetErrorString(q)),
              "; aborting the NCCL communicator");
          ZRT_LOG_ERROR(fatal);
          ncclCommAbort(comm);
          comm = nullptr;
          pending.clear();
          cv.notify_all();
        }
        break;
      }
    }
  }
};

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<NcclState> state, SharedEvent done)
      : state_(std::move(state)), done_(done) {}
  // See Note [NCCL stream ordering]: the caller's stream waits, the host does not.
  void wait() override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->throw_if_broken_locked();
    ZRT_CUDA_CHECK(cudaStreamWaitEvent(current_stream(state_->device), done_.get(), 0));
  }
  bool is_completed() override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->throw_if_broken_locked();
    return cudaEventQuery(done_.get()) == cudaSuccess;
  }

 private:
  std::shared_ptr<NcclState> state_;
  SharedEvent done_;
};

class NcclComm final : public Comm {
 public:
  // Over the ranks of `bootstrap` (MPI); device -1: local_rank % the visible devices.
  NcclComm(std::shared_ptr<Comm> bootstrap, double timeout_seconds, int device)
      : state_(std::make_shared<NcclState>()), bootstrap_(std::move(bootstrap)) {
    int devices = 0;
    ZRT_CUDA_CHECK(cudaGetDeviceCount(&devices));
    ZRT_CHECK_AS(CommError, devices > 0, "the NCCL backend needs a CUDA device; none is visible");
    state_->rank = bootstrap_->rank();
    state_->device = device >= 0 ? device : bootstrap_->local_rank() % devices;
    state_->timeout_seconds = timeout_seconds;
    ZRT_CUDA_CHECK(cudaSetDevice(state_->device));
    ncclUniqueId id;
    at::Tensor id_bytes = at::zeros({static_cast<int64_t>(sizeof(id))}, at::kByte);
    if (bootstrap_->rank() == 0) {
      ZRT_NCCL_CHECK(ncclGetUniqueId(&id));
      std::memcpy(id_bytes.data_ptr(), &id, sizeof(id));
    }
    bootstrap_->broadcast(id_bytes, 0);
    std::memcpy(&id, id_bytes.data_ptr(), sizeof(id));
    ZRT_NCCL_CHECK(ncclCommInitRank(&state_->comm, bootstrap_->size(), id, bootstrap_->rank()));
#if ZRT_TORCH_HAS_CUDA
    torch_stream_ = std::make_unique<c10::cuda::CUDAStream>(
        c10::cuda::getStreamFromPool(false, static_cast<c10::DeviceIndex>(state_->device)));
    stream_ = torch_stream_->stream();
#else
    ZRT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
#endif
    watchdog_ = std::thread([s = state_] { s->watch(); });
  }

  ~NcclComm() override {
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->stop = true;
    }
    state_->cv.notify_all();
    watchdog_.join();
    if (state_->comm != nullptr) {
      cudaStreamSynchronize(stream_);
      ncclCommDestroy(state_->comm);
    }
#if !ZRT_TORCH_HAS_CUDA
    cudaStreamDestroy(stream_);
#endif
  }

  int rank() const override { return bootstrap_->rank(); }
  int size() const override { return bootstrap_->size(); }
  int local_rank() const override { return bootstrap_->local_rank(); }
  int local_size() const override { return bootstrap_->local_size(); }
  std::string backend_name() const override { return "nccl"; }
  at::DeviceType device_type() const override { return at::kCUDA; }
  double timeout_seconds() const override { return state_->timeout_seconds; }

 protected:
  std::shared_ptr<Work> all_reduce_impl(const at::Tensor& t, const OpInfo& info) override {
    return launch(info, {t}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(info.dtype),
                           nccl_op(info.reduce_op), c, s);
    });
  }
  std::shared_ptr<Work> reduce_scatter_impl(const at::Tensor& out, const at::Tensor& in,
                                            const OpInfo& info) override {
    return launch(info, {out, in}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclReduceScatter(in.data_ptr(), out.data_ptr(), out.numel(), nccl_type(info.dtype),
                               nccl_op(info.reduce_op), c, s);
    });
  }
  std::shared_ptr<Work> all_gather_impl(const at::Tensor& out, const at::Tensor& in,
                                        const OpInfo& info) override {
    return launch(info, {out, in}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclAllGather(in.data_ptr(), out.data_ptr(), in.numel(), nccl_type(info.dtype), c, s);
    });
  }
  // NCCL has no variable-size reduce-scatter/all-gather: one grouped reduce / broadcast per
  // piece, which moves the same bytes as the ring collectives.
  std::shared_ptr<Work> reduce_scatter_v_impl(const at::Tensor& out, const at::Tensor& in,
                                              const OpInfo& info) override {
    return launch(info, {out, in}, [&](ncclComm_t c, cudaStream_t s) {
      const size_t es = in.element_size();
      ncclResult_t rc = ncclGroupStart();
      int64_t offset = 0;
      for (int r = 0; r < size() && rc == ncclSuccess; ++r) {
        const auto* src = static_cast<const char*>(in.data_ptr()) + offset * es;
        void* dst = r == rank() ? out.data_ptr() : nullptr;
        if (info.counts[r] > 0) {
          rc = ncclReduce(src, dst, info.counts[r], nccl_type(info.dtype), nccl_op(info.reduce_op),
                          r, c, s);
        }
        offset += info.counts[r];
      }
      const ncclResult_t end = ncclGroupEnd();
      return rc != ncclSuccess ? rc : end;
    });
  }
  std::shared_ptr<Work> all_gather_v_impl(const at::Tensor& out, const at::Tensor& in,
                                          const OpInfo& info) override {
    return launch(info, {out, in}, [&](ncclComm_t c, cudaStream_t s) {
      const size_t es = out.element_size();
      ncclResult_t rc = ncclGroupStart();
      int64_t offset = 0;
      for (int r = 0; r < size() && rc == ncclSuccess; ++r) {
        char* dst = static_cast<char*>(out.data_ptr()) + offset * es;
        const void* src = r == rank() ? in.data_ptr() : dst;
        if (info.counts[r] > 0) {
          rc = ncclBroadcast(src, dst, info.counts[r], nccl_type(info.dtype), r, c, s);
        }
        offset += info.counts[r];
      }
      const ncclResult_t end = ncclGroupEnd();
      return rc != ncclSuccess ? rc : end;
    });
  }
  std::shared_ptr<Work> broadcast_impl(const at::Tensor& t, const OpInfo& info) override {
    return launch(info, {t}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(info.dtype), info.root,
                           c, s);
    });
  }
  // One grouped send and receive per peer.
  std::shared_ptr<Work> all_to_all_impl(const at::Tensor& out, const at::Tensor& in,
                                        const OpInfo& info) override {
    return launch(info, {out, in}, [&](ncclComm_t c, cudaStream_t s) {
      const int64_t chunk = in.numel() / size();
      const size_t bytes = static_cast<size_t>(chunk) * in.element_size();
      ncclResult_t rc = ncclGroupStart();
      for (int r = 0; r < size() && rc == ncclSuccess && chunk > 0; ++r) {
        const auto* src = static_cast<const char*>(in.data_ptr()) + r * bytes;
        char* dst = static_cast<char*>(out.data_ptr()) + r * bytes;
        rc = ncclSend(src, chunk, nccl_type(info.dtype), r, c, s);
        if (rc == ncclSuccess) rc = ncclRecv(dst, chunk, nccl_type(info.dtype), r, c, s);
      }
      const ncclResult_t end = ncclGroupEnd();
      return rc != ncclSuccess ? rc : end;
    });
  }
  // Sub-communicators: the MPI bootstrap splits, and the new ranks make a NCCL communicator of
  // their own on this rank's device (Note [Sub-communicators]).
  std::shared_ptr<Comm> split_impl(int color, int key) override {
    ZRT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return std::make_shared<NcclComm>(bootstrap_->split(color, key), state_->timeout_seconds,
                                      state_->device);
  }
  std::shared_ptr<Comm> split_by_host_impl() override {
    ZRT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return std::make_shared<NcclComm>(bootstrap_->split_by_host(), state_->timeout_seconds,
                                      state_->device);
  }
  // A host-level barrier: pending device work is flushed first, then the MPI ranks meet.
  std::shared_ptr<Work> barrier_impl(const OpInfo&) override {
    ZRT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    bootstrap_->barrier();
    return completed_work();
  }

 private:
  template <typename Launch>
  std::shared_ptr<Work> launch(const OpInfo& info, std::initializer_list<at::Tensor> tensors,
                               Launch&& nccl_call) {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->throw_if_broken_locked();
    for (const at::Tensor& t : tensors) {
      ZRT_CHECK_AS(CommError, t.device().index() == state_->device, info.describe(),
                   ": tensor is on ", t.device(),
                   " but this rank's NCCL device is cuda:", state_->device);
#if ZRT_TORCH_HAS_CUDA
      c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), *torch_stream_);
#endif
    }
    ZRT_CUDA_CHECK(cudaSetDevice(state_->device));
    cudaEvent_t ready = nullptr;
    cudaEvent_t done_raw = nullptr;
    ZRT_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    ZRT_CUDA_CHECK(cudaEventCreateWithFlags(&done_raw, cudaEventDisableTiming));
    SharedEvent done(done_raw, [](cudaEvent_t e) { cudaEventDestroy(e); });
    ZRT_CUDA_CHECK(cudaEventRecord(ready, current_stream(state_->device)));
    ZRT_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready, 0));
    ZRT_NCCL_CHECK(nccl_call(state_->comm, stream_));
    ZRT_CUDA_CHECK(cudaEventRecord(done.get(), stream_));
    cudaEventDestroy(ready);  // safe: destruction is deferred until the event completes
    state_->pending.push_back({info, done, Clock::now()});
    state_->cv.notify_all();
    return std::make_shared<NcclWork>(state_, done);
  }

  std::shared_ptr<NcclState> state_;
  std::shared_ptr<Comm> bootstrap_;  // MPI, for the unique id and host barriers
  cudaStream_t stream_ = nullptr;
#if ZRT_TORCH_HAS_CUDA
  std::unique_ptr<c10::cuda::CUDAStream> torch_stream_;
#endif
  std::thread watchdog_;
};

}  // namespace

bool nccl_available() { return true; }

std::string nccl_version() {
  int v = 0;
  ncclGetVersion(&v);
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
  return str(v / 10000, ".", (v / 100) % 100, ".", v % 100);
}

std::shared_ptr<Comm> make_nccl_comm(const CommOptions& options) {
  return std::make_shared<NcclComm>(make_mpi_comm(options), options.timeout_seconds, -1);
}

}  // namespace zrt::comm

#else  // !ZRT_WITH_NCCL

#include "core/error.h"

namespace zrt::comm {

bool nccl_available() { return false; }
std::string nccl_version() { return "not compiled in"; }
std::shared_ptr<Comm> make_nccl_comm(const CommOptions&) {
  throw CommError(
      "this ZeroRT build has no NCCL support (configure with the CUDA toolkit and NCCL installed, "
      "ZRT_WITH_NCCL=ON)");
}

}  // namespace zrt::comm

#endif  // ZRT_WITH_NCCL
