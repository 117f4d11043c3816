#include "aio/io_worker.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <utility>

#include "aio/fault_injection.h"
#include "core/error.h"

namespace zrt::aio::detail {
namespace {

std::string request_text(const OpState& op, int64_t offset, int64_t bytes) {
  return str(op.kind(), " of ", op.path, " at byte ", offset, " (", bytes, " bytes)");
}

std::string operation_text(const OpState& op) {
  return str(" (in the ", op.kind(), " of ", op.bytes, " bytes at byte ", op.offset, ")");
}

}  // namespace

void OpState::fail(const std::string& message) {
  std::lock_guard<std::mutex> lock(mutex);
  if (error.empty()) error = message;
  failed = true;
}

void OpState::finish_slice() {
  std::lock_guard<std::mutex> lock(mutex);
  ZRT_INTERNAL_ASSERT(slices_left > 0, "slice finished twice");
  if (--slices_left == 0) finished.notify_all();
}

IoWorker::IoWorker(std::unique_ptr<Backend> backend, const AioOptions& options,
                   ByteCounters* counters)
    : backend_(std::move(backend)), options_(options), counters_(counters) {
  const auto depth = static_cast<size_t>(options_.queue_depth);
  slots_.resize(depth);
  completions_.resize(depth);
  for (size_t i = depth; i > 0; --i) free_slots_.push_back(i - 1);
  thread_ = std::thread([this] { run(); });
}

IoWorker::~IoWorker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void IoWorker::push(Slice slice) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queued_.push_back(std::move(slice));
  }
  wake_.notify_all();
}

void IoWorker::run() {
  while (take_queued()) {
    try {
      step();
    } catch (const std::exception& e) {
      fail_everything(e.what());
    }
  }
}

// Moves newly queued slices to active_, sleeping while there is nothing to do. False once the
// engine stops and everything is finished.
bool IoWorker::take_queued() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (active_.empty() && in_flight_ == 0) {
    wake_.wait(lock, [this] { return stop_ || !queued_.empty(); });
  }
  active_.splice(active_.end(), queued_);
  return !(stop_ && active_.empty() && in_flight_ == 0);
}

// One round of Note [Worker loop]: issue what the mode allows, then handle one wait's worth of
// completions.
void IoWorker::step() {
  if (broken_) {
    fail_everything(broken_message_);
    return;
  }
  if (options_.overlap_events || in_flight_ == 0) issue();
  sweep_finished();
  if (in_flight_ == 0) return;
  const int n = backend_->wait(completions_.data(), static_cast<int>(completions_.size()));
  bool resubmitted = false;
  for (int i = 0; i < n; ++i) {
    const int before = in_flight_;
    complete(completions_[i]);
    resubmitted |= in_flight_ == before;  // a partial completion went back in
  }
  if (resubmitted && !options_.single_submit) backend_->submit();
  sweep_finished();
}

void IoWorker::issue() {
  bool prepared = false;
  for (Slice& slice : active_) {
    while (!free_slots_.empty() && slice.issued < slice.bytes && !slice.op->failed) {
      const uint64_t tag = free_slots_.back();
      free_slots_.pop_back();
      RequestSlot& slot = slots_[tag];
      slot.slice = &slice;
      slot.offset = slice.offset + slice.issued;
      slot.bytes = std::min(options_.block_size, slice.bytes - slice.issued);
      slot.done = 0;
      slot.inject_failure = take_injected_failure(slice.op->write);
      slice.issued += slot.bytes;
      ++slice.in_flight;
      ++in_flight_;
      prepare(tag);
      prepared = true;
    }
    if (free_slots_.empty()) break;
  }
  if (prepared && !options_.single_submit) backend_->submit();
}

// Hands the rest of slot `tag`'s request (all of it unless a partial completion came back) to
// the backend; submits at once with single_submit.
void IoWorker::prepare(uint64_t tag) {
  const RequestSlot& slot = slots_[tag];
  const Slice& slice = *slot.slice;
  IoRequest request;
  request.fd = slice.fd;
  request.write = slice.op->write;
  request.offset = slot.offset + slot.done;
  request.buffer = slice.buffer + (slot.offset - slice.offset) + slot.done;
  request.bytes = slot.bytes - slot.done;
  request.tag = tag;
  backend_->prepare(request);
  if (options_.single_submit) backend_->submit();
}

void IoWorker::complete(const IoCompletion& completion) {
  ZRT_INTERNAL_ASSERT(completion.tag < slots_.size() && slots_[completion.tag].slice != nullptr,
                      "completion with unknown tag ", completion.tag);
  RequestSlot& slot = slots_[completion.tag];
  OpState& op = *slot.slice->op;
  int64_t result = completion.result;
  if (slot.inject_failure) {  // ZRT_AIO_FAIL: as if the device had answered EIO
    slot.inject_failure = false;
    result = -EIO;
  }
  if (result < 0) {
    op.fail(str(request_text(op, slot.offset, slot.bytes),
                " failed: ", std::strerror(static_cast<int>(-result)), operation_text(op)));
  } else if (result == 0) {
    op.fail(str(op.kind(), " of ", op.path, " at byte ", slot.offset, " returned ", slot.done,
                " of ", slot.bytes, " bytes: ",
                op.write ? "nothing more was written" : "file ended", operation_text(op)));
  } else {
    ZRT_INTERNAL_ASSERT(result <= slot.bytes - slot.done, "completion of ", result,
                        " bytes for a request of ", slot.bytes - slot.done);
    (op.write ? counters_->written : counters_->read) += result;
    slot.done += result;
    if (slot.done < slot.bytes && !op.failed) {
      prepare(completion.tag);  // partial completion: the remainder goes back in
      return;
    }
  }
  release(completion.tag);
}

void IoWorker::release(uint64_t tag) {
  RequestSlot& slot = slots_[tag];
  --slot.slice->in_flight;
  --in_flight_;
  slot.slice = nullptr;
  free_slots_.push_back(tag);
}

// Reports and drops the slices with nothing left in flight and nothing (more) to issue.
void IoWorker::sweep_finished() {
  for (auto it = active_.begin(); it != active_.end();) {
    const bool issued_all = it->issued >= it->bytes || it->op->failed;
    if (issued_all && it->in_flight == 0) {
      it->op->finish_slice();
      it = active_.erase(it);
    } else {
      ++it;
    }
  }
}

// The backend failed as a whole: every operation this worker holds fails with its message, and so
// will every later one. Requests still in the kernel are abandoned (their buffers may yet be
// touched; the engine cannot recover them).
void IoWorker::fail_everything(const std::string& message) {
  if (!broken_) {
    broken_ = true;
    broken_message_ = str("aio ", backend_->name(), " backend failed: ", message);
  }
  for (RequestSlot& slot : slots_) slot.slice = nullptr;
  free_slots_.clear();
  for (size_t i = slots_.size(); i > 0; --i) free_slots_.push_back(i - 1);
  in_flight_ = 0;
  for (Slice& slice : active_) {
    slice.op->fail(str(slice.op->kind(), " of ", slice.op->path, ": ", broken_message_));
    slice.op->finish_slice();
  }
  active_.clear();
}

}  // namespace zrt::aio::detail
