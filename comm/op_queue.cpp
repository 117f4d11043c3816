#include "comm/op_queue.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "core/logging.h"

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
};

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

struct OpQueue::Core {
  std::string label;
  int rank = 0;
  double timeout_seconds = 600;

  std::mutex mutex;
  std::condition_variable cv;  // signalled on every status change
  std::deque<std::shared_ptr<OpState>> pending;
  std::shared_ptr<OpState> running;
  bool stop = false;
  bool thread_exited = false;
  std::string fatal;  // non-empty once broken
  std::thread thread;
  CommTimes times;  // guarded by mutex

  void mark_broken(const std::string& message) {
    if (fatal.empty()) fatal = message;
    g_any_broken = true;
    cv.notify_all();
  }

  // Throws the timeout error if the running collective exceeded the deadline. Requires mutex.
  void check_deadline_locked() {
    if (!fatal.empty()) throw CommError(fatal);
    if (!running) return;
    const double waited = seconds_since(running->started);
    if (waited <= timeout_seconds) return;
    mark_broken(str("[rank ", rank, "] communication timeout: ", running->info.describe(),
                    " on the ", label, " communicator did not complete after ", waited,
                    " s (timeout ", timeout_seconds,
                    " s, set with ZRT_COMM_TIMEOUT or zrt.comm_timeout). Another rank probably "
                    "skipped this collective, stalled or died."));
    throw CommError(fatal);
  }

  void run() {
    for (;;) {
      std::shared_ptr<OpState> op;
      {
        std::unique_lock<std::mutex> lock(mutex);
        cv.wait(lock, [&] { return stop || !pending.empty(); });
        if (pending.empty()) break;  // stop requested and drained
        op = pending.front();
        pending.pop_front();
        if (!fatal.empty()) {
          op->status = Status::kFailed;
          op->error = std::make_exception_ptr(
              CommError(str(op->info.describe(), " not run: the communicator is broken: ", fatal)));
          op->body = nullptr;
          op->keep_alive.clear();
          cv.notify_all();
          continue;
        }
        op->status = Status::kRunning;
        op->started = Clock::now();
        running = op;
      }
      std::exception_ptr error;
      try {
        op->body();
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mutex);
      times.busy_seconds += seconds_since(op->started);
      times.collectives += 1;
      op->body = nullptr;
      op->keep_alive.clear();
      running.reset();
      if (error) {
        op->status = Status::kFailed;
        op->error = error;
        std::string what = "unknown error";
        try {
          std::rethrow_exception(error);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        mark_broken(str("[rank ", rank, "] ", op->info.describe(), " failed: ", what));
      } else {
        op->status = Status::kDone;
      }
      cv.notify_all();
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
    const Clock::time_point start = Clock::now();
    struct AddWaited {  // on every way out, including the throws
      OpQueue::Core& core;
      Clock::time_point start;
      ~AddWaited() { core.times.exposed_seconds += seconds_since(start); }
    } add_waited{*core_, start};
    for (;;) {
      if (op_->status == Status::kDone) return;
      if (op_->status == Status::kFailed) std::rethrow_exception(op_->error);
      core_->check_deadline_locked();
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

OpQueue::OpQueue(std::string label, int rank, double timeout_seconds)
    : core_(std::make_shared<Core>()) {
  ZRT_CHECK_AS(ConfigError, timeout_seconds > 0, "communication timeout must be positive, got ",
               timeout_seconds);
  core_->label = std::move(label);
  core_->rank = rank;
  core_->timeout_seconds = timeout_seconds;
  // The thread holds its own reference so a detached thread never touches freed memory.
  std::shared_ptr<Core> core = core_;
  core_->thread = std::thread([core] { core->run(); });
}

OpQueue::~OpQueue() {
  std::unique_lock<std::mutex> lock(core_->mutex);
  core_->stop = true;
  core_->cv.notify_all();
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
                                      std::vector<at::Tensor> keep_alive) {
  auto op = std::make_shared<OpState>();
  op->info = info;
  op->body = std::move(body);
  op->keep_alive = std::move(keep_alive);
  {
    std::lock_guard<std::mutex> lock(core_->mutex);
    if (!core_->fatal.empty()) {
      throw CommError(str(info.describe(), " refused: the ", core_->label,
                          " communicator is broken: ", core_->fatal));
    }
    core_->pending.push_back(op);
  }
  core_->cv.notify_all();
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

}  // namespace zrt::comm
