// The process-wide pool of worker threads used by the CPU kernels. A job runs one function on N
// threads (the caller is thread 0); jobs from different callers are serialised. The thread count
// comes from ZRT_NUM_THREADS, else from LibTorch's intra-op thread count.
#pragma once

#include <functional>

namespace zrt::kernels {

// Note [Kernel thread count]:
// ZRT_NUM_THREADS if set (1..4096), else LibTorch's intra-op thread count at::get_num_threads():
// at::set_num_threads(n) if the program called it, else OMP_NUM_THREADS (zrt-launch sets it to
// cores / ranks per node), else LibTorch's default, which on the builds tested here is the number
// of CPUs in the process's affinity mask (taskset and mpirun's core binding restrict it). So the
// Adam kernel runs on as many threads as LibTorch's own operators in the same step. At least 1.
// Throws ConfigError for a bad ZRT_NUM_THREADS. Read on every call (cheap).
int cpu_kernel_threads();

// Note [Kernel thread pool]:
// LibTorch's at::parallel_for is an inline template whose OpenMP pragma only takes effect in
// translation units compiled with -fopenmp; ZeroRT cannot add that flag (it would invalidate the
// shared precompiled header), so in our code at::parallel_for would run serially. The kernels
// therefore use this small pool: persistent threads, created on first use and grown on demand,
// woken through a condition variable per job. Waking costs a few microseconds, negligible against
// the ≥ 1 ms jobs it is used for (smaller jobs run inline on the caller).
//
// Runs fn(thread_index) for thread_index in [0, num_threads), the caller running index 0, and
// returns when all have finished. The first exception thrown by any fn is rethrown here. Calls
// from inside a job run everything inline on the calling thread. Like any thread pool it does not
// survive fork(): a forked child must not call the CPU kernels with more than one thread.
void run_on_threads(int num_threads, const std::function<void(int)>& fn);

}  // namespace zrt::kernels
