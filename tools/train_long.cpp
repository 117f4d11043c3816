#include "tools/train_long.h"

#include <string>

#include "core/error.h"
#include "models/tiled_loss.h"
#include "tools/clm_data.h"

namespace zrt::tools {

void add_sequence_parallel_options(cxxopts::Options& options) {
  options.add_options("model")(
      "sequence_parallel_size",
      "--model llama text data: Ulysses sequence parallelism, each sample's sequence split over "
      "this many consecutive ranks that exchange attention heads by all-to-all (DeepSpeed's "
      "config key sequence_parallel_size; the data-parallel ranks are the job's / this)",
      cxxopts::value<int64_t>())("parallelism_config_sp_size",
                                 "accelerate's name for --sequence_parallel_size",
                                 cxxopts::value<int64_t>());
}

void apply_sequence_parallel_flag(const cxxopts::ParseResult& result, bool do_predict,
                                  Json& ds_config) {
  std::optional<int64_t> k;
  for (const char* flag : {"sequence_parallel_size", "parallelism_config_sp_size"}) {
    if (!result.count(flag)) continue;
    const int64_t v = result[flag].as<int64_t>();
    ZRT_CHECK_AS(UsageError, v >= 1, "--", flag, " must be at least 1, got ", v);
    ZRT_CHECK_AS(UsageError, !k || *k == v, "--sequence_parallel_size ", *k,
                 " and --parallelism_config_sp_size ", v, " disagree");
    k = v;
  }
  if (k) {
    if (ds_config.is_object() && ds_config.contains("sequence_parallel_size")) {
      const Json& own = ds_config["sequence_parallel_size"];
      ZRT_CHECK_AS(UsageError, own.is_number_integer() && own.get<int64_t>() == *k,
                   "--sequence_parallel_size ", *k, " but the DeepSpeed config says ",
                   "sequence_parallel_size ", own.dump(), ": give one, or the same value");
    }
    ds_config["sequence_parallel_size"] = *k;
  }
  const int sp = config::sequence_parallel_size(ds_config);
  ZRT_CHECK_AS(UsageError, !do_predict || sp == 1,
               "--do_predict under sequence parallelism (sequence_parallel_size ", sp,
               ") is not supported: each rank's forward gives "
               "a slice of the logits (--do_eval is)");
}

LossFn tiled_loss(std::shared_ptr<models::LlamaForCausalLMImpl> llama, int64_t tile,
                  double smoothing) {
  return [llama, tile, smoothing](torch::nn::Module&, const at::Tensor& x, const at::Tensor& y) {
    const auto [ids, positions] = clm_input(x);
    return models::tiled_causal_lm_loss(*llama, llama->hidden(ids, nullptr, nullptr, positions), y,
                                        tile, smoothing);
  };
}

LossFn sequence_parallel_loss(std::shared_ptr<models::LlamaForCausalLMImpl> llama,
                              std::shared_ptr<const SequenceParallel> sp, int64_t tile,
                              double smoothing) {
  return [llama, sp, tile, smoothing](torch::nn::Module&, const at::Tensor& x,
                                      const at::Tensor& y) {
    const auto [ids, positions] = clm_input(x);
    const SequenceParallel::Shard s = sp->shard_causal_lm(ids, positions, y);
    const int64_t here = s.labels.ne(-100).sum().item<int64_t>();
    at::Tensor sum;
    if (tile > 0) {
      const at::Tensor h = llama->hidden(s.ids, nullptr, nullptr, s.position_ids);
      // A slice without labels still runs its backward: the exchanges are collectives.
      sum = here == 0 ? h.sum() * 0
                      : models::tiled_head_loss(*llama, h, s.labels, tile, smoothing) *
                            static_cast<double>(here);
    } else {
      const at::Tensor logits = llama->forward(s.ids, nullptr, nullptr, s.position_ids);
      sum = torch::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}).to(torch::kFloat),
                                      s.labels.reshape({-1}), /*weight=*/{}, at::Reduction::Sum,
                                      /*ignore_index=*/-100, smoothing);
    }
    return sp->loss(sum, s.label_count);
  };
}

LossFn long_sequence_loss(const cxxopts::ParseResult& result, const Json& ds_config,
                          comm::Comm& world, LossFn plain, bool supported,
                          std::shared_ptr<models::LlamaForCausalLMImpl> llama, double smoothing) {
  const int64_t tile = tile_tokens(result, "tiled_loss_tokens");
  const int k = config::sequence_parallel_size(ds_config, world.size());
  const char* flag = k > 1 ? "--sequence_parallel_size" : "--tiled_loss_tokens";
  ZRT_CHECK_AS(UsageError, supported || (tile == 0 && k == 1), flag,
               " needs a LLaMA's text --train_file, and a model without output_router_logits");
  if (k > 1) {
    auto sp = std::make_shared<SequenceParallel>(world, k);
    llama->set_sequence_parallel(sp);
    return sequence_parallel_loss(llama, sp, tile, smoothing);
  }
  return tile > 0 ? tiled_loss(llama, tile, smoothing) : plain;
}

}  // namespace zrt::tools
