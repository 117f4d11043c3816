// DeepSpeed's universal checkpoint (its ds_to_universal.py; loaded with
// "checkpoint": {"load_universal": true}): every trainable parameter's whole state in files of its
// own, so that any world size and ZeRO stage can take its partitions from it.
//
// Note [Universal checkpoints]
// A universal tag folder (save_dir/<tag>, named by save_dir/latest_universal) holds
//   zero/<param>/fp32.pt, exp_avg.pt, exp_avg_sq.pt   the parameter's fp32 master and Adam moments,
//       whole: DeepSpeed writes {"param": tensor of the parameter's shape, "cat_dim": 0} from
//       stages 1/2 and the bare flat tensor from stage 3; ZeroRT writes the dict form, which
//       DeepSpeed's loaders of every stage accept, and reads both;
//   zero/<param>/step.pt   the group's step (an int; DeepSpeed writes it from stages 1/2 only);
//   zero/optimizer_state.pt   what the optimizer needs besides the tensors: "param_groups" (the
//       torch layout's hyper-parameters per group), "loss_scaler", "dynamic_loss_scale",
//       "overflow", "clip_grad", "ds_version", ...; from stage 3 DeepSpeed keeps rank 0's whole
//       optimizer_state_dict there, whose state[0]["step"] its stage-3 loader reads. ZeroRT writes
//       both the stage-1/2 keys and an "optimizer_state_dict" with each group's step, so one folder
//       serves DeepSpeed's loaders of every stage;
//   the source's *_model_states.pt files, unchanged (global steps, scheduler, client state,
//       buffers; DeepSpeed's stage-3 loader opens zero_pp_rank_0_mp_rank_00_model_states.pt).
// Frozen parameters and buffers are not under zero/: they come from the model states.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "checkpoint/pt/pt_file.h"
#include "checkpoint/reshard.h"
#include "checkpoint/value.h"
#include "checkpoint/zero_folder.h"

namespace zrt::ckpt {

constexpr const char* kLatestUniversalFile = "latest_universal";

// folder/zero/<param>/<state>.pt (`param` must be a plain name: no '/', not "." or "..").
std::string universal_state_path(const std::string& folder, const std::string& param,
                                 const std::string& state);

// A universal tag folder opened for ranged reads (the engine's load_universal).
class UniversalFolder : public WholeStateSource {
 public:
  // Throws CheckpointError naming the folder when zero/optimizer_state.pt or the model states are
  // missing or unreadable.
  explicit UniversalFolder(std::string folder);

  const std::string& folder() const { return folder_; }
  // zero/optimizer_state.pt (tensors on the meta device).
  const Value& optimizer_state() const { return optim_->value(); }
  // The model-states file the counters and buffers come from: mp_rank_00_model_states.pt, or
  // stage 3's zero_pp_rank_0_mp_rank_00_model_states.pt.
  const std::string& model_states_file() const { return model_file_; }
  bool has(const std::string& param, const std::string& state) const override;
  std::string location(const std::string& param, const std::string& state) const override;
  const std::string& where() const override { return folder_; }
  // Whole parameters' `state` by ranges (float32 as saved). The reader throws CheckpointError
  // naming the file when it is missing or its tensor does not have the parameter's elements.
  RangeReader reader(const std::string& state) const override;
  // The parameters under zero/ with an fp32.pt (their element counts from the files' indexes).
  std::map<std::string, int64_t> params() const override;
  // The step of the parameter's group: its step.pt, else optimizer_state_dict.state[group].step
  // (DeepSpeed's stage-3 form), else nullopt.
  std::optional<int64_t> step(const std::string& param, size_t group) const override;
  // zero/optimizer_state.pt's "param_groups", "optimizer_state_dict"."zrt_optimizer" and
  // "loss_scaler".
  const Value& param_groups() const override;
  const Value& optimizer_name() const override;
  const Value& loss_scaler() const override;

 private:
  std::string folder_;
  std::unique_ptr<PtIndex> optim_;
  std::string model_file_;
};

struct UniversalWriteStats {
  int64_t params = 0;
  int64_t files = 0;
  int64_t bytes = 0;
};

// Writes the universal form of the ZeRO stage 1-3 checkpoint in `src` (a tag folder written by
// ZeroRT or DeepSpeed) to `out` (a new folder, or an earlier universal checkpoint, which it
// replaces), then names it in out's parent's latest_universal.
// Streams one parameter at a time by ranged reads (checkpoint/zero_folder.h): memory holds one
// parameter's state, never the model's. Everything is written under a temporary name and renamed
// into place last; on failure nothing is left behind. Throws CheckpointError naming what was wrong
// (`out` exists and is not a universal checkpoint, a stage-0 source, a file that does not fit
// its param_shapes).
UniversalWriteStats write_universal(const std::string& src, const std::string& out);

}  // namespace zrt::ckpt
