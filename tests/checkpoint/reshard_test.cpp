// checkpoint/reshard.h: whole tensors -> every rank's partition -> whole tensors for both layouts
// (Note [Partition layouts]) at world sizes 1-5 with awkward sizes (scalars, empty and 1-element
// tensors, groups smaller than the world), against a from-scratch construction of the partitions
// with plain ATen; padding is zero; lean stage-1/2 partitions merge like padded ones; errors.
#include "checkpoint/reshard.h"

#include <map>
#include <set>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/error.h"
#include "tests/support/error_of.h"

namespace zrt::ckpt {
namespace {

constexpr PartitionLayout kLayouts[] = {PartitionLayout::kFlat, PartitionLayout::kPerParam};

const char* name_of(PartitionLayout layout) {
  return layout == PartitionLayout::kFlat ? "flat" : "per-param";
}

// Parameter lists that exercise the padding: odd sizes, a scalar, an empty tensor, a group of one
// element (smaller than every world size above 1), an empty group.
std::vector<NamedShapes> awkward_groups() {
  return {
      {{"embed.weight", {7, 5}}, {"l1.weight", {3, 5}}, {"scale", {}}},
      {{"l1.bias", {3}}, {"empty", {0, 4}}, {"l2.weight", {1, 3}}, {"l2.bias", {1}}},
      {{"one", {1}}},
      {{"big", {2, 3, 11}}, {"odd", {13}}},
      {},
  };
}

std::map<std::string, at::Tensor> wholes_of(const NamedShapes& params) {
  std::map<std::string, at::Tensor> out;
  double seed = 1;
  for (const auto& [name, shape] : params) {
    const int64_t n = shape_numel(shape);
    out[name] = torch::arange(n, torch::kFloat).mul(0.5).add(100 * seed++).reshape(shape);
  }
  return out;
}

// Rank r's padded partition built from scratch with plain ATen, as DeepSpeed builds it: the flat
// group padded to a multiple of 2W and cut in W, or each parameter padded to W·ceil(n/W) and cut.
at::Tensor reference_partition(PartitionLayout layout, const NamedShapes& params,
                               const std::map<std::string, at::Tensor>& wholes, int r, int w) {
  std::vector<at::Tensor> pieces;
  if (layout == PartitionLayout::kFlat) {
    std::vector<at::Tensor> flat{torch::zeros({0})};
    for (const auto& [name, shape] : params) flat.push_back(wholes.at(name).reshape({-1}));
    const at::Tensor group = torch::cat(flat);
    const int64_t padded = (group.numel() + 2 * w - 1) / (2 * w) * (2 * w);
    const at::Tensor all = torch::cat({group, torch::zeros({padded - group.numel()})});
    return all.narrow(0, r * (padded / w), padded / w);
  }
  pieces.push_back(torch::zeros({0}));
  for (const auto& [name, shape] : params) {
    const at::Tensor t = wholes.at(name).reshape({-1});
    const int64_t pn = (t.numel() + w - 1) / w;
    const at::Tensor all = torch::cat({t, torch::zeros({pn * w - t.numel()})});
    pieces.push_back(all.narrow(0, r * pn, pn));
  }
  return torch::cat(pieces);
}

TEST(Reshard, RoundTripBothLayoutsWorldSizes1To5) {
  for (PartitionLayout layout : kLayouts) {
    for (const NamedShapes& params : awkward_groups()) {
      const auto wholes = wholes_of(params);
      auto whole = [&](const std::string& name) { return wholes.at(name); };
      for (int w = 1; w <= 5; ++w) {
        SCOPED_TRACE(::testing::Message() << name_of(layout) << " W=" << w << " params "
                                          << params.size() << " numel " << group_numel(params));
        std::vector<at::Tensor> padded, lean;
        int64_t valid_total = 0;
        for (int r = 0; r < w; ++r) {
          const RankPartition mine = rank_partition(layout, params, r, w);
          const at::Tensor part =
              partition_from_whole(layout, params, r, w, whole, at::kFloat, "test");
          ASSERT_EQ(part.dim(), 1);
          ASSERT_EQ(part.numel(), mine.partition_numel);
          // The expected partition, padding (zeros) included, bit for bit.
          EXPECT_TRUE(torch::equal(part, reference_partition(layout, params, wholes, r, w)));
          EXPECT_GE(mine.padding(), 0);
          valid_total += mine.valid_numel;
          padded.push_back(part);
          lean.push_back(part.narrow(0, 0, mine.valid_numel));
        }
        EXPECT_EQ(valid_total, group_numel(params));
        for (const auto* parts : {&padded, &lean}) {
          // Lean pieces only make sense for kFlat, where the padding is at the group's end.
          if (parts == &lean && layout == PartitionLayout::kPerParam && w > 1) continue;
          const NamedTensors merged = merge_partitions(layout, *parts, params, "test");
          ASSERT_EQ(merged.size(), params.size());
          for (size_t i = 0; i < params.size(); ++i) {
            EXPECT_EQ(merged[i].first, params[i].first);
            EXPECT_EQ(merged[i].second.sizes().vec(), params[i].second);
            EXPECT_TRUE(torch::equal(merged[i].second, wholes.at(params[i].first)))
                << params[i].first;
          }
        }
      }
    }
  }
}

TEST(Reshard, RankPartitionMatchesDeepSpeedPadding) {
  // 35 + 15 + 1 = 51 elements over 4 ranks: padded to 56 (a multiple of 8), 14 per rank, the last
  // rank holds 9 real elements and 5 padding (DeepSpeed's group_paddings).
  const NamedShapes group = awkward_groups()[0];
  for (int r = 0; r < 3; ++r) {
    const RankPartition p = rank_partition(PartitionLayout::kFlat, group, r, 4);
    EXPECT_EQ(p.partition_numel, 14);
    EXPECT_EQ(p.padding(), 0);
  }
  const RankPartition last = rank_partition(PartitionLayout::kFlat, group, 3, 4);
  EXPECT_EQ(last.valid_numel, 9);
  EXPECT_EQ(last.padding(), 5);
  // Stage 3 at W=3: ceil(35/3) + ceil(15/3) + ceil(1/3) = 12 + 5 + 1 per rank; rank 2 holds 11 of
  // embed.weight, 5 of l1.weight and nothing of the scalar.
  const RankPartition s3 = rank_partition(PartitionLayout::kPerParam, group, 2, 3);
  EXPECT_EQ(s3.partition_numel, 18);
  EXPECT_EQ(s3.valid_numel, 16);
  // A group of one element over 5 ranks: flat padded to 10 (2 per rank), per-param 1 per rank.
  const NamedShapes one = awkward_groups()[2];
  EXPECT_EQ(rank_partition(PartitionLayout::kFlat, one, 0, 5).valid_numel, 1);
  EXPECT_EQ(rank_partition(PartitionLayout::kFlat, one, 1, 5).valid_numel, 0);
  EXPECT_EQ(rank_partition(PartitionLayout::kFlat, one, 4, 5).partition_numel, 2);
  EXPECT_EQ(rank_partition(PartitionLayout::kPerParam, one, 4, 5).partition_numel, 1);
  EXPECT_EQ(rank_partition(PartitionLayout::kPerParam, one, 4, 5).valid_numel, 0);
}

TEST(Reshard, KeepsAndCastsDtypes) {
  const NamedShapes params = awkward_groups()[3];
  const auto wholes = wholes_of(params);
  for (PartitionLayout layout : kLayouts) {
    std::vector<at::Tensor> parts;
    for (int r = 0; r < 3; ++r) {
      parts.push_back(partition_from_whole(
          layout, params, r, 3, [&](const std::string& n) { return wholes.at(n).to(at::kDouble); },
          at::kBFloat16, "test"));
      EXPECT_EQ(parts.back().scalar_type(), at::kBFloat16);
    }
    for (const auto& [name, t] : merge_partitions(layout, parts, params, "test")) {
      EXPECT_EQ(t.scalar_type(), at::kBFloat16);
      EXPECT_TRUE(torch::equal(t, wholes.at(name).to(at::kBFloat16))) << name;
    }
  }
}

TEST(Reshard, AsksOnlyForTheParametersARankHolds) {
  // W=5 per-parameter: "one" lives on rank 0 only; flat: the group of 51 padded to 60, rank 4
  // holds elements [48, 60), i.e. only the end of l1.weight and the scalar.
  const NamedShapes params = awkward_groups()[0];
  const auto wholes = wholes_of(params);
  std::set<std::string> asked;
  auto whole = [&](const std::string& name) {
    asked.insert(name);
    return wholes.at(name);
  };
  partition_from_whole(PartitionLayout::kFlat, params, 4, 5, whole, at::kFloat, "test");
  EXPECT_EQ(asked, (std::set<std::string>{"l1.weight", "scale"}));
  asked.clear();
  partition_from_whole(PartitionLayout::kPerParam, awkward_groups()[2], 3, 5, whole, at::kFloat,
                       "test");
  EXPECT_TRUE(asked.empty());
}

TEST(Reshard, FillPartitionReadsExactlyTheHeldRanges) {
  // The ranges fill_partition asks for, in each parameter's own coordinates, must add up to the
  // rank's real elements and reproduce the reference partition; padding and skipped parameters
  // keep the values the partition had.
  for (PartitionLayout layout : kLayouts) {
    for (const NamedShapes& params : awkward_groups()) {
      const auto wholes = wholes_of(params);
      for (int w = 1; w <= 5; ++w) {
        for (int r = 0; r < w; ++r) {
          const RankPartition mine = rank_partition(layout, params, r, w);
          int64_t asked = 0;
          RangeReader read = [&](const std::string& name, int64_t numel, ShardInfo range) {
            EXPECT_EQ(numel, wholes.at(name).numel()) << name;
            EXPECT_GT(range.size, 0) << name;
            EXPECT_LE(range.end(), numel) << name;
            asked += range.size;
            return wholes.at(name).reshape({-1}).narrow(0, range.offset, range.size).to(at::kDouble);
          };
          at::Tensor part = torch::full({mine.partition_numel + 3}, -1.0f);
          fill_partition(layout, params, r, w, read, part, "test");
          SCOPED_TRACE(std::string(name_of(layout)) + " w=" + std::to_string(w) +
                       " r=" + std::to_string(r));
          EXPECT_EQ(asked, mine.valid_numel);
          const at::Tensor ref = reference_partition(layout, params, wholes, r, w);
          // Real elements equal the reference; the rest (padding, the 3 extra) stayed -1.
          const at::Tensor real = ref.ne(0) | part.narrow(0, 0, ref.numel()).ne(-1);
          EXPECT_TRUE(torch::equal(part.narrow(0, 0, ref.numel()).masked_select(real),
                                   ref.masked_select(real)));
          EXPECT_TRUE(torch::equal(part.narrow(0, ref.numel(), 3), torch::full({3}, -1.0f)));
          EXPECT_EQ(part.eq(-1).sum().item<int64_t>(), mine.padding() + 3);
        }
      }
    }
  }
  // An undefined tensor leaves the parameter's elements untouched; a short one is an error.
  const NamedShapes params = awkward_groups()[0];
  at::Tensor part = torch::full({rank_partition(PartitionLayout::kPerParam, params, 0, 1)
                                     .partition_numel},
                                7.0f);
  fill_partition(PartitionLayout::kPerParam, params, 0, 1,
                 [](const std::string&, int64_t, ShardInfo) { return at::Tensor(); }, part, "t");
  EXPECT_TRUE(torch::equal(part, torch::full_like(part, 7.0f)));
  EXPECT_NE(zrt::test::error_of<CheckpointError>([&] {
              fill_partition(PartitionLayout::kPerParam, params, 0, 1,
                             [](const std::string&, int64_t, ShardInfo) { return torch::ones({1}); },
                             part, "loading w");
            }).find("loading w: parameter 'embed.weight': asked for 35 elements, got 1"),
            std::string::npos);
}

// whole_from_partitions, the inverse of fill_partition: any range of any parameter from every
// rank's partition (padded, or lean for kFlat), asking each rank only for the elements of the
// range it holds — never more elements in all than the range has.
TEST(Reshard, WholeFromPartitionsReadsOnlyTheRangeAskedFor) {
  for (PartitionLayout layout : kLayouts) {
    for (const NamedShapes& params : awkward_groups()) {
      const auto wholes = wholes_of(params);
      for (int w = 1; w <= 5; ++w) {
        for (bool lean : {false, true}) {
          if (lean && layout == PartitionLayout::kPerParam) continue;
          SCOPED_TRACE(::testing::Message() << name_of(layout) << " W=" << w << " lean " << lean);
          std::vector<at::Tensor> parts;
          for (int r = 0; r < w; ++r) {
            const at::Tensor p = reference_partition(layout, params, wholes, r, w);
            parts.push_back(lean ? p.narrow(0, 0, rank_partition(layout, params, r, w).valid_numel)
                                 : p);
          }
          int64_t asked = 0;
          PartReader part = [&](int rank, int64_t offset, int64_t count) {
            asked += count;
            return parts.at(static_cast<size_t>(rank)).narrow(0, offset, count).clone();
          };
          const RangeReader read = whole_from_partitions(layout, params, w, part, "test");
          for (const auto& [name, shape] : params) {
            const at::Tensor flat = wholes.at(name).reshape({-1});
            const int64_t n = flat.numel();
            for (const ShardInfo range : {ShardInfo{0, n}, ShardInfo{0, n / 2},
                                          ShardInfo{n / 3, n - n / 3 - n / 4}, ShardInfo{n, 0}}) {
              asked = 0;
              const at::Tensor got = read(name, n, range);
              EXPECT_TRUE(torch::equal(got, flat.narrow(0, range.offset, range.size)))
                  << name << " [" << range.offset << ", +" << range.size << ")";
              EXPECT_EQ(asked, range.size) << name;
            }
          }
        }
      }
    }
  }
  const NamedShapes params = awkward_groups()[0];
  PartReader zeros = [](int, int64_t, int64_t count) { return torch::zeros({count}); };
  const RangeReader read = whole_from_partitions(PartitionLayout::kFlat, params, 2, zeros, "dir");
  EXPECT_NE(zrt::test::error_of<CheckpointError>([&] { read("nope", 3, ShardInfo{0, 3}); })
                .find("dir: no parameter 'nope' in the group"),
            std::string::npos);
  EXPECT_NE(zrt::test::error_of<CheckpointError>([&] { read("l1.weight", 15, ShardInfo{10, 6}); })
                .find("dir: parameter 'l1.weight' of 15 elements: asked for 6 elements at 10"),
            std::string::npos);
  PartReader short_part = [](int, int64_t, int64_t count) { return torch::zeros({count - 1}); };
  const RangeReader bad =
      whole_from_partitions(PartitionLayout::kFlat, params, 2, short_part, "dir");
  EXPECT_NE(zrt::test::error_of<CheckpointError>([&] { bad("l1.weight", 15, ShardInfo{0, 15}); })
                .find("dir: parameter 'l1.weight': rank 1's partition gave 14 elements for 15"),
            std::string::npos);
}

TEST(Reshard, Errors) {
  const auto error_of = &zrt::test::error_of<CheckpointError>;
  const NamedShapes params = awkward_groups()[0];
  const auto wholes = wholes_of(params);
  auto whole = [&](const std::string& name) { return wholes.at(name); };
  std::vector<at::Tensor> parts;
  for (int r = 0; r < 2; ++r) {
    parts.push_back(
        partition_from_whole(PartitionLayout::kFlat, params, r, 2, whole, at::kFloat, "t"));
  }
  NamedShapes bigger = params;
  bigger.emplace_back("extra", Shape{50});
  EXPECT_NE(error_of([&] { merge_partitions(PartitionLayout::kFlat, parts, bigger, "dir", 1); })
                .find("dir: parameter 'extra' needs elements [51, 101) of group 1 but the ranks' "
                      "partitions hold only 52"),
            std::string::npos);
  EXPECT_NE(error_of([&] { merge_partitions(PartitionLayout::kPerParam, parts, bigger, "dir"); })
                .find("parameter 'scale' needs elements [26, 27) of rank 0's fp32 partition, "
                      "which has only 26"),
            std::string::npos);
  NamedShapes negative = params;
  negative[0].second = {-7, 5};
  EXPECT_NE(error_of([&] {
              merge_partitions(PartitionLayout::kFlat, parts, negative, "dir");
            }).find("parameter 'embed.weight' has a negative dimension -7"),
            std::string::npos);
  EXPECT_THROW(merge_partitions(PartitionLayout::kFlat, parts, negative, "dir"), CheckpointError);
  auto short_whole = [&](const std::string& name) { return wholes.at(name).narrow(0, 0, 1); };
  EXPECT_NE(error_of([&] {
              partition_from_whole(PartitionLayout::kFlat, params, 0, 2, short_whole, at::kFloat,
                                   "dir");
            }).find("dir: parameter 'embed.weight' has 5 elements, its shape needs 35"),
            std::string::npos);
}

}  // namespace
}  // namespace zrt::ckpt
