// EngineCheckpointer: an Engine's checkpoints in DeepSpeed's layout (docs/DEEPSPEED.md §4;
// checkpoint/FORMAT.md "Engine keys") and its whole-weight files. The save side is in
// runtime/engine_checkpointer.cpp (what each rank writes, save_16bit_model), the load side in
// runtime/engine_checkpointer_load.cpp (at the same world size and stage from this rank's own
// files; stage 0; module files) and runtime/engine_checkpointer_ranged.cpp (another world size or
// stage, universal checkpoints and ZeRO-3 weights only, each rank reading its partitions' ranges).
//
// It holds no state of its own and works only through the Engine's public surface, the
// CheckpointAccess that only it gets (runtime/checkpoint_access.h) and the
// ModelStates seam (runtime/model_states.h): it never needs to know which ZeRO stage's states it
// has, only the file names and keys depend on the stage. Built per call by the Engine's
// save_checkpoint / load_checkpoint / load_module_file / save_16bit_model, whose contracts
// (runtime/engine.h) its methods have. Internal to runtime/.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <unordered_map>

#include <ATen/ATen.h>

#include "checkpoint/pt/unpickler.h"
#include "checkpoint/universal.h"
#include "checkpoint/value.h"
#include "runtime/engine.h"

namespace zrt::runtime {

class EngineCheckpointer {
 public:
  explicit EngineCheckpointer(Engine& engine) : engine_(engine) {}

  // Collective; Engine::save_checkpoint.
  std::string save(const std::string& save_dir, const std::optional<std::string>& tag,
                   const ckpt::Value& client_state, bool save_latest);
  // Collective; Engine::load_checkpoint.
  std::optional<LoadedCheckpoint> load(const std::string& load_dir,
                                       const std::optional<std::string>& tag,
                                       const LoadCheckpointOptions& options);
  // Collective; Engine::load_module_file.
  void load_module_file(const std::string& path, bool strict);
  // Collective; Engine::save_16bit_model.
  bool save_16bit_model(const std::string& dir, const std::string& name);

  // What save() writes: the model-states file (with or without the module's tensors) and this
  // rank's optimizer-states file (stages 1-3 with an optimizer).
  ckpt::Value model_states_value(bool with_module);
  ckpt::Value optim_states_value();

 private:
  // `params` under their checkpoint names (Engine::set_checkpoint_names).
  ckpt::NamedShapes checkpoint_names(const ckpt::NamedShapes& params) const;
  // A model-states file read back with the model's own names where it uses the engine's
  // checkpoint names: the keys of module, param_shapes, frozen_param_shapes and
  // frozen_param_fragments, buffer_names and shared_params.
  void to_model_names(ckpt::Value& model_states) const;
  ckpt::Value module_state_dict();
  ckpt::Value frozen_params_value(ckpt::Value* shapes);
  void load_module_weights(const std::string& dir, const std::string& tag,
                           const ckpt::Value& model_states, int saved_stage, bool strict);
  // Weights only from whole-parameter state read by ranges (a stage-3 checkpoint's fp32 flats, a
  // universal folder): each rank reads its partitions' elements (never the whole model), the
  // buffers and frozen parameters come from the model states.
  void load_partitioned_weights(const ckpt::WholeStateSource& src, const ckpt::Value& model_states,
                                bool strict);
  void assign_module_weights(const std::unordered_map<std::string, at::Tensor>& full, bool strict,
                             const std::string& context);
  // Masters, optimizer state and loss scale from the checkpoint; then the parameters from the
  // masters and the buffers and frozen parameters from the module (collective).
  void load_partitioned_state(const std::string& dir, const std::string& tag, int saved_stage,
                              int saved_world, const ckpt::Value& model_states);
  // The same stage (1-3) and world size: each rank reads its own partitions. Returns the loss
  // scaler.
  ckpt::Value load_same_layout(const std::string& dir, const std::string& optim_file,
                               const ckpt::ReadOptions& read_options);
  // A stage-0 checkpoint (its layouts, Note [Stage 0 layouts]): whole parameters from the model
  // states, then this rank's partitions of them. Returns the loss scaler.
  ckpt::Value load_stage0(const std::string& dir, int saved_world, const ckpt::Value& model_states);
  // Buffers from the model states' module, and the frozen parameters (restore_frozen).
  void restore_whole_tensors(const std::string& dir, const ckpt::Value& model_states);
  // Collective. The frozen parameters from the checkpoint in `dir` (Note [Frozen parameters in
  // checkpoints] in runtime/engine_checkpointer_frozen.cpp); `model_states` is one of its model
  // states files.
  void restore_frozen(const std::string& dir, const ckpt::Value& model_states);
  // "checkpoint": {"load_universal": true}: the tag latest_universal names (Note [Universal
  // checkpoints], checkpoint/universal.h), each rank reading only its partitions' ranges.
  std::optional<LoadedCheckpoint> load_universal(const std::string& load_dir,
                                                 const std::optional<std::string>& tag,
                                                 const LoadCheckpointOptions& options);
  // Masters, optimizer state and loss scaler from whole-parameter state read by ranges (a
  // universal folder, or a ZeRO folder of another world size or stage), each rank only its
  // partitions' elements; every needed file is checked on every rank first. Then the parameters
  // from the masters and the buffers and frozen parameters from `model_states` (collective).
  void load_ranged_state(const ckpt::WholeStateSource& src, const ckpt::Value& model_states);
  // What every load ends with: counters, scheduler, the RNG (`rng_file` when not empty), the
  // client state (the model states' other keys), a barrier.
  std::optional<LoadedCheckpoint> finish_load(const std::string& dir,
                                              const ckpt::Value& model_states,
                                              const LoadCheckpointOptions& options,
                                              bool module_only, const std::string& rng_file);
  // This rank's partition of group `group`, `dtype`, from whole tensors by name.
  at::Tensor my_partition(int group, const std::function<at::Tensor(const std::string&)>& full,
                          at::ScalarType dtype) const;

  Engine& engine_;
};

}  // namespace zrt::runtime
