#include <zrt/zrt.h>

int main() {
  return zrt::run_tool("consumer", [] {
    auto model = std::make_shared<torch::nn::LinearImpl>(4, 2);
    auto engine = zrt::initialize(model, std::string(R"({"train_micro_batch_size_per_gpu": 2,
        "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}, "zero_optimization": {"stage": 2}})"));
    for (int step = 0; step < 3; ++step) {
      engine->backward(torch::mse_loss(model->forward(torch::ones({2, 4})), torch::zeros({2, 2})));
      engine->step();
    }
    std::printf("rank %d: %lld steps\n", engine->comm().rank(), (long long)engine->global_steps());
    return engine->global_steps() == 3 ? 0 : 1;
  });
}
