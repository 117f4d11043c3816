// Options of checkpoint save/load (leaf header: includes only core/). docs/DEEPSPEED.md §1.9.
#pragma once

namespace zrt::ckpt {

enum class TagValidation { kIgnore, kWarn, kFail };

struct CheckpointOptions {
  TagValidation tag_validation = TagValidation::kWarn;
  bool use_node_local_storage = false;  // writer rank = local rank 0 of each node
  bool load_universal = false;          // load universal checkpoints (latest_universal)
  bool parallel_write_pipeline_stage = false;
};

}  // namespace zrt::ckpt
