// The options of the asynchronous file I/O layer (aio/), as DeepSpeed's "aio" config section
// names them, with DeepSpeed's defaults. A leaf header: config/ fills it without depending on the
// module's internals.
#pragma once

#include <cstdint>

namespace zrt::aio {

// DeepSpeed's "aio" section, its defaults. IoEngine validates them (io_engine.h).
struct AioOptions {
  int64_t block_size = 1048576;  // bytes per request an operation is cut into (multiple of 4096)
  int64_t queue_depth = 8;       // requests in flight per thread
  // DeepSpeed's intra_op_parallelism: each operation is split over this many threads.
  int64_t thread_count = 1;
  bool single_submit = false;  // submit requests one syscall each instead of batched
  // Refill the queue as requests complete instead of waiting for the whole batch.
  bool overlap_events = true;
};

// Which kernel interface carries the requests. kAuto: io_uring, else libaio, else posix
// (pread/pwrite on the worker threads); ZRT_AIO_BACKEND overrides kAuto (io_engine.h).
enum class IoBackend { kAuto, kIoUring, kLibaio, kPosix };

}  // namespace zrt::aio
