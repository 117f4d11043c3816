// ZeRO-3 under mpirun (world sizes 1–4): inference equals the unsharded model, model states at
// rest are 16Ψ/N, gathered bytes stay within the prefetch window, the first step moves 3Ψ(N−1)/N
// elements, reduce_bucket_size bounds the gradients in flight, whole-model access writes back,
// misuse gives clear errors, ranks that run different units fail together, and a tied embedding
// used twice per forward stays partitioned.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/error.h"
#include "core/logging.h"
#include "core/shard.h"
#include "runtime/gathered_parameters.h"
#include "runtime/initialize.h"
#include "runtime/model_states.h"
#include "runtime/stage3_model_states.h"
#include "tests/support/mpi_world.h"
#include "tests/support/tensor_compare.h"
#include "tests/support/tiny_model.h"
#include "zero/unit_tags.h"

namespace zrt {
namespace {

std::shared_ptr<comm::Comm> world_ptr() {
  return std::shared_ptr<comm::Comm>(&test::world(), [](comm::Comm*) {});
}

Json stage3_config(bool with_optimizer, bool bf16) {
  Json cfg = {{"train_micro_batch_size_per_gpu", 4},
              {"gradient_clipping", 0.0},  // the references do not clip
              {"zero_optimization",
               {{"stage", 3},
                {"stage3_param_persistence_threshold", 0},
                {"stage3_prefetch_bucket_size", 100},
                {"stage3_max_reuse_distance", 0}}}};
  if (with_optimizer) {
    cfg["optimizer"] = {{"type", "AdamW"}, {"params", {{"lr", 0.01}, {"weight_decay", 0.0}}}};
  }
  if (bf16) cfg["bf16"] = {{"enabled", true}};
  return cfg;
}

std::unique_ptr<Engine> make_engine(std::shared_ptr<torch::nn::Module> model, const Json& cfg) {
  InitializeOptions io;
  io.comm = world_ptr();
  return initialize(std::move(model), cfg, io);
}

TEST(Stage3Inference, OutputsEqualTheUnshardedModel) {
  test::TinyStack reference(true);
  auto model = std::make_shared<test::TinyStackImpl>(true);
  auto engine = make_engine(model, stage3_config(false, false));
  EXPECT_EQ(engine->optimizer(), nullptr);
  auto [x, y] = test::tiny_batch(test::world().rank(), 0);
  torch::NoGradGuard no_grad;
  for (int pass = 0; pass < 3; ++pass) {
    at::Tensor got = model->forward(x);
    EXPECT_TRUE(torch::allclose(got, reference->forward(x), 1e-6, 1e-7)) << "pass " << pass;
  }
  // Parameters are released between forwards: nothing but persistent ones stays gathered.
  auto& states = dynamic_cast<runtime::Stage3ModelStates&>(engine->model_states());
  EXPECT_EQ(states.coordinator().stats().gathered_bytes, 0);
  if (test::world().size() > 1) {
    EXPECT_GT(states.coordinator().stats().peak_gathered_bytes, 0);
  } else {
    // Note [Stage 3 on one rank]: parameters are views of their partitions, never gathered.
    EXPECT_EQ(states.coordinator().stats().peak_gathered_bytes, 0);
    EXPECT_EQ(states.coordinator().stats().all_gathers, 0);
  }
}

// A mixture of experts as a user first writes one: each expert its own ShardUnit, the tokens of
// each rank routed to another expert. The experts' gathers have one size, so the communicator
// would pair rank 0's gather of expert 0 with rank 1's of expert 1 and each rank would compute
// with the other's weights; the unit tags (Note [Unit tags] in zero/unit_tags.cpp) make every rank
// fail at that first gather instead, naming the experts.
struct RoutedExpertsImpl : torch::nn::Module {
  RoutedExpertsImpl() {
    for (int i = 0; i < 4; ++i) {
      experts.push_back(register_module(
          "expert" + std::to_string(i), std::make_shared<ShardUnit<torch::nn::LinearImpl>>(8, 8)));
    }
  }
  at::Tensor forward(const at::Tensor& x, int expert) { return experts[expert]->forward(x); }
  std::vector<std::shared_ptr<ShardUnit<torch::nn::LinearImpl>>> experts;
};

TEST(Stage3Units, RanksRoutedToDifferentExpertsFailAtTheFirstGather) {
  auto model = std::make_shared<RoutedExpertsImpl>();
  auto engine = make_engine(model, stage3_config(true, false));
  const int rank = test::world().rank();
  const at::Tensor x = torch::ones({4, 8});
  if (test::world().size() == 1) {  // one rank runs what it runs: nothing to disagree with
    engine->backward(model->forward(x, 2).sum());
    engine->step();
    return;
  }
  try {
    engine->backward(model->forward(x, rank % 4).sum());
    engine->step();
    ADD_FAILURE() << "rank " << rank << " trained with another rank's expert";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("ZeRO-3 ranks out of step: rank " + std::to_string(rank) +
                     " all-gathered unit " + std::to_string(rank % 4) + " (expert" +
                     std::to_string(rank % 4) + ")"),
              std::string::npos)
        << m;
  }
  at::Tensor one = torch::ones({1});
  test::world().all_reduce(one);
  EXPECT_EQ(one.item<float>(), test::world().size()) << "every rank stopped at one collective";
}

// A model with no ShardUnit at stage 3 is not partitioned; the job is told so once (rank 0), with
// the share of trainable elements left whole. A model built of units is not warned about.
TEST(Stage3Units, AModelWithoutUnitsIsWarnedAbout) {
  std::vector<std::string> warnings;
  set_log_sink([&](LogLevel level, const std::string& line) {
    if (level == LogLevel::kWarn) warnings.push_back(line);
  });
  auto count = [&] {
    int n = 0;
    for (const std::string& w : warnings) n += w.find("in no zrt::ShardUnit") != std::string::npos;
    return n;
  };
  {
    auto plain = std::make_shared<torch::nn::SequentialImpl>(torch::nn::Linear(16, 64),
                                                             torch::nn::Linear(64, 1));
    auto engine = make_engine(plain, stage3_config(true, false));
  }
  const int without_units = count();
  {
    auto model = std::make_shared<test::TinyStackImpl>(true);
    auto engine = make_engine(model, stage3_config(true, false));
  }
  set_log_sink(nullptr);
  const bool rank0_of_many = test::world().size() > 1 && test::world().rank() == 0;
  EXPECT_EQ(without_units, rank0_of_many ? 1 : 0);
  EXPECT_EQ(count(), without_units) << "a model of units was warned about";
  if (rank0_of_many) {
    EXPECT_NE(warnings.front().find("(100%) are in no zrt::ShardUnit (the model has none)"),
              std::string::npos)
        << warnings.front();
  }
}

TEST(Stage3Inference, BackwardAndStepAreClearErrors) {
  auto model = std::make_shared<test::TinyStackImpl>(true);
  auto engine = make_engine(model, stage3_config(false, false));
  auto [x, y] = test::tiny_batch(0, 0);
  auto loss = torch::mse_loss(model->forward(x), y);
  try {
    engine->backward(loss);
    ADD_FAILURE() << "backward accepted in inference mode";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("inference mode"), std::string::npos) << e.what();
  }
  EXPECT_THROW(engine->step(), Error);
}

// A model whose full parameters exceed what one rank may hold still runs: at most one unit (plus
// the one being prefetched) is ever gathered.
TEST(Stage3Memory, AtRestSixteenPsiOverNAndWindowDuringSteps) {
  const int n = test::world().size();
  auto model = std::make_shared<test::TinyStackImpl>(true);
  auto engine = make_engine(model, stage3_config(true, true));
  auto& states = dynamic_cast<runtime::Stage3ModelStates&>(engine->model_states());
  int64_t sum_pn = 0;
  int64_t max_unit_bytes = 0;
  for (const auto& unit : states.layout().units()) {
    // bf16 parameters and the all-gather's buffer: each rank's chunk and its tag slot.
    max_unit_bytes = std::max(max_unit_bytes, 2 * (unit.gather_numel + unit.gather_partition * n) +
                                                  n * zero::kTagSlotBytes);
  }
  for (const auto& p : states.layout().params()) sum_pn += param_partition_size(p.numel, n);
  states.coordinator().reset_peak();
  for (int step = 0; step < 3; ++step) {
    auto [x, y] = test::tiny_batch(test::world().rank(), step);
    auto loss = torch::mse_loss(model->forward(x.to(at::kBFloat16)).to(at::kFloat), y);
    engine->backward(loss);
    engine->step();
  }
  const auto bytes = engine->model_state_bytes();
  EXPECT_EQ(bytes.params, 2 * sum_pn);
  EXPECT_EQ(bytes.grads, 2 * sum_pn);
  EXPECT_EQ(bytes.master, 4 * sum_pn);
  EXPECT_EQ(bytes.optimizer, 8 * sum_pn);
  EXPECT_EQ(bytes.total(), 16 * sum_pn) << "16Ψ/N up to padding";
  EXPECT_EQ(bytes.gathered, 0) << "nothing stays gathered between steps";
  // In flight at most: the unit in use and one prefetched unit, each with its gathered
  // parameters and its coalesced all-gather buffer.
  EXPECT_LE(states.coordinator().stats().peak_gathered_bytes, 2 * max_unit_bytes);
  if (n > 1) {
    EXPECT_GT(states.coordinator().stats().prefetches, 0);
  } else {
    EXPECT_EQ(states.coordinator().stats().all_gathers, 0) << "one rank gathers nothing";
    EXPECT_EQ(states.coordinator().stats().reduce_scatters, 0) << "nor reduce-scatters";
  }
}

// Note [Bounded gradient reduction]: with reduce_bucket_size below one unit at most two units'
// reductions are in flight (the newest, and the previous one until it is finished); with
// DeepSpeed's default (5e8) every unit's stays in flight until the end of the backward. Both
// give the same step.
TEST(Stage3Memory, ReduceBucketSizeBoundsTheGradientsInFlight) {
  const int n = test::world().size();
  if (n == 1) GTEST_SKIP() << "one rank reduces nothing (Note [Stage 3 on one rank])";
  std::vector<at::Tensor> after;
  for (int64_t bucket : {int64_t{1}, int64_t{500000000}}) {
    auto model = std::make_shared<test::TinyStackImpl>(true);
    Json cfg = stage3_config(true, false);
    cfg["zero_optimization"]["reduce_bucket_size"] = bucket;
    auto engine = make_engine(model, cfg);
    auto& states = dynamic_cast<runtime::Stage3ModelStates&>(engine->model_states());
    int64_t largest = 0, all = 0;
    for (const auto& unit : states.layout().units()) {
      largest = std::max(largest, unit.reduce_partition * n);
      all += unit.reduce_partition * n;
    }
    auto [x, y] = test::tiny_batch(test::world().rank(), 0);
    engine->backward(torch::mse_loss(model->forward(x), y));
    engine->step();
    const int64_t peak = states.coordinator().stats().peak_reducing_elements;
    if (bucket == 1) {
      EXPECT_LE(peak, 2 * largest) << "the newest reduction and the one being finished";
      EXPECT_LT(peak, all);
    } else {
      EXPECT_EQ(peak, all) << "every unit's reduction in flight until the end";
    }
    GatheredParameters access(*engine);
    std::vector<at::Tensor> values;
    for (const auto& p : model->parameters()) values.push_back(p.detach().reshape({-1}).clone());
    after.push_back(at::cat(values));
  }
  EXPECT_TRUE(torch::equal(after[0], after[1])) << "the bound changes memory, not results";
}

TEST(Stage3Volume, FirstStepMovesThreePsi) {
  const int n = test::world().size();
  auto model = std::make_shared<test::TinyStackImpl>(true);
  auto engine = make_engine(model, stage3_config(true, true));
  auto& states = dynamic_cast<runtime::Stage3ModelStates&>(engine->model_states());
  int64_t sum_pn = 0;
  for (const auto& p : states.layout().params()) sum_pn += param_partition_size(p.numel, n);
  engine->reset_comm_stats();
  auto [x, y] = test::tiny_batch(test::world().rank(), 0);
  engine->backward(torch::mse_loss(model->forward(x.to(at::kBFloat16)).to(at::kFloat), y));
  engine->step();
  // Forward all-gather, backward all-gather, gradient reduce-scatter, each (n−1)·Σpn bf16
  // elements, plus the 8-byte norm all-reduce. Each unit collective also carries the unit's tag
  // (Note [Unit tags]): a 64-byte slot per rank's chunk.
  const int bits = zero::reduce_tag_bits(states.layout().num_units(), n, at::kBFloat16);
  const int64_t slots = zero::reduce_tag_elements(bits, at::kBFloat16) * 2;
  double tags = 0;
  for (const auto& unit : states.layout().units()) {
    if (unit.gather_partition > 0) tags += 2.0 * (n - 1) * zero::kTagSlotBytes;
    if (unit.reduce_partition > 0) tags += 1.0 * (n - 1) * slots;
  }
  const double expected = 3.0 * 2 * (n - 1) * sum_pn + 2.0 * 8 * (n - 1) / n + tags;
  EXPECT_DOUBLE_EQ(engine->comm_stats().total_wire_bytes(), expected);
}

TEST(Stage3Access, GatheredParametersWriteBackFromTheModifier) {
  auto model = std::make_shared<test::TinyStackImpl>(true);
  auto engine = make_engine(model, stage3_config(true, false));
  const int last = test::world().size() - 1;
  {
    GatheredParameters access(*engine, last);
    EXPECT_EQ(model->blocks[1]->fc->weight.numel(), 49);
    if (test::world().rank() == last) {
      torch::NoGradGuard no_grad;
      model->blocks[1]->fc->weight.fill_(0.25f);
    }
  }
  {
    GatheredParameters access(*engine);
    EXPECT_TRUE(torch::equal(model->blocks[1]->fc->weight, torch::full({7, 7}, 0.25f)));
  }
  // Training continues from the written-back values (the fp32 masters followed).
  auto [x, y] = test::tiny_batch(test::world().rank(), 0);
  engine->backward(torch::mse_loss(model->forward(x), y));
  engine->step();
  GatheredParameters access(*engine);
  EXPECT_LT((model->blocks[1]->fc->weight - 0.25f).abs().max().item<float>(), 0.05f);
}

// Note [A unit used several times] (zero/param_coordinator.cpp): tied embeddings stay partitioned.

at::Tensor tied_loss(test::TiedStackImpl& model, const at::Tensor& tokens, const at::Tensor& y) {
  return torch::cross_entropy_loss(model.forward(tokens).reshape({-1, 11}), y.reshape({-1}));
}

at::Tensor flat_weights(Engine& engine, torch::nn::Module& model) {
  GatheredParameters access(engine);
  std::vector<at::Tensor> values;
  for (const auto& p : model.parameters()) values.push_back(p.detach().reshape({-1}).clone());
  return at::cat(values);
}

TEST(Stage3Tied, InferenceEqualsUnshardedAndHoldsNoWholeEmbedding) {
  test::TiedStack reference;
  auto model = std::make_shared<test::TiedStackImpl>();
  auto engine = make_engine(model, stage3_config(false, false));
  auto& states = dynamic_cast<runtime::Stage3ModelStates&>(engine->model_states());
  const int n = test::world().size();
  for (const auto& p : states.layout().params()) {
    if (p.name == "embed.weight") EXPECT_EQ(p.persistent, n == 1) << "partitioned when N > 1";
  }
  auto [tokens, y] = test::tied_batch(test::world().rank(), 0);
  torch::NoGradGuard no_grad;
  for (int pass = 0; pass < 3; ++pass) {
    EXPECT_TRUE(torch::allclose(model->forward(tokens), reference->forward(tokens), 1e-6, 1e-7))
        << "pass " << pass;
    EXPECT_EQ(states.coordinator().stats().gathered_bytes, 0) << "released after both uses";
    if (n > 1) EXPECT_EQ(model->embed->weight.storage().nbytes(), 0u);
  }
  // Two gathers of the embedding (its two uses) and one of each block per forward.
  if (n > 1) EXPECT_EQ(states.coordinator().stats().all_gathers, 3 * 5);
}

TEST(Stage3Tied, TrainingMatchesSingleProcessWithTheExpectedGathers) {
  const int n = test::world().size();
  auto model = std::make_shared<test::TiedStackImpl>();
  Json cfg = stage3_config(true, false);
  cfg["zero_optimization"]["stage3_prefetch_bucket_size"] = 0;
  auto engine = make_engine(model, cfg);
  auto& coordinator =
      dynamic_cast<runtime::Stage3ModelStates&>(engine->model_states()).coordinator();
  test::TiedStack reference;
  torch::optim::AdamW opt(reference->parameters(),
                          torch::optim::AdamWOptions(0.01).weight_decay(0.0));
  for (int step = 0; step < 5; ++step) {
    const int64_t gathers_before = coordinator.stats().all_gathers;
    auto [tokens, y] = test::tied_batch(test::world().rank(), step);
    engine->backward(tied_loss(*model, tokens, y));
    engine->step();
    // Per step after the first (which records the trace and keeps nothing): the embedding for
    // its forward, for the head's forward (kept into the head's backward, reuse distance 0), and
    // again for its own backward after the head's backward released it; each block twice.
    if (n > 1)
      EXPECT_EQ(coordinator.stats().all_gathers - gathers_before, step == 0 ? 10 : 9)
          << "step " << step;
    std::vector<at::Tensor> all_tokens, all_y;
    for (int r = 0; r < n; ++r) {
      auto [t, ty] = test::tied_batch(r, step);
      all_tokens.push_back(t);
      all_y.push_back(ty);
    }
    opt.zero_grad();
    tied_loss(*reference, at::cat(all_tokens), at::cat(all_y)).backward();
    opt.step();
  }
  EXPECT_EQ(coordinator.stats().gathered_bytes, 0) << "nothing stays gathered between steps";
  const at::Tensor got = flat_weights(*engine, *model);
  std::vector<at::Tensor> want;
  for (const auto& p : reference->parameters()) want.push_back(p.detach().reshape({-1}));
  EXPECT_TRUE(test::all_close(got, at::cat(want), 1e-5, 1e-6))
      << "AdamW's early steps move weights by about lr whatever the gradient's size";
}

TEST(Stage3Tied, PrefetchAndReuseChangeNoResult) {
  std::vector<at::Tensor> results;
  for (int64_t prefetch : {int64_t{0}, int64_t{1000000000}}) {
    for (int64_t reuse : {int64_t{0}, int64_t{1000000000}}) {
      auto model = std::make_shared<test::TiedStackImpl>();
      Json cfg = stage3_config(true, false);
      cfg["zero_optimization"]["stage3_prefetch_bucket_size"] = prefetch;
      cfg["zero_optimization"]["stage3_max_reuse_distance"] = reuse;
      auto engine = make_engine(model, cfg);
      for (int step = 0; step < 3; ++step) {
        auto [tokens, y] = test::tied_batch(test::world().rank(), step);
        engine->backward(tied_loss(*model, tokens, y));
        engine->step();
      }
      results.push_back(flat_weights(*engine, *model));
    }
  }
  for (size_t i = 1; i < results.size(); ++i) {
    EXPECT_TRUE(torch::equal(results[0], results[i])) << "variant " << i;
  }
}

// ZeRO++ in the engine (one host here; the two-host runs are bench/zeropp.py's): hpZ gives the
// bitwise result of plain ZeRO-3 and gathers within its group after the first; qwZ and qgZ stay
// within a few AdamW steps of it (AdamW moves each weight by about lr per step whatever the
// gradient's size, so a quantization error can at worst flip a step: 2·lr per step).
TEST(Stage3ZeroPP, HpzIsBitwisePlainAndQuantizedStayClose) {
  const int n = test::world().size();
  struct Variant {
    const char* name;
    Json keys;
  };
  std::vector<Variant> variants = {{"plain", Json::object()},
                                   {"qwZ", {{"zero_quantized_weights", true}}},
                                   {"qgZ", {{"zero_quantized_gradients", true}}}};
  if (n % 2 == 0) {
    variants.push_back({"hpZ", {{"zero_hpz_partition_size", 2}}});
    variants.push_back({"all", {{"zero_hpz_partition_size", 2},
                                {"zero_quantized_weights", true},
                                {"zero_quantized_gradients", true}}});
  }
  const int steps = 4;
  std::vector<at::Tensor> results;
  for (const Variant& v : variants) {
    auto model = std::make_shared<test::TiedStackImpl>();
    Json cfg = stage3_config(true, false);
    for (const auto& [key, value] : v.keys.items()) cfg["zero_optimization"][key] = value;
    auto engine = make_engine(model, cfg);
    for (int step = 0; step < steps; ++step) {
      auto [tokens, y] = test::tied_batch(test::world().rank(), step);
      engine->backward(tied_loss(*model, tokens, y));
      engine->step();
    }
    const auto stats =
        dynamic_cast<runtime::Stage3ModelStates&>(engine->model_states()).coordinator().stats();
    const std::string name = v.name;
    if (n > 1 && (name == "hpZ" || name == "all")) EXPECT_GT(stats.secondary_gathers, 0) << name;
    if (n > 1 && (name == "qwZ" || name == "all")) EXPECT_GT(stats.quantized_gathers, 0) << name;
    results.push_back(flat_weights(*engine, *model));
    if (name == "hpZ") {
      EXPECT_TRUE(torch::equal(results[0], results.back())) << "hpZ is exact";
    } else if (name != "plain") {
      const double diff = (results[0] - results.back()).abs().max().item<double>();
      EXPECT_LE(diff, 2 * 0.01 * steps) << name;
      if (n > 1) EXPECT_GT(diff, 0.0) << name << ": quantization changes something";
    }
  }
}

}  // namespace
}  // namespace zrt
