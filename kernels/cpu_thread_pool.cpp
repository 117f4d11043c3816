// The CPU kernels' worker pool (Note [Kernel thread pool] in cpu_thread_pool.h).
#include "kernels/cpu_thread_pool.h"

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include <ATen/Parallel.h>

#include "core/env.h"
#include "core/error.h"

namespace zrt::kernels {
namespace {

thread_local bool t_inside_job = false;

class ThreadPool {
 public:
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

  void run(int num_threads, const std::function<void(int)>& fn) {
    std::lock_guard<std::mutex> job_lock(job_mutex_);
    {
      std::unique_lock<std::mutex> lock(mutex_);
      while (static_cast<int>(workers_.size()) < num_threads - 1) {
        const int index = static_cast<int>(workers_.size()) + 1;
        // The new worker must take part in the job announced below, so it starts from the
        // generation before it.
        workers_.emplace_back([this, index, g = generation_] { worker_loop(index, g); });
      }
      fn_ = &fn;
      participants_ = num_threads;
      pending_ = num_threads - 1;
      error_ = nullptr;
      ++generation_;
    }
    work_cv_.notify_all();
    run_one(fn, 0);
    std::unique_lock<std::mutex> lock(mutex_);
    done_cv_.wait(lock, [this] { return pending_ == 0; });
    fn_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void run_one(const std::function<void(int)>& fn, int index) {
    t_inside_job = true;
    try {
      fn(index);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    t_inside_job = false;
  }

  void worker_loop(int index, uint64_t seen) {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (index >= participants_) continue;
      const std::function<void(int)>* fn = fn_;
      lock.unlock();
      run_one(*fn, index);
      lock.lock();
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }

  std::mutex job_mutex_;  // one job at a time
  std::mutex mutex_;      // guards everything below
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::vector<std::thread> workers_;  // worker i runs thread index i + 1
  const std::function<void(int)>* fn_ = nullptr;
  int participants_ = 0;
  int pending_ = 0;
  uint64_t generation_ = 0;
  std::exception_ptr error_;
  bool stop_ = false;
};

ThreadPool& pool() {
  static ThreadPool instance;
  return instance;
}

}  // namespace

int cpu_kernel_threads() {
  if (auto n = env::get_int(env::kNumThreads)) {
    ZRT_CHECK_AS(ConfigError, *n >= 1 && *n <= 4096, "environment variable ", env::kNumThreads, "=",
                 *n, " must be between 1 and 4096");
    return static_cast<int>(*n);
  }
  // Note [Kernel thread count]: LibTorch's intra-op count.
  return std::max(1, at::get_num_threads());
}

void run_on_threads(int num_threads, const std::function<void(int)>& fn) {
  ZRT_INTERNAL_ASSERT(num_threads >= 1, "num_threads=", num_threads);
  if (num_threads == 1 || t_inside_job) {
    for (int i = 0; i < num_threads; ++i) fn(i);
    return;
  }
  pool().run(num_threads, fn);
}

}  // namespace zrt::kernels
