// ZeRO-3 leaf modules: DeepSpeed's set_z3_leaf_modules and zero_optimization.leaf_module, as
// ZeroRT's units give them a meaning (Note [Leaf modules]).
#pragma once

#include <string>
#include <vector>

#include <torch/torch.h>

namespace zrt {

// Note [Leaf modules]
// DeepSpeed's ZeRO-3 hooks every submodule. A leaf is a module that its hooks gather whole at
// its forward, with no hooks on its submodules, so that a module which runs only some of its
// submodules (a sparse MoE block routing each rank's tokens to some experts) issues the same
// gathers on every rank. ZeroRT's units are the program's ShardUnits, each gathered whole with
// every ShardUnit nested in it; a leaf says which module must not be cut finer. A ShardUnit
// strictly inside a leaf is no unit of its own: its parameters go with the leaf, into the leaf's
// unit when the leaf is a ShardUnit or lies inside one, else they stay whole on every rank (the
// engine warns; declare the leaf as zrt::ShardUnit<M> to partition it as one unit). Leaves come
// from the config (zero_optimization.leaf_module, DeepSpeed's default classes included) and from
// set_z3_leaf_modules, and apply when the engine is built.
struct LeafModules {
  // Class names, matched by module_class_matches.
  std::vector<std::string> classes;
  std::vector<std::string> names;          // full dotted module names ("layers.0.moe")
  std::vector<std::string> name_suffixes;  // the end of a module's dotted name (".moe")

  // Whether `module`, named `name` in its model, is one of these leaves.
  bool matches(const std::string& name, const torch::nn::Module& module) const;
};

// Whether `module`'s class is `class_name`: its C++ type's name in full ("ns::MoeBlockImpl") or
// short ("MoeBlockImpl", or "MoeBlock" for a LibTorch *Impl class), template arguments ignored and
// ShardUnit<M> taken as M. A dotted Python path matches by its last part, so DeepSpeed's default
// classes (transformers' MixtralSparseMoeBlock, ...) match C++ modules of the same name.
bool module_class_matches(const torch::nn::Module& module, const std::string& class_name);

// DeepSpeed's set_z3_leaf_modules: marks every module of `model` (itself included when it is
// held by a shared_ptr) whose class is one of `classes` as a leaf, for as long as the module
// lives. Call it before zrt::initialize. Returns the marked modules' names ("" for the model);
// throws UsageError naming the classes when none matches.
std::vector<std::string> set_z3_leaf_modules(torch::nn::Module& model,
                                             const std::vector<std::string>& classes);
// Removes the mark from the modules of `model` whose class is one of `classes`.
void unset_z3_leaf_modules(torch::nn::Module& model, const std::vector<std::string>& classes);
// Whether set_z3_leaf_modules marked `module`.
bool is_z3_leaf_module(const torch::nn::Module& module);

}  // namespace zrt
