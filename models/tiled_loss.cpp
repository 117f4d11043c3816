#include "models/tiled_loss.h"

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace zrt::models {
namespace {

// Rows [start, start + n) of one tile's summed loss, from torch's cross entropy.
at::Tensor tile_loss_sum(const at::Tensor& h, const at::Tensor& w, const at::Tensor& labels,
                         double smoothing) {
  return torch::cross_entropy_loss(torch::linear(h, w).to(at::kFloat), labels, /*weight=*/{},
                                   at::Reduction::Sum, /*ignore_index=*/-100, smoothing);
}

// Note [Tiled logits and loss].
struct TiledCrossEntropy : public torch::autograd::Function<TiledCrossEntropy> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const at::Tensor& h, const at::Tensor& w,
                                                const at::Tensor& labels, int64_t tile,
                                                double smoothing) {
    ctx->save_for_backward({h, w, labels});
    ctx->saved_data["tile"] = tile;
    ctx->saved_data["smoothing"] = smoothing;
    ctx->saved_data["h_grad"] = h.requires_grad();
    ctx->saved_data["w_grad"] = w.requires_grad();
    at::NoGradGuard no_grad;
    at::Tensor sum = at::zeros({}, h.options().dtype(at::kFloat));
    for (int64_t s = 0; s < h.size(0); s += tile) {
      const int64_t n = std::min(tile, h.size(0) - s);
      sum += tile_loss_sum(h.narrow(0, s, n), w, labels.narrow(0, s, n), smoothing);
    }
    return {sum / labels.ne(-100).sum().to(at::kFloat)};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &h = saved[0], &w = saved[1], &labels = saved[2];
    const int64_t tile = ctx->saved_data["tile"].toInt();
    const double smoothing = ctx->saved_data["smoothing"].toDouble();
    const bool h_grad = ctx->saved_data["h_grad"].toBool(), w_grad = ctx->saved_data["w_grad"].toBool();
    const at::Tensor scale = grads[0] / labels.ne(-100).sum().to(at::kFloat);
    at::Tensor gh = h_grad ? at::empty_like(h) : at::Tensor();
    at::Tensor gw = w_grad ? at::zeros(w.sizes(), w.options().dtype(at::kFloat)) : at::Tensor();
    for (int64_t s = 0; s < h.size(0); s += tile) {
      const int64_t n = std::min(tile, h.size(0) - s);
      const at::Tensor ht = h.narrow(0, s, n).detach().requires_grad_(h_grad);
      const at::Tensor wt = w.detach().requires_grad_(w_grad);
      std::vector<at::Tensor> inputs;
      if (h_grad) inputs.push_back(ht);
      if (w_grad) inputs.push_back(wt);
      if (inputs.empty()) break;
      at::AutoGradMode grad_on(true);
      const auto parts = torch::autograd::grad({tile_loss_sum(ht, wt, labels.narrow(0, s, n), smoothing)},
                                               inputs, {scale});
      if (h_grad) gh.narrow(0, s, n).copy_(parts[0]);
      if (w_grad) gw += parts.back().to(at::kFloat);
    }
    return {gh, w_grad ? gw.to(w.scalar_type()) : at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

}  // namespace

at::Tensor tiled_linear_cross_entropy(const at::Tensor& h, const at::Tensor& w,
                                      const at::Tensor& labels, int64_t tile, double smoothing) {
  ZRT_CHECK(tile >= 1, "tiled_linear_cross_entropy: tile must be at least 1, got ", tile);
  ZRT_CHECK(h.dim() == 2 && w.dim() == 2 && h.size(1) == w.size(1) && labels.dim() == 1 &&
                labels.size(0) == h.size(0),
            "tiled_linear_cross_entropy: h (N, hidden), w (vocab, hidden) and labels (N) expected, "
            "got ", h.sizes(), ", ", w.sizes(), " and ", labels.sizes());
  return TiledCrossEntropy::apply(h, w, labels, tile, smoothing)[0];
}

at::Tensor tiled_causal_lm_loss(LlamaForCausalLMImpl& model, const at::Tensor& hidden,
                                const at::Tensor& labels, int64_t tile, double smoothing) {
  const int64_t n = hidden.size(1) - 1;  // position t scores label t + 1
  return tiled_head_loss(model, hidden.narrow(1, 0, n), labels.narrow(1, 1, n), tile, smoothing);
}

at::Tensor tiled_head_loss(LlamaForCausalLMImpl& model, const at::Tensor& hidden,
                           const at::Tensor& labels, int64_t tile, double smoothing) {
  const at::Tensor target = labels.reshape({-1});
  auto loss = [&](const at::Tensor& h, const at::Tensor& w) {
    return tiled_linear_cross_entropy(h.reshape({-1, h.size(-1)}), w, target, tile, smoothing);
  };
  if (model.lm_head) {
    auto& head = *model.lm_head;
    return head.run([&](const at::Tensor& h) { return loss(h, head.weight); }, hidden);
  }
  auto& embed = *model.model->embed_unit;  // tied
  return embed.run([&](const at::Tensor& h) { return loss(h, embed.weight); }, hidden);
}

}  // namespace zrt::models
