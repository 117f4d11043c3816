// Rotary position embeddings of the LLaMA family (models/llama.h) as transformers computes them,
// with its rope scalings, and the KV cache whose length positions continue from.
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "models/llama_config.h"

namespace zrt::models {

// Keys and values of every layer so far, for generation. k[l], v[l]: (batch, kv_heads, length,
// head_dim), after rotary.
struct KvCache {
  std::vector<torch::Tensor> k, v;
  int64_t length = 0;
  // rope_type "dynamic": the longest length the frequencies were computed for, and those
  // frequencies (Note [Rotary scaling]); 0 / undefined: the unscaled ones.
  int64_t rope_length = 0;
  torch::Tensor rope_inv_freq;
};

// Note [Rotary scaling]
// transformers' rope types, from the unscaled inv_freq[j] = 1 / theta^(2j / head_dim) (fp32),
// all with attention scaling 1:
// - linear (factor f): inv_freq / f.
// - llama3 (f, low_freq_factor lo, high_freq_factor hi, original_max_position_embeddings L):
//   with wavelen = 2π / inv_freq: wavelen > L / lo → inv_freq / f; wavelen < L / hi → inv_freq;
//   between, s = (L / wavelen − lo) / (hi − lo) and (1 − s)·inv_freq / f + s·inv_freq.
// - dynamic (NTK, factor f, M = max_position_embeddings): for a forward whose last position is
//   n − 1, when n > M: theta' = theta · (f·n / M − (f − 1))^(d / (d − 2)) (d = head_dim) in
//   place of theta. The frequencies are state: computed again only when n grows past the
//   longest length so far, back to the unscaled ones when n < M after a longer one; keys already
//   in a KV cache keep the rotation they were given. transformers keeps that state on the model
//   across calls; here it lives in the KvCache, so each generation starts unscaled (the two agree
//   when each call starts from a fresh state or below M); without a cache every forward starts
//   fresh.

// The inverse frequencies (head_dim / 2, fp32) of a forward ending at position `length` − 1.
inline torch::Tensor llama_inv_freq(const LlamaConfig& c, int64_t length, KvCache* cache) {
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat);
  auto exponent = torch::arange(0, c.head_dim, 2, torch::kLong).to(torch::kFloat) / c.head_dim;
  auto unscaled = [&](const torch::Tensor& theta) { return 1.0 / torch::pow(theta, exponent); };
  const torch::Tensor inv_freq = unscaled(torch::full({}, c.rope_theta, f32));
  if (c.rope_type == "linear") return inv_freq / c.rope_factor;
  if (c.rope_type == "llama3") {
    const double f = c.rope_factor, lo = c.rope_low_freq_factor, hi = c.rope_high_freq_factor;
    const double old_len = static_cast<double>(c.rope_original_max_position_embeddings);
    const auto wavelen = 2 * M_PI / inv_freq;
    auto scaled = torch::where(wavelen > old_len / lo, inv_freq / f, inv_freq);
    const auto smooth = (old_len / wavelen - lo) / (hi - lo);
    const auto smoothed = (1 - smooth) * scaled / f + smooth * scaled;
    const auto medium = (wavelen >= old_len / hi).logical_and(wavelen <= old_len / lo);
    return torch::where(medium, smoothed, scaled);
  }
  if (c.rope_type != "dynamic") return inv_freq;
  const int64_t max = c.max_position_embeddings;
  KvCache fresh;
  KvCache& state = cache != nullptr ? *cache : fresh;
  if (state.rope_length == 0) state.rope_length = max;
  if (length > state.rope_length) {
    // As transformers computes it: the length as a tensor, so theta' is fp32.
    const auto n = torch::full({}, length, torch::kLong);
    const double d = static_cast<double>(c.head_dim);
    const auto theta = c.rope_theta * torch::pow(c.rope_factor * n / max - (c.rope_factor - 1),
                                                 d / (d - 2));
    state.rope_inv_freq = unscaled(theta);
    state.rope_length = length;
  } else if (length < max && state.rope_length > max) {
    state.rope_inv_freq = torch::Tensor();
    state.rope_length = max;
  }
  return state.rope_inv_freq.defined() ? state.rope_inv_freq : inv_freq;
}

// cos and sin (t, head_dim) of absolute positions [offset, offset + t), in `dtype`; `cache`
// holds the dynamic rope state (Note [Rotary scaling]).
inline std::pair<torch::Tensor, torch::Tensor> llama_rotary(const LlamaConfig& c, int64_t offset,
                                                            int64_t t, at::ScalarType dtype,
                                                            KvCache* cache = nullptr) {
  const torch::Tensor inv_freq = llama_inv_freq(c, offset + t, cache);
  auto pos = torch::arange(offset, offset + t, torch::kLong).to(torch::kFloat);
  auto freqs = pos.unsqueeze(1) * inv_freq.unsqueeze(0);  // (t, head_dim / 2)
  auto emb = torch::cat({freqs, freqs}, -1);
  return {emb.cos().to(dtype), emb.sin().to(dtype)};
}

// cos and sin (b, 1, t, head_dim) of given positions `position_ids` (b, t), as transformers' rotary
// embedding takes them (a dynamic rope scaled for the largest position + 1, from a fresh state).
inline std::pair<torch::Tensor, torch::Tensor> llama_rotary_at(const LlamaConfig& c,
                                                               const torch::Tensor& position_ids,
                                                               at::ScalarType dtype) {
  const torch::Tensor pos = position_ids.to(torch::kCPU);
  const torch::Tensor inv_freq = llama_inv_freq(c, pos.max().item<int64_t>() + 1, nullptr);
  auto freqs = pos.to(torch::kFloat).unsqueeze(-1) * inv_freq;  // (b, t, head_dim / 2)
  auto emb = torch::cat({freqs, freqs}, -1).unsqueeze(1).to(position_ids.device());
  return {emb.cos().to(dtype), emb.sin().to(dtype)};
}

inline torch::Tensor llama_rotate_half(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

}  // namespace zrt::models
