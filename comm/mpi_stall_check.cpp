#include "comm/mpi_stall_check.h"

#if ZRT_WITH_MPI

#include <cstring>
#include <deque>
#include <map>
#include <mutex>

#include "core/error.h"

namespace zrt::comm {
namespace {

constexpr int kTagStall = 7303;  // apart from the ring's and all-to-all's tags (mpi_comm.cpp)
constexpr int64_t kMagic = 0x7a72745374616c6cLL;
constexpr size_t kContextBytes = 192;

// One rank's description of the collective it is stuck in, as sent to its neighbours.
struct Report {
  int64_t magic = kMagic;
  int64_t seq = 0;
  int64_t type = 0;
  int64_t reduce_op = 0;
  int64_t dtype = 0;
  int64_t numel = 0;
  int64_t root = 0;
  int64_t counts_hash = 0;
  char context[kContextBytes] = {};
};
static_assert(sizeof(Report) == 256, "a stall report is 256 bytes on the wire");

Report report_of(const OpInfo& info) {
  Report r;
  r.seq = static_cast<int64_t>(info.seq);
  r.type = static_cast<int64_t>(info.type);
  r.reduce_op = static_cast<int64_t>(info.reduce_op);
  r.dtype = static_cast<int64_t>(info.dtype);
  r.numel = info.numel;
  r.root = info.root;
  uint64_t h = 1469598103934665603ULL;  // FNV-1a over the *_v counts
  for (int64_t c : info.counts) h = (h ^ static_cast<uint64_t>(c)) * 1099511628211ULL;
  r.counts_hash = static_cast<int64_t>(h);
  std::strncpy(r.context, info.context.c_str(), kContextBytes - 1);
  return r;
}

// Whether two reports describe the same call (the context is for the message only).
bool same_call(const Report& a, const Report& b) {
  return a.seq == b.seq && a.type == b.type && a.reduce_op == b.reduce_op && a.dtype == b.dtype &&
         a.numel == b.numel && a.root == b.root && a.counts_hash == b.counts_hash;
}

std::string describe(const Report& r) {
  OpInfo info;
  info.type = static_cast<OpType>(r.type);
  info.reduce_op = static_cast<ReduceOp>(r.reduce_op);
  info.dtype = static_cast<at::ScalarType>(r.dtype);
  info.numel = r.numel;
  info.root = static_cast<int>(r.root);
  info.seq = static_cast<uint64_t>(r.seq);
  info.context.assign(r.context, strnlen(r.context, kContextBytes));
  return info.describe();
}

bool mpi_usable() {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

class MpiStallCheck final : public StallCheck {
 public:
  MpiStallCheck(MPI_Comm comm, int rank, int size, std::string label)
      : comm_(comm), rank_(rank), label_(std::move(label)) {
    for (int peer : {(rank + 1) % size, (rank - 1 + size) % size}) {
      if (peer != rank && (neighbours_.empty() || neighbours_.front() != peer)) {
        neighbours_.push_back(peer);
      }
    }
  }

  ~MpiStallCheck() override {
    if (!mpi_usable()) return;
    for (Pending& p : pending_) {  // a send still in flight completes on its own
      if (p.request != MPI_REQUEST_NULL) MPI_Request_free(&p.request);
    }
  }

  std::string check(const OpInfo& running) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const Report mine = report_of(running);
    if (mine.seq != sent_seq_) {
      sent_seq_ = mine.seq;
      send(mine);
    }
    receive_all();
    for (const auto& [peer, theirs] : latest_) {
      if (theirs.seq == mine.seq && !same_call(theirs, mine)) {
        return str("[rank ", rank_, "] ranks out of step on the ", label_,
                   " communicator: this rank is in ", describe(mine), " but rank ", peer,
                   " is in ", describe(theirs),
                   "; each waits for the other, so neither can complete. The ranks issued "
                   "different collectives (one skipped or added one). Under ZeRO-3 this is ranks "
                   "running different modules (routed experts, early exits): put the modules that "
                   "only some ranks run inside one ShardUnit, a leaf (docs/DESIGN.md, \"Ranks "
                   "running different modules\").");
      }
    }
    return {};
  }

 private:
  struct Pending {
    Report report;
    MPI_Request request = MPI_REQUEST_NULL;
  };

  void send(const Report& r) {
    while (!pending_.empty()) {  // completed sends leave from the front (addresses stay valid)
      int done = 0;
      MPI_Test(&pending_.front().request, &done, MPI_STATUS_IGNORE);
      if (!done) break;
      pending_.pop_front();
    }
    for (int peer : neighbours_) {
      pending_.push_back(Pending{r, MPI_REQUEST_NULL});
      Pending& p = pending_.back();
      const int rc =
          MPI_Isend(&p.report, sizeof(Report), MPI_BYTE, peer, kTagStall, comm_, &p.request);
      ZRT_CHECK_AS(CommError, rc == MPI_SUCCESS, "stall report to rank ", peer, " failed (", rc,
                   ")");
    }
  }

  // Takes every report that arrived; only the latest of each neighbour counts.
  void receive_all() {
    for (;;) {
      int found = 0;
      MPI_Message message;
      MPI_Status status;
      const int rc = MPI_Improbe(MPI_ANY_SOURCE, kTagStall, comm_, &found, &message, &status);
      ZRT_CHECK_AS(CommError, rc == MPI_SUCCESS, "stall report probe failed (", rc, ")");
      if (!found) return;
      Report r;
      r.magic = 0;
      MPI_Mrecv(&r, sizeof(Report), MPI_BYTE, &message, MPI_STATUS_IGNORE);
      if (r.magic == kMagic) latest_[status.MPI_SOURCE] = r;
    }
  }

  MPI_Comm comm_;
  int rank_;
  std::string label_;
  std::vector<int> neighbours_;
  std::mutex mutex_;
  int64_t sent_seq_ = 0;
  std::deque<Pending> pending_;
  std::map<int, Report> latest_;
};

}  // namespace

std::shared_ptr<StallCheck> make_mpi_stall_check(MPI_Comm comm, int rank, int size,
                                                 std::string label) {
  return std::make_shared<MpiStallCheck>(comm, rank, size, std::move(label));
}

}  // namespace zrt::comm

#endif  // ZRT_WITH_MPI
