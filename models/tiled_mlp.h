// A position-wise module (an MLP) run over tiles of the sequence (DeepSpeed ALST's TiledMLP).
//
// Note [Tiled MLP]
// At a long context a LLaMA MLP's activations are (t, intermediate) three times over per layer,
// several times the layer's input. tiled_sequence runs fn over `tile` positions at a time, each
// tile a checkpointed region (zero/activation_checkpoint.h): the forward keeps only the tile's
// input, the backward recomputes the tile (the CPU generator's state restored, so dropout draws the
// same masks) and takes its gradients; the parameters named in `params` get their gradients out
// of each tile's node, so autograd sums the tiles before their one accumulation (ZeRO's gradient
// hooks see one gradient, as without tiling). The output is the same as fn(x) within fp32 rounding
// (each tile's matrix products are computed on fewer rows). Inside a checkpointed decoder layer
// the tiles nest in its region. Without grad mode the tiles run one after the other, no region.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include <torch/torch.h>

#include "zero/activation_checkpoint.h"

namespace zrt::models {

// fn over x (b, t, ...) in tiles of `tile` (≥ 1) positions along dim 1, concatenated.
inline at::Tensor tiled_sequence(std::function<at::Tensor(const at::Tensor&)> fn,
                                 const at::Tensor& x, const std::vector<at::Tensor>& params,
                                 int64_t tile) {
  std::vector<at::Tensor> parts;
  for (int64_t s = 0; s < x.size(1); s += tile) {
    const at::Tensor part = x.narrow(1, s, std::min(tile, x.size(1) - s));
    parts.push_back(zrt::detail::checkpoint_call(
        params, [fn](const at::Tensor& p) { return fn(p); }, part));
  }
  return at::cat(parts, 1);
}

}  // namespace zrt::models
