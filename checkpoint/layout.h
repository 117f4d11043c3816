// DeepSpeed's checkpoint tree (docs/DEEPSPEED.md §4.1) as functions: file names, tags and their
// validation, the `latest` file, and the HF Trainer resume rules of §3.7. Pure naming and small
// reads; writing goes through commit.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/storage.h"
#include "core/error.h"

namespace zrt::ckpt {

// "mp_rank_00_model_states.pt" (stages 0-2, written by the writer rank).
std::string model_states_name(int mp_rank = 0);
// "zero_pp_rank_{dp}_mp_rank_00_model_states.pt" (stage 3, one per DP rank).
std::string zero3_model_states_name(int dp_rank, int mp_rank = 0);
// The model-states file rank `dp_rank` writes at `zero_stage` (the writer's for stages 0-2).
std::string model_states_name_of(int zero_stage, int dp_rank);
// "[bf16_]zero_pp_rank_{dp}_mp_rank_00_optim_states.pt" (ZeRO / bf16 optimizer, one per DP rank).
std::string optim_states_name(int dp_rank, bool bf16, int mp_rank = 0);
// "zrt_rng_state_{dp}.pt" (ZeroRT: the CPU generator state of one DP rank).
std::string rng_state_name(int dp_rank);
// "global_step{N}".
std::string default_tag(int64_t global_steps);
// The optim-states names of all `world_size` DP ranks, in rank order.
std::vector<std::string> optim_states_names(int world_size, bool bf16, int mp_rank = 0);

constexpr const char* kLatestFile = "latest";
constexpr uint64_t kMaxLatestBytes = 4096;

// Throws CheckpointError unless `tag` matches ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$ (so no "." or
// "..", separators, NUL or absolute paths). The message names the tag (escaped).
void validate_tag(const std::string& tag);
bool is_valid_tag(const std::string& tag);
// save_dir/tag after validate_tag.
std::string tag_path(const std::string& save_dir, const std::string& tag);
// Throws CheckpointError unless `name` is a plain file name (what validate_tag allows).
void validate_file_name(const std::string& name);

// The tag named by save_dir/latest: nullopt when the file does not exist; CheckpointError when it
// is not a regular file, larger than 4 KiB, more than one line (one trailing newline is accepted)
// or not a valid tag.
// `file` names another file of that form (universal.h's latest_universal).
std::optional<std::string> read_latest(const std::string& save_dir, Storage* storage = nullptr,
                                       const char* file = kLatestFile);

// HF Trainer resume (spec §3.7): the entries of `checkpoint_path` matching global_step*, sorted as
// Python's sorted(glob(...)) sorts them (byte order of the full paths).
std::vector<std::string> glob_global_steps(const std::string& checkpoint_path,
                                           Storage* storage = nullptr);
// Throws CheckpointError("Can't find a valid checkpoint at {path}") when that glob is empty.
void check_hf_resumable(const std::string& checkpoint_path, Storage* storage = nullptr);
// The error for a load that found no checkpoint: "[deepspeed] failed to resume from checkpoint
// {path}".
CheckpointError hf_resume_failed(const std::string& checkpoint_path);

// DeepSpeed's natural sort key order ("rank_2" < "rank_10"), used for *_optim_states.pt lists.
bool natural_less(const std::string& a, const std::string& b);

// The *_optim_states.pt and *_model_states.pt names in tag folder `dir`, each in natural order
// (rank order), as zero_to_fp32 globs them. CheckpointError "Directory '<dir>' doesn't exist".
struct ZeroFiles {
  std::vector<std::string> optim;
  std::vector<std::string> model;
};
ZeroFiles list_zero_files(const std::string& dir);

}  // namespace zrt::ckpt
