// ParamSwapper (Note [Swapped partitions]): unaligned reads and writes across the resident prefix
// and the file, unit plans with pieces from two groups and gaps, read-ahead buffers (never the
// last free one), and writes that make units read ahead earlier be read again.
#include "zero/param_swapper.h"

#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/error.h"
#include "tests/support/error_of.h"
#include "tests/support/temp_dir.h"

namespace zrt::zero {
namespace {

// Group 0: bf16, 10000 elements; group 1: fp32, 3000. Unit 0: two adjacent pieces of group 0 and a
// piece of group 1; unit 1: two pieces of group 0 with a gap; unit 2: one piece in the prefix.
std::vector<std::vector<SwapPiece>> pieces() {
  return {{{0, 3000, 2500}, {0, 5500, 1000}, {1, 100, 2000}},
          {{0, 6600, 1400}, {0, 8500, 1500}},
          {{0, 0, 3000}}};
}

ParamSwapOptions options_in(const std::string& dir) {
  ParamSwapOptions o;
  o.nvme_path = dir;
  o.aio.block_size = 4096;
  o.buffer_count = 3;
  o.buffer_size = 8000;
  o.max_in_cpu = 3000;  // group 0's first piece stays in memory
  return o;
}

at::Tensor ramp(int64_t n, at::ScalarType t, double start) {
  return at::arange(start, start + static_cast<double>(n), at::TensorOptions().dtype(at::kDouble))
      .to(t);
}

TEST(ParamSwapper, ReadsWritesAndUnitsSeeTheSameBytes) {
  test::TempDir dir("zrt_pswap");
  ParamSwapper s(options_in(dir.path()), {10000, 3000}, {at::kBFloat16, at::kFloat}, pieces());
  EXPECT_EQ(s.resident_numel(0), 3000);
  EXPECT_EQ(s.resident_numel(1), 0);
  const at::Tensor g0 = ramp(10000, at::kBFloat16, 1);
  const at::Tensor g1 = ramp(3000, at::kFloat, -5000);
  s.write(0, 0, g0);
  s.write(1, 0, g1);
  at::Tensor back = at::empty({7777}, at::kBFloat16);
  s.read(0, 1111, back);  // across the prefix's end, unaligned at both ends
  EXPECT_TRUE(at::equal(back, g0.narrow(0, 1111, 7777)));
  const auto all = pieces();
  for (int u = 0; u < 3; ++u) {
    const std::vector<at::Tensor> parts = s.acquire(u);
    ASSERT_EQ(parts.size(), all[u].size());
    for (size_t k = 0; k < parts.size(); ++k) {
      const SwapPiece& p = all[u][k];
      const at::Tensor& whole = p.group == 0 ? g0 : g1;
      EXPECT_TRUE(at::equal(parts[k], whole.narrow(0, p.offset, p.numel))) << u << " " << k;
    }
    s.release(u);
  }
  EXPECT_EQ(s.stats().unit_reads, 2) << "unit 2 is wholly in memory";
  EXPECT_EQ(s.stats().swapped_bytes, 7000 * 2 + 3000 * 4);
}

TEST(ParamSwapper, ReadAheadKeepsOneBufferAndWritesDropIt) {
  test::TempDir dir("zrt_pswap");
  ParamSwapper s(options_in(dir.path()), {10000, 3000}, {at::kBFloat16, at::kFloat}, pieces());
  s.write(0, 0, ramp(10000, at::kBFloat16, 1));
  EXPECT_TRUE(s.read_ahead(0));
  EXPECT_TRUE(s.read_ahead(2)) << "nothing to read: no buffer taken";
  EXPECT_TRUE(s.read_ahead(1));
  EXPECT_TRUE(s.read_ahead(1)) << "already read ahead";
  // Two of three buffers are taken; the last one stays for acquire().
  ParamSwapper other(options_in(dir.path()), {10000, 3000}, {at::kBFloat16, at::kFloat}, pieces());
  EXPECT_TRUE(other.read_ahead(0));
  EXPECT_TRUE(other.read_ahead(1));
  // A write after the read ahead: unit 1 must show the new values, not the ones read before.
  const at::Tensor fresh = ramp(1400, at::kBFloat16, 100);
  s.write(0, 6600, fresh);
  {
    const std::vector<at::Tensor> parts = s.acquire(1);
    EXPECT_TRUE(at::equal(parts[0], fresh));
    s.release(1);
  }
  EXPECT_EQ(s.stats().read_ahead_hits, 0) << "the write dropped what was read ahead";
  EXPECT_TRUE(s.read_ahead(0));
  s.acquire(0);
  s.release(0);
  EXPECT_EQ(s.stats().read_ahead_hits, 1);
}

TEST(ParamSwapper, FullBuffersRefuseReadAhead) {
  test::TempDir dir("zrt_pswap");
  ParamSwapOptions o = options_in(dir.path());
  o.buffer_count = 2;
  ParamSwapper s(o, {10000, 3000}, {at::kBFloat16, at::kFloat}, pieces());
  EXPECT_TRUE(s.read_ahead(0));
  EXPECT_FALSE(s.read_ahead(1)) << "the last free buffer is acquire()'s";
  s.acquire(1);  // not read ahead: read now into the free buffer
  s.release(1);
}

TEST(ParamSwapper, ErrorsNameTheKeyAndTheUnit) {
  test::TempDir dir("zrt_pswap");
  ParamSwapOptions o = options_in(dir.path());
  o.buffer_size = 4000;
  const std::string small = test::error_of<ConfigError>([&] {
    ParamSwapper(o, {10000, 3000}, {at::kBFloat16, at::kFloat}, pieces());
  });
  EXPECT_NE(small.find("offload_param.buffer_size: unit 0's parameter partitions need "),
            std::string::npos)
      << small;
  dir.write("file", "x");
  o = options_in(dir.path() + "/file/nvme");
  const std::string bad = test::error_of<Error>([&] {
    ParamSwapper(o, {10000, 3000}, {at::kBFloat16, at::kFloat}, pieces());
  });
  EXPECT_NE(bad.find("offload_param.nvme_path " + dir.path() + "/file/nvme"), std::string::npos)
      << bad;
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1)
      << "only the file made above";
}

}  // namespace
}  // namespace zrt::zero
