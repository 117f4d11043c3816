// The stage-3 layout and the parameter coordinator on their own (no engine, no mpirun): partition
// bounds and padding, group offsets, persistence rules, unit sums, storage release; gathering
// and releasing units, the reuse distance, gather_all, and the gradient reduce-scatter into each
// rank's partition, with ranks as threads over the in-process backend.
#include <cstdio>
#include <map>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "comm/local_comm.h"
#include "zero/buffer_pool.h"
#include "zero/grad_reducer.h"
#include "zero/param_coordinator.h"
#include "zero/stage3_layout.h"

namespace zrt::zero {
namespace {

// Parameters with values 1..numel scaled by `scale` (distinct per parameter), so that a wrong
// slice or a wrong offset shows up as a wrong value.
struct Params {
  std::map<std::string, at::Tensor> t;
  Params() {
    add("a.w", {2, 5}, 1);    // 10 elements: pads at W = 3 and 4
    add("a.b", {3}, 100);     // small: persistent at threshold 3
    add("b.w", {4, 2}, 1000); // 8 elements
    add("top", {7}, 10000);   // outside every unit
  }
  void add(const std::string& name, std::vector<int64_t> shape, float scale) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    t[name] = (torch::arange(1, n + 1, torch::kFloat) * scale).view(shape).requires_grad_();
  }
  std::vector<std::vector<NamedParam>> groups() {
    return {{{"a.w", t["a.w"]}, {"a.b", t["a.b"]}}, {{"b.w", t["b.w"]}, {"top", t["top"]}}};
  }
};

const std::vector<std::pair<std::string, int>> kUnits = {{"a.w", 0}, {"a.b", 0}, {"b.w", 1}};

Stage3Layout make_layout(Params& p, int world, int rank, int64_t threshold,
                         int64_t model_threshold = std::numeric_limits<int64_t>::max()) {
  return Stage3Layout(p.groups(), {}, kUnits, 2, world, rank, threshold, model_threshold);
}

const Stage3Param& find(const Stage3Layout& l, const std::string& name) {
  for (const auto& p : l.params()) {
    if (p.name == name) return p;
  }
  throw std::runtime_error("no parameter " + name);
}

TEST(Stage3Layout, PartitionsArePaddedSlicesAtTheirGroupOffsets) {
  for (int world : {1, 3, 4}) {
    std::vector<at::Tensor> pieces_aw;
    for (int rank = 0; rank < world; ++rank) {
      Params p;
      const at::Tensor aw = p.t["a.w"].detach().clone();
      Stage3Layout l = make_layout(p, world, rank, /*threshold=*/0);
      l.partition();
      const Stage3Param& w = find(l, "a.w");
      const Stage3Param& b = find(l, "a.b");
      EXPECT_EQ(w.pn, (10 + world - 1) / world);
      EXPECT_EQ(b.pn, (3 + world - 1) / world);
      EXPECT_EQ(w.group, 0);
      EXPECT_EQ(b.group_offset, w.pn) << "a.b follows a.w in group 0's partition flat";
      EXPECT_EQ(l.group_partition_numel(0), w.pn + b.pn);
      EXPECT_EQ(find(l, "top").unit, 2) << "outside every unit: the root unit";
      EXPECT_TRUE(find(l, "top").persistent);
      // This rank's slice, zero-padded past the end.
      const at::Tensor part = l.partition_of(0);
      at::Tensor expect = torch::zeros({w.pn});
      const int64_t n = std::max<int64_t>(0, std::min<int64_t>(w.pn, 10 - rank * w.pn));
      if (n > 0) expect.narrow(0, 0, n).copy_(aw.reshape(-1).narrow(0, rank * w.pn, n));
      EXPECT_TRUE(torch::equal(part, expect)) << "W=" << world << " rank " << rank;
      pieces_aw.push_back(part);
      if (world > 1) {
        EXPECT_FALSE(storage_allocated(p.t["a.w"])) << "released after partition()";
      } else {
        // Note [Stage 3 on one rank]: every parameter is a view of its partition.
        EXPECT_TRUE(w.persistent);
        EXPECT_EQ(p.t["a.w"].data_ptr(), part.data_ptr()) << "a view of its partition";
        EXPECT_EQ(p.t["top"].data_ptr(), l.partition_of(3).data_ptr());
        l.partition_of(2).fill_(5.0f);  // b.w: an updated partition is the updated parameter
        EXPECT_TRUE(torch::equal(p.t["b.w"], torch::full({4, 2}, 5.0f)));
      }
      EXPECT_EQ(p.t["a.w"].sizes(), at::IntArrayRef({2, 5})) << "keeps its shape";
    }
    EXPECT_TRUE(torch::equal(torch::cat(pieces_aw).narrow(0, 0, 10),
                             torch::arange(1, 11, torch::kFloat)));
  }
}

TEST(Stage3Layout, PersistenceThresholdsAndUnitSums) {
  Params p;
  Stage3Layout l = make_layout(p, 2, 0, /*threshold=*/3);
  l.partition();
  EXPECT_TRUE(find(l, "a.b").persistent) << "numel 3 <= threshold 3";
  EXPECT_FALSE(find(l, "a.w").persistent);
  EXPECT_TRUE(storage_allocated(p.t["a.b"])) << "persistent parameters stay gathered";
  EXPECT_EQ(l.persistent_numel(), 3 + 7);
  const Stage3Unit& u0 = l.units()[0];
  EXPECT_EQ(u0.gather_numel, 10) << "persistent a.b is not gathered with its unit";
  EXPECT_EQ(u0.gather_partition, 5);
  EXPECT_EQ(u0.reduce_partition, 5 + 2) << "but its gradient is reduced with it";
  EXPECT_EQ(l.num_units(), 2);

  // The model-wide cap: no small parameter persists once the cap would be passed.
  Params q;
  Stage3Layout capped = make_layout(q, 2, 0, /*threshold=*/3, /*model_threshold=*/2);
  capped.partition();
  EXPECT_FALSE(find(capped, "a.b").persistent);
  EXPECT_FALSE(storage_allocated(q.t["a.b"]));
}

// Note [Returning released memory]: parameter storages of at least kOwnMappingBytes and gather
// buffers are mappings of their own (page-aligned, whatever malloc's threshold); smaller ones come
// from the allocator. Releasing gives the mapping back: the process's mapped memory shrinks.
int64_t mapped_kib() {
  FILE* f = std::fopen("/proc/self/status", "r");
  char line[256];
  int64_t kib = -1;
  while (f != nullptr && std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, "VmSize: %ld kB", &kib) == 1) break;
  }
  if (f != nullptr) std::fclose(f);
  return kib;
}

TEST(OwnMappings, LargeParameterStoragesAndGatherBuffersAreUnmappedWhenReleased) {
  const int64_t n = 16 << 20;  // 64 MiB of fp32
  at::Tensor t = at::zeros({1});
  t.unsafeGetTensorImpl()->set_sizes_contiguous({n});  // a parameter shell, as after release
  release_storage(t);
  at::zeros({n}).fill_(1.0f);  // starts the intra-op threads (their stacks are mappings too)
  const int64_t before = mapped_kib();
  allocate_storage(t);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % 4096, 0u) << "a mapping of its own";
  t.fill_(2.0f);
  EXPECT_GE(mapped_kib() - before, 64 * 1024);
  release_storage(t);
  EXPECT_LT(mapped_kib() - before, 1024) << "released: unmapped";
  at::Tensor buffer = mapped_empty(n, at::TensorOptions().dtype(at::kFloat));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data_ptr()) % 4096, 0u);
  buffer.fill_(1.0f);
  EXPECT_GE(mapped_kib() - before, 64 * 1024);
  buffer = at::Tensor();
  EXPECT_LT(mapped_kib() - before, 1024);
  at::Tensor small = mapped_empty(16, at::TensorOptions().dtype(at::kFloat));
  small.fill_(3.0f);  // below kOwnMappingBytes: the allocator's
  EXPECT_EQ(small.sum().item<float>(), 48.0f);
}

// Each rank (a thread) builds the same parameters, partitions them and drives a coordinator.
void run_coordinator(int world, const std::function<void(Params&, Stage3Layout&,
                                                         ParamCoordinator&, int)>& body,
                     CoordinatorOptions options = {}) {
  comm::run_local_world(world, [&](comm::Comm& c) {
    std::shared_ptr<comm::Comm> comm(&c, [](comm::Comm*) {});
    Params p;
    Stage3Layout l = make_layout(p, world, c.rank(), /*threshold=*/0);
    l.partition();
    ParamCoordinator coordinator(l, comm, options);
    body(p, l, coordinator, c.rank());
  });
}

TEST(ParamCoordinator, GathersAndReleasesUnits) {
  run_coordinator(3, [](Params& p, Stage3Layout&, ParamCoordinator& co, int) {
    at::NoGradGuard no_grad;  // a forward-only pass: no order recorded, nothing reused
    EXPECT_EQ(co.stats().gathered_bytes, 0) << "nothing is gathered after partitioning";
    co.reset_peak();
    co.pre_forward(0);
    ASSERT_TRUE(storage_allocated(p.t["a.w"]));
    EXPECT_TRUE(torch::equal(p.t["a.w"].reshape(-1), torch::arange(1, 11, torch::kFloat)));
    EXPECT_FALSE(storage_allocated(p.t["b.w"])) << "unit 1 is not gathered with unit 0";
    EXPECT_EQ(co.stats().gathered_bytes, (10 + 3) * 4) << "a.w and a.b, fp32";
    co.post_forward(0);
    EXPECT_FALSE(storage_allocated(p.t["a.w"]));
    EXPECT_EQ(co.stats().gathered_bytes, 0);
    // The peak includes the all-gather's receive buffer, alive while it is copied out: W ranks'
    // chunks of pn(a.w) + pn(a.b) = 4 + 1 elements, each followed by the unit's 64-byte tag slot
    // (Note [Unit tags]).
    EXPECT_EQ(co.stats().peak_gathered_bytes, (10 + 3) * 4 + 3 * ((4 + 1) * 4 + 64));
    co.gather_all();
    EXPECT_TRUE(torch::equal(p.t["b.w"].reshape(-1), torch::arange(1, 9, torch::kFloat) * 1000));
    co.release_all();
    EXPECT_FALSE(storage_allocated(p.t["b.w"]));
    EXPECT_EQ(co.stats().all_gathers, 3);
  });
}

// Note [Reusing gather buffers]: an inference coordinator gathers every unit into one output
// buffer and places its parameters in one slab, pass after pass, with the right values;
// release_all() frees both.
TEST(ParamCoordinator, GathersReuseOneBufferAndOneSlabUntilTrimmed) {
  CoordinatorOptions inference;
  inference.gradients = false;
  run_coordinator(3, [](Params& p, Stage3Layout&, ParamCoordinator& co, int) {
    at::NoGradGuard no_grad;
    const void* slab = nullptr;
    for (int pass = 0; pass < 3; ++pass) {
      co.pre_forward(0);
      EXPECT_TRUE(torch::equal(p.t["a.w"].reshape(-1), torch::arange(1, 11, torch::kFloat)));
      EXPECT_TRUE(torch::equal(p.t["a.b"], torch::arange(1, 4, torch::kFloat) * 100));
      // One slab: a.w (40 bytes) at 0, a.b at the next 64-byte boundary; the same every pass.
      const auto* a_w = static_cast<const char*>(p.t["a.w"].data_ptr());
      EXPECT_EQ(static_cast<const char*>(p.t["a.b"].data_ptr()), a_w + 64);
      if (pass == 0) slab = a_w;
      EXPECT_EQ(a_w, slab) << "pass " << pass;
      co.post_forward(0);
      co.pre_forward(1);
      EXPECT_TRUE(torch::equal(p.t["b.w"].reshape(-1), torch::arange(1, 9, torch::kFloat) * 1000));
      EXPECT_EQ(p.t["b.w"].data_ptr(), slab) << "unit 0's slab is free again, pass " << pass;
      co.post_forward(1);
      // One buffer of W x the larger unit's chunk: 3 x (pn(a.w) + pn(a.b) + the 64-byte tag
      // slot) = 3 x (4 + 1 + 16), fp32; one slab, grown to the larger unit: 64 + 64 bytes.
      EXPECT_EQ(co.stats().gather_buffer_bytes, 3 * 21 * 4) << "pass " << pass;
      EXPECT_EQ(co.stats().parameter_slab_bytes, 128) << "pass " << pass;
    }
    EXPECT_EQ(co.stats().all_gathers, 6);
    co.release_all();
    EXPECT_EQ(co.stats().gather_buffer_bytes, 0);
    EXPECT_EQ(co.stats().parameter_slab_bytes, 0);
  }, inference);
}

// A slab in use is never handed out again: a unit gathered while another still is gets a slab of
// its own, and the first keeps its values. Idle slabs this small stay pooled after a release (two
// here: one by count, one within kHeapTrimBytes) until trimmed.
TEST(ParamCoordinator, UnitsGatheredTogetherGetSlabsOfTheirOwn) {
  CoordinatorOptions inference;
  inference.gradients = false;
  run_coordinator(3, [](Params& p, Stage3Layout&, ParamCoordinator& co, int) {
    at::NoGradGuard no_grad;
    co.pre_forward(0);
    co.pre_forward(1);  // nested: unit 0 is still in use
    EXPECT_TRUE(torch::equal(p.t["a.w"].reshape(-1), torch::arange(1, 11, torch::kFloat)));
    EXPECT_TRUE(torch::equal(p.t["a.b"], torch::arange(1, 4, torch::kFloat) * 100));
    EXPECT_TRUE(torch::equal(p.t["b.w"].reshape(-1), torch::arange(1, 9, torch::kFloat) * 1000));
    const auto* a_w = static_cast<const char*>(p.t["a.w"].data_ptr());
    const auto* b_w = static_cast<const char*>(p.t["b.w"].data_ptr());
    EXPECT_TRUE(b_w + 32 <= a_w || a_w + 128 <= b_w) << "b.w must not overlap unit 0's slab";
    EXPECT_EQ(co.stats().parameter_slab_bytes, 128 + 64) << "each unit's slab has its size";
    EXPECT_EQ(co.stats().gathered_bytes, (10 + 3 + 8) * 4);
    co.post_forward(1);
    co.post_forward(0);
    EXPECT_EQ(co.stats().parameter_slab_bytes, 128 + 64) << "small idle slabs are kept";
    co.trim_gather_buffers();
    EXPECT_EQ(co.stats().parameter_slab_bytes, 0);
    // A slab is as large as its unit needs (b.w: 64 bytes) and grows for a larger one.
    co.pre_forward(1);
    EXPECT_TRUE(torch::equal(p.t["b.w"].reshape(-1), torch::arange(1, 9, torch::kFloat) * 1000));
    EXPECT_EQ(co.stats().parameter_slab_bytes, 64);
    co.post_forward(1);
    co.pre_forward(0);
    EXPECT_TRUE(torch::equal(p.t["a.w"].reshape(-1), torch::arange(1, 11, torch::kFloat)));
    EXPECT_EQ(co.stats().parameter_slab_bytes, 128);
    co.post_forward(0);
  }, inference);
}

// Training: the units kept from forward into backward each have a slab; after the backward the
// idle slabs stay within kHeapTrimBytes (all of them, for this small model), so the next step's
// gathers reuse them; release_all() frees them.
TEST(ParamCoordinator, TrainingReusesItsSlabsAcrossSteps) {
  run_coordinator(3, [](Params& p, Stage3Layout&, ParamCoordinator& co, int) {
    const void* first = nullptr;
    for (int step = 0; step < 3; ++step) {
      co.pre_forward(0);
      EXPECT_TRUE(torch::equal(p.t["a.w"].reshape(-1), torch::arange(1, 11, torch::kFloat)));
      if (step == 0) first = p.t["a.w"].data_ptr();
      EXPECT_EQ(p.t["a.w"].data_ptr(), first) << "step " << step;
      co.post_forward(0);
      co.pre_forward(1);
      EXPECT_TRUE(torch::equal(p.t["b.w"].reshape(-1), torch::arange(1, 9, torch::kFloat) * 1000));
      co.post_forward(1);
      co.begin_backward();
      co.end_backward();
      EXPECT_LE(co.stats().parameter_slab_bytes, static_cast<int64_t>(kHeapTrimBytes));
      EXPECT_GT(co.stats().parameter_slab_bytes, 0) << "step " << step;
      EXPECT_EQ(co.stats().gathered_bytes, 0) << "step " << step;
    }
    co.release_all();
    EXPECT_EQ(co.stats().parameter_slab_bytes, 0);
  });
}

// BufferPool: busy while any view of a buffer lives; past the depth, buffers of their own.
TEST(BufferPool, HandsOutFreeBuffersOnlyAndTrimsIdleOnes) {
  BufferPool pool(2);
  const auto opts = at::TensorOptions().dtype(at::kFloat);
  at::Tensor a = pool.acquire(10, opts);
  at::Tensor b = pool.acquire(20, opts);
  at::Tensor c = pool.acquire(5, opts);  // both pooled buffers are busy: a one-off
  EXPECT_EQ(pool.bytes(), (10 + 20) * 4);
  EXPECT_EQ(pool.allocations(), 3);
  EXPECT_NE(a.data_ptr(), b.data_ptr());
  const void* first = a.data_ptr();
  at::Tensor view = a.narrow(0, 2, 3);
  a = at::Tensor();
  EXPECT_NE(pool.acquire(4, opts).data_ptr(), first) << "a view keeps the buffer busy";
  view = at::Tensor();
  at::Tensor again = pool.acquire(8, opts);
  EXPECT_EQ(again.data_ptr(), first) << "free again once its last view is gone";
  EXPECT_EQ(again.numel(), 8);
  again = at::Tensor();
  at::Tensor grown = pool.acquire(12, opts);  // the free buffer of 10 is replaced by one of 12
  EXPECT_EQ(pool.bytes(), (12 + 20) * 4);
  EXPECT_EQ(pool.acquire(1, opts.dtype(at::kByte)).numel(), 1) << "other dtype: a one-off";
  pool.trim();
  EXPECT_EQ(pool.bytes(), (12 + 20) * 4) << "both are busy";
  grown = at::Tensor();
  b = at::Tensor();
  pool.trim(1, 0);
  EXPECT_EQ(pool.bytes(), 12 * 4) << "the first idle one kept by count";
  at::Tensor d = pool.acquire(30, opts);  // the kept one (12) grows to 30
  at::Tensor e = pool.acquire(3, opts);   // a second pooled buffer
  d = at::Tensor();
  e = at::Tensor();
  pool.trim(0, 30 * 4);
  EXPECT_EQ(pool.bytes(), 30 * 4) << "idle ones kept while they fit in the byte budget";
  pool.trim();
  EXPECT_EQ(pool.bytes(), 0);
}

TEST(ParamCoordinator, GradientsAreAveragedIntoEachRanksPartition) {
  const int world = 3;
  run_coordinator(world, [&](Params& p, Stage3Layout& l, ParamCoordinator& co, int rank) {
    co.begin_backward();
    for (size_t i = 0; i < l.params().size(); ++i) {
      const Stage3Param& sp = l.params()[i];
      // Rank r's gradient: (r + 1) times a ramp; the average over ranks is 2 times the ramp.
      p.t[sp.name].mutable_grad() =
          torch::arange(sp.numel, torch::kFloat).view(sp.shape) * static_cast<float>(rank + 1);
      co.gradients().on_grad_ready(static_cast<int>(i));  // as the accumulator hook does
    }
    co.end_backward();
    for (const Stage3Param& sp : l.params()) {
      at::Tensor expect = torch::zeros({sp.pn});
      const int64_t n = std::max<int64_t>(0, std::min<int64_t>(sp.pn, sp.numel - rank * sp.pn));
      if (n > 0) expect.narrow(0, 0, n).copy_(torch::arange(rank * sp.pn, rank * sp.pn + n) * 2.0);
      const at::Tensor got = co.grad_partition(sp.group).narrow(0, sp.group_offset, sp.pn);
      EXPECT_TRUE(torch::allclose(got, expect)) << sp.name << " rank " << rank << ": " << got;
    }
    EXPECT_EQ(co.stats().reduce_scatters, 3) << "two units and the root unit";
    co.zero_grad();
    EXPECT_EQ(co.grad_partition(0).abs().sum().item<float>(), 0.0f);
  });
}

TEST(ParamCoordinator, ReuseDistanceKeepsAUnitGathered) {
  CoordinatorOptions keep;
  keep.max_reuse_distance = 1000;  // every other unit fits: nothing is released between uses
  keep.prefetch_bucket_size = 0;
  run_coordinator(2, [](Params& p, Stage3Layout&, ParamCoordinator& co, int) {
    // The first training forward records the order; from then on a unit reused within the
    // distance stays gathered after its forward.
    co.begin_backward();
    for (int u : {0, 1}) {
      co.pre_forward(u);
      co.post_forward(u);
    }
    co.end_backward();  // releases everything; the order is now complete
    co.pre_forward(0);
    co.post_forward(0);
    EXPECT_TRUE(storage_allocated(p.t["a.w"])) << "reused within max_reuse_distance";
    co.release_all();
  }, keep);
}

// Note [A unit used several times]: unit 0 runs twice per forward (a tied embedding and its
// lm_head), unit 1 between; the backward mirrors it, and post_backward ends the head's use.
TEST(ParamCoordinator, AUnitUsedTwicePerForward) {
  CoordinatorOptions o;
  o.max_reuse_distance = 0;
  o.prefetch_bucket_size = 1000;
  run_coordinator(
      2,
      [](Params& p, Stage3Layout&, ParamCoordinator& co, int) {
        auto step = [&](bool check) {
          const CoordinatorStats before = co.stats();
          co.pre_forward(0);
          co.post_forward(0);
          if (check) EXPECT_FALSE(storage_allocated(p.t["a.w"])) << "next used a unit later";
          co.pre_forward(1);
          co.post_forward(1);
          co.pre_forward(0);
          co.post_forward(0);
          if (check) EXPECT_TRUE(storage_allocated(p.t["a.w"])) << "kept: its backward is next";
          co.begin_backward();
          co.pre_backward(0);
          co.post_backward(0);
          if (check) EXPECT_FALSE(storage_allocated(p.t["a.w"])) << "released after that backward";
          co.pre_backward(1);
          co.pre_backward(0);
          if (check) EXPECT_TRUE(storage_allocated(p.t["a.w"]));
          co.end_backward();
          if (!check) return;
          // Unit 0: its first forward (waited for), prefetched before its second forward use (then
          // kept into the first backward use) and before its last backward use; unit 1: prefetched
          // before its forward and before its backward.
          EXPECT_EQ(co.stats().all_gathers - before.all_gathers, 5);
          EXPECT_EQ(co.stats().prefetches - before.prefetches, 4);
        };
        step(false);  // records the trace
        step(true);
        step(true);  // the same again: the positions start over every step
      },
      o);
}

// Two grad-mode forwards before the first backward (an evaluation without NoGradGuard) record
// the pass twice; the trace keeps one, so reuse is measured within one pass.
TEST(ParamCoordinator, ATraceOfRepeatedPassesKeepsOne) {
  CoordinatorOptions o;
  o.max_reuse_distance = 10;  // unit 1 (8 elements) fits between uses of unit 0, not unit 0 (13)
  o.prefetch_bucket_size = 0;
  run_coordinator(2, [](Params& p, Stage3Layout&, ParamCoordinator& co, int) {
    for (int pass = 0; pass < 2; ++pass) {
      for (int u : {0, 1}) {
        co.pre_forward(u);
        co.post_forward(u);
      }
    }
    co.begin_backward();
    co.pre_backward(1);
    co.pre_backward(0);
    co.end_backward();
    // Trace [0, 1]: unit 0 is next used after 2 x 8 elements (released), unit 1 right away in
    // backward (kept). The doubled trace [0, 1, 0, 1] would give the opposite.
    co.pre_forward(0);
    co.post_forward(0);
    EXPECT_FALSE(storage_allocated(p.t["a.w"]));
    co.pre_forward(1);
    co.post_forward(1);
    EXPECT_TRUE(storage_allocated(p.t["b.w"]));
    co.begin_backward();
    co.end_backward();
  }, o);
}

TEST(ComponentOptions, FollowTheConfigsZeroSection) {
  ZeroOptions z;
  z.stage = 2;
  z.reduce_bucket_size = 0;  // clamped to one element
  z.prefetch_bucket_size = 123;
  z.max_live_parameters = 456;
  z.max_reuse_distance = 789;
  GradientOptions g{DType::kBFloat16, DType::kFloat32, true, 2.0};
  const ReducerOptions r = ReducerOptions::from(z, g);
  EXPECT_TRUE(r.policy.shard_optimizer && r.policy.shard_grads && !r.policy.shard_params);
  EXPECT_EQ(r.bucket_elements, 1);
  EXPECT_FALSE(r.overlap) << "overlap_comm unset: on only at stage 3";
  EXPECT_EQ(r.comm_dtype, at::kBFloat16);
  EXPECT_EQ(r.accum_dtype, at::kFloat);
  EXPECT_TRUE(r.prescale);
  EXPECT_EQ(r.predivide_factor, 2.0);
  z.stage = 3;
  EXPECT_TRUE(ReducerOptions::from(z, g).overlap);
  const CoordinatorOptions c = CoordinatorOptions::from(z, g);
  EXPECT_EQ(c.prefetch_bucket_size, 123);
  EXPECT_EQ(c.max_live_parameters, 456);
  EXPECT_EQ(c.max_reuse_distance, 789);
  EXPECT_EQ(c.comm_dtype, at::kBFloat16);
}

}  // namespace
}  // namespace zrt::zero
