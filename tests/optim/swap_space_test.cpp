// SwapSpace (optim/swap_space.h) on its own: whole-state reads and writes at unaligned offsets
// across buffer windows, the streamed sub-groups (order, offsets, write-back) under every
// pipeline setting, the option checks, and the life of the swap folder.
#include "optim/swap_space.h"

#include <filesystem>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "core/error.h"
#include "tests/support/error_of.h"
#include "tests/support/temp_dir.h"

namespace zrt::optim {
namespace {

namespace fs = std::filesystem;

SwapSpaceOptions options_in(const std::string& dir) {
  SwapSpaceOptions o;
  o.nvme_path = dir;
  o.rank = 3;
  o.sub_group_size = 1000;  // rounded up to 1024 elements (one page of floats)
  o.buffer_count = 9;
  o.aio.block_size = 4096;
  o.aio.queue_depth = 4;
  return o;
}

TEST(SwapSpace, WholeStatesRoundTripAtUnalignedOffsets) {
  test::TempDir dir("zrt_swap");
  SwapSpace space(options_in(dir.path()), {5000, 3});
  EXPECT_EQ(space.sub_group_numel(), 1024);
  const at::Tensor values = at::randn({5000});
  space.write(0, SwapState::kExpAvg, 0, values);
  EXPECT_TRUE(at::equal(space.read_all(0, SwapState::kExpAvg), values));
  // A piece straddling window and page boundaries, from a bf16 source (converted).
  const at::Tensor piece = at::randn({2100}).to(at::kBFloat16);
  space.write(0, SwapState::kExpAvg, 777, piece);
  at::Tensor expected = values.clone();
  expected.narrow(0, 777, 2100).copy_(piece);
  EXPECT_TRUE(at::equal(space.read_all(0, SwapState::kExpAvg), expected));
  at::Tensor part = at::empty({1500});
  space.read(0, SwapState::kExpAvg, 1001, part);
  EXPECT_TRUE(at::equal(part, expected.narrow(0, 1001, 1500)));
  // Never-written states read as zeros; other groups and states are independent.
  EXPECT_TRUE(at::equal(space.read_all(0, SwapState::kMaster), at::zeros({5000})));
  space.write(1, SwapState::kMaster, 0, at::ones({3}));
  EXPECT_TRUE(at::equal(space.read_all(1, SwapState::kMaster), at::ones({3})));
  EXPECT_NE(test::error_of<Error>([&] {
              space.read(0, SwapState::kMaster, 4999, part);
            }).find("elements [4999, 6499) of group 0 (5000 elements)"),
            std::string::npos);
}

// map_state: the state's values through a mapping of its file (what checkpoints write from); a
// write into the view never reaches the file.
TEST(SwapSpace, MappedStatesShowTheFileAndNeverWriteIt) {
  test::TempDir dir("zrt_swap");
  SwapSpace space(options_in(dir.path()), {5000, 3});
  const at::Tensor values = at::randn({5000});
  space.write(0, SwapState::kExpAvgSq, 0, values);
  at::Tensor mapped = space.map_state(0, SwapState::kExpAvgSq);
  EXPECT_EQ(mapped.numel(), 5000);
  EXPECT_EQ(mapped.storage().nbytes(), 5000u * 4) << "exactly the state, not the file's padding";
  EXPECT_TRUE(at::equal(mapped, values));
  mapped.fill_(7.0f);
  EXPECT_TRUE(at::equal(space.read_all(0, SwapState::kExpAvgSq), values));
  EXPECT_TRUE(at::equal(space.map_state(1, SwapState::kMaster), at::zeros({3})));
}

TEST(SwapSpace, StreamVisitsEverySubGroupAndWritesItBack) {
  test::TempDir dir("zrt_swap");
  for (int pipeline = 0; pipeline < 4; ++pipeline) {
    SwapSpaceOptions o = options_in(dir.path());
    o.pipeline_read = pipeline & 1;
    o.pipeline_write = pipeline & 2;
    SwapSpace space(o, {5000});
    EXPECT_EQ(space.buffer_sets(), 1 + (pipeline & 1) + ((pipeline & 2) >> 1));
    const at::Tensor start = at::randn({5000});
    space.write(0, SwapState::kMaster, 0, start);
    for (int pass = 1; pass <= 3; ++pass) {
      std::vector<int64_t> offsets;
      space.stream(0, [&](SwapChunk& c) {
        offsets.push_back(c.offset);
        EXPECT_EQ(c.numel, std::min<int64_t>(1024, 5000 - c.offset));
        // Each pass sees the previous pass's write-back.
        EXPECT_TRUE(at::equal(c.state(SwapState::kExpAvg), at::full({c.numel}, pass - 1.0f)));
        c.state(SwapState::kMaster).add_(1.0f);
        c.state(SwapState::kExpAvg).fill_(static_cast<float>(pass));
      });
      EXPECT_EQ(offsets, (std::vector<int64_t>{0, 1024, 2048, 3072, 4096})) << pipeline;
    }
    EXPECT_TRUE(at::equal(space.read_all(0, SwapState::kMaster), start + 1.0f + 1.0f + 1.0f))
        << pipeline;
    const SwapStats st = space.stats();
    EXPECT_GE(st.bytes_read, 3 * 3 * 5000 * 4);  // three passes, three states
    EXPECT_EQ(st.buffer_bytes, space.buffer_sets() * 3 * 1024 * 4);
  }
}

TEST(SwapSpace, ErrorInTheCallbackLeavesNoRequestBehind) {
  test::TempDir dir("zrt_swap");
  SwapSpaceOptions o = options_in(dir.path());
  o.pipeline_read = o.pipeline_write = true;
  SwapSpace space(o, {5000});
  int calls = 0;
  EXPECT_THROW(space.stream(0,
                            [&](SwapChunk&) {
                              if (++calls == 3) throw Error("boom");
                            }),
               Error);
  space.stream(0, [](SwapChunk&) {});  // still usable
}

TEST(SwapSpace, OptionsAndFolders) {
  test::TempDir dir("zrt_swap");
  SwapSpaceOptions o = options_in(dir.path());
  o.buffer_count = 2;
  EXPECT_NE(test::error_of<Error>([&] {
              SwapSpace s(o, {10});
            }).find("offload_optimizer.buffer_count: 2 buffers cannot hold one sub-group's 3"),
            std::string::npos);
  o = options_in("");
  EXPECT_NE(test::error_of<Error>([&] {
              SwapSpace s(o, {10});
            }).find("offload_optimizer.nvme_path is required with device \"nvme\""),
            std::string::npos);
  // A folder that does not exist yet is made, parents and all, as DeepSpeed makes it.
  o = options_in(dir.path() + "/new/nvme");
  { SwapSpace made(o, {10}); }
  EXPECT_TRUE(std::filesystem::is_directory(dir.path() + "/new/nvme"));
  // One that cannot be made is named with the reason.
  dir.write("file", "x");
  o = options_in(dir.path() + "/file/nvme");
  EXPECT_NE(test::error_of<Error>([&] {
              SwapSpace s(o, {10});
            }).find("offload_optimizer.nvme_path " + dir.path() + "/file/nvme: Not a directory"),
            std::string::npos);
  // Too few buffers to pipeline: fewer sub-groups in flight.
  o = options_in(dir.path());
  o.pipeline_read = o.pipeline_write = true;
  o.buffer_count = 6;
  std::string folder;
  {
    SwapSpace a(o, {10, 20});
    SwapSpace b(o, {10, 20});
    EXPECT_EQ(a.buffer_sets(), 2);
    EXPECT_NE(a.folder(), b.folder()) << "every space gets a fresh folder";
    EXPECT_EQ(fs::path(a.folder()).parent_path(), fs::path(dir.path()));
    EXPECT_EQ(fs::path(a.folder()).filename().string().rfind("zerort-swap-rank3-", 0), 0u);
    EXPECT_TRUE(fs::exists(a.file_path(1, SwapState::kExpAvgSq)));
    EXPECT_EQ(fs::path(a.file_path(1, SwapState::kExpAvgSq)).filename(), "g1.exp_avg_sq.swp");
    folder = a.folder();
  }
  EXPECT_FALSE(fs::exists(folder));
  for (const auto& entry : fs::recursive_directory_iterator(dir.path())) {
    EXPECT_EQ(entry.path().filename().string().rfind("zerort-", 0), std::string::npos)
        << entry.path() << " was left behind";
  }
}

}  // namespace
}  // namespace zrt::optim
