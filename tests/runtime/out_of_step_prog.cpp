// A ZeRO-3 mixture of experts whose ranks run different experts, driven by comm_fault_test:
//   out_of_step_prog count|skip|leaf|leaf_config [stage]
// count: rank r runs experts 0..r, each its own ShardUnit (the ranks issue different numbers of
//        gathers, of different sizes);
// skip:  rank 0 runs all four experts, the others skip the last;
// leaf:  the experts inside one ShardUnit (a leaf), rank r routed to expert r % 4: trains, and
//        prints each step's loss (the same at every ZeRO stage; `stage` picks it, default 3);
// leaf_config: each expert its own ShardUnit as in `count`, routed as in `leaf`, the experts'
//        parent made a leaf by zero_optimization.leaf_module (its units dissolve).
// Every rank runs under zrt::run_tool, so the exit code tells how it ended (4: communication).
#include <cstdio>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "core/tool_main.h"
#include "runtime/initialize.h"
#include "zero/shard_unit.h"

namespace {

struct ExpertImpl : torch::nn::Module {
  explicit ExpertImpl(int hidden)
      : up(register_module("up", torch::nn::Linear(8, hidden))),
        down(register_module("down", torch::nn::Linear(hidden, 8))) {}
  at::Tensor forward(const at::Tensor& x) { return down(torch::tanh(up(x))); }
  torch::nn::Linear up, down;
};

// Expert i has 4(i + 1) hidden units: every expert's gather has its own size.
template <typename Expert>
struct ExpertsImpl : torch::nn::Module {
  ExpertsImpl() {
    for (int i = 0; i < 4; ++i) {
      experts.push_back(
          register_module("expert" + std::to_string(i), std::make_shared<Expert>(4 * (i + 1))));
    }
  }
  at::Tensor forward(at::Tensor x, const std::vector<int>& route) {
    for (int e : route) x = x + experts[e]->forward(x);
    return x;
  }
  std::vector<std::shared_ptr<Expert>> experts;
};
using UnitPerExpert = ExpertsImpl<zrt::ShardUnit<ExpertImpl>>;
using Leaf = zrt::ShardUnit<ExpertsImpl<ExpertImpl>>;

template <typename Model>
void train(const std::string& scenario, int stage) {
  torch::manual_seed(0);
  auto model = std::make_shared<Model>();
  zrt::Json cfg = {{"train_micro_batch_size_per_gpu", 4},
                   {"gradient_clipping", 0.0},
                   {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 0.01}}}}},
                   {"zero_optimization",
                    {{"stage", stage},
                     {"reduce_bucket_size", 200},  // stages 1-2: several buckets
                     {"stage3_param_persistence_threshold", 0},
                     {"stage3_max_reuse_distance", 0}}}};
  if (scenario == "leaf_config") cfg["zero_optimization"]["leaf_module"] = {{"classes", {"Experts"}}};
  auto engine = zrt::initialize(model, cfg);
  const int rank = engine->comm().rank();
  const int world = engine->comm().size();
  std::vector<int> route;
  if (scenario == "count") {
    for (int e = 0; e <= rank % 4; ++e) route.push_back(e);
  } else if (scenario == "skip") {
    route = rank == 0 ? std::vector<int>{0, 1, 2, 3} : std::vector<int>{0, 1, 2};
  } else {
    route = {rank % 4};
  }
  for (int step = 0; step < 3; ++step) {
    torch::manual_seed(100 * step + rank);
    const at::Tensor x = torch::randn({4, 8});
    at::Tensor loss = model->forward(x, route).pow(2).mean();
    engine->backward(loss);
    engine->step();
    std::printf("rank %d/%d step %d loss %.6f\n", rank, world, step, loss.item<double>());
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  const int stage = argc > 2 ? std::stoi(argv[2]) : 3;
  return zrt::run_tool("out_of_step_prog", [&] {
    if (scenario == "leaf") {
      train<Leaf>(scenario, stage);
    } else if (scenario == "count" || scenario == "skip" || scenario == "leaf_config") {
      train<UnitPerExpert>(scenario, stage);
    } else {
      throw zrt::UsageError("usage: out_of_step_prog count|skip|leaf|leaf_config [stage]");
    }
    return 0;
  });
}
