// Closed-form checks of all_to_all and of sub-communicators (Note [Sub-communicators] in
// comm/comm.h), shared by the in-process and the MPI test binaries. Each function must be called
// by every rank of `comm`.
#pragma once

#include <memory>
#include <string>

#include "tests/comm/collective_checks.h"

namespace zrt::test {

// Rank r sends 1000·r + 10·q + (k mod 10) as element k of its chunk q; chunk q of rank r's output
// must hold rank q's chunk r.
inline void check_all_to_all(comm::Comm& comm, at::ScalarType dtype, int64_t c) {
  const int r = comm.rank();
  const int w = comm.size();
  auto value = [&](int from, int to) {
    return at::arange(c, at::kLong).remainder(10).add(1000 * from + 10 * to).to(dtype);
  };
  at::Tensor in = at::empty({c * w}, dtype);
  for (int q = 0; q < w; ++q) in.narrow(0, q * c, c).copy_(value(r, q));
  at::Tensor out = at::full({c * w}, 7, dtype);
  comm.all_to_all(out, in);
  at::Tensor want = at::empty({c * w}, dtype);
  for (int q = 0; q < w; ++q) want.narrow(0, q * c, c).copy_(value(q, r));
  expect_equal(out, want, "all_to_all " + std::string(c10::toString(dtype)) +
                              " c=" + std::to_string(c));
}

// split(): ranks of one parity, in reverse order of rank; collectives on the parts and on the
// parent in turn; and split_by_host()'s ranks agree with local_rank()/local_size().
inline void check_split(comm::Comm& comm) {
  const int r = comm.rank();
  const int w = comm.size();
  std::shared_ptr<comm::Comm> part = comm.split(r % 2, -r);
  const int members = (w - r % 2 + 1) / 2;
  ASSERT_EQ(part->size(), members);
  // Ranks of parity p by descending rank: the largest is 0.
  int expected_rank = 0;
  for (int k = r + 2; k < w; k += 2) ++expected_rank;
  EXPECT_EQ(part->rank(), expected_rank);
  at::Tensor x = at::full({3}, r, at::kLong);
  part->all_reduce(x);
  int64_t sum = 0;
  for (int k = r % 2; k < w; k += 2) sum += k;
  EXPECT_EQ(x[0].item<int64_t>(), sum);
  at::Tensor y = at::full({1}, 1, at::kLong);
  comm.all_reduce(y);
  EXPECT_EQ(y.item<int64_t>(), w);
  check_all_to_all(*part, at::kFloat, 5);
  std::shared_ptr<comm::Comm> host = comm.split_by_host();
  EXPECT_EQ(host->size(), comm.local_size());
  EXPECT_EQ(host->rank(), comm.local_rank());
  at::Tensor z = at::ones({1}, at::kInt);
  host->all_reduce(z);
  EXPECT_EQ(z.item<int>(), comm.local_size());
}

// all_to_all at every dtype and awkward size.
inline void check_all_to_all_everywhere(comm::Comm& comm) {
  for (at::ScalarType dtype : all_dtypes()) {
    for (int64_t n : awkward_sizes(comm.size())) check_all_to_all(comm, dtype, n);
  }
}

}  // namespace zrt::test
