// BlockingCall: tells a CPU backend that the calling thread will wait for the collective it is
// submitting before doing anything else (see Note [The caller runs what it waits for],
// comm/op_queue.h).
#pragma once

namespace zrt::comm {

// Marks the calling thread, for its lifetime, as one that waits for the collective it submits
// before doing anything else. The blocking forms of Comm set it around their async call, so a
// backend may run that collective on the calling thread instead of handing it to another (Note
// [The caller runs what it waits for], comm/op_queue.h). Nests.
class BlockingCall {
 public:
  BlockingCall();
  ~BlockingCall();
  BlockingCall(const BlockingCall&) = delete;
  BlockingCall& operator=(const BlockingCall&) = delete;
  // Whether the calling thread is inside one.
  static bool active();
};

}  // namespace zrt::comm
