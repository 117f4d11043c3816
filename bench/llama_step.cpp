// A plain LibTorch training step of the LLaMA family (models/llama.h) in one process: no engine,
// no ZeRO, no Trainer; torch::optim::AdamW. The baseline bench/llama_step.py sets zrt-train's
// own overhead against.
//
//   llama_step CONFIG_DIR CONTEXT STEPS [sdpa|eager]
//
// Trains STEPS steps of one sequence of CONTEXT random tokens (the next-token loss, fp32) and
// prints "train_runtime <seconds of the STEPS steps>" and each step's loss.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <torch/torch.h>

#include "models/llama.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: llama_step CONFIG_DIR CONTEXT STEPS [sdpa|eager]\n");
    return 1;
  }
  zrt::models::LlamaConfig c = zrt::models::LlamaConfig::from_file(argv[1]);
  if (argc > 4) c.attn_implementation = argv[4];
  const int64_t context = std::atoll(argv[2]), steps = std::atoll(argv[3]);
  torch::manual_seed(0);
  auto model = std::make_shared<zrt::models::LlamaForCausalLMImpl>(c);
  model->train();
  torch::optim::AdamW opt(model->parameters(),
                          torch::optim::AdamWOptions(1e-3).weight_decay(0.0));
  const at::Tensor tokens = torch::randint(0, c.vocab_size, {1, context}, torch::kLong);
  const auto start = std::chrono::steady_clock::now();
  for (int64_t s = 0; s < steps; ++s) {
    opt.zero_grad();
    const at::Tensor logits = model->forward(tokens);
    const at::Tensor loss = torch::cross_entropy_loss(
        logits.narrow(1, 0, context - 1).reshape({-1, c.vocab_size}),
        tokens.narrow(1, 1, context - 1).reshape({-1}));
    loss.backward();
    opt.step();
    std::printf("loss %.6f\n", loss.item<double>());
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("train_runtime %.6f\n", seconds);
  return 0;
}
