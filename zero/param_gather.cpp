#include "zero/param_gather.h"

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace zrt::zero {

void all_gather_flat(const FlatGroup& group, comm::Comm& comm, int64_t bucket_elements) {
  ZRT_INTERNAL_ASSERT(bucket_elements > 0);
  if (comm.size() == 1) return;
  const FlatPartition& part = group.partition();
  const ShardInfo mine = part.partition(comm.rank());
  std::vector<std::shared_ptr<comm::Work>> works;
  for (int64_t begin = 0; begin < part.padded_numel; begin += bucket_elements) {
    const int64_t end = std::min(part.padded_numel, begin + bucket_elements);
    const ShardInfo piece = intersect(mine, ShardInfo{begin, end - begin});
    at::Tensor out = group.flat().narrow(0, begin, end - begin);
    at::Tensor in = group.flat().narrow(0, piece.size > 0 ? piece.offset : begin, piece.size);
    works.push_back(comm.all_gather_v_async(out, in, group.counts_by_rank(begin, end)));
  }
  for (auto& w : works) w->wait();
}

}  // namespace zrt::zero
