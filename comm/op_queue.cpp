#include "comm/op_queue.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "comm/blocking_call.h"
#include "core/env.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/tool_main.h"

namespace zrt::comm {
namespace {

using Clock = std::chrono::steady_clock;
std::atomic<bool> g_any_broken{false};

enum class Status { kQueued, kRunning, kDone, kFailed };

struct OpState {
  OpInfo info;
  std::function<void()> body;
  std::vector<at::Tensor> keep_alive;
  Status status = Status::kQueued;  // guarded by Core::mutex
  std::exception_ptr error;         // set when kFailed
  Clock::time_point started;
  Clock::time_point finished;  // when it ended (guarded by Core::mutex); a waiter's wait ends here
  std::shared_ptr<StallCheck> stall;  // Note [Stalled collectives]; set before it is queued
  Clock::time_point next_stall_check;  // guarded by Core::mutex
};

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

struct OpQueue::Core {
  std::string label;
  int rank = 0;
  double timeout_seconds = 600;
  bool caller_runs = false;

  std::mutex mutex;
  std::condition_variable cv;       // signalled on every status change (for waiters)
  std::condition_variable work_cv;  // signalled for the queue's thread: new work or stop
  std::deque<std::shared_ptr<OpState>> pending;
  std::shared_ptr<OpState> running;
  bool stop = false;
  bool thread_exited = false;
  std::string fatal;  // non-empty once broken
  double stall_seconds = 2.0;  // Note [Stalled collectives]; 0: never check
  bool stall_checking = false;  // a thread is running a StallCheck (guarded by mutex)
  std::thread thread;
  CommTimes times;  // guarded by mutex
  // Note [Waited time is a union]: threads can wait at once (the step and a backward hook).
  // busy_seconds adds the time during which at least one collective was queued or running, and
  // exposed_seconds the time during which at least one caller waited for a collective that had
  // not ended yet: a wait counts until the waited collective's end (not until the waiter wakes
  // up), so every waited moment lies in some collective's queued-or-running time and the time
  // waited never exceeds the communication time reported. Guarded by mutex.
  struct UnionTimer {  // adds to `*total` the time during which some interval is open
    double* total;
    int open = 0;
    Clock::time_point since, until;
    void begin(Clock::time_point at) {
      if (open++ == 0) since = until = at;
    }
    void end(Clock::time_point at) {
      until = std::max(until, at);
      if (--open == 0) *total += std::chrono::duration<double>(until - since).count();
    }
  };
  UnionTimer in_flight{&times.busy_seconds};  // collectives queued or running
  UnionTimer waiting{&times.exposed_seconds};  // callers waiting for one
  void begin_flight_locked() { in_flight.begin(Clock::now()); }
  void end_flight_locked(OpState& op) {
    op.finished = Clock::now();
    in_flight.end(op.finished);
  }
  void begin_wait_locked() { waiting.begin(Clock::now()); }
  // The wait for `op` ends when op ended, if it has (else now: a wait given up on a failure).
  void end_wait_locked(const OpState& op) {
    const bool ended = op.status == Status::kDone || op.status == Status::kFailed;
    waiting.end(ended ? std::min(Clock::now(), op.finished) : Clock::now());
  }

  void mark_broken(const std::string& message) {
    if (fatal.empty()) fatal = message;
    g_any_broken = true;
    cv.notify_all();
  }

  // How late the queue's thread may notice a caller's collective: a quarter of the deadline, at
  // most a second.
  double watch_period() const { return std::min(1.0, timeout_seconds / 4); }

  std::string timeout_message(const OpState& op, double waited) const {
    return str("[rank ", rank, "] communication timeout: ", op.info.describe(), " on the ", label,
               " communicator did not complete after ", waited, " s (timeout ", timeout_seconds,
               " s, set with ZRT_COMM_TIMEOUT or zrt.comm_timeout). Another rank probably "
               "skipped this collective, stalled or died.");
  }

  // Throws the timeout error if the running collective exceeded the deadline. Requires mutex.
  void check_deadline_locked() {
    if (!fatal.empty()) throw CommError(fatal);
    if (!running) return;
    const double waited = seconds_since(running->started);
    if (waited <= timeout_seconds) return;
    mark_broken(timeout_message(*running, waited));
    throw CommError(fatal);
  }

  // Requires mutex.
  void start_locked(const std::shared_ptr<OpState>& op) {
    op->status = Status::kRunning;
    op->started = Clock::now();
    op->next_stall_check = op->started + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double>(stall_seconds));
    running = op;
  }

  // Seconds until the running collective's next stall check is due (a large value if it has
  // none). Requires mutex.
  double until_stall_check_locked() const {
    if (!running || !running->stall || stall_seconds <= 0 || !fatal.empty()) return 3600.0;
    return std::max(0.0, std::chrono::duration<double>(running->next_stall_check - Clock::now())
                             .count());
  }

  // Runs the running collective's StallCheck if it is due (Note [Stalled collectives]), with the
  // mutex released meanwhile, and breaks the communicator on a verdict. Returns the verdict (empty:
  // none). Requires mutex, held through `lock`.
  std::string check_stall_locked(std::unique_lock<std::mutex>& lock) {
    if (stall_checking || until_stall_check_locked() > 0) return {};
    std::shared_ptr<OpState> op = running;
    op->next_stall_check = Clock::now() + std::chrono::milliseconds(500);
    stall_checking = true;
    lock.unlock();
    std::string verdict;
    try {
      verdict = op->stall->check(op->info);
    } catch (const std::exception& e) {
      ZRT_LOG_WARN("[rank ", rank, "] stall check of ", op->info.describe(), " failed: ",
                   e.what());
    }
    lock.lock();
    stall_checking = false;
    if (!verdict.empty()) mark_broken(verdict);
    return verdict;
  }

  static std::exception_ptr run_body(OpState& op) {
    try {
      op.body();
    } catch (...) {
      return std::current_exception();
    }
    return nullptr;
  }

  // Records the end of the running collective `op` and wakes every waiter. Requires mutex.
  void finish_locked(OpState& op, std::exception_ptr error) {
    end_flight_locked(op);
    times.collectives += 1;
    op.body = nullptr;
    op.keep_alive.clear();
    running.reset();
    if (error) {
      op.status = Status::kFailed;
      op.error = error;
      std::string what = "unknown error";
      bool comm_error = false;
      try {
        std::rethrow_exception(error);
      } catch (const CommError& e) {
        what = e.what();
        comm_error = true;
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      const std::string message = str("[rank ", rank, "] ", op.info.describe(), " failed: ", what);
      // The caller learns which collective failed, and what for (OpInfo::context).
      if (comm_error) op.error = std::make_exception_ptr(CommError(message));
      mark_broken(message);
    } else {
      op.status = Status::kDone;
    }
    cv.notify_all();
  }

  // The queue's thread while a caller runs a collective itself: sleeps until its deadline (or
  // new work) and ends the process once it outlives it (Note [The caller runs what it waits
  // for]). Requires mutex; `running` is the caller's collective.
  void watch_caller_locked(std::unique_lock<std::mutex>& lock) {
    const double waited = seconds_since(running->started);
    std::string message;
    if (waited <= timeout_seconds) {
      // At most an hour at a time: the loop looks again (and huge timeouts cannot overflow).
      const double sleep = std::min({3600.0, timeout_seconds - waited + 1e-3,
                                     until_stall_check_locked() + 1e-3});
      work_cv.wait_for(lock, std::chrono::duration<double>(sleep));
      if (!running) return;
      message = check_stall_locked(lock);
      if (message.empty()) return;
    } else {
      message = timeout_message(*running, waited);
    }
    mark_broken(message);
    lock.unlock();
    exit_with_error(message, ExitCode::kComm);
  }

  void run() {
    for (;;) {
      std::shared_ptr<OpState> op;
      {
        std::unique_lock<std::mutex> lock(mutex);
        for (;;) {
          if (running) {
            watch_caller_locked(lock);  // only a caller's collective runs while we are here
          } else if (!pending.empty() || stop) {
            break;
          } else if (caller_runs) {
            // A caller may start a collective without waking us: look every watch period.
            work_cv.wait_for(lock, std::chrono::duration<double>(watch_period()));
          } else {
            work_cv.wait(lock);
          }
        }
        if (pending.empty()) break;  // stop requested and drained
        op = pending.front();
        pending.pop_front();
        if (!fatal.empty()) {
          op->status = Status::kFailed;
          op->error = std::make_exception_ptr(
              CommError(str(op->info.describe(), " not run: the communicator is broken: ", fatal)));
          op->body = nullptr;
          op->keep_alive.clear();
          end_flight_locked(*op);
          cv.notify_all();
          continue;
        }
        start_locked(op);
      }
      std::exception_ptr error = run_body(*op);
      std::lock_guard<std::mutex> lock(mutex);
      finish_locked(*op, error);
    }
    std::lock_guard<std::mutex> lock(mutex);
    thread_exited = true;
    cv.notify_all();
  }
};

namespace {

class QueuedWork final : public Work {
 public:
  QueuedWork(std::shared_ptr<OpQueue::Core> core, std::shared_ptr<OpState> op)
      : core_(std::move(core)), op_(std::move(op)) {}

  void wait() override {
    std::unique_lock<std::mutex> lock(core_->mutex);
    struct AddWaited {  // on every way out, including the throws (the lock is held then)
      OpQueue::Core& core;
      const OpState& op;
      AddWaited(OpQueue::Core& c, const OpState& o) : core(c), op(o) { core.begin_wait_locked(); }
      ~AddWaited() { core.end_wait_locked(op); }
    } add_waited{*core_, *op_};
    for (;;) {
      if (op_->status == Status::kDone) return;
      if (op_->status == Status::kFailed) std::rethrow_exception(op_->error);
      core_->check_deadline_locked();
      if (!core_->check_stall_locked(lock).empty()) throw CommError(core_->fatal);
      core_->cv.wait_for(lock, std::chrono::milliseconds(50));
    }
  }

  bool is_completed() override {
    std::lock_guard<std::mutex> lock(core_->mutex);
    return op_->status == Status::kDone || op_->status == Status::kFailed;
  }

 private:
  std::shared_ptr<OpQueue::Core> core_;
  std::shared_ptr<OpState> op_;
};

}  // namespace

OpQueue::OpQueue(std::string label, int rank, double timeout_seconds, bool caller_runs)
    : core_(std::make_shared<Core>()) {
  ZRT_CHECK_AS(ConfigError, timeout_seconds > 0, "communication timeout must be positive, got ",
               timeout_seconds);
  core_->label = std::move(label);
  core_->rank = rank;
  core_->timeout_seconds = timeout_seconds;
  core_->caller_runs = caller_runs;
  core_->stall_seconds = stall_check_seconds_from_env();
  // The thread holds its own reference so a detached thread never touches freed memory.
  std::shared_ptr<Core> core = core_;
  core_->thread = std::thread([core] { core->run(); });
}

OpQueue::~OpQueue() {
  std::unique_lock<std::mutex> lock(core_->mutex);
  core_->stop = true;
  core_->work_cv.notify_all();
  const auto deadline = Clock::now() + std::chrono::duration<double>(core_->timeout_seconds);
  const bool exited = core_->cv.wait_until(lock, deadline, [&] {
    return core_->thread_exited || (!core_->fatal.empty() && core_->running);
  });
  const bool joinable = exited && core_->thread_exited;
  if (!joinable) {
    core_->mark_broken(str("[rank ", core_->rank, "] ", core_->label,
                           " communicator destroyed while a collective was still running"));
  }
  lock.unlock();
  if (joinable) {
    core_->thread.join();
  } else {
    core_->thread.detach();  // blocked in a collective that will never finish
  }
}

std::shared_ptr<Work> OpQueue::submit(const OpInfo& info, std::function<void()> body,
                                      std::vector<at::Tensor> keep_alive,
                                      std::shared_ptr<StallCheck> stall) {
  auto op = std::make_shared<OpState>();
  op->info = info;
  op->stall = std::move(stall);
  op->body = std::move(body);
  op->keep_alive = std::move(keep_alive);
  {
    std::unique_lock<std::mutex> lock(core_->mutex);
    if (!core_->fatal.empty()) {
      throw CommError(str(info.describe(), " refused: the ", core_->label,
                          " communicator is broken: ", core_->fatal));
    }
    core_->begin_flight_locked();
    if (core_->caller_runs && BlockingCall::active() && core_->pending.empty() &&
        !core_->running) {
      // Note [The caller runs what it waits for]
      core_->start_locked(op);
      core_->begin_wait_locked();  // the caller waits it all
      lock.unlock();
      std::exception_ptr error = Core::run_body(*op);
      lock.lock();
      core_->finish_locked(*op, error);
      core_->end_wait_locked(*op);
      // Another thread may have queued a collective meanwhile: the queue's thread, asleep until
      // this one's deadline, starts it now.
      if (!core_->pending.empty()) core_->work_cv.notify_all();
      return std::make_shared<QueuedWork>(core_, std::move(op));
    }
    core_->pending.push_back(op);
  }
  core_->work_cv.notify_all();
  return std::make_shared<QueuedWork>(core_, std::move(op));
}

void OpQueue::drain() {
  std::shared_ptr<OpState> last;
  {
    std::lock_guard<std::mutex> lock(core_->mutex);
    if (!core_->pending.empty()) {
      last = core_->pending.back();
    } else if (core_->running) {
      last = core_->running;
    }
  }
  if (last) QueuedWork(core_, last).wait();
}

bool OpQueue::broken() const {
  std::lock_guard<std::mutex> lock(core_->mutex);
  return !core_->fatal.empty();
}

double OpQueue::timeout_seconds() const { return core_->timeout_seconds; }

CommTimes OpQueue::times() const {
  std::lock_guard<std::mutex> lock(core_->mutex);
  return core_->times;
}

bool any_comm_broken() { return g_any_broken; }

double stall_check_seconds_from_env() {
  const double s = env::get_double("ZRT_COMM_STALL_CHECK").value_or(2.0);
  ZRT_CHECK_AS(ConfigError, s >= 0, "ZRT_COMM_STALL_CHECK must be >= 0 seconds (0: off), got ", s);
  return s;
}

}  // namespace zrt::comm
