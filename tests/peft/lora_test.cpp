// peft/lora.h on the LLaMA family: PEFT's target matching (names, suffixes, a regular expression,
// "all-linear" without the output layer and MoE's routed experts and routers), the adapters'
// names, shapes and initialisation, the frozen base, the forward (the base model's at init, the
// merged weights' after training), merge / unmerge, unused adapters, PEFT's key names and
// adapter_config.json, and clear errors that leave the model as it was. (Against PEFT itself:
// tests/peers/hf_lora.py.)
#include "peft/lora.h"

#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/error.h"
#include "models/llama.h"

namespace zrt::lora {
namespace {

using models::LlamaConfig;
using models::LlamaForCausalLMImpl;

LlamaConfig tiny(const std::string& family = "llama") {
  LlamaConfig c;
  c.vocab_size = 37;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 4;
  c.max_position_embeddings = 32;
  c.model_type = family;
  if (family == "qwen2_moe") {
    c.moe.num_experts = 4;
    c.moe.num_experts_per_tok = 2;
    c.moe.expert_intermediate_size = 8;
    c.moe.shared_expert_intermediate_size = 12;
  }
  return c;
}

std::shared_ptr<LlamaForCausalLMImpl> llama(const std::string& family = "llama") {
  torch::manual_seed(3);
  auto m = std::make_shared<LlamaForCausalLMImpl>(tiny(family));
  m->eval();
  return m;
}

LoraConfig lora(std::vector<std::string> targets) {
  LoraConfig c;
  c.r = 4;
  c.lora_alpha = 8;
  c.target_modules = std::move(targets);
  return c;
}

std::set<std::string> adapted(torch::nn::Module& m, const LoraConfig& c) {
  const Applied a = zrt::lora::apply(m, c);
  return {a.adapted.begin(), a.adapted.end()};
}

TEST(Lora, TargetsAsPeftMatchesThem) {
  auto m = llama();
  EXPECT_EQ(
      adapted(*m, lora({"q_proj", "model.layers.1.mlp.down_proj"})),
      (std::set<std::string>{"model.layers.0.self_attn.q_proj", "model.layers.1.self_attn.q_proj",
                             "model.layers.1.mlp.down_proj"}));
  m = llama();
  LoraConfig re = lora({});
  re.target_regex = R"(.*layers\.0\..*_proj)";
  EXPECT_EQ(adapted(*m, re).size(), 7u);  // q, k, v, o, gate, up, down of layer 0
  m = llama();
  LoraConfig all = lora({});
  all.all_linear = true;
  EXPECT_EQ(adapted(*m, all).size(), 14u) << "every projection but lm_head";
  // MoE: the routed experts and the routers are no Linear layers (transformers keeps them as
  // plain parameters), the shared expert and its gate are.
  auto moe = llama("qwen2_moe");
  const auto got = adapted(*moe, all);
  EXPECT_TRUE(got.count("model.layers.0.mlp.shared_expert.gate_proj")) << got.size();
  EXPECT_TRUE(got.count("model.layers.0.mlp.shared_expert_gate"));
  for (const std::string& name : got) {
    EXPECT_EQ(name.find("experts."), std::string::npos) << name;
    EXPECT_NE(name.substr(name.size() - 5), ".gate") << name;
  }
}

TEST(Lora, AdaptersFreezeTheBaseAndStartAsIt) {
  auto base = llama();
  auto m = llama();
  const torch::Tensor tokens = torch::randint(0, 37, {2, 6});
  const Applied a = zrt::lora::apply(*m, lora({"q_proj", "v_proj"}));
  int64_t trainable = 0;
  for (const auto& p : m->named_parameters()) {
    const bool is_lora = p.key().find(".lora_") != std::string::npos;
    EXPECT_EQ(p.value().requires_grad(), is_lora) << p.key();
    if (is_lora) trainable += p.value().numel();
  }
  EXPECT_EQ(a.trainable_params, trainable);
  EXPECT_EQ(trainable, 2 * (4 * 16 + 16 * 4) + 2 * (4 * 16 + 8 * 4));  // q: 16→16, v: 16→8
  const auto params = m->named_parameters();
  const torch::Tensor la = params["model.layers.0.self_attn.q_proj.lora_A.weight"];
  EXPECT_EQ(la.sizes(), (std::vector<int64_t>{4, 16}));
  EXPECT_LE(la.abs().max().item<float>(), 1.0f / 4.0f);  // Kaiming-uniform, a = sqrt(5)
  EXPECT_GT(la.abs().max().item<float>(), 0.0f);
  EXPECT_TRUE(params["model.layers.0.self_attn.v_proj.lora_B.weight"].eq(0).all().item<bool>());
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(m->forward(tokens), base->forward(tokens))) << "B = 0: the base model";
}

TEST(Lora, MergedWeightsGiveTheAdaptedOutput) {
  auto m = llama();
  LoraConfig c = lora({"q_proj", "down_proj"});
  c.use_rslora = true;
  EXPECT_DOUBLE_EQ(c.scaling(), 8.0 / 2.0);
  zrt::lora::apply(*m, c);
  torch::NoGradGuard no_grad;
  for (auto& p : m->named_parameters()) {
    if (p.key().find(".lora_B.") != std::string::npos) p.value().normal_(0, 0.1);
  }
  const auto before = m->named_parameters()["model.layers.1.mlp.down_proj.weight"].clone();
  const torch::Tensor tokens = torch::randint(0, 37, {2, 6});
  const torch::Tensor adapted_out = m->forward(tokens);
  EXPECT_TRUE(unused_adapters(*m).empty());
  merge(*m);
  EXPECT_TRUE(torch::allclose(m->forward(tokens), adapted_out, 1e-5, 1e-5));
  EXPECT_THROW(merge(*m), Error);
  unmerge(*m);
  EXPECT_TRUE(torch::allclose(m->named_parameters()["model.layers.1.mlp.down_proj.weight"], before,
                              0, 1e-6));
  EXPECT_TRUE(torch::allclose(m->forward(tokens), adapted_out, 1e-5, 1e-5));
}

TEST(Lora, DropoutOnlyInTraining) {
  auto m = llama();
  LoraConfig c = lora({"o_proj"});
  c.lora_dropout = 0.5;
  zrt::lora::apply(*m, c);
  torch::NoGradGuard no_grad;
  for (auto& p : m->named_parameters()) {
    if (p.key().find(".lora_B.") != std::string::npos) p.value().fill_(0.5);
  }
  const torch::Tensor tokens = torch::randint(0, 37, {2, 6});
  EXPECT_TRUE(torch::equal(m->forward(tokens), m->forward(tokens)));
  m->train();
  EXPECT_FALSE(torch::equal(m->forward(tokens), m->forward(tokens)));
}

TEST(Lora, AnAdapterNoForwardReachesIsReported) {
  auto m = llama();
  zrt::lora::apply(
      *m, lora({"lm_head", "k_proj"}));  // lm_head is called as a ZeRO-3 unit, not through linear()
  EXPECT_EQ(unused_adapters(*m).size(), 3u);
  torch::NoGradGuard no_grad;
  m->forward(torch::randint(0, 37, {1, 4}));
  EXPECT_EQ(unused_adapters(*m), std::vector<std::string>{"lm_head"});
}

TEST(Lora, BadConfigsAreRefusedAndChangeNothing) {
  auto expect_refused = [](const LoraConfig& c, const std::string& what) {
    auto m = llama();
    try {
      zrt::lora::apply(*m, c);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
    for (const auto& p : m->named_parameters()) {
      EXPECT_TRUE(p.value().requires_grad()) << p.key();
      EXPECT_EQ(p.key().find("lora_"), std::string::npos) << p.key();
    }
  };
  LoraConfig c = lora({"q_proj"});
  c.r = 0;
  expect_refused(c, "r must be positive, got 0");
  expect_refused(lora({"qq_proj"}), "match no module");
  expect_refused(lora({"embed_tokens"}), "'model.embed_tokens', which is not a Linear layer");
  c = lora({"q_proj"});
  c.modules_to_save = {"score"};
  expect_refused(c, "modules_to_save names 'score'");
  c = lora({});
  c.target_regex = "(unclosed";
  expect_refused(c, "is not a regular expression");
  c = lora({"q_proj"});
  c.lora_dropout = 1.0;
  expect_refused(c, "lora_dropout must be in [0, 1)");
}

TEST(Lora, PeftNamesAndConfig) {
  LoraConfig c = lora({"q_proj", "v_proj"});
  c.modules_to_save = {"lm_head"};
  EXPECT_EQ(peft_key("model.layers.0.self_attn.q_proj.lora_A.weight", c),
            "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
  EXPECT_EQ(peft_key("lm_head.weight", c), "base_model.model.lm_head.weight");
  EXPECT_EQ(peft_key("model.layers.0.self_attn.q_proj.weight", c), "");
  EXPECT_EQ(param_name_of("base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"),
            "model.layers.0.self_attn.q_proj.lora_B.weight");
  EXPECT_EQ(param_name_of("base_model.model.model.layers.0.mlp.up_proj.lora_A.default.weight"),
            "model.layers.0.mlp.up_proj.lora_A.weight");
  EXPECT_EQ(param_name_of("model.norm.weight"), "");
  // The names of PeftModel's parameters (DeepSpeed's checkpoints of a PEFT model).
  auto m = llama();
  zrt::lora::apply(*m, lora({"q_proj"}));
  const auto wrapped = peft_model_names(*m);
  EXPECT_EQ(wrapped("model.layers.1.self_attn.q_proj.weight"),
            "base_model.model.model.layers.1.self_attn.q_proj.base_layer.weight");
  EXPECT_EQ(wrapped("model.layers.1.self_attn.q_proj.lora_B.weight"),
            "base_model.model.model.layers.1.self_attn.q_proj.lora_B.default.weight");
  EXPECT_EQ(wrapped("model.layers.1.self_attn.k_proj.weight"),
            "base_model.model.model.layers.1.self_attn.k_proj.weight");
  EXPECT_EQ(wrapped("lm_head.weight"), "base_model.model.lm_head.weight");
  const Json j = c.to_peft_json("/models/tiny");
  EXPECT_EQ(j.at("peft_type"), "LORA");
  EXPECT_EQ(j.at("target_modules"), Json::array({"q_proj", "v_proj"}));
  const LoraConfig back = LoraConfig::from_peft_json(j, "adapter_config.json");
  EXPECT_EQ(back.r, 4);
  EXPECT_EQ(back.lora_alpha, 8.0);
  EXPECT_EQ(back.target_modules, c.target_modules);
  EXPECT_EQ(back.modules_to_save, c.modules_to_save);
  auto refused = [&](Json bad, const std::string& what) {
    try {
      LoraConfig::from_peft_json(bad, "adapter_config.json");
      ADD_FAILURE() << "accepted: " << bad.dump();
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  Json bad = j;
  bad["peft_type"] = "PREFIX_TUNING";
  refused(bad, "peft_type is 'PREFIX_TUNING'; only LORA");
  bad = j;
  bad["use_dora"] = true;
  refused(bad, "use_dora true is not supported");
  bad = j;
  bad["r"] = -2;
  refused(bad, "r must be positive, got -2");
  bad = j;
  bad["target_modules"] = "all-linear";
  EXPECT_TRUE(LoraConfig::from_peft_json(bad, "x").all_linear);
}

}  // namespace
}  // namespace zrt::lora
