// Leaf modules (Note [Leaf modules] in zero/leaf_modules.h): DeepSpeed's class names carried over
// to C++ types, and the units inside a leaf dissolved into it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/error.h"
#include "zero/leaf_modules.h"
#include "zero/shard_unit.h"

namespace zrt {
namespace {

using Expert = ShardUnit<torch::nn::LinearImpl>;

namespace moe {
// A sparse MoE block as a user first writes one: each expert its own unit.
struct SparseMoeBlockImpl : torch::nn::Module {
  SparseMoeBlockImpl() : gate(register_module("gate", torch::nn::Linear(4, 2))) {
    for (int i = 0; i < 2; ++i) {
      experts.push_back(register_module("expert" + std::to_string(i), std::make_shared<Expert>(4, 4)));
    }
  }
  torch::nn::Linear gate;
  std::vector<std::shared_ptr<Expert>> experts;
};
}  // namespace moe

struct LayerImpl : torch::nn::Module {
  LayerImpl()
      : attn(register_module("attn", torch::nn::Linear(4, 4))),
        moe(register_module("moe", std::make_shared<moe::SparseMoeBlockImpl>())) {}
  torch::nn::Linear attn;
  std::shared_ptr<moe::SparseMoeBlockImpl> moe;
};

// One layer that is no unit (its experts are units) and one that is.
struct ModelImpl : torch::nn::Module {
  ModelImpl()
      : plain(register_module("plain", std::make_shared<LayerImpl>())),
        unit(register_module("unit", std::make_shared<ShardUnit<LayerImpl>>())) {}
  std::shared_ptr<LayerImpl> plain;
  std::shared_ptr<ShardUnit<LayerImpl>> unit;
};

std::vector<std::string> unit_params(const zero::ShardUnits& found, int unit) {
  std::vector<std::string> names;
  for (const auto& [name, id] : found.unit_of) {
    if (id == unit) names.push_back(name);
  }
  return names;
}

TEST(LeafModules, ClassesMatchByTheirCxxNameOrDeepSpeedsPythonPath) {
  moe::SparseMoeBlockImpl block;
  EXPECT_TRUE(module_class_matches(block, block.name()));  // the full C++ name
  EXPECT_TRUE(module_class_matches(block, "SparseMoeBlockImpl"));
  EXPECT_TRUE(module_class_matches(block, "SparseMoeBlock"));
  EXPECT_TRUE(module_class_matches(block, "transformers.models.x.modeling_x.SparseMoeBlock"));
  EXPECT_FALSE(module_class_matches(block, "MoeBlock"));
  EXPECT_FALSE(module_class_matches(block, "SparseMoeBlockImp"));
  ShardUnit<moe::SparseMoeBlockImpl> as_unit;  // matched as the module it is
  EXPECT_TRUE(module_class_matches(as_unit, "SparseMoeBlock"));
  EXPECT_FALSE(module_class_matches(as_unit, "ShardUnit"));

  EXPECT_TRUE((LeafModules{{}, {"plain.moe"}, {}}.matches("plain.moe", block)));
  EXPECT_FALSE((LeafModules{{}, {"plain.moe"}, {}}.matches("unit.moe", block)));
  EXPECT_TRUE((LeafModules{{}, {}, {".moe"}}.matches("unit.moe", block)));
  EXPECT_FALSE((LeafModules{{}, {}, {".moe"}}.matches("unit.moes", block)));
  EXPECT_FALSE((LeafModules{{}, {}, {""}}.matches("unit.moe", block)));
}

// Without leaves the experts of the plain layer are units of their own (ranks routed to
// different experts would gather different units); with the MoE block a leaf they dissolve: the
// plain layer's block has no unit to go to and stays whole (reported), the unit layer's goes
// with that unit.
TEST(LeafModules, UnitsInsideALeafAreNoUnitsOfTheirOwn) {
  auto model = std::make_shared<ModelImpl>();
  const zero::ShardUnits before = zero::find_shard_units(*model, {});
  ASSERT_EQ(before.units.size(), 3u);
  EXPECT_EQ(unit_params(before, 0),
            (std::vector<std::string>{"plain.moe.expert0.weight", "plain.moe.expert0.bias"}));
  EXPECT_TRUE(before.leaves.empty());

  const zero::ShardUnits after =
      zero::find_shard_units(*model, {}, LeafModules{{"SparseMoeBlock"}, {}, {}});
  ASSERT_EQ(after.units.size(), 1u);
  EXPECT_EQ(after.units[0], static_cast<zero::ShardUnitBase*>(model->unit.get()));
  for (const auto& [name, id] : after.unit_of) {
    EXPECT_EQ(name.rfind("unit.", 0), 0u) << name << " in unit " << id;
  }
  EXPECT_EQ(unit_params(after, 0).size(), 2u + 2u + 2u * 2u);  // attn, gate, two experts
  EXPECT_EQ(after.leaves, (std::vector<std::string>{"plain.moe", "unit.moe"}));
  EXPECT_EQ(after.leaves_in_no_unit, std::vector<std::string>{"plain.moe"});
}

TEST(LeafModules, SetZ3LeafModulesMarksTheInstancesUntilUnset) {
  auto model = std::make_shared<ModelImpl>();
  EXPECT_EQ(set_z3_leaf_modules(*model, {"Nothing", "SparseMoeBlock"}),
            (std::vector<std::string>{"plain.moe", "unit.moe"}));
  EXPECT_TRUE(is_z3_leaf_module(*model->plain->moe));
  EXPECT_FALSE(is_z3_leaf_module(*model->plain));
  EXPECT_EQ(zero::find_shard_units(*model, {}).units.size(), 1u);
  auto other = std::make_shared<ModelImpl>();  // marks belong to instances, not classes
  EXPECT_EQ(zero::find_shard_units(*other, {}).units.size(), 3u);
  unset_z3_leaf_modules(*model, {"SparseMoeBlock"});
  EXPECT_FALSE(is_z3_leaf_module(*model->plain->moe));
  EXPECT_EQ(zero::find_shard_units(*model, {}).units.size(), 3u);
  try {
    set_z3_leaf_modules(*model, {"MixtralSparseMoeBlock"});
    ADD_FAILURE() << "a class that matches nothing was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("no module of the model is of class MixtralSparseMoeBlock"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace zrt
