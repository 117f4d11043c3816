// Real engine checkpoints for the tool tests and the bad-input corpus: a tiny MLP (with a frozen
// and an unused parameter) trained for a few steps by zrt::initialize on an in-process world of
// 1-4 ranks, then saved with Engine::save_checkpoint. Also runs a tool binary and captures its
// output and exit status.
#pragma once

#include <map>
#include <string>

#include <ATen/core/Tensor.h>

#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

namespace zrt::test {

struct CheckpointSpec {
  int stage = 2;
  int world = 2;
  bool bf16 = false;
  int steps = 2;  // optimizer steps before the save; the tag is global_step{steps}
};

struct MadeCheckpoint {
  std::string tag;
  std::map<std::string, at::Tensor> weights;  // every parameter after training, fp32
};

// Trains and saves into `save_dir` (created if needed). Throws on failure.
MadeCheckpoint make_engine_checkpoint(const std::string& save_dir, const CheckpointSpec& spec);

using ToolResult = zrt::test::CommandResult;
// Single-quotes `s` for the shell.
std::string shell_quote(const std::string& s);


}  // namespace zrt::test
