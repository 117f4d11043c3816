// Ulysses sequence parallelism (zero/sequence_parallel.h) on 1-4 in-process ranks: the exchanges'
// layouts and gradients, and a LLaMA-family model whose ranks each hold a slice of the sequence
// giving the whole sequence's logits, loss and (summed over the group) gradients — GQA with
// key/value heads repeated, Mistral's window across slices, packed documents, a length that does
// not divide over the ranks, eager and sdpa.
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "comm/local_comm.h"
#include "core/error.h"
#include "models/llama.h"
#include "zero/sequence_parallel.h"

namespace zrt::models {
namespace {

// Every rank's part of a known (b, heads, T, d) tensor: gather_sequence gives rank r heads
// [r·h, (r+1)·h) at every position, scatter_sequence undoes it, and each one's backward routes
// the gradient back as the other.
TEST(SequenceParallel, ExchangesMoveHeadsAndPositionsAndTheirGradients) {
  for (int k : {1, 2, 3}) {
    SCOPED_TRACE("K = " + std::to_string(k));
    const int64_t b = 2, heads = 6, t = 5, d = 3, h = heads / k;
    const at::Tensor all = torch::arange(b * heads * k * t * d, torch::kFloat).view({b, heads, k * t, d});
    const at::Tensor upstream = torch::sin(all);
    comm::run_local_world(k, [&](comm::Comm& c) {
      const SequenceParallel sp(c, k);
      EXPECT_EQ(sp.rank(), c.rank());
      EXPECT_EQ(sp.data_parallel_size(), 1);
      const int64_t r = c.rank();
      const at::Tensor mine = all.narrow(2, r * t, t).clone().requires_grad_(true);
      const at::Tensor gathered = sp.gather_sequence(mine);
      EXPECT_TRUE(torch::equal(gathered, all.narrow(1, r * h, h)));
      EXPECT_TRUE(torch::equal(sp.scatter_sequence(gathered), mine));
      gathered.backward(upstream.narrow(1, r * h, h));
      EXPECT_TRUE(torch::equal(mine.grad(), upstream.narrow(2, r * t, t)));
      const at::Tensor theirs = all.narrow(1, r * h, h).clone().requires_grad_(true);
      sp.scatter_sequence(theirs).backward(upstream.narrow(2, r * t, t));
      EXPECT_TRUE(torch::equal(theirs.grad(), upstream.narrow(1, r * h, h)));
      const at::Tensor positions = torch::arange(t, torch::kLong).expand({b, t}) + r * t;
      EXPECT_TRUE(torch::equal(sp.all_positions(positions), torch::arange(k * t).expand({b, k * t})));
      if (k > 1) EXPECT_THROW(sp.gather_sequence(torch::zeros({b, k + 1, t, d})), Error);
    });
  }
  comm::run_local_world(4, [](comm::Comm& c) {
    const SequenceParallel sp(c, 2);  // two groups of two: data-parallel ranks 0 0 1 1
    EXPECT_EQ(sp.data_parallel_size(), 2);
    EXPECT_EQ(sp.data_parallel_rank(), c.rank() / 2);
    EXPECT_EQ(sp.rank(), c.rank() % 2);
  });
  comm::run_local_world(3, [](comm::Comm& c) { EXPECT_THROW(SequenceParallel(c, 2), ConfigError); });
}

// The slices and labels shard_causal_lm gives: padding at the end, labels shifted across the
// slice boundary, positions continued into the padding.
TEST(SequenceParallel, ShardsPadTheEndAndShiftLabelsAcrossSlices) {
  const at::Tensor ids = torch::arange(10, 17, torch::kLong).unsqueeze(0);  // T = 7
  at::Tensor labels = ids.clone();
  labels[0][3] = -100;
  comm::run_local_world(3, [&](comm::Comm& c) {
    const SequenceParallel sp(c, 3);
    const SequenceParallel::Shard s = sp.shard_causal_lm(ids, at::Tensor(), labels);
    EXPECT_EQ(s.label_count, 5);  // 6 shifted labels, one of them -100
    const std::vector<std::vector<int64_t>> want_ids = {{10, 11, 12}, {13, 14, 15}, {16, 0, 0}};
    const std::vector<std::vector<int64_t>> want_labels = {{11, 12, -100}, {14, 15, 16}, {-100, -100, -100}};
    const int r = c.rank();
    EXPECT_TRUE(torch::equal(s.ids[0], torch::tensor(want_ids[r])));
    EXPECT_TRUE(torch::equal(s.labels[0], torch::tensor(want_labels[r])));
    EXPECT_TRUE(torch::equal(s.position_ids[0], torch::arange(3 * r, 3 * r + 3)));
  });
}

LlamaConfig six_heads(const std::string& family, const std::string& impl) {
  LlamaConfig c;
  c.vocab_size = 61;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 6;
  c.num_key_value_heads = 2;  // K = 3 repeats each key/value head 3 times
  c.head_dim = 8;
  c.max_position_embeddings = 64;
  c.model_type = family;
  if (family == "mistral") c.sliding_window = 4;
  c.attn_implementation = impl;
  return c;
}

// Each rank's slice of the logits equals the whole forward's; the group's mean loss is the
// whole sequence's mean loss, and the group's gradients summed / K are the whole loss's.
void check_slices_equal_whole(const LlamaConfig& c, int k) {
  const int64_t n = 13;
  const at::Tensor tokens = torch::randint(0, c.vocab_size, {2, n}, torch::kLong);
  std::vector<at::Tensor> row0;  // packed: documents of 4, 7 and 2 in row 0; row 1 is one
  for (int64_t len : {4, 7, 2}) row0.push_back(torch::arange(len, torch::kLong));
  const at::Tensor positions = torch::stack({torch::cat(row0), torch::arange(n, torch::kLong)});
  at::Tensor labels = tokens.clone();
  labels[0][4] = -100;  // a document's first token, as --packed_documents labels it
  auto whole = std::make_shared<LlamaForCausalLMImpl>(c);
  torch::manual_seed(3);
  for (auto& p : whole->parameters()) p.data().normal_(0, 0.3);
  std::vector<std::shared_ptr<LlamaForCausalLMImpl>> ranks;
  for (int r = 0; r < k; ++r) {
    ranks.push_back(std::make_shared<LlamaForCausalLMImpl>(c));
    for (size_t i = 0; i < whole->parameters().size(); ++i) {
      ranks.back()->parameters()[i].data().copy_(whole->parameters()[i]);
    }
  }
  const at::Tensor logits = whole->forward(tokens, nullptr, nullptr, positions);
  const at::Tensor shifted = torch::cat({labels.narrow(1, 1, n - 1), torch::full({2, 1}, -100, torch::kLong)}, 1);
  const at::Tensor loss = torch::cross_entropy_loss(logits.reshape({-1, c.vocab_size}), shifted.reshape({-1}));
  loss.backward();
  std::vector<double> losses(k);
  comm::run_local_world(k, [&](comm::Comm& comm) {
    auto sp = std::make_shared<const SequenceParallel>(comm, k);
    auto& m = *ranks[comm.rank()];
    m.set_sequence_parallel(sp);
    const SequenceParallel::Shard s = sp->shard_causal_lm(tokens, positions, labels);
    const at::Tensor mine = m.forward(s.ids, nullptr, nullptr, s.position_ids);
    const int64_t t = s.ids.size(1), from = comm.rank() * t, real = std::min(t, n - from);
    EXPECT_TRUE(torch::allclose(mine.narrow(1, 0, real), logits.narrow(1, from, real), 1e-5, 1e-5))
        << "rank " << comm.rank();
    const at::Tensor sum = torch::cross_entropy_loss(mine.reshape({-1, c.vocab_size}), s.labels.reshape({-1}),
                                                     {}, at::Reduction::Sum);
    const at::Tensor l = sp->loss(sum, s.label_count);
    l.backward();
    losses[comm.rank()] = l.item<double>();
  });
  double mean = 0;
  for (double l : losses) mean += l / k;
  EXPECT_NEAR(mean, loss.item<double>(), 1e-5);
  for (size_t i = 0; i < whole->parameters().size(); ++i) {
    at::Tensor sum = torch::zeros_like(whole->parameters()[i]);
    for (auto& r : ranks) sum += r->parameters()[i].grad();
    EXPECT_TRUE(torch::allclose(sum / k, whole->parameters()[i].grad(), 1e-5, 1e-6))
        << whole->named_parameters().keys()[i];
  }
}

TEST(SequenceParallel, LlamaSlicesGiveTheWholeSequencesLogitsLossAndGradients) {
  std::vector<std::string> impls = {"eager"};
#if TORCH_VERSION_MAJOR >= 2
  impls.push_back("sdpa");
#endif
  for (const std::string family : {"llama", "mistral"}) {
    for (const std::string& impl : impls) {
      for (int k : {2, 3}) {
        SCOPED_TRACE(family + " " + impl + " K = " + std::to_string(k));
        check_slices_equal_whole(six_heads(family, impl), k);
      }
    }
  }
}

TEST(SequenceParallel, LlamaRefusesWhatItCannotSplit) {
  comm::run_local_world(4, [](comm::Comm& c) {
    auto sp = std::make_shared<const SequenceParallel>(c, 4);
    auto six = std::make_shared<LlamaForCausalLMImpl>(six_heads("llama", "eager"));
    EXPECT_THROW(six->set_sequence_parallel(sp), ConfigError);  // 6 heads over 4 ranks
    LlamaConfig dynamic = six_heads("llama", "eager");
    dynamic.num_attention_heads = 4;
    dynamic.rope_type = "dynamic";
    auto scaled = std::make_shared<LlamaForCausalLMImpl>(dynamic);
    EXPECT_THROW(scaled->set_sequence_parallel(sp), ConfigError);
  });
  comm::run_local_world(2, [](comm::Comm& c) {
    auto m = std::make_shared<LlamaForCausalLMImpl>(six_heads("llama", "eager"));
    m->set_sequence_parallel(std::make_shared<const SequenceParallel>(c, 2));
    EXPECT_THROW(m->forward(torch::zeros({1, 4}, torch::kLong)), Error);  // no position_ids
  });
}

}  // namespace
}  // namespace zrt::models
