// models/: the LLaMA family's config.json rules (the MoE families' too), its KV cache against
// full forwards, the MoE layer's routing and load-balancing loss, the GPT and MLP shapes, and
// generate() (models/generate.h) on 1-3 in-process ranks against a plain greedy loop. (Logits
// against transformers: tests/peers/hf_llama.py and hf_moe.py.)
#include <string>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "comm/local_comm.h"
#include "core/error.h"
#include "models/generate.h"
#include "models/gpt.h"
#include "models/llama.h"
#include "models/mlp.h"
#include "models/tiled_loss.h"

namespace zrt::models {
namespace {

LlamaConfig tiny_llama(const std::string& family = "llama") {
  LlamaConfig c;
  c.vocab_size = 61;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;  // GQA
  c.head_dim = 8;
  c.max_position_embeddings = 64;
  c.model_type = family;
  if (family == "mistral" || family == "mixtral") c.sliding_window = 5;
  if (family == "mixtral" || family == "qwen2_moe" || family == "qwen3_moe") {
    c.moe.num_experts = 5;
    c.moe.num_experts_per_tok = 2;
    c.moe.expert_intermediate_size = 12;
    c.moe.norm_topk_prob = family != "qwen2_moe";
    if (family == "qwen2_moe") {
      c.moe.shared_expert_intermediate_size = 20;
      c.qwen_qkv_bias = true;
      c.moe.mlp_only_layers = {0};
    }
  }
  return c;
}

std::shared_ptr<LlamaForCausalLMImpl> make_llama(const LlamaConfig& c, uint64_t seed = 7) {
  torch::manual_seed(seed);
  auto m = std::make_shared<LlamaForCausalLMImpl>(c);
  m->eval();
  return m;
}

// One copy of the same model per rank, made here: the ranks are threads, and torch's default
// generator, which the initialisation draws from, is shared by them.
std::vector<std::shared_ptr<LlamaForCausalLMImpl>> models_for(const LlamaConfig& c, int world) {
  std::vector<std::shared_ptr<LlamaForCausalLMImpl>> out;
  for (int r = 0; r < world; ++r) out.push_back(make_llama(c));
  return out;
}

TEST(LlamaConfig, ReadsAndRefusesByKey) {
  const Json j = {{"model_type", "qwen2"},        {"vocab_size", 100},
                  {"hidden_size", 16},            {"intermediate_size", 32},
                  {"num_hidden_layers", 1},       {"num_attention_heads", 2},
                  {"num_key_value_heads", 1},     {"max_position_embeddings", 128},
                  {"tie_word_embeddings", true},  {"hidden_act", "silu"},
                  {"custom_key", "kept"}};
  const LlamaConfig c = LlamaConfig::from_json(j, "config.json");
  EXPECT_EQ(c.model_type, "qwen2");
  EXPECT_STREQ(family_name(c), "Qwen2");  // what zrt-train's log calls the model
  EXPECT_TRUE(c.qkv_bias());
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.to_json()["custom_key"], "kept");  // written back as read
  EXPECT_EQ(c.to_json()["vocab_size"], 100);

  Json bad = j;
  bad["model_type"] = "gpt_neox";
  try {
    LlamaConfig::from_json(bad, "dir/config.json");
    FAIL() << "another model_type must be refused";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("gpt_neox"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("dir/config.json"), std::string::npos) << e.what();
  }
  bad = j;
  bad["hidden_act"] = "gelu";
  EXPECT_THROW(LlamaConfig::from_json(bad, "config.json"), ConfigError);
}

// Logits of one forward over t tokens equal those of a forward over the first k and then the rest
// through the KV cache (GQA; Mistral's sliding window shorter than the sequence).
TEST(Llama, KvCacheEqualsFullForward) {
  torch::NoGradGuard no_grad;
  for (const std::string family :
       {"llama", "mistral", "qwen2", "mixtral", "qwen2_moe", "qwen3_moe"}) {
    SCOPED_TRACE(family);
    auto m = make_llama(tiny_llama(family));
    const at::Tensor tokens = torch::randint(0, 61, {2, 11}, torch::kLong);
    const at::Tensor full = m->forward(tokens);
    ASSERT_EQ(full.sizes(), (std::vector<int64_t>{2, 11, 61}));
    KvCache cache;
    const at::Tensor head = m->forward(tokens.narrow(1, 0, 4), &cache);
    std::vector<at::Tensor> parts = {head};
    for (int64_t t = 4; t < 11; ++t) parts.push_back(m->forward(tokens.narrow(1, t, 1), &cache));
    EXPECT_EQ(cache.length, 11);
    EXPECT_TRUE(torch::allclose(torch::cat(parts, 1), full, 1e-5, 1e-5));
  }
}

// Note [Attention implementations]: sdpa's logits equal eager's, with the causal flag (no cache),
// a cache's offset and Mistral's window (masks), GQA; a cached generation agrees too.
TEST(Llama, SdpaEqualsEager) {
#if TORCH_VERSION_MAJOR >= 2
  torch::NoGradGuard no_grad;
  for (const std::string family : {"llama", "mistral", "qwen3_moe"}) {
    SCOPED_TRACE(family);
    LlamaConfig c = tiny_llama(family);
    c.attn_implementation = "eager";
    auto eager = make_llama(c);
    set_attn_implementation(c, "sdpa", "--attn_implementation");
    auto sdpa = make_llama(c);
    const at::Tensor tokens = torch::randint(0, 61, {2, 11}, torch::kLong);
    EXPECT_TRUE(torch::allclose(sdpa->forward(tokens), eager->forward(tokens), 1e-5, 1e-5));
    KvCache a, b;
    EXPECT_TRUE(torch::allclose(sdpa->forward(tokens.narrow(1, 0, 6), &a),
                                eager->forward(tokens.narrow(1, 0, 6), &b), 1e-5, 1e-5));
    EXPECT_TRUE(torch::allclose(sdpa->forward(tokens.narrow(1, 6, 5), &a),
                                eager->forward(tokens.narrow(1, 6, 5), &b), 1e-5, 1e-5));
  }
#endif
  LlamaConfig c = tiny_llama();
  EXPECT_THROW(set_attn_implementation(c, "flash_attention_2", "--attn_implementation"), ConfigError);
}

// Note [Packed sequences]: documents told apart by position_ids give each document's logits as
// if it ran alone (rotary from its own positions, no attention across documents, Mistral's
// window within it), with either attention; positions of one document per row change nothing.
TEST(Llama, PackedDocumentsAttendWithinThemselves) {
  torch::NoGradGuard no_grad;
  std::vector<std::string> impls = {"eager"};
#if TORCH_VERSION_MAJOR >= 2
  impls.push_back("sdpa");
#endif
  for (const std::string family : {"llama", "mistral", "qwen3_moe"}) {
    for (const std::string& impl : impls) {
      SCOPED_TRACE(family + " " + impl);
      LlamaConfig c = tiny_llama(family);
      c.attn_implementation = impl;
      auto m = make_llama(c);
      const at::Tensor tokens = torch::randint(0, 61, {2, 13}, torch::kLong);
      const std::vector<int64_t> lengths = {4, 7, 2};  // row 0; row 1 is one document
      std::vector<at::Tensor> row0;
      for (int64_t n : lengths) row0.push_back(torch::arange(n, torch::kLong));
      const at::Tensor positions =
          torch::stack({torch::cat(row0), torch::arange(13, torch::kLong)});
      EXPECT_TRUE(packed_documents(positions).defined());
      const at::Tensor packed = m->forward(tokens, nullptr, nullptr, positions);
      int64_t at = 0;
      for (int64_t n : lengths) {
        const at::Tensor alone = m->forward(tokens.narrow(0, 0, 1).narrow(1, at, n));
        EXPECT_TRUE(torch::allclose(packed.narrow(0, 0, 1).narrow(1, at, n), alone, 1e-5, 1e-5))
            << "document at " << at;
        at += n;
      }
      EXPECT_TRUE(torch::allclose(packed[1], m->forward(tokens.narrow(0, 1, 1))[0], 1e-5, 1e-5));
      const at::Tensor plain = torch::arange(13, torch::kLong).expand({2, 13});
      EXPECT_FALSE(packed_documents(plain).defined());
      EXPECT_TRUE(torch::equal(m->forward(tokens, nullptr, nullptr, plain), m->forward(tokens)));
      KvCache cache;
      EXPECT_THROW(m->forward(tokens, &cache, nullptr, positions), Error);
      EXPECT_THROW(m->forward(tokens, nullptr, nullptr, positions.narrow(1, 0, 5)), Error);
    }
  }
}

// Note [Tiled logits and loss]: any tile size gives the untiled loss and gradients (ignored labels,
// label smoothing, a frozen weight), and a LLaMA's tiled causal-LM loss equals the loss of its
// logits, untied and tied, with the parameters' gradients.
TEST(TiledLoss, EqualsTheUntiledLossAndGradients) {
  torch::manual_seed(3);
  const at::Tensor h0 = torch::randn({13, 8}), w0 = torch::randn({29, 8});
  at::Tensor labels = torch::randint(0, 29, {13}, torch::kLong);
  labels.index_put_({torch::tensor({0, 5, 6})}, -100);
  for (const double smoothing : {0.0, 0.1}) {
    for (const bool frozen : {false, true}) {
      const at::Tensor h = h0.clone().requires_grad_(), w = w0.clone().requires_grad_(!frozen);
      const at::Tensor ref = torch::cross_entropy_loss(torch::linear(h, w), labels, {},
                                                       at::Reduction::Mean, -100, smoothing);
      ref.backward();
      for (const int64_t tile : {1, 4, 13, 20}) {
        SCOPED_TRACE("smoothing " + std::to_string(smoothing) + " tile " + std::to_string(tile));
        const at::Tensor ht = h0.clone().requires_grad_(), wt = w0.clone().requires_grad_(!frozen);
        const at::Tensor loss = tiled_linear_cross_entropy(ht, wt, labels, tile, smoothing);
        loss.backward();
        EXPECT_TRUE(torch::allclose(loss, ref, 1e-6, 1e-6));
        EXPECT_TRUE(torch::allclose(ht.grad(), h.grad(), 1e-6, 1e-7));
        if (!frozen) EXPECT_TRUE(torch::allclose(wt.grad(), w.grad(), 1e-6, 1e-7));
        if (frozen) EXPECT_FALSE(wt.grad().defined());
      }
    }
  }
  for (const bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    LlamaConfig c = tiny_llama();
    c.tie_word_embeddings = tied;
    auto a = make_llama(c), b = make_llama(c);
    a->train();
    b->train();
    const at::Tensor tokens = torch::randint(0, 61, {2, 9}, torch::kLong);
    const at::Tensor logits = a->forward(tokens);
    const at::Tensor ref = torch::cross_entropy_loss(
        logits.narrow(1, 0, 8).reshape({-1, 61}).to(torch::kFloat), tokens.narrow(1, 1, 8).reshape({-1}));
    ref.backward();
    const at::Tensor loss = tiled_causal_lm_loss(*b, b->hidden(tokens), tokens, 5, 0.0);
    loss.backward();
    EXPECT_TRUE(torch::allclose(loss, ref, 1e-6, 1e-6));
    const auto pa = a->named_parameters(), pb = b->named_parameters();
    for (const auto& p : pa) {
      EXPECT_TRUE(torch::allclose(p.value().grad(), pb[p.key()].grad(), 1e-5, 1e-6)) << p.key();
    }
  }
}

// Note [Tiled MLP]: a LLaMA whose MLPs run over tiles of 3 positions gives the untiled logits and
// parameter gradients (with LoRA adapters on the MLP too); with dropout in the tiled function the
// recompute draws the forward's masks (the gradients of a plain loop over the same tiles).
TEST(TiledMlp, EqualsTheWholeSequence) {
  LlamaConfig c = tiny_llama();
  c.mlp_tile_tokens = 3;
  const at::Tensor tokens = torch::randint(0, 61, {2, 11}, torch::kLong);
  for (const bool adapters : {false, true}) {
    SCOPED_TRACE(adapters ? "LoRA on the MLP" : "full");
    auto a = make_llama(tiny_llama()), b = make_llama(c);
    if (adapters) {
      lora::LoraConfig lc;
      lc.r = 2;
      lc.target_modules = {"up_proj", "down_proj"};
      torch::manual_seed(9);  // the same adapters' initial values
      lora::apply(*a, lc);
      torch::manual_seed(9);
      lora::apply(*b, lc);
    }
    const at::Tensor la = a->forward(tokens), lb = b->forward(tokens);
    la.pow(2).mean().backward();
    lb.pow(2).mean().backward();
    EXPECT_TRUE(torch::allclose(la, lb, 1e-5, 1e-6));
    const auto pa = a->named_parameters(), pb = b->named_parameters();
    for (const auto& p : pa) {
      if (!p.value().requires_grad()) continue;
      EXPECT_TRUE(torch::allclose(p.value().grad(), pb[p.key()].grad(), 1e-5, 1e-6)) << p.key();
    }
  }
  torch::nn::Linear fc(4, 4);
  const at::Tensor x = torch::randn({2, 7, 4});
  auto fn = [&fc](const at::Tensor& t) { return torch::dropout(fc->forward(t), 0.5, true); };
  std::vector<at::Tensor> grads[2];
  for (const bool tiled : {false, true}) {
    fc->zero_grad();
    const at::Tensor xi = x.clone().requires_grad_();
    torch::manual_seed(5);
    at::Tensor y;
    if (tiled) {
      y = tiled_sequence(fn, xi, fc->parameters(), 3);
    } else {
      y = torch::cat({fn(xi.narrow(1, 0, 3)), fn(xi.narrow(1, 3, 3)), fn(xi.narrow(1, 6, 1))}, 1);
    }
    y.pow(2).sum().backward();
    grads[tiled] = {xi.grad(), fc->weight.grad(), fc->bias.grad()};
  }
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(torch::allclose(grads[0][i], grads[1][i], 1e-6, 1e-7)) << i;
}

// The MoE keys as transformers writes them for each family, and bad values refused by key.
TEST(LlamaConfig, MixtureOfExpertsKeys) {
  const Json base = {{"vocab_size", 100},      {"hidden_size", 16},      {"intermediate_size", 32},
                     {"num_hidden_layers", 4}, {"num_attention_heads", 2}};
  Json j = base;
  j["model_type"] = "mixtral";
  j["num_local_experts"] = 4;
  LlamaConfig c = LlamaConfig::from_json(j, "config.json");
  EXPECT_EQ(c.moe.num_experts, 4);
  EXPECT_EQ(c.moe.num_experts_per_tok, 2);          // transformers' default
  EXPECT_EQ(c.moe.expert_intermediate_size, 32);    // Mixtral's experts: intermediate_size
  EXPECT_TRUE(c.moe.norm_topk_prob);                // always renormalised
  EXPECT_TRUE(c.moe.sparse_layer(0) && c.moe.sparse_layer(3));
  EXPECT_EQ(c.to_json()["architectures"][0], "MixtralForCausalLM");
  EXPECT_EQ(c.to_json()["num_local_experts"], 4);

  j = base;
  j["model_type"] = "qwen3_moe";
  j["num_experts"] = 6;  // Qwen3-MoE reads both names
  j["num_experts_per_tok"] = 3;
  j["moe_intermediate_size"] = 8;
  j["decoder_sparse_step"] = 2;
  j["mlp_only_layers"] = {3};
  c = LlamaConfig::from_json(j, "config.json");
  EXPECT_EQ(c.moe.num_experts, 6);
  EXPECT_EQ(c.moe.num_experts_per_tok, 3);
  EXPECT_FALSE(c.moe.norm_topk_prob);  // Qwen's default
  EXPECT_TRUE(c.qk_norm());
  EXPECT_FALSE(c.moe.sparse_layer(0));
  EXPECT_TRUE(c.moe.sparse_layer(1));
  EXPECT_FALSE(c.moe.sparse_layer(3));  // listed in mlp_only_layers
  EXPECT_EQ(c.to_json()["num_local_experts"], 6);  // as transformers writes Qwen3-MoE's

  auto refused = [&](Json bad, const std::string& key) {
    try {
      LlamaConfig::from_json(bad, "m/config.json");
      ADD_FAILURE() << key << " must be refused";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("m/config.json"), std::string::npos) << e.what();
    }
  };
  Json bad = j;
  bad["num_experts_per_tok"] = 7;  // more than the 6 experts
  refused(bad, "num_experts_per_tok");
  bad = j;
  bad["mlp_only_layers"] = {"one"};
  refused(bad, "mlp_only_layers");
  bad = j;
  bad["use_sliding_window"] = true;
  refused(bad, "use_sliding_window");
  bad = base;
  bad["model_type"] = "mixtral";
  bad["router_jitter_noise"] = 0.1;
  refused(bad, "router_jitter_noise");
}

// The sparse layer's output is each token's top-k experts weighted as transformers weighs them,
// computed here token by token; the load-balancing loss is K for a uniform router and its
// statistics pool the layers and skip masked tokens.
TEST(Moe, RoutingAndLoadBalancingLoss) {
  torch::NoGradGuard no_grad;
  for (const std::string family : {"mixtral", "qwen2_moe"}) {
    SCOPED_TRACE(family);
    torch::manual_seed(3);
    LlamaConfig c = tiny_llama(family);
    SparseMoeBlock block(c);
    const at::Tensor x = torch::randn({2, 3, c.hidden_size});
    auto [out, logits] = block->forward(x);
    ASSERT_EQ(logits.sizes(), (std::vector<int64_t>{6, 5}));
    const at::Tensor flat = x.reshape({6, -1});
    for (int64_t t = 0; t < 6; ++t) {
      auto [w, idx] = torch::softmax(logits[t], -1).topk(2);
      if (c.moe.norm_topk_prob) w = w / w.sum();
      at::Tensor expect = torch::zeros({c.hidden_size});
      for (int64_t k = 0; k < 2; ++k) {
        expect += w[k] * block->experts->ptr<MoeExpertImpl>(idx[k].item<int64_t>())->forward(flat[t]);
      }
      if (block->shared_expert) {
        expect += torch::sigmoid(block->shared_expert_gate->forward(flat[t])) *
                  block->shared_expert->forward(flat[t]);
      }
      EXPECT_TRUE(torch::allclose(out.reshape({6, -1})[t], expect, 1e-5, 1e-6)) << "token " << t;
    }
  }
  MoeConfig moe;
  moe.num_experts = 4;
  moe.num_experts_per_tok = 2;
  // Uniform probabilities: frac sums to K, prob[e] = 1/E: aux = E · K · (1/E) = K.
  EXPECT_NEAR(load_balancing_loss({torch::zeros({5, 4})}, moe).item<double>(), 2.0, 1e-6);
  // Every token sends its two routes to experts 0 and 1 with probability ~1/2 each: frac = (1, 1,
  // 0, 0), prob = (1/2, 1/2, 0, 0): aux = 4 · (1/2 + 1/2) = 4, pooled over two layers alike.
  const at::Tensor skewed = torch::tensor({{30.0f, 30.0f, 0.0f, 0.0f}}).expand({3, 4});
  EXPECT_NEAR(load_balancing_loss({skewed, skewed}, moe).item<double>(), 4.0, 1e-5);
  // A masked token does not count: the uniform tokens alone give K again.
  const at::Tensor mixed = torch::cat({torch::zeros({2, 4}), skewed.narrow(0, 0, 1)});
  EXPECT_NEAR(load_balancing_loss({mixed}, moe, torch::tensor({1.0f, 1.0f, 0.0f})).item<double>(),
              2.0, 1e-6);
}

TEST(SmallModels, Shapes) {
  torch::manual_seed(1);
  GptConfig g;
  g.width = 16;
  g.layers = 1;
  g.heads = 2;
  g.context = 8;
  GptImpl gpt(g);
  EXPECT_EQ(gpt.forward(torch::randint(0, 256, {3, 8}, torch::kLong)).sizes(),
            (std::vector<int64_t>{3, 8, 256}));
  MlpImpl mlp(8, 2);
  auto [x, y] = regression_data(5, 3);
  EXPECT_EQ(mlp.forward(x).sizes(), y.sizes());
  auto [x2, y2] = regression_data(5, 3);
  EXPECT_TRUE(torch::equal(x, x2));  // seeded: the same examples
}

TEST(Sampling, NextTokens) {
  const at::Tensor logits = torch::tensor({{0.1f, 3.0f, 2.9f, -1.0f}, {5.0f, 0.0f, 0.0f, 4.0f}});
  at::Generator gen = at::detail::createCPUGenerator(3);
  SamplingOptions greedy;
  EXPECT_TRUE(torch::equal(next_tokens(logits, greedy, gen), torch::tensor({1, 0}, torch::kLong)));
  SamplingOptions top1;
  top1.do_sample = true;
  top1.top_k = 1;
  SamplingOptions nucleus;
  nucleus.do_sample = true;
  nucleus.top_k = 0;
  nucleus.top_p = 0.01;  // only the most likely token survives
  for (int i = 0; i < 20; ++i) {
    EXPECT_TRUE(torch::equal(next_tokens(logits, top1, gen), torch::tensor({1, 0}, torch::kLong)));
    EXPECT_TRUE(
        torch::equal(next_tokens(logits, nucleus, gen), torch::tensor({1, 0}, torch::kLong)));
  }
  SamplingOptions top2;
  top2.do_sample = true;
  top2.top_k = 2;
  for (int i = 0; i < 50; ++i) {
    const int64_t row0 = next_tokens(logits.narrow(0, 0, 1), top2, gen).item<int64_t>();
    EXPECT_TRUE(row0 == 1 || row0 == 2) << row0;
  }
}

// The greedy tokens of a plain loop: a full forward over the whole sequence for every new token.
std::vector<int64_t> plain_greedy(LlamaForCausalLMImpl& m, std::vector<int64_t> seq, int64_t n,
                                  int64_t eos) {
  torch::NoGradGuard no_grad;
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i) {
    const at::Tensor logits =
        m.forward(torch::tensor(seq, torch::kLong).view({1, static_cast<int64_t>(seq.size())}));
    const int64_t next = logits[0][-1].argmax().item<int64_t>();
    out.push_back(next);
    seq.push_back(next);
    if (next == eos) break;
  }
  return out;
}

// generate() on 1-3 ranks (each rank its own copy of the same model: no ZeRO here), prompts of
// mixed lengths spread over the ranks or replicated: every rank gets every prompt's tokens, and
// they are the plain loop's.
TEST(Generate, GreedyEqualsPlainLoopAtEveryWorldSize) {
  const LlamaConfig c = tiny_llama();
  const std::vector<std::vector<int64_t>> prompts = {{1, 2, 3}, {4, 5}, {6, 7, 8}, {9}, {10, 11}};
  auto reference_model = make_llama(c);
  // An eos that the plain loop of prompt 0 reaches: generation of that prompt stops there.
  const std::vector<int64_t> first = plain_greedy(*reference_model, prompts[0], 6, -1);
  const int64_t eos = first[2];
  std::vector<std::vector<int64_t>> expected;
  for (const auto& p : prompts) expected.push_back(plain_greedy(*reference_model, p, 6, eos));
  ASSERT_EQ(expected[0].size(), 3u);
  for (int world : {1, 2, 3}) {
    for (bool replicate : {false, true}) {
      SCOPED_TRACE("world " + std::to_string(world) + (replicate ? " replicated" : ""));
      const auto models = models_for(c, world);
      comm::run_local_world(world, [&](comm::Comm& comm) {
        LlamaForCausalLMImpl& m = *models[comm.rank()];
        GenerateOptions o;
        o.max_new_tokens = 6;
        o.eos = {eos};
        o.replicate = replicate;
        o.keep_logits = true;
        o.vocab_size = c.vocab_size;
        const GenerateResult r = generate(m, comm, prompts, o, 0);
        EXPECT_EQ(r.generated, expected);
        ASSERT_EQ(r.first_logits.size(), prompts.size());
        EXPECT_EQ(r.first_logits[2].sizes(), (std::vector<int64_t>{3, c.vocab_size}));
        int64_t total = 0;
        for (const auto& g : expected) total += static_cast<int64_t>(g.size());
        EXPECT_EQ(r.new_tokens, total);
      });
    }
  }
}

// Sampled tokens depend on the seed and the prompt's index, not on the world size.
TEST(Generate, SamplingIsIndependentOfTheWorldSize) {
  const LlamaConfig c = tiny_llama();
  const std::vector<std::vector<int64_t>> prompts = {{1, 2}, {3, 4, 5}, {6, 7}, {8, 9, 10}};
  GenerateOptions o;
  o.max_new_tokens = 5;
  o.sampling.do_sample = true;
  o.sampling.temperature = 1.5;
  const auto models = models_for(c, 2);
  std::vector<std::vector<int64_t>> one;
  comm::run_local_world(1, [&](comm::Comm& comm) {
    one = generate(*models[0], comm, prompts, o, 42).generated;
  });
  comm::run_local_world(2, [&](comm::Comm& comm) {
    EXPECT_EQ(generate(*models[comm.rank()], comm, prompts, o, 42).generated, one);
  });
  comm::run_local_world(1, [&](comm::Comm& comm) {
    EXPECT_NE(generate(*models[0], comm, prompts, o, 43).generated, one);
  });
}

}  // namespace
}  // namespace zrt::models
