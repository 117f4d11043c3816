// zero_to_fp32 consolidation on synthetic ZeRO checkpoints partitioned with core/shard.h (the
// rules the engine uses) at world sizes 1-4 with odd sizes: stage 1/2 flat groups padded to 2W,
// stage 3 per-parameter partitions, frozen parameters, buffers, shared (tied) parameters; also
// through real files (our writer + tolerant reader) and the error cases.
#include "checkpoint/consolidate.h"

#include <map>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "checkpoint/layout.h"
#include "checkpoint/pt/pt_file.h"
#include "checkpoint/reshard.h"
#include "checkpoint/zero_folder.h"
#include "core/error.h"
#include "core/shard.h"
#include "tests/checkpoint/test_util.h"
#include "tests/support/error_of.h"

namespace zrt::ckpt {
namespace {

struct Param {
  std::string name;
  std::vector<int64_t> shape;
  at::Tensor value;  // fp32
};

// Two trainable groups with odd sizes, one frozen parameter, two buffers and a tied alias.
struct Model {
  std::vector<std::vector<Param>> groups;
  std::vector<Param> frozen;
  at::Tensor running_mean = torch::tensor({0.5f, -1.0f, 2.0f});
  at::Tensor num_batches = torch::tensor(int64_t{7});

  Model() {
    int seed = 1;
    auto p = [&](const std::string& name, std::vector<int64_t> shape) {
      int64_t numel = 1;
      for (int64_t d : shape) numel *= d;
      const at::Tensor v =
          torch::arange(numel, torch::kFloat).mul(0.25).add(100 * seed++).reshape(shape);
      return Param{name, shape, v};
    };
    groups = {{p("embed.weight", {7, 5}), p("l1.weight", {3, 5}), p("scale", {})},
              {p("l1.bias", {3}), p("l2.weight", {1, 3}), p("l2.bias", {1})}};
    frozen = {p("frozen.w", {2, 3})};
  }

  // The module state dict as a bf16 model would hold it (buffers are what consolidation keeps).
  Value module(bool stage3) const {
    Value m = Value::ordered_dict();
    for (const auto& g : groups) {
      for (const auto& p : g) {
        m.set(p.name, stage3 ? torch::empty({0}, torch::kBFloat16) : p.value.to(torch::kBFloat16));
      }
    }
    m.set("bn.running_mean", running_mean);
    m.set("bn.num_batches_tracked", num_batches);
    return m;
  }

  Value model_states(bool stage3, int rank, int world) const {
    Value v = Value::dict();
    v.set("module", module(stage3));
    v.set("buffer_names", Value::list({"bn.running_mean", "bn.num_batches_tracked"}));
    Value shapes = Value::list();
    for (const auto& g : groups) {
      Value d = Value::ordered_dict();
      for (const auto& p : g) d.set(p.name, Value::torch_size(p.shape));
      shapes.push_back(d);
    }
    v.set("param_shapes", shapes);
    Value frozen_shapes = Value::ordered_dict();
    Value fragments = Value::dict();
    for (const auto& p : frozen) {
      frozen_shapes.set(p.name, Value::torch_size(p.shape));
      if (!stage3) {
        fragments.set(p.name, p.value);
      } else {
        fragments.set(p.name, stage3_partition(p.value, rank, world));
      }
    }
    v.set("frozen_param_shapes", frozen_shapes);
    v.set("frozen_param_fragments", fragments);
    Value shared = Value::dict();
    if (rank == 0) shared.set("lm_head.weight", "embed.weight");
    v.set("shared_params", shared);
    v.set("optimizer", Value());
    v.set("global_steps", 10);
    return v;
  }

  // Stage 1/2: each group's flat is padded to a multiple of 2W and cut in W partitions; the file
  // holds the partition without its padding ("lean"), as a view of one buffer like the engine's.
  Value optim_states_stage12(int rank, int world) const {
    Value lean = Value::list();
    Value paddings = Value::list();
    Value counts = Value::list();
    for (const auto& g : groups) {
      std::vector<at::Tensor> flat_parts;
      for (const auto& p : g) flat_parts.push_back(p.value.reshape({-1}));
      const at::Tensor flat = torch::cat(flat_parts);
      const FlatPartition fp = make_flat_partition(flat.numel(), world);
      at::Tensor padded = torch::zeros({fp.padded_numel});
      padded.narrow(0, 0, flat.numel()).copy_(flat);
      const ShardInfo valid = fp.valid(rank);
      lean.push_back(padded.narrow(0, valid.offset, valid.size));
      paddings.push_back(fp.padding(rank));
      counts.push_back(world);
    }
    Value osd = Value::dict();
    osd.set("zero_stage", 2);
    osd.set("loss_scaler", Value::dict());
    osd.set("partition_count", counts);
    osd.set("group_paddings", paddings);
    osd.set("single_partition_of_fp32_groups", lean);
    Value v = Value::dict();
    v.set("optimizer_state_dict", osd);
    v.set("ds_version", "0.19.6");
    return v;
  }

  static at::Tensor stage3_partition(const at::Tensor& value, int rank, int world) {
    const at::Tensor flat = value.reshape({-1});
    const int64_t pn = param_partition_size(flat.numel(), world);
    const ShardInfo s = param_shard(flat.numel(), rank, world);
    at::Tensor part = torch::zeros({pn}, value.options());
    if (s.size > 0) part.narrow(0, 0, s.size).copy_(flat.narrow(0, s.offset, s.size));
    return part;
  }

  // Stage 3: per-parameter partitions of ceil(numel/W), concatenated per sub-group.
  Value optim_states_stage3(int rank, int world) const {
    Value flats = Value::list();
    for (const auto& g : groups) {
      std::vector<at::Tensor> parts;
      for (const auto& p : g) parts.push_back(stage3_partition(p.value, rank, world));
      flats.push_back(torch::cat(parts));
    }
    Value osd = Value::dict();
    osd.set("zero_stage", 3);
    osd.set("partition_count", world);
    osd.set("fp32_flat_groups", flats);
    Value v = Value::dict();
    v.set("optimizer_state_dict", osd);
    return v;
  }

  void check(const NamedTensors& sd, bool with_frozen = true) const {
    std::vector<std::string> expect_names = {"bn.running_mean", "bn.num_batches_tracked"};
    if (with_frozen) expect_names.push_back("frozen.w");
    for (const auto& g : groups) {
      for (const auto& p : g) expect_names.push_back(p.name);
    }
    expect_names.push_back("lm_head.weight");
    std::vector<std::string> names;
    for (const auto& [n, _] : sd) names.push_back(n);
    ASSERT_EQ(names, expect_names);
    std::map<std::string, at::Tensor> by_name(sd.begin(), sd.end());
    for (const auto& g : groups) {
      for (const auto& p : g) {
        EXPECT_EQ(by_name[p.name].scalar_type(), at::kFloat);
        EXPECT_TRUE(by_name[p.name].equal(p.value)) << p.name;
      }
    }
    EXPECT_TRUE(by_name["lm_head.weight"].equal(groups[0][0].value));
    EXPECT_TRUE(by_name["bn.running_mean"].equal(running_mean));
    EXPECT_EQ(by_name["bn.num_batches_tracked"].scalar_type(), at::kFloat);  // DeepSpeed: .float()
    EXPECT_EQ(by_name["bn.num_batches_tracked"].item<float>(), 7.0f);
    if (with_frozen) EXPECT_TRUE(by_name["frozen.w"].equal(frozen[0].value));
  }
};

class ConsolidateTest : public ::testing::TestWithParam<int> {};

TEST_P(ConsolidateTest, Stage12) {
  const int world = GetParam();
  Model model;
  std::vector<Value> optim;
  for (int r = 0; r < world; ++r) optim.push_back(model.optim_states_stage12(r, world));
  model.check(consolidate_fp32(optim, {model.model_states(false, 0, world)}, "ckpt"));
  ConsolidateOptions no_frozen;
  no_frozen.exclude_frozen_parameters = true;
  model.check(consolidate_fp32(optim, {model.model_states(false, 0, world)}, "ckpt", no_frozen),
              false);
}

TEST_P(ConsolidateTest, Stage3) {
  const int world = GetParam();
  Model model;
  std::vector<Value> optim, states;
  for (int r = 0; r < world; ++r) {
    optim.push_back(model.optim_states_stage3(r, world));
    states.push_back(model.model_states(true, r, world));
  }
  model.check(consolidate_fp32(optim, states, "ckpt"));
}

// DeepSpeed's stage 3 may cut a group into sub-groups (sub_group_size): every rank's flats are
// read back to back, wherever the cuts fall.
TEST_P(ConsolidateTest, Stage3SubGroupsCutAnywhere) {
  const int world = GetParam();
  Model model;
  std::vector<Value> optim, states;
  for (int r = 0; r < world; ++r) {
    Value file = model.optim_states_stage3(r, world);
    Value osd = file.at("optimizer_state_dict");
    std::vector<at::Tensor> flats;
    for (const Value& t : osd.at("fp32_flat_groups").items()) flats.push_back(t.as_tensor());
    const at::Tensor all = torch::cat(flats);
    const int64_t n = all.numel();
    Value cut = Value::list();
    for (const auto& [from, to] : std::vector<std::pair<int64_t, int64_t>>{
             {0, n / 3}, {n / 3, n / 3}, {n / 3, 2 * n / 3 + 1}, {2 * n / 3 + 1, n}}) {
      cut.push_back(all.narrow(0, from, to - from).clone());  // one sub-group is empty
    }
    osd.set("fp32_flat_groups", cut);
    file.set("optimizer_state_dict", osd);
    optim.push_back(file);
    states.push_back(model.model_states(true, r, world));
  }
  model.check(consolidate_fp32(optim, states, "ckpt"));
}

// DsOptimStatesFile writes a rank's file from its padded masters as DeepSpeed lays it out (stages
// 1/2 lean with paddings, stage 3 padded) and reads it back; a ZeroFolder over the files gives
// every parameter's fp32 weights and moments whole.
TEST_P(ConsolidateTest, OptimStatesFileWritesAndReadsBack) {
  const int world = GetParam();
  Model model;
  for (int stage : {2, 3}) {
    std::vector<NamedShapes> shapes;
    for (const auto& g : model.groups) {
      NamedShapes named;
      for (const auto& p : g) named.emplace_back(p.name, p.shape);
      shapes.push_back(named);
    }
    const PartitionLayout layout = ds_partition_layout(stage);
    std::vector<Value> files;
    for (int r = 0; r < world; ++r) {
      std::vector<at::Tensor> masters;
      Value state = Value::dict();
      for (size_t g = 0; g < shapes.size(); ++g) {
        masters.push_back(partition_from_whole(
            layout, shapes[g], r, world,
            [&](const std::string& name) {
              for (const auto& p : model.groups[g]) {
                if (p.name == name) return p.value;
              }
              return at::Tensor();
            },
            at::kFloat, "test"));
        Value entry = Value::dict();
        entry.set("step", 4);
        entry.set("exp_avg", masters.back() * 2);
        entry.set("exp_avg_sq", masters.back() * 3);
        state.set(static_cast<int64_t>(g), entry);
      }
      DsOptimStatesFile f;
      f.zero_stage = stage;
      f.world_size = world;
      f.base = Value::dict();
      f.base.set("state", state);
      f.base.set("param_groups", Value::list());
      f.loss_scaler = Value::dict();
      f.clip_grad = 1.0;
      files.push_back(f.to_value(r, shapes, masters, Value::dict(), "0.16.5"));
      const DsOptimStatesFile back = DsOptimStatesFile::read(files.back(), "file");
      EXPECT_EQ(back.zero_stage, stage);
      EXPECT_EQ(back.world_size, world);
      EXPECT_EQ(back.clip_grad, 1.0);
      ASSERT_EQ(back.fp32.size(), shapes.size());
      for (size_t g = 0; g < shapes.size(); ++g) {
        const RankPartition part = rank_partition(layout, shapes[g], r, world);
        const int64_t saved = stage == 3 ? part.partition_numel : part.valid_numel;
        EXPECT_TRUE(back.fp32[g].equal(masters[g].narrow(0, 0, saved))) << stage << " " << g;
        if (stage != 3) EXPECT_EQ(back.group_paddings.at(g), part.padding());
        EXPECT_TRUE(back.partition(g, "exp_avg", "file").equal(masters[g] * 2));
      }
      EXPECT_TRUE(back.base.equals(f.base));
    }
    const ZeroFolder folder(files, model.model_states(stage == 3, 0, world), "ckpt");
    EXPECT_EQ(folder.group_step(1), 4);
    for (size_t g = 0; g < shapes.size(); ++g) {
      const RangeReader fp32 = folder.reader(g, kFp32State);
      const RangeReader exp_avg_sq = folder.reader(g, kExpAvgSqState);
      for (const auto& p : model.groups[g]) {
        const int64_t n = p.value.numel();
        EXPECT_TRUE(fp32(p.name, n, ShardInfo{0, n}).equal(p.value.reshape({-1}))) << p.name;
        EXPECT_TRUE(exp_avg_sq(p.name, n, ShardInfo{0, n}).equal(p.value.reshape({-1}) * 3))
            << p.name;
      }
    }
  }
}

TEST_P(ConsolidateTest, ThroughFilesAndTheDirectoryLoader) {
  const int world = GetParam();
  Model model;
  for (bool stage3 : {false, true}) {
    test::TempDir dir;
    const std::string tag_dir = dir / "global_step10";
    std::filesystem::create_directory(tag_dir);
    test::write_all(dir / "latest", "global_step10");
    for (int r = 0; r < world; ++r) {
      save_pt(stage3 ? model.optim_states_stage3(r, world) : model.optim_states_stage12(r, world),
              tag_dir + "/" + optim_states_name(r, /*bf16=*/true));
      if (stage3) {
        save_pt(model.model_states(true, r, world), tag_dir + "/" + zero3_model_states_name(r));
      }
    }
    if (!stage3) save_pt(model.model_states(false, 0, world), tag_dir + "/" + model_states_name());
    model.check(load_fp32_state_dict(dir.path()));
    model.check(load_fp32_state_dict(dir.path(), std::string("global_step10")));
  }
}

// An independent restatement of spec §4.6 in Python, run on our files with weights_only=True;
// its result (saved by torch.save) must equal ours.
constexpr const char* kPythonZeroToFp32 = R"PY(
import sys, glob, re, collections, torch
d, out = sys.argv[1], sys.argv[2]
natural = lambda s: [int(t) if t.isdigit() else t for t in re.split(r'(\d+)', s)]
osds = [torch.load(f, weights_only=True)['optimizer_state_dict']
        for f in sorted(glob.glob(d + '/*_optim_states.pt'), key=natural)]
ms = [torch.load(f, weights_only=True) for f in sorted(glob.glob(d + '/*_model_states.pt'), key=natural)]
stage, world = osds[0]['zero_stage'], osds[0]['partition_count']
world = max(world) if isinstance(world, list) else world
assert len(osds) == world
sd = collections.OrderedDict()
for k, v in ms[0]['module'].items():
    if k in ms[0]['buffer_names']:
        sd[k] = v.float()
for name, shape in ms[0]['frozen_param_shapes'].items():
    if stage <= 2:
        sd[name] = ms[0]['frozen_param_fragments'][name]
    else:
        sd[name] = torch.cat([m['frozen_param_fragments'][name] for m in ms]).narrow(0, 0, shape.numel()).view(shape)
if stage <= 2:
    for g, shapes in enumerate(ms[0]['param_shapes']):
        full = torch.cat([o['single_partition_of_fp32_groups'][g] for o in osds])
        off = 0
        for name, shape in shapes.items():
            sd[name] = full.narrow(0, off, shape.numel()).view(shape)
            off += shape.numel()
else:
    flats = [torch.cat(o['fp32_flat_groups']) for o in osds]
    off = 0
    for shapes in ms[0]['param_shapes']:
        for name, shape in shapes.items():
            pn = -(-shape.numel() // world)
            sd[name] = torch.cat([f.narrow(0, off, pn) for f in flats]).narrow(0, 0, shape.numel()).view(shape)
            off += pn
for alias, owner in ms[0]['shared_params'].items():
    sd[alias] = sd[owner]
torch.save(collections.OrderedDict((k, v.clone()) for k, v in sd.items()), out)
)PY";

TEST(Consolidate, PythonReimplementationAgrees) {
  ZRT_REQUIRE_PYTHON_TORCH();
  const int world = 3;
  Model model;
  for (bool stage3 : {false, true}) {
    test::TempDir dir;
    std::vector<Value> optim, states;
    for (int r = 0; r < world; ++r) {
      optim.push_back(stage3 ? model.optim_states_stage3(r, world)
                             : model.optim_states_stage12(r, world));
      save_pt(optim.back(), dir / optim_states_name(r, false));
      if (stage3 || r == 0) {
        states.push_back(model.model_states(stage3, r, world));
        save_pt(states.back(), dir / (stage3 ? zero3_model_states_name(r) : model_states_name()));
      }
    }
    const auto res = test::run_python(kPythonZeroToFp32, dir.path() + " " + (dir / "py.pt"));
    ASSERT_EQ(res.exit_code, 0) << res.output;
    const Value py = load_pt(dir / "py.pt");
    const NamedTensors ours = consolidate_fp32(optim, states, dir.path());
    ASSERT_EQ(py.length(), ours.size());
    size_t i = 0;
    for (const auto& [k, v] : py.as_dict()) {
      EXPECT_EQ(k.as_str(), ours[i].first);
      EXPECT_TRUE(v.as_tensor().equal(ours[i].second)) << ours[i].first;
      ++i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, ConsolidateTest, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

const auto error_of = &zrt::test::error_of<CheckpointError>;

TEST(Consolidate, Errors) {
  Model model;
  const int world = 3;
  std::vector<Value> optim;
  for (int r = 0; r < world; ++r) optim.push_back(model.optim_states_stage12(r, world));
  const Value ms = model.model_states(false, 0, world);
  // A missing rank file.
  std::vector<Value> two(optim.begin(), optim.begin() + 2);
  EXPECT_NE(error_of([&] {
              consolidate_fp32(two, {ms}, "dir");
            }).find("Expected 3 of '*_optim_states.pt' under 'dir' but found 2 files."),
            std::string::npos);
  // A BF16_Optimizer checkpoint has no zero_stage.
  std::vector<Value> bf16 = optim;
  Value osd = bf16[0].at("optimizer_state_dict");
  Dict stripped;
  for (const auto& [k, v] : osd.as_dict()) {
    if (k != Key("zero_stage")) stripped.set(k, v);
  }
  bf16[0].set("optimizer_state_dict", Value(stripped));
  EXPECT_NE(error_of([&] { consolidate_fp32(bf16, {ms}, "dir"); }).find("is not a zero checkpoint"),
            std::string::npos);
  // param_shapes that do not match the partitions.
  Value bigger = ms;
  Value shapes = bigger.at("param_shapes");
  shapes.items()[1].set("extra", Value::torch_size({50}));
  bigger.set("param_shapes", shapes);
  // Each rank's partition is checked against the size param_shapes gives it (zero_to_fp32 only
  // compares the totals), naming the file and the group.
  EXPECT_PRED_FORMAT2(::testing::IsSubstring,
                      "dir: optim states 0: the fp32 partition of group 1 holds 4 elements, "
                      "param_shapes needs 20",
                      error_of([&] { consolidate_fp32(optim, {bigger}, "dir"); }));
  Value smaller = ms;
  Value s2 = smaller.at("param_shapes");
  Dict g1;
  g1.set("l1.bias", Value::torch_size({3}));
  s2.items()[1] = Value(g1, true);
  smaller.set("param_shapes", s2);
  EXPECT_PRED_FORMAT2(::testing::IsSubstring,
                      "dir: optim states 0: the fp32 partition of group 1 holds 4 elements, "
                      "param_shapes needs 2",
                      error_of([&] { consolidate_fp32(optim, {smaller}, "dir"); }));
  Value negative = ms;
  Value s3 = negative.at("param_shapes");
  s3.items()[0].set("embed.weight", Value::list({-7, 5}));
  negative.set("param_shapes", s3);
  EXPECT_NE(error_of([&] { consolidate_fp32(optim, {negative}, "dir"); }).find("negative"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              load_fp32_state_dict("/nonexistent/dir");
            }).find("Unable to find 'latest' file at /nonexistent/dir/latest"),
            std::string::npos);
}

TEST(Consolidate, DeepSpeedZeroStageEnumForms) {
  auto osd_with = [](Value stage) {
    Value osd = Value::dict();
    osd.set("zero_stage", stage);
    Value v = Value::dict();
    v.set("optimizer_state_dict", osd);
    return v;
  };
  EXPECT_EQ(zero_stage_of(osd_with(2), "f"), 2);
  EXPECT_EQ(zero_stage_of(osd_with(Value::object("deepspeed.runtime.zero.config.ZeroStageEnum",
                                                 Value::tuple({1}))),
                          "f"),
            1);
  EXPECT_EQ(zero_stage_of(
                osd_with(Value::object("builtins.getattr",
                                       Value::tuple({Value::object("deepspeed.runtime.zero.config."
                                                                   "ZeroStageEnum"),
                                                     "weights"}))),
                "f"),
            3);
  EXPECT_THROW(zero_stage_of(osd_with("two"), "f"), CheckpointError);
}

}  // namespace
}  // namespace zrt::ckpt
