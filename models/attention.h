// Attention of the model family (models/llama.h) as transformers computes it, by its
// attn_implementation.
#pragma once

#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include <torch/torch.h>
#include <torch/version.h>

#include "core/error.h"
#include "models/llama_config.h"

namespace zrt::models {

// Note [Attention implementations]
// As transformers' attn_implementation: "sdpa" (its default) computes attention with
// at::scaled_dot_product_attention (LibTorch's fused CPU and GPU kernels: no (t, total) score
// matrix kept for backward), causal by the kernel's own flag when nothing else is masked, else
// with a boolean mask (a KV cache's offset, Mistral's sliding window); "eager" is the scores
// matrix, a softmax in fp32 and a matmul. Both give transformers' logits with the same
// implementation within fp32 rounding. LibTorch 1.13 has no such kernel: "eager" is its default,
// and "sdpa" is refused there.
inline bool llama_uses_sdpa(const LlamaConfig& c) {
#if TORCH_VERSION_MAJOR >= 2
  return c.attn_implementation != "eager";
#else
  return false;
#endif
}

// Sets `c`'s attention (Note [Attention implementations]) from a flag's value; `where` names the
// flag in errors.
inline void set_attn_implementation(LlamaConfig& c, const std::string& value, const std::string& where) {
  ZRT_CHECK_AS(ConfigError, value == "sdpa" || value == "eager", where, " '", value,
               "' is not supported (\"sdpa\" and \"eager\" are; flash_attention_2 and "
               "flex_attention need kernels LibTorch's C++ API does not have)");
#if TORCH_VERSION_MAJOR < 2
  ZRT_CHECK_AS(ConfigError, value == "eager", where, " 'sdpa': this LibTorch (",
               TORCH_VERSION, ") has no scaled_dot_product_attention (2.0 and later have it)");
#endif
  c.attn_implementation = value;
}

// Note [Packed sequences]
// Several documents in one row, told apart by their position_ids: a document starts wherever a
// position is not its predecessor + 1 (transformers' find_packed_sequence_indices), e.g. positions
// 0 1 2 0 1 0 1 2 3 are documents 0 0 0 1 1 2 2 2 2. Rotary takes the given positions, and a query
// attends only to the keys of its own document (causal, and Mistral's window by index within the
// row, as transformers masks them). transformers applies the document mask only when the forward
// has no KV cache (use_cache=False: with the config's default use_cache=True its mask stays plain
// causal even in training); ZeroRT's training forward never has one, so the mask always applies,
// and a forward with both a cache and position_ids is refused.
//
// Each token's document index (b, t) from `position_ids` (b, t); undefined when every row is one
// document.
inline torch::Tensor packed_documents(const torch::Tensor& position_ids) {
  const int64_t t = position_ids.size(1);
  const torch::Tensor p = torch::cat({position_ids.narrow(1, 0, 1) - 1, position_ids}, 1);
  const torch::Tensor documents = (p.narrow(1, 1, t) - p.narrow(1, 0, t)).ne(1).cumsum(1);
  if (documents.select(1, t - 1).eq(0).all().item<bool>()) return torch::Tensor();
  return documents;
}

// Causal attention (b, heads, t, d) of the queries q (b, heads, t, d) over the keys and values k,
// v (b, heads, total, d; key/value heads already repeated), the queries being the last t of the
// total positions; with `sliding_window` W > 0 a query at position p sees keys p − W + 1 .. p;
// with `documents` (b, t: each token's document, Note [Packed sequences]; no earlier
// positions) a query sees only its own document's keys.
// Scores scaled by d^−1/2; eager's softmax in fp32, cast back to the activations' dtype.
inline torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k,
                                      const torch::Tensor& v, int64_t sliding_window, bool sdpa,
                                      const torch::Tensor& documents = torch::Tensor()) {
  const int64_t t = q.size(2), total = k.size(2), past = total - t;
  ZRT_CHECK(!documents.defined() || past == 0, "packed documents with earlier positions (a cache)");
  // Query i (absolute past + i) sees keys 0 .. past + i: true where it must not look.
  auto masked = [&] {
    const auto flags = torch::TensorOptions().dtype(torch::kBool).device(q.device());
    auto mask = torch::ones({t, total}, flags).triu(past + 1);  // the future
    if (sliding_window > 0) {  // keys at or before query position − window
      mask = mask.logical_or(torch::ones({t, total}, flags).tril(past - sliding_window));
    }
    if (documents.defined()) {  // (b, 1, t, t): another document's keys
      const torch::Tensor d = documents.to(q.device());
      mask = mask.logical_or(d.unsqueeze(2).ne(d.unsqueeze(1)).unsqueeze(1));
    }
    return mask;
  };
#if TORCH_VERSION_MAJOR >= 2
  if (sdpa) {
    const bool causal = past == 0 && sliding_window == 0 && !documents.defined();  // the kernel's own causal mask
    const std::optional<at::Tensor> allowed =
        causal ? std::nullopt : std::optional<at::Tensor>(masked().logical_not());
    return at::scaled_dot_product_attention(q, k, v, allowed, 0.0, causal);
  }
#endif
  auto scores = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  scores = scores.to(torch::kFloat).masked_fill(masked(), -std::numeric_limits<float>::infinity());
  return torch::matmul(torch::softmax(scores, -1).to(q.scalar_type()), v);
}

}  // namespace zrt::models
