// ZeRO++ (zero/zeropp.h) on ranks as threads over the in-process backend with emulated hosts:
// the host groups, qgZ's hierarchical quantized reduce-scatter against the plain one within the
// quantization bound at 2x2 and 2x3 ranks, hpZ's secondary gathers (bitwise the primary's), and
// qwZ's quantized gathers (within the int8 bound, the same values every time).
#include <cmath>
#include <map>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "comm/local_comm.h"
#include "core/error.h"
#include "zero/stage3_layout.h"
#include "zero/unit_gatherer.h"
#include "zero/zeropp.h"

namespace zrt::zero {
namespace {

comm::CommOptions hosts_of(int ranks_per_host) {
  comm::CommOptions o;
  o.local_ranks_per_host = ranks_per_host;
  o.timeout_seconds = 60;
  return o;
}

std::shared_ptr<comm::Comm> borrow(comm::Comm& c) {
  return std::shared_ptr<comm::Comm>(&c, [](comm::Comm*) {});
}

TEST(ZeroPPGroups, HostGroupsFollowTheHosts) {
  comm::run_local_world(
      6,
      [](comm::Comm& c) {
        ZeroPPOptions o;
        o.hpz_partition_size = 3;
        o.quantized_gradients = true;
        const ZeroPPGroups g = ZeroPPGroups::make(c, o);
        ASSERT_TRUE(g.hpz && g.host && g.cross);
        EXPECT_EQ(g.hpz->size(), 3);
        EXPECT_EQ(g.hpz->rank(), c.rank() % 3);
        EXPECT_EQ(g.host->size(), 3);
        EXPECT_EQ(g.cross->size(), 2);
        EXPECT_EQ(g.cross->rank(), c.rank() / 3);
        EXPECT_EQ(g.world_rank_of, (std::vector<int>{0, 1, 2, 3, 4, 5}));
        ZeroPPOptions smaller;
        smaller.hpz_partition_size = 1;
        EXPECT_FALSE(ZeroPPGroups::make(c, smaller).hpz) << "K = 1 is plain ZeRO-3";
      },
      hosts_of(3));
}

TEST(ZeroPPGroups, HpzMustDivideTheHost) {
  comm::run_local_world(
      4,
      [](comm::Comm& c) {
        ZeroPPOptions o;
        o.hpz_partition_size = 4;
        try {
          ZeroPPGroups::make(c, o);
          ADD_FAILURE() << "K = 4 over hosts of 2 ranks";
        } catch (const ConfigError& e) {
          EXPECT_NE(std::string(e.what()).find("zero_optimization.zero_hpz_partition_size: 4 does "
                                               "not divide the ranks of every host"),
                    std::string::npos)
              << e.what();
        }
      },
      hosts_of(2));
}

// The error bound of one rank's result: every quantization contributes at most one step,
// amax/2^(bits−1), of its group (kernels/quantize.h), and a rank's element passes through L
// first-hop quantizations and N second-hop ones; amax here is bounded by the largest input (the
// first hop) and by L times it (the partial sums of the second).
double qgz_bound(double max_abs, int hosts, int local) {
  const double step = 1.0 / (1 << (QuantizedReduceScatter::kBits - 1));
  return step * max_abs * (hosts * local + hosts * local) * (1 + 1e-5);
}

void check_qgz(int hosts, int local, int64_t chunk) {
  const int world = hosts * local;
  comm::run_local_world(
      world,
      [&](comm::Comm& c) {
        ZeroPPOptions o;
        o.quantized_gradients = true;
        const ZeroPPGroups g = ZeroPPGroups::make(c, o);
        const QuantizedReduceScatter qrs(g);
        // A generator of its own: the ranks are threads of one process.
        const at::Tensor send =
            torch::randn({chunk * world}, at::detail::createCPUGenerator(1000 + c.rank()));
        const at::Tensor all = torch::empty({chunk * world * world});
        c.all_gather(all, send);
        at::Tensor want = torch::zeros({chunk}, torch::kDouble);
        for (int r = 0; r < world; ++r) {
          want += all.narrow(0, r * chunk * world + c.rank() * chunk, chunk).to(torch::kDouble);
        }
        auto f = qrs.start(send);
        const at::Tensor got = torch::empty({chunk});
        qrs.finish(*f, got);
        const double err = (got.to(torch::kDouble) - want).abs().max().item<double>();
        const double max_abs = all.abs().max().item<double>();
        EXPECT_LE(err, qgz_bound(max_abs, hosts, local))
            << hosts << "x" << local << " chunk " << chunk << " rank " << c.rank();
        // Not a bound met by accident: the mean error is far below it.
        const double mean = (got.to(torch::kDouble) - want).abs().mean().item<double>();
        EXPECT_LT(mean, 0.25 * qgz_bound(max_abs, hosts, local));
        EXPECT_GT(err, 0.0) << "4-bit values cannot carry random floats exactly";
      },
      hosts_of(local));
}

TEST(QuantizedReduceScatter, MatchesThePlainReduceScatterWithinTheBound) {
  check_qgz(2, 2, 1000);
  check_qgz(2, 3, 1537);  // groups of 512 and a short last one
  check_qgz(3, 1, 5);     // one rank per host: the first hop stays on the rank
  check_qgz(1, 3, 64);    // one host: no second hop
}

TEST(QuantizedReduceScatter, ExactValuesStayExact) {
  // Every value is a multiple of amax/8 of its group (amax 8 in every group and every partial):
  // 4-bit quantization represents them exactly, so the result is exact.
  comm::run_local_world(
      4,
      [&](comm::Comm& c) {
        ZeroPPOptions o;
        o.quantized_gradients = true;
        const ZeroPPGroups g = ZeroPPGroups::make(c, o);
        const QuantizedReduceScatter qrs(g);
        const int64_t chunk = 512;
        // Each rank sends −2 everywhere but −8 at element 0 of each chunk: partials over 2 ranks
        // are −4 (−16 at 0), totals −8 (−32 at 0).
        at::Tensor send = torch::full({chunk * 4}, -2.0f);
        for (int r = 0; r < 4; ++r) send[r * chunk] = -8.0f;
        auto f = qrs.start(send);
        at::Tensor got = torch::empty({chunk});
        qrs.finish(*f, got);
        at::Tensor want = torch::full({chunk}, -8.0f);
        want[0] = -32.0f;
        EXPECT_TRUE(torch::equal(got, want));
      },
      hosts_of(2));
}

// ---- gathers ---------------------------------------------------------------------------------

struct Model {
  std::map<std::string, at::Tensor> t;
  Model() {  // the same values on every rank (ranks are threads: no global generator)
    const at::Generator gen = at::detail::createCPUGenerator(7);
    t["u0.w"] = torch::randn({37, 11}, gen).requires_grad_();
    t["u0.b"] = torch::randn({13}, gen).requires_grad_();
    t["u1.w"] = torch::randn({5, 3}, gen).requires_grad_();
  }
  std::map<std::string, at::Tensor> values() const {
    std::map<std::string, at::Tensor> v;
    for (const auto& [n, x] : t) v[n] = x.detach().clone();
    return v;
  }
  Stage3Layout layout(int world, int rank) {
    Stage3Layout l({{{"u0.w", t["u0.w"]}, {"u0.b", t["u0.b"]}, {"u1.w", t["u1.w"]}}}, {},
                   {{"u0.w", 0}, {"u0.b", 0}, {"u1.w", 1}}, 2, world, rank, 0,
                   std::numeric_limits<int64_t>::max());
    l.partition();
    return l;
  }
};

TEST(UnitGatherer, HpzGathersFromTheSecondaryPartitionBitwise) {
  comm::run_local_world(
      4,
      [](comm::Comm& c) {
        ZeroPPOptions o;
        o.hpz_partition_size = 2;
        const ZeroPPGroups groups = ZeroPPGroups::make(c, o);
        Model m;
        const auto want = m.values();
        Stage3Layout l = m.layout(4, c.rank());
        UnitGatherer g(l, borrow(c), 1, groups.hpz);
        for (int round = 0; round < 3; ++round) {
          for (int u = 0; u < 2; ++u) {
            g.wait(u);
            for (const auto& [name, x] : want) {
              if (name.rfind(u == 0 ? "u0" : "u1", 0) == 0) {
                EXPECT_TRUE(torch::equal(m.t[name].detach(), x)) << name << " round " << round;
              }
            }
            g.release(u);
          }
        }
        EXPECT_EQ(g.stats().all_gathers, 6);
        EXPECT_EQ(g.stats().secondary_gathers, 4) << "all but the first gather of each unit";
        // Ψ/K: ceil(numel/2) elements of every parameter.
        EXPECT_EQ(g.stats().secondary_bytes, (204 + 7 + 8) * 4);
        g.refresh_persistent();  // the partitions changed: the secondaries are gone
        EXPECT_EQ(g.stats().secondary_bytes, 0);
        g.wait(0);
        EXPECT_EQ(g.stats().secondary_gathers, 4);
        g.release(0);
        g.drop_secondaries();  // partitions written outside a step: the same
        EXPECT_EQ(g.stats().secondary_bytes, 0);
        g.wait(0);
        EXPECT_EQ(g.stats().secondary_gathers, 4) << "gathered from the primary partitions";
      },
      hosts_of(2));
}

TEST(UnitGatherer, QwzGathersWithinTheInt8BoundAndAlwaysTheSameValues) {
  comm::run_local_world(3, [](comm::Comm& c) {
    Model m;
    const auto want = m.values();
    Stage3Layout l = m.layout(3, c.rank());
    UnitGatherer g(l, borrow(c), 1, nullptr, /*quantized_weights=*/true);
    g.wait(0);
    const at::Tensor first = m.t["u0.w"].detach().clone();
    for (const char* name : {"u0.w", "u0.b"}) {
      const at::Tensor got = m.t[name].detach();
      const double err = (got - want.at(name)).abs().max().item<double>();
      // One int8 step of the largest group amax (each rank's chunk is one group here).
      const double amax = std::max(want.at("u0.w").abs().max().item<double>(),
                                   want.at("u0.b").abs().max().item<double>());
      EXPECT_LE(err, amax / 128 * (1 + 1e-5)) << name;
      EXPECT_GT(err, 0.0) << name << ": int8 cannot carry random floats exactly";
    }
    g.release(0);
    g.wait(0);
    EXPECT_TRUE(torch::equal(m.t["u0.w"].detach(), first)) << "deterministic";
    EXPECT_EQ(g.stats().quantized_gathers, 2);
  });
}

TEST(QuantizedChunk, DeepSpeedsGroupRuleAndPadding) {
  const QuantizedChunk a = QuantizedChunk::for_numel(157);
  EXPECT_EQ(a.padded, 160);
  EXPECT_EQ(a.groups, 1);
  EXPECT_EQ(a.bytes, 164);
  const QuantizedChunk b = QuantizedChunk::for_numel(16000);
  EXPECT_EQ(b.groups, 2);
  EXPECT_EQ(QuantizedChunk::for_numel(0).bytes, 0);
}

}  // namespace
}  // namespace zrt::zero
