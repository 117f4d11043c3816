// Internal: the state of an operation in flight and the worker thread that carries slices of
// operations through one Backend. Not part of the public API (io_engine.h is).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "aio/backend.h"
#include "aio/options.h"

namespace zrt::aio::detail {

// One read or write as the user asked for it; IoTicket holds it. Each of its slices reports
// here when it is finished.
struct OpState {
  std::string path;
  bool write = false;
  int64_t offset = 0;
  int64_t bytes = 0;

  std::mutex mutex;
  std::condition_variable finished;
  int slices_left = 0;              // guarded by mutex
  std::string error;                // the first failure; guarded by mutex
  std::atomic<bool> failed{false};  // set with error; workers stop issuing its requests

  const char* kind() const { return write ? "write" : "read"; }
  void fail(const std::string& message);
  void finish_slice();
};

// A contiguous part of an operation that one worker carries.
struct Slice {
  std::shared_ptr<OpState> op;
  int fd = -1;
  int64_t offset = 0;
  char* buffer = nullptr;
  int64_t bytes = 0;
  int64_t issued = 0;  // bytes handed out as requests so far
  int in_flight = 0;   // its requests not yet completed
};

struct ByteCounters {
  std::atomic<int64_t> read{0};
  std::atomic<int64_t> written{0};
};

// Note [Worker loop]:
// A worker owns one Backend and `queue_depth` request slots. It takes slices in FIFO order and
// cuts them into block_size requests. With overlap_events it refills a slot as soon as its request
// completes, moving on to the next queued slice (of the next operation) as soon as the current one
// is fully issued, so a read can start while the tail of a write is still in flight. Without it,
// it issues a batch of up to queue_depth requests and waits for the whole batch. single_submit
// hands each request to the kernel with its own syscall. A completion shorter than its request
// (res > 0) is resubmitted for the remainder; res == 0 means the file ended (read) or nothing was
// written: an error. After an operation's first failure its remaining requests are not issued.
// A worker blocked on completions sees newly queued slices at its next completion.
class IoWorker {
 public:
  IoWorker(std::unique_ptr<Backend> backend, const AioOptions& options, ByteCounters* counters);
  ~IoWorker();  // finishes every queued slice, then joins; never throws
  IoWorker(const IoWorker&) = delete;
  IoWorker& operator=(const IoWorker&) = delete;

  void push(Slice slice);
  const char* backend_name() const { return backend_->name(); }

 private:
  struct RequestSlot {
    Slice* slice = nullptr;
    int64_t offset = 0;  // the request as first issued
    int64_t bytes = 0;
    int64_t done = 0;  // bytes completed so far (partial completions)
    bool inject_failure = false;
  };

  void run();
  void step();
  bool take_queued();
  void issue();
  void prepare(uint64_t tag);
  void complete(const IoCompletion& completion);
  void release(uint64_t tag);
  void sweep_finished();
  void fail_everything(const std::string& message);

  std::unique_ptr<Backend> backend_;
  const AioOptions options_;
  ByteCounters* counters_;
  std::vector<RequestSlot> slots_;
  std::vector<uint64_t> free_slots_;
  std::vector<IoCompletion> completions_;
  std::list<Slice> active_;  // slices being carried, FIFO; only the worker thread touches it
  int in_flight_ = 0;
  bool broken_ = false;  // the backend failed as a whole (Backend::submit/wait threw)
  std::string broken_message_;

  std::mutex mutex_;
  std::condition_variable wake_;
  std::list<Slice> queued_;  // guarded by mutex_
  bool stop_ = false;        // guarded by mutex_
  std::thread thread_;
};

}  // namespace zrt::aio::detail
