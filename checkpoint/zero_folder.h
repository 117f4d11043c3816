// A ZeRO checkpoint tag folder (stages 1-3, written by ZeroRT or DeepSpeed) opened for ranged
// reads: which files and keys hold each group's fp32 partitions and Adam moments (FORMAT.md
// "Engine keys"), and whole-parameter readers over them that fetch only the requested elements
// from each rank's file (checkpoint/reshard.h whole_from_partitions over pt_file.h PtIndex). No
// tensor is read when the folder is opened; a reader of one parameter's range reads just that
// range, so converting or loading never holds more than what the caller asks for.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/ds_files.h"
#include "checkpoint/pt/pt_file.h"
#include "checkpoint/reshard.h"
#include "checkpoint/value.h"
#include "checkpoint/value_view.h"

namespace zrt::ckpt {

// The states a ZeRO folder holds per group (and a universal folder per parameter).
inline constexpr const char* kFp32State = "fp32";
inline constexpr const char* kExpAvgState = "exp_avg";
inline constexpr const char* kExpAvgSqState = "exp_avg_sq";

// Whole parameters' optimizer state by ranges, wherever it is kept: a ZeRO folder's partitions
// (ZeroFolder) or a universal folder's per-parameter files (universal.h). What loading at another
// world size or stage needs, one parameter range at a time.
class WholeStateSource {
 public:
  virtual ~WholeStateSource() = default;
  // The folder, for messages.
  virtual const std::string& where() const = 0;
  // Whether `state` (kFp32State, kExpAvgState, kExpAvgSqState, "momentum_buffer") of `param` is
  // there.
  virtual bool has(const std::string& param, const std::string& state) const = 0;
  // Where `state` of `param` is (or would be), for messages.
  virtual std::string location(const std::string& param, const std::string& state) const = 0;
  virtual RangeReader reader(const std::string& state) const = 0;
  // Every parameter with fp32 weights, and its number of elements.
  virtual std::map<std::string, int64_t> params() const = 0;
  // The step of `param`'s group (`group`: the loading engine's group index), nullopt if unknown.
  virtual std::optional<int64_t> step(const std::string& param, size_t group) const = 0;
  // The torch-layout "param_groups" (hyper-parameters per group), "zrt_optimizer" (None for
  // DeepSpeed's files: FusedAdam) and the saved loss scaler (None when absent).
  virtual const Value& param_groups() const = 0;
  virtual const Value& optimizer_name() const = 0;
  virtual const Value& loss_scaler() const = 0;
};

// A ZeRO stage 1-3 checkpoint's optimizer partitions (DsOptimStatesFile, one per saved rank)
// served as whole parameters by ranges. Stages 1/2 partition each group (kFlat); stage 3 is read
// as DeepSpeed's zero_to_fp32 reads it, each rank's sub-group flats back to back over all
// param_shapes groups (kPerParam), so any sub-grouping of the groups gives the same parameters.
class ZeroFolder : public WholeStateSource {
 public:
  // Opens save_dir/tag's files for ranged reads: every *_optim_states.pt (natural order = rank
  // order; bf16_ names too) and rank 0's model states (param_shapes). Throws CheckpointError
  // naming the folder when it is not a ZeRO stage 1-3 checkpoint (stage 0 has no partitions),
  // the file count does not match the saved world size ("Expected W of '*_optim_states.pt' under
  // ..."), or a file is unreadable.
  explicit ZeroFolder(const std::string& dir);
  // The same over file values already in memory: `optim_files[r]` rank r's *_optim_states.pt,
  // `model_states` rank 0's model states; `context` names them in errors.
  ZeroFolder(const std::vector<Value>& optim_files, const Value& model_states,
             const std::string& context);

  const std::string& dir() const { return dir_; }
  int zero_stage() const { return file(0).zero_stage; }
  int world_size() const { return static_cast<int>(ranks_.size()); }
  // Per group, the parameters and shapes in flattening order (the model states' param_shapes).
  const std::vector<NamedShapes>& groups() const { return groups_; }
  // The model-states file names in the folder (natural order; empty in memory).
  const std::vector<std::string>& model_states_files() const { return model_files_; }
  // Rank r's optimizer-states file, typed, and as saved ("optimizer_state_dict"; tensors on the
  // meta device when read from a folder), and its name for messages.
  const DsOptimStatesFile& file(int rank) const { return ranks_.at(static_cast<size_t>(rank)).file; }
  const Value& optimizer_state(int rank) const;
  const std::string& file_name(int rank) const { return ranks_.at(static_cast<size_t>(rank)).name; }

  // Whether group g has `state` (the moments exist once the optimizer has stepped).
  bool has_state(size_t group, const std::string& state) const;
  // Whole parameters of group g for `state` (kFp32State, kExpAvgState, kExpAvgSqState,
  // "momentum_buffer"), read by ranges from every rank's partition (the dtype as saved). Checks
  // first that every rank's partition has the size param_shapes gives it.
  RangeReader reader(size_t group, const std::string& state) const;
  // The group's step count as saved (rank 0's base optimizer state; 0 before the first step).
  int64_t group_step(size_t group) const;
  // The torch-layout param_groups list of rank 0's base optimizer (hyper-parameters per group).
  const Value& param_groups() const override;

  // WholeStateSource, by parameter name over all groups.
  const std::string& where() const override { return dir_; }
  bool has(const std::string& param, const std::string& state) const override;
  std::string location(const std::string& param, const std::string& state) const override;
  RangeReader reader(const std::string& state) const override;
  std::map<std::string, int64_t> params() const override;
  std::optional<int64_t> step(const std::string& param, size_t group) const override;
  const Value& optimizer_name() const override;
  const Value& loss_scaler() const override;

 private:
  struct Rank {
    std::string name;
    DsOptimStatesFile file;
    const Value* value = nullptr;  // the file's value (in index, or in held_)
    std::unique_ptr<PtIndex> index;  // null in memory
  };
  void open(const Value& model_states, const std::string& model_name);
  // Elements [offset, offset + count) of `t`, a tensor of rank r's file.
  at::Tensor read(int rank, const at::Tensor& t, int64_t offset, int64_t count) const;
  // Rank r's partitions of `state` that the reader walks: group g's (stages 1/2), or every
  // sub-group's in order (stage 3).
  std::vector<at::Tensor> pieces(int rank, size_t group, const std::string& state) const;

  std::string dir_;
  std::vector<Rank> ranks_;
  std::vector<Value> held_;  // the in-memory files
  std::vector<std::string> model_files_;
  std::vector<NamedShapes> groups_;
  NamedShapes all_params_;                   // every group's parameters in order (stage 3)
  std::map<std::string, size_t> group_of_;  // parameter name -> saved group
};

}  // namespace zrt::ckpt
