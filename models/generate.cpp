#include "models/generate.h"

#include <deque>
#include <limits>
#include <map>
#include <utility>

#include <ATen/CPUGeneratorImpl.h>

namespace zrt::models {

// The next token of every row of `logits` (batch, vocab), as transformers' generate picks it.
at::Tensor next_tokens(const at::Tensor& logits, const SamplingOptions& s, at::Generator& gen) {
  if (!s.do_sample) return logits.argmax(-1);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  at::Tensor scores = logits.to(at::kFloat) / s.temperature;
  if (s.top_k > 0 && s.top_k < scores.size(-1)) {
    const at::Tensor kth = std::get<0>(scores.topk(s.top_k, -1)).narrow(-1, s.top_k - 1, 1);
    scores = scores.masked_fill(scores < kth, neg_inf);
  }
  if (s.top_p < 1.0) {
    // Drop the smallest tokens whose probabilities add up to at most 1 - top_p; keep at least one.
    auto [sorted, order] = scores.sort(-1, /*descending=*/false);
    at::Tensor drop = sorted.softmax(-1).cumsum(-1) <= (1.0 - s.top_p);
    drop.narrow(-1, drop.size(-1) - 1, 1).fill_(false);
    scores = scores.masked_fill(drop.scatter(-1, order, drop), neg_inf);
  }
  return at::multinomial(scores.softmax(-1), 1, /*replacement=*/false, gen).squeeze(-1);
}

namespace {

// Prompts of one length that a rank generates together.
struct Batch {
  std::vector<size_t> members;  // prompt indices
  at::Tensor input;             // the next forward's tokens, (rows, t)
  KvCache cache;
  std::vector<bool> done;
  int64_t steps = 0;  // tokens picked so far for every row
};

// This rank's prompts, batched by length (shortest first).
std::deque<Batch> rank_batches(const std::vector<std::vector<int64_t>>& prompts, int rank,
                               int world, bool replicate) {
  std::map<size_t, std::vector<size_t>> by_length;
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (replicate || static_cast<int>(i % static_cast<size_t>(world)) == rank)
      by_length[prompts[i].size()].push_back(i);
  }
  std::deque<Batch> batches;
  for (auto& [length, members] : by_length) {
    std::vector<int64_t> ids;
    for (size_t m : members) ids.insert(ids.end(), prompts[m].begin(), prompts[m].end());
    Batch b;
    b.input = at::tensor(ids, at::kLong)
                  .view({static_cast<int64_t>(members.size()), static_cast<int64_t>(length)});
    b.done.assign(members.size(), false);
    b.members = std::move(members);
    batches.push_back(std::move(b));
  }
  return batches;
}

// One forward of `b` and the token it picks for every unfinished row; false once `b` is done.
bool advance(LlamaForCausalLMImpl& model, comm::Comm& comm, Batch& b, const GenerateOptions& o,
             std::vector<at::Generator>& gens, GenerateResult& res) {
  const at::Tensor logits = model.forward(b.input, &b.cache);
  const auto rows = static_cast<int64_t>(b.members.size());
  if (b.steps == 0 && o.keep_logits) {
    for (int64_t r = 0; r < rows; ++r) res.first_logits[b.members[r]] = logits[r].to(at::kFloat);
  }
  const at::Tensor last = logits.select(1, logits.size(1) - 1);
  at::Tensor next = at::empty({rows}, at::kLong);
  int64_t* ids = next.data_ptr<int64_t>();
  for (int64_t r = 0; r < rows; ++r) {  // row by row: each prompt draws from its own generator
    ids[r] = next_tokens(last.narrow(0, r, 1), o.sampling, gens[b.members[r]]).item<int64_t>();
  }
  if (o.replicate) comm.broadcast(next, 0);  // rank 0's choice: every rank feeds the same tokens
  bool all_done = true;
  for (int64_t r = 0; r < rows; ++r) {
    if (!b.done[r]) {
      res.generated[b.members[r]].push_back(ids[r]);
      b.done[r] = o.eos.count(ids[r]) != 0;
    }
    all_done = all_done && b.done[r];
  }
  b.steps += 1;
  if (all_done || b.steps == o.max_new_tokens) return false;
  b.input = next.view({rows, 1});
  return true;
}

// Collective: every prompt's tokens and logits from the rank that generated it to rank 0.
void collect_results(comm::Comm& comm, const std::vector<std::vector<int64_t>>& prompts,
                     const GenerateOptions& o, GenerateResult& res) {
  const int world = comm.size();
  if (world == 1 || o.replicate) return;
  const auto count = static_cast<int64_t>(prompts.size());
  auto owner = [&](int64_t i) { return static_cast<int>(i % world); };
  // Row i: the number of tokens, then the tokens; zeros on every rank but the owner, then summed.
  at::Tensor table = at::zeros({count, o.max_new_tokens + 1}, at::kLong);
  for (int64_t i = 0; i < count; ++i) {
    if (owner(i) != comm.rank()) continue;
    const auto& g = res.generated[i];
    table[i][0] = static_cast<int64_t>(g.size());
    if (!g.empty())
      table[i].narrow(0, 1, static_cast<int64_t>(g.size())).copy_(at::tensor(g, at::kLong));
  }
  comm.all_reduce(table, comm::ReduceOp::kSum);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t* row = table[i].data_ptr<int64_t>();
    res.generated[i].assign(row + 1, row + 1 + row[0]);
  }
  if (!o.keep_logits) return;
  for (int64_t i = 0; i < count; ++i) {
    at::Tensor& t = res.first_logits[i];
    if (owner(i) != comm.rank())
      t = at::empty({static_cast<int64_t>(prompts[i].size()), o.vocab_size}, at::kFloat);
    comm.broadcast(t, owner(i));
  }
}

}  // namespace

// Every rank generates its batches one forward at a time, and runs as many forwards as the busiest
// rank (a rank without work runs a one-token forward, no cache), because each forward gathers
// every layer with all ranks.
GenerateResult generate(LlamaForCausalLMImpl& model, comm::Comm& comm,
                        const std::vector<std::vector<int64_t>>& prompts, const GenerateOptions& o,
                        uint64_t seed) {
  at::NoGradGuard no_grad;
  GenerateResult res;
  res.generated.resize(prompts.size());
  if (o.keep_logits) res.first_logits.resize(prompts.size());
  std::vector<at::Generator> gens;
  for (size_t i = 0; i < prompts.size(); ++i)
    gens.push_back(at::detail::createCPUGenerator(seed + i));
  std::deque<Batch> queue = rank_batches(prompts, comm.rank(), comm.size(), o.replicate);
  const at::Tensor idle = at::zeros({1, 1}, at::kLong);
  while (true) {
    at::Tensor busy = at::full({1}, queue.empty() ? 0 : 1, at::kLong);
    if (!o.replicate) comm.all_reduce(busy, comm::ReduceOp::kMax);  // else: the same queues
    if (busy.item<int64_t>() == 0) break;
    if (queue.empty()) {
      model.forward(idle);
    } else if (!advance(model, comm, queue.front(), o, gens, res)) {
      queue.pop_front();
    }
  }
  collect_results(comm, prompts, o, res);
  for (const auto& g : res.generated) res.new_tokens += static_cast<int64_t>(g.size());
  return res;
}

}  // namespace zrt::models
