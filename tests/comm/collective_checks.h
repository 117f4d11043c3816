// Closed-form checks of every collective, shared by the in-process and the MPI test binaries.
// Each function must be called by every rank of `comm` with the same arguments. Inputs are small
// integers so that every dtype (bf16 and fp16 included) represents inputs and results exactly.
#pragma once

#include <vector>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "comm/comm.h"

namespace zrt::test {

inline std::vector<at::ScalarType> all_dtypes() {
  return {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf, at::kInt, at::kLong, at::kByte};
}

// Element i of rank r's all_reduce input: (r + 1) · (i mod 7 + 1).
inline at::Tensor pattern(int64_t n, int64_t period, double scale, at::ScalarType dtype) {
  at::Tensor idx = at::arange(n, at::kLong).remainder(period).add(1).to(at::kDouble).mul(scale);
  return idx.to(dtype);
}

inline void expect_equal(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.numel(), want.numel()) << what;
  const bool eq = at::equal(got.to(at::kDouble), want.to(at::kDouble));
  if (!eq) {
    const int64_t bad = at::ne(got.to(at::kDouble), want.to(at::kDouble))
                            .nonzero()
                            .select(1, 0)
                            .select(0, 0)
                            .item<int64_t>();
    ADD_FAILURE() << what << ": first mismatch at element " << bad << ": got "
                  << got.to(at::kDouble)[bad].item<double>() << ", want "
                  << want.to(at::kDouble)[bad].item<double>();
  }
}

inline void check_all_reduce(comm::Comm& comm, at::ScalarType dtype, int64_t n, comm::ReduceOp op) {
  const int r = comm.rank();
  const int w = comm.size();
  const std::string what = "all_reduce(" + std::string(comm::reduce_op_name(op)) + ") " +
                           c10::toString(dtype) + " n=" + std::to_string(n);
  at::Tensor t;
  at::Tensor want;
  switch (op) {
    case comm::ReduceOp::kSum:
      t = pattern(n, 7, r + 1, dtype);
      want = pattern(n, 7, w * (w + 1) / 2.0, dtype);
      break;
    case comm::ReduceOp::kAvg:
      t = pattern(n, 7, 2.0 * (r + 1), dtype);
      want = pattern(n, 7, (w + 1), dtype);  // mean of 2(r+1) over r < w is w + 1
      break;
    case comm::ReduceOp::kMax:
      t = pattern(n, 3, 1, dtype).add(r);
      want = pattern(n, 3, 1, dtype).add(w - 1);
      break;
    case comm::ReduceOp::kMin:
      t = pattern(n, 3, 1, dtype).add(r);
      want = pattern(n, 3, 1, dtype);
      break;
  }
  comm.all_reduce(t, op);
  expect_equal(t, want, what);
}

inline void check_bool_all_reduce(comm::Comm& comm) {
  const int r = comm.rank();
  const int w = comm.size();
  // "some rank": only the last rank sets element 0; "every rank": all set element 1.
  at::Tensor t = at::zeros({3}, at::kBool);
  if (r == w - 1) t[0] = true;
  t[1] = true;
  at::Tensor any = t.clone();
  comm.all_reduce(any, comm::ReduceOp::kMax);
  EXPECT_TRUE(any[0].item<bool>());
  EXPECT_TRUE(any[1].item<bool>());
  EXPECT_FALSE(any[2].item<bool>());
  at::Tensor all = t.clone();
  comm.all_reduce(all, comm::ReduceOp::kMin);
  EXPECT_EQ(all[0].item<bool>(), w == 1);
  EXPECT_TRUE(all[1].item<bool>());
}

// Rank r's input element j is (r + 1) · (j mod 5 + 1); the output of rank r holds elements
// [r·c, (r+1)·c) of the sum, i.e. w(w+1)/2 · (j mod 5 + 1).
inline void check_reduce_scatter(comm::Comm& comm, at::ScalarType dtype, int64_t c,
                                 comm::ReduceOp op) {
  const int r = comm.rank();
  const int w = comm.size();
  at::Tensor in = pattern(c * w, 5, r + 1, dtype);
  at::Tensor out = at::full({c}, 99, dtype);
  comm.reduce_scatter(out, in, op);
  const double factor = op == comm::ReduceOp::kAvg ? (w + 1) / 2.0 : w * (w + 1) / 2.0;
  at::Tensor want = pattern(c * w, 5, factor, dtype).narrow(0, r * c, c);
  expect_equal(out, want,
               "reduce_scatter " + std::string(c10::toString(dtype)) + " c=" + std::to_string(c));
}

// Rank r contributes r·8 + (k mod 8); chunk r of the output must hold exactly that. With
// in_place, the input is the output's own chunk r (as ZeRO-3's gathers pass it).
inline void check_all_gather(comm::Comm& comm, at::ScalarType dtype, int64_t c,
                             bool in_place = false) {
  const int r = comm.rank();
  const int w = comm.size();
  at::Tensor mine = at::arange(c, at::kLong).remainder(8).add(8 * r).to(dtype);
  at::Tensor out = at::full({c * w}, 99, dtype);
  at::Tensor in = in_place ? out.narrow(0, r * c, c) : mine;
  if (in_place) in.copy_(mine);
  comm.all_gather(out, in);
  at::Tensor want = at::empty({c * w}, dtype);
  for (int k = 0; k < w; ++k) {
    want.narrow(0, k * c, c).copy_(at::arange(c, at::kLong).remainder(8).add(8 * k).to(dtype));
  }
  expect_equal(out, want,
               "all_gather " + std::string(c10::toString(dtype)) + " c=" + std::to_string(c) +
                   (in_place ? " in place" : ""));
}

// Uneven pieces, some empty: counts[r] = (3r + base) mod 5 · scale.
inline std::vector<int64_t> uneven_counts(int world, int base, int64_t scale) {
  std::vector<int64_t> counts(world);
  for (int r = 0; r < world; ++r) counts[r] = ((3 * r + base) % 5) * scale;
  return counts;
}

inline void check_reduce_scatter_v(comm::Comm& comm, at::ScalarType dtype,
                                   const std::vector<int64_t>& counts, bool in_place = false) {
  const int r = comm.rank();
  const int w = comm.size();
  int64_t total = 0;
  int64_t offset = 0;
  for (int k = 0; k < w; ++k) {
    if (k == r) offset = total;
    total += counts[k];
  }
  at::Tensor in = pattern(total, 5, r + 1, dtype);
  at::Tensor out = in_place ? in.narrow(0, offset, counts[r]) : at::full({counts[r]}, 99, dtype);
  comm.reduce_scatter_v(out, in, counts);
  at::Tensor want = pattern(total, 5, w * (w + 1) / 2.0, dtype).narrow(0, offset, counts[r]);
  expect_equal(
      out, want,
      "reduce_scatter_v " + std::string(c10::toString(dtype)) + (in_place ? " in place" : ""));
}

// Rank k's piece is k·8 + (j mod 8). With in_place, the input is the output's own view.
inline void check_all_gather_v(comm::Comm& comm, at::ScalarType dtype,
                               const std::vector<int64_t>& counts, bool in_place) {
  const int r = comm.rank();
  const int w = comm.size();
  int64_t total = 0;
  std::vector<int64_t> offsets;
  for (int k = 0; k < w; ++k) {
    offsets.push_back(total);
    total += counts[k];
  }
  auto piece = [&](int k) {
    return at::arange(counts[k], at::kLong).remainder(8).add(8 * k).to(dtype);
  };
  at::Tensor out = at::full({total}, 99, dtype);
  at::Tensor in = in_place ? out.narrow(0, offsets[r], counts[r]) : piece(r);
  if (in_place) in.copy_(piece(r));
  comm.all_gather_v(out, in, counts);
  at::Tensor want = at::empty({total}, dtype);
  for (int k = 0; k < w; ++k) want.narrow(0, offsets[k], counts[k]).copy_(piece(k));
  expect_equal(out, want,
               "all_gather_v " + std::string(c10::toString(dtype)) + (in_place ? " in place" : ""));
}

inline void check_broadcast(comm::Comm& comm, at::ScalarType dtype, int64_t n, int root) {
  at::Tensor want = at::arange(n, at::kLong).remainder(11).add(root).to(dtype);
  at::Tensor t = comm.rank() == root ? want.clone() : at::full({n}, 77, dtype);
  comm.broadcast(t, root);
  expect_equal(t, want,
               "broadcast " + std::string(c10::toString(dtype)) + " root=" + std::to_string(root));
}

// Several async collectives in flight at once, waited in reverse order, with local work between.
inline void check_async_overlap(comm::Comm& comm) {
  const int w = comm.size();
  std::vector<at::Tensor> ts;
  std::vector<std::shared_ptr<comm::Work>> works;
  for (int k = 0; k < 6; ++k) {
    ts.push_back(at::full({1000 + k}, k + 1.0, at::kFloat));
    works.push_back(comm.all_reduce_async(ts.back()));
  }
  at::Tensor gathered = at::empty({w * 3}, at::kLong);
  at::Tensor mine = at::full({3}, comm.rank(), at::kLong);
  works.push_back(comm.all_gather_async(gathered, mine));
  at::Tensor local = at::randn({200, 200}).matmul(at::randn({200, 200}));  // overlapping work
  EXPECT_EQ(local.numel(), 40000);
  for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();
  for (auto& work : works) {
    EXPECT_TRUE(work->is_completed());
    work->wait();  // waiting twice is allowed
  }
  for (int k = 0; k < 6; ++k) {
    EXPECT_TRUE(at::equal(ts[k], at::full({1000 + k}, (k + 1.0) * w, at::kFloat))) << k;
  }
  for (int k = 0; k < w; ++k) {
    EXPECT_TRUE(at::equal(gathered.narrow(0, 3 * k, 3), at::full({3}, k, at::kLong)));
  }
}

// Sizes that find padding and edge bugs at this world size.
inline std::vector<int64_t> awkward_sizes(int world) {
  std::vector<int64_t> sizes = {0, 1, 1023, 4099};
  if (world > 2) sizes.push_back(world - 1);
  return sizes;
}

// Runs every closed-form check for every dtype and awkward size.
inline void check_everything(comm::Comm& comm) {
  for (at::ScalarType dtype : all_dtypes()) {
    for (int64_t n : awkward_sizes(comm.size())) {
      for (comm::ReduceOp op : {comm::ReduceOp::kSum, comm::ReduceOp::kMax, comm::ReduceOp::kMin,
                                comm::ReduceOp::kAvg}) {
        if (op == comm::ReduceOp::kAvg && !at::isFloatingType(dtype)) continue;
        check_all_reduce(comm, dtype, n, op);
      }
      check_reduce_scatter(comm, dtype, n, comm::ReduceOp::kSum);
      if (at::isFloatingType(dtype)) check_reduce_scatter(comm, dtype, n, comm::ReduceOp::kAvg);
      check_all_gather(comm, dtype, n);
      check_all_gather(comm, dtype, n, /*in_place=*/true);
      check_broadcast(comm, dtype, n, comm.size() - 1);
      check_broadcast(comm, dtype, n, 0);
    }
  }
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kLong}) {
    for (int base : {0, 2}) {
      for (int64_t scale : {1, 1000}) {
        const auto counts = uneven_counts(comm.size(), base, scale);
        check_reduce_scatter_v(comm, dtype, counts);
        check_reduce_scatter_v(comm, dtype, counts, /*in_place=*/true);
        check_all_gather_v(comm, dtype, counts, false);
        check_all_gather_v(comm, dtype, counts, true);
      }
    }
  }
  check_bool_all_reduce(comm);
  comm.barrier();
}

}  // namespace zrt::test
