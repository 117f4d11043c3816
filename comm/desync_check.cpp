#include "comm/desync_check.h"

#include <functional>

#include "core/error.h"

namespace zrt::comm {
namespace {

constexpr int kFields = 7;

int64_t counts_hash(const std::vector<int64_t>& counts) {
  uint64_t h = 1469598103934665603ULL;
  for (int64_t c : counts) {
    h ^= static_cast<uint64_t>(c);
    h *= 1099511628211ULL;
  }
  return static_cast<int64_t>(h);
}

std::string describe(const int64_t* f) {
  OpInfo info;
  info.type = static_cast<OpType>(f[0]);
  info.reduce_op = static_cast<ReduceOp>(f[1]);
  info.dtype = static_cast<at::ScalarType>(f[2]);
  info.numel = f[3];
  info.root = static_cast<int>(f[4]);
  info.seq = static_cast<uint64_t>(f[6]);
  return info.describe();
}

}  // namespace

DesyncCheckComm::DesyncCheckComm(std::shared_ptr<Comm> inner)
    : CommWrapper(std::move(inner), "desync_check") {}

void DesyncCheckComm::before_collective(const OpInfo& info) {
  const int n = size();
  at::Tensor mine = at::empty({kFields}, at::kLong);
  int64_t* f = mine.data_ptr<int64_t>();
  f[0] = static_cast<int64_t>(info.type);
  const bool reduction = info.type == OpType::kAllReduce || info.type == OpType::kReduceScatter ||
                         info.type == OpType::kReduceScatterV;
  f[1] = reduction ? static_cast<int64_t>(info.reduce_op) : 0;
  f[2] = info.type == OpType::kBarrier ? 0 : static_cast<int64_t>(info.dtype);
  f[3] = info.numel;
  f[4] = info.root;
  f[5] = counts_hash(info.counts);
  f[6] = static_cast<int64_t>(info.seq);
  if (device_type() != at::kCPU) mine = mine.to(device_type());
  at::Tensor all = at::empty({n * kFields}, mine.options());
  inner_->all_gather(all, mine);
  all = all.cpu();
  const int64_t* a = all.data_ptr<int64_t>();
  for (int r = 1; r < n; ++r) {
    bool same = true;
    for (int k = 0; k < kFields; ++k) same = same && a[r * kFields + k] == a[k];
    ZRT_CHECK_AS(CommError, same, "[rank ", rank(),
                 "] collective desynchronisation detected (ZRT_DEBUG_COLLECTIVES): rank 0 called ",
                 describe(a), " but rank ", r, " called ", describe(a + r * kFields));
  }
}

}  // namespace zrt::comm
