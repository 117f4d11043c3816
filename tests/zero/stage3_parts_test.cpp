// The parts of the stage-3 data path on their own: UseTrace (positions, prefetch, reuse; no
// tensors), ParamStorage (slabs), UnitGatherer (gather and release, ranks as threads over the
// in-process backend) and UnitGradReducer (gradients into each rank's partition).
#include <atomic>
#include <map>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "comm/local_comm.h"
#include "core/error.h"
#include "zero/param_storage.h"
#include "zero/stage3_layout.h"
#include "zero/unit_gatherer.h"
#include "zero/unit_grad_reducer.h"
#include "zero/use_trace.h"

namespace zrt::zero {
namespace {

// ---- UseTrace ------------------------------------------------------------------------------

// One training step of units called in `order`: every forward use, then the backward uses in
// reverse; returns the positions the trace gave the backward uses.
std::vector<int> run_step(UseTrace& t, const std::vector<int>& order) {
  for (int u : order) {
    t.begin_forward_use(u, /*record=*/true);
    t.end_forward_use();
  }
  t.begin_backward();
  std::vector<int> positions;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    positions.push_back(t.begin_backward_use(*it));
  }
  t.end_backward();
  return positions;
}

TEST(UseTrace, RecordsTheFirstTrainingForwardAndWalksItBothWays) {
  UseTrace t({10, 20, 30});
  EXPECT_FALSE(t.complete());
  EXPECT_EQ(t.begin_forward_use(0, /*record=*/false), -1) << "nothing recorded without grad";
  t.end_forward_use();
  run_step(t, {0, 1, 2});
  ASSERT_TRUE(t.complete());
  EXPECT_EQ(t.size(), 3);
  EXPECT_EQ(run_step(t, {0, 1, 2}), (std::vector<int>{2, 1, 0}));
  EXPECT_EQ(t.size(), 3) << "a complete trace records no more";
}

TEST(UseTrace, KeepsOneCopyOfARepeatedPass) {
  UseTrace t({1, 1});
  for (int pass = 0; pass < 3; ++pass) {  // three grad-mode forwards before the first backward
    for (int u : {0, 1}) {
      t.begin_forward_use(u, true);
      t.end_forward_use();
    }
  }
  t.begin_backward();
  t.end_backward();
  EXPECT_EQ(t.size(), 2);
}

TEST(UseTrace, PrefetchStopsAtTheBucketAndTheLiveLimit) {
  UseTrace t({10, 20, 30, 40});
  run_step(t, {0, 1, 2, 3});
  auto all_released = [](int) { return true; };
  EXPECT_EQ(t.prefetch_after(0, +1, {100, 1000}, 0, 0, all_released), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(t.prefetch_after(0, +1, {50, 1000}, 0, 0, all_released), (std::vector<int>{1, 2}));
  EXPECT_EQ(t.prefetch_after(0, +1, {50, 1000}, 25, 0, all_released), (std::vector<int>{1}))
      << "what is in flight counts against the bucket";
  EXPECT_EQ(t.prefetch_after(0, +1, {100, 40}, 0, 10, all_released), (std::vector<int>{1}))
      << "gathered + in flight stay within max_live";
  EXPECT_EQ(t.prefetch_after(3, -1, {100, 1000}, 0, 0, all_released), (std::vector<int>{2, 1, 0}))
      << "backward walks towards the first unit";
  EXPECT_EQ(t.prefetch_after(0, +1, {100, 1000}, 0, 0, [](int u) { return u != 1; }),
            (std::vector<int>{2, 3}))
      << "units not released are skipped";
  EXPECT_TRUE(t.prefetch_after(0, +1, {0, 1000}, 0, 0, all_released).empty()) << "bucket 0: off";
}

TEST(UseTrace, ReuseDistanceAlongForwardThenBackward) {
  // A tied embedding: unit 0 is used first and last (the lm_head), so its last forward use is
  // followed at once by its backward.
  UseTrace t({100, 10, 10});
  run_step(t, {0, 1, 2, 0});
  EXPECT_TRUE(t.reused_soon(0, 3, /*backward_use=*/false, /*training=*/true, 0))
      << "the lm_head's forward is followed by its own backward";
  EXPECT_FALSE(t.reused_soon(1, 1, false, true, 219))
      << "unit 1's backward comes after units 2, 0, 0 and 2 (220 elements)";
  EXPECT_TRUE(t.reused_soon(1, 1, false, true, 220));
  EXPECT_FALSE(t.reused_soon(0, 0, /*backward_use=*/true, true, 1000000))
      << "the last backward use is not used again this step";
  EXPECT_FALSE(t.reused_soon(0, 3, false, /*training=*/false, 0))
      << "in inference the next use is the next forward's: never distance 0";
  EXPECT_TRUE(t.reused_soon(0, 3, false, /*training=*/false, 1));
}

// ---- parameters over ranks -------------------------------------------------------------------

struct Params {
  std::map<std::string, at::Tensor> t;
  Params() {
    add("a.w", {2, 5}, 1);
    add("a.b", {3}, 100);
    add("b.w", {4, 2}, 1000);
    add("top", {7}, 10000);
  }
  void add(const std::string& name, std::vector<int64_t> shape, float scale) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    t[name] = (torch::arange(1, n + 1, torch::kFloat) * scale).view(shape).requires_grad_();
  }
  Stage3Layout layout(int world, int rank) {
    std::vector<std::vector<NamedParam>> groups = {{{"a.w", t["a.w"]}, {"a.b", t["a.b"]}},
                                                   {{"b.w", t["b.w"]}, {"top", t["top"]}}};
    Stage3Layout l(groups, {}, {{"a.w", 0}, {"a.b", 0}, {"b.w", 1}}, 2, world, rank,
                   /*persistence_threshold=*/0, std::numeric_limits<int64_t>::max());
    l.partition();
    return l;
  }
};

TEST(ParamStorage, UnitsGetSlabsAndReleasedOnesAreBounded) {
  Params p;
  Stage3Layout l = p.layout(2, 0);
  ParamStorage s(l, /*idle_slabs=*/1);
  EXPECT_EQ(s.place(0, l.units()[0].params), (10 + 3) * 4);
  EXPECT_TRUE(storage_allocated(p.t["a.w"]));
  EXPECT_EQ(s.place(0, l.units()[0].params), 0) << "placed already";
  const int64_t slab0 = s.bytes();
  EXPECT_GE(slab0, (10 + 3) * 4);
  EXPECT_EQ(s.place(1, l.units()[1].params), 8 * 4);
  EXPECT_GT(s.bytes(), slab0) << "a slab per unit";
  EXPECT_EQ(s.release(0), (10 + 3) * 4);
  EXPECT_FALSE(storage_allocated(p.t["a.w"]));
  EXPECT_EQ(s.release(0), 0) << "nothing left to release";
  s.release(1);
  EXPECT_GT(s.bytes(), 0) << "small idle slabs are kept for the next gathers";
  s.trim();
  EXPECT_EQ(s.bytes(), 0);
}

TEST(UnitGatherer, GathersTheWholeValuesAndReleasesThem) {
  for (int world : {1, 3}) {
    comm::run_local_world(world, [&](comm::Comm& c) {
      std::shared_ptr<comm::Comm> comm(&c, [](comm::Comm*) {});
      Params p;
      Stage3Layout l = p.layout(world, c.rank());
      UnitGatherer g(l, comm, 1);
      if (world > 1) EXPECT_EQ(g.state(1), UnitGatherer::State::kReleased);
      g.start(1, /*prefetch=*/true);
      g.wait(1);
      EXPECT_EQ(g.state(1), UnitGatherer::State::kGathered);
      EXPECT_TRUE(torch::equal(p.t["b.w"].reshape(-1), torch::arange(1, 9, torch::kFloat) * 1000));
      EXPECT_EQ(g.in_flight_numel(), 0);
      if (world > 1) {
        EXPECT_EQ(g.live_numel(), 8);
        EXPECT_EQ(g.stats().prefetches, 1);
        EXPECT_EQ(g.stats().gathered_bytes, 8 * 4);
        g.release(1);
        EXPECT_FALSE(storage_allocated(p.t["b.w"]));
        EXPECT_EQ(g.stats().gathered_bytes, 0);
      }
    });
  }
}

TEST(UnitGradReducer, EachRankGetsTheMeanGradientOfItsPartitions) {
  const int world = 3;
  comm::run_local_world(world, [&](comm::Comm& c) {
    std::shared_ptr<comm::Comm> comm(&c, [](comm::Comm*) {});
    Params p;
    Stage3Layout l = p.layout(world, c.rank());
    UnitGatherer g(l, comm, 1);
    std::vector<int> done;
    UnitGradReducer r(l, comm, {}, [&](int unit) { done.push_back(unit); });
    for (int u = 0; u < l.num_units(); ++u) g.wait(u);
    r.begin();
    // d/dp of sum(p) * (rank + 1): every gradient element is rank + 1; the mean over 3 ranks is 2.
    at::Tensor loss = at::zeros({});
    for (auto& [name, t] : p.t) loss = loss + t.sum();
    (loss * (c.rank() + 1)).backward();
    r.end();
    EXPECT_EQ(done.size(), 3u) << "units 0 and 1 and the root unit, each once";
    for (int group = 0; group < l.num_groups(); ++group) {
      const at::Tensor& part = r.grad_partition(group);
      // Padding past a parameter's end reduces to 0; every real element to 2.
      for (const Stage3Param& q : l.params()) {
        if (q.group != group) continue;
        const int64_t n = std::max<int64_t>(0, std::min<int64_t>(q.pn, q.numel - c.rank() * q.pn));
        EXPECT_TRUE(torch::allclose(part.narrow(0, q.group_offset, n), torch::full({n}, 2.0f)))
            << q.name << " on rank " << c.rank();
      }
    }
    EXPECT_EQ(r.stats().reduce_scatters, 3) << "one per unit, the root included";
    r.zero_grad();
    EXPECT_EQ(r.grad_partition(0).abs().sum().item<float>(), 0.0f);
  });
}


// ---- ranks that run different units (Note [Unit tags]) ---------------------------------------

// Two experts of one shape in units 0 and 1: their gathers and reductions have the same size, so
// only the tags tell them apart.
struct Experts {
  at::Tensor e0 = torch::arange(1, 7, torch::kFloat).view({2, 3}).requires_grad_();
  at::Tensor e1 = (torch::arange(1, 7, torch::kFloat) * 10).view({2, 3}).requires_grad_();
  Stage3Layout layout(int world, int rank) {
    Stage3Layout l({{{"moe.experts.0.weight", e0}, {"moe.experts.1.weight", e1}}}, {},
                   {{"moe.experts.0.weight", 0}, {"moe.experts.1.weight", 1}}, 2, world, rank,
                   /*persistence_threshold=*/0, std::numeric_limits<int64_t>::max());
    l.partition();
    return l;
  }
};

void expect_out_of_step(const Error& e, const std::vector<std::string>& parts) {
  const std::string m = e.what();
  EXPECT_NE(m.find("ZeRO-3 ranks out of step"), std::string::npos) << m;
  EXPECT_NE(m.find("together in one ShardUnit"), std::string::npos) << m;
  for (const std::string& p : parts) EXPECT_NE(m.find(p), std::string::npos) << p << " in " << m;
}

// Rank 0 gathers the experts in the order 0, 1, the other ranks in the order 1, 0 (a fault: the
// two units swapped on some ranks). Every rank fails at the first gather, none uses the data.
TEST(UnitTags, GathersOfDifferentUnitsFailOnEveryRank) {
  for (int world : {2, 3}) {
    std::atomic<int> failed{0};
    comm::run_local_world(world, [&](comm::Comm& c) {
      std::shared_ptr<comm::Comm> comm(&c, [](comm::Comm*) {});
      Experts e;
      Stage3Layout l = e.layout(world, c.rank());
      UnitGatherer g(l, comm, 1);
      const int first = c.rank() == 0 ? 0 : 1;
      try {
        g.wait(first);
        g.wait(1 - first);
      } catch (const Error& err) {
        ++failed;
        EXPECT_NE(g.state(first), UnitGatherer::State::kGathered);
        const int other = c.rank() == 0 ? 1 : 0;  // the first rank whose tag differs
        expect_out_of_step(err, {"rank " + std::to_string(c.rank()) + " all-gathered unit " +
                                     std::to_string(first) + " (moe.experts." +
                                     std::to_string(first) + ")",
                                 "while rank " + std::to_string(other) + " all-gathered unit " +
                                     std::to_string(1 - first)});
      }
    });
    EXPECT_EQ(failed.load(), world) << world << " ranks";
  }
}

// Every rank gathers both experts in one order, but rank 0's loss uses expert 0 and rank 1's
// expert 1: each reduce-scatters its own expert's gradients first, during the backward.
TEST(UnitTags, ReductionsOfDifferentUnitsFailOnEveryRank) {
  std::atomic<int> failed{0};
  comm::run_local_world(2, [&](comm::Comm& c) {
    std::shared_ptr<comm::Comm> comm(&c, [](comm::Comm*) {});
    Experts e;
    Stage3Layout l = e.layout(2, c.rank());
    UnitGatherer g(l, comm, 1);
    for (int u = 0; u < l.num_units(); ++u) g.wait(u);
    UnitGradReducer r(l, comm, {}, [](int) {});
    r.begin();
    const int used = c.rank();
    try {
      (used == 0 ? e.e0 : e.e1).sum().backward();
      r.end();
    } catch (const Error& err) {
      ++failed;
      expect_out_of_step(err, {"rank " + std::to_string(c.rank()) +
                                   " reduce-scattered the gradients of unit " + std::to_string(used),
                               "rank " + std::to_string(1 - c.rank()) +
                                   " reduce-scattered the gradients of unit " +
                                   std::to_string(1 - used) + " (moe.experts."});
    }
  });
  EXPECT_EQ(failed.load(), 2);
}

// The same experts run in the same order on every rank (routing that happens to agree) pass, and
// so does a unit no rank used this step (end() reduces it, in unit order, on every rank).
TEST(UnitTags, TheSameUnitsInTheSameOrderPass) {
  comm::run_local_world(3, [&](comm::Comm& c) {
    std::shared_ptr<comm::Comm> comm(&c, [](comm::Comm*) {});
    Experts e;
    Stage3Layout l = e.layout(3, c.rank());
    UnitGatherer g(l, comm, 1);
    g.wait(1);
    EXPECT_TRUE(torch::equal(e.e1.reshape(-1), torch::arange(1, 7, torch::kFloat) * 10));
    UnitGradReducer r(l, comm, {}, [](int) {});
    r.begin();
    (e.e1 * (c.rank() + 1)).sum().backward();
    r.end();
    const int64_t n = std::max<int64_t>(0, std::min<int64_t>(2, 6 - c.rank() * 2));
    const Stage3Param& p1 = l.params()[1];
    EXPECT_TRUE(torch::allclose(r.grad_partition(0).narrow(0, p1.group_offset, n),
                                torch::full({n}, 2.0f)));
  });
}

}  // namespace
}  // namespace zrt::zero
