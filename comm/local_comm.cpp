#include "comm/local_comm.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "comm/op_queue.h"
#include "comm/reduce_kernels.h"
#include "core/error.h"
#include "core/shard.h"

namespace zrt::comm {

// The state shared by the ranks of one in-process world. Every collective is a sequence of
// rendezvous phases; between phases a rank only reads the buffers other ranks published in
// their slot, and writes only its own tensors (see run_* below).
class LocalWorld {
 public:
  struct Slot {
    OpInfo info;
    const uint8_t* in = nullptr;
    uint8_t* out = nullptr;
    const uint8_t* partial = nullptr;  // all_reduce: this rank's reduced slice
  };

  // `host_of[r]`: the emulated host of rank r.
  LocalWorld(std::vector<int> host_of, double timeout_seconds)
      : size_(static_cast<int>(host_of.size())),
        timeout_(timeout_seconds),
        host_of_(std::move(host_of)),
        slots_(size_),
        partials_(size_),
        requests_(size_),
        made_(size_),
        arrived_(size_) {}

  int size() const { return size_; }
  int host_of(int rank) const { return host_of_[rank]; }
  // Rank's index among the ranks of its host, and their number.
  int local_rank(int rank) const {
    return static_cast<int>(std::count(host_of_.begin(), host_of_.begin() + rank, host_of_[rank]));
  }
  int local_size(int rank) const {
    return static_cast<int>(std::count(host_of_.begin(), host_of_.end(), host_of_[rank]));
  }

  void abort(const std::string& why) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (aborted_.empty()) aborted_ = why;
    cv_.notify_all();
  }

  void run_all_reduce(int rank, const at::Tensor& t, const OpInfo& info) {
    publish(rank, info, t.data_ptr(), t.data_ptr());
    const int64_t n = info.numel;
    const int64_t es = static_cast<int64_t>(t.element_size());
    const ShardInfo mine = slice_of(n, rank);
    std::vector<uint8_t>& partial = partials_[rank];
    partial.resize(static_cast<size_t>(mine.size * es));
    if (mine.size > 0) {
      std::memcpy(partial.data(), slots_[0].in + mine.offset * es, partial.size());
      for (int k = 1; k < size_; ++k) {
        detail::reduce_inplace(partial.data(), slots_[k].in + mine.offset * es, mine.size,
                               info.dtype, info.reduce_op);
      }
    }
    slots_[rank].partial = partial.data();
    rendezvous(rank, info, "reduce");
    auto* out = static_cast<uint8_t*>(t.data_ptr());
    for (int k = 0; k < size_; ++k) {
      const ShardInfo s = slice_of(n, k);
      if (s.size > 0) std::memcpy(out + s.offset * es, slots_[k].partial, s.size * es);
    }
    if (info.reduce_op == ReduceOp::kAvg) detail::divide_inplace(out, n, info.dtype, size_);
    rendezvous(rank, info, "finish");
  }

  // Both reduce-scatters: piece r of every rank's input, at offsets[r], is reduced into rank
  // r's output (counts[r] elements).
  void run_reduce_scatter(int rank, const at::Tensor& out, const at::Tensor& in, const OpInfo& info,
                          const std::vector<int64_t>& counts) {
    publish(rank, info, in.data_ptr(), out.data_ptr());
    const int64_t es = static_cast<int64_t>(out.element_size());
    const int64_t c = counts[rank];
    const int64_t offset = offset_of(counts, rank) * es;
    auto* o = static_cast<uint8_t*>(out.data_ptr());
    if (c > 0) {
      // Reduce into scratch: the output may be this rank's own input piece (in place).
      std::vector<uint8_t>& acc = partials_[rank];
      acc.resize(static_cast<size_t>(c * es));
      std::memcpy(acc.data(), slots_[0].in + offset, c * es);
      for (int k = 1; k < size_; ++k) {
        detail::reduce_inplace(acc.data(), slots_[k].in + offset, c, info.dtype, info.reduce_op);
      }
      if (info.reduce_op == ReduceOp::kAvg)
        detail::divide_inplace(acc.data(), c, info.dtype, size_);
      rendezvous(rank, info, "reduce");  // every rank has read every input
      std::memcpy(o, acc.data(), c * es);
    } else {
      rendezvous(rank, info, "reduce");
    }
    rendezvous(rank, info, "finish");
  }

  // Both all-gathers: rank k's input lands at offsets[k] of every output.
  void run_all_gather(int rank, const at::Tensor& out, const at::Tensor& in, const OpInfo& info,
                      const std::vector<int64_t>& counts) {
    publish(rank, info, in.data_ptr(), out.data_ptr());
    const int64_t es = static_cast<int64_t>(in.element_size());
    auto* o = static_cast<uint8_t*>(out.data_ptr());
    for (int k = 0; k < size_; ++k) {
      uint8_t* dst = o + offset_of(counts, k) * es;
      if (counts[k] > 0 && dst != slots_[k].in) std::memcpy(dst, slots_[k].in, counts[k] * es);
    }
    rendezvous(rank, info, "finish");
  }

  void run_broadcast(int rank, const at::Tensor& t, const OpInfo& info) {
    publish(rank, info, t.data_ptr(), t.data_ptr());
    const size_t bytes = static_cast<size_t>(t.numel() * t.element_size());
    if (rank != info.root && bytes > 0) {
      std::memcpy(t.data_ptr(), slots_[info.root].in, bytes);
    }
    rendezvous(rank, info, "finish");
  }

  // Chunk r of rank k's input lands in chunk k of rank r's output.
  void run_all_to_all(int rank, const at::Tensor& out, const at::Tensor& in, const OpInfo& info) {
    publish(rank, info, in.data_ptr(), out.data_ptr());
    const int64_t chunk = info.numel / size_ * static_cast<int64_t>(in.element_size());
    auto* o = static_cast<uint8_t*>(out.data_ptr());
    for (int k = 0; k < size_ && chunk > 0; ++k) {
      std::memcpy(o + k * chunk, slots_[k].in + rank * chunk, chunk);
    }
    rendezvous(rank, info, "finish");
  }

  // Note [Sub-communicators]: the ranks of `color`, ranked by (key, rank); the first of them
  // makes the new world, the others pick it up. Returns it and this rank's rank in it.
  std::pair<std::shared_ptr<LocalWorld>, int> run_split(int rank, int color, int key,
                                                        const OpInfo& info) {
    requests_[rank] = {color, key};
    publish(rank, info, nullptr, nullptr);
    std::vector<int> members;
    for (int k = 0; k < size_; ++k) {
      if (requests_[k].first == color) members.push_back(k);
    }
    std::stable_sort(members.begin(), members.end(),
                     [&](int a, int b) { return requests_[a].second < requests_[b].second; });
    if (members.front() == rank) {
      std::vector<int> hosts;
      for (int k : members) hosts.push_back(host_of_[k]);
      made_[rank] = std::make_shared<LocalWorld>(std::move(hosts), timeout_);
    }
    rendezvous(rank, info, "create");
    std::shared_ptr<LocalWorld> world = made_[members.front()];
    rendezvous(rank, info, "finish");
    const auto at = std::find(members.begin(), members.end(), rank) - members.begin();
    return {std::move(world), static_cast<int>(at)};
  }

  // The second phase keeps fast ranks from republishing their slot while slower ones still
  // compare slots in publish().
  void run_barrier(int rank, const OpInfo& info) {
    publish(rank, info, nullptr, nullptr);
    rendezvous(rank, info, "finish");
  }

 private:
  static int64_t offset_of(const std::vector<int64_t>& counts, int r) {
    int64_t o = 0;
    for (int k = 0; k < r; ++k) o += counts[k];
    return o;
  }

  // Element range of the all_reduce slice that rank `r` reduces.
  ShardInfo slice_of(int64_t n, int r) const { return param_shard(n, r, size_); }

  // Publishes this rank's buffers, waits for every rank, and checks that all called the same
  // collective (the check runs on every rank against the same slots, so all agree).
  void publish(int rank, const OpInfo& info, const void* in, void* out) {
    slots_[rank].info = info;
    slots_[rank].in = static_cast<const uint8_t*>(in);
    slots_[rank].out = static_cast<uint8_t*>(out);
    rendezvous(rank, info, "start");
    const OpInfo& first = slots_[0].info;
    for (int k = 1; k < size_; ++k) {
      const OpInfo& other = slots_[k].info;
      const bool same = other.type == first.type && other.dtype == first.dtype &&
                        other.numel == first.numel && other.root == first.root &&
                        other.counts == first.counts &&
                        (other.type == OpType::kAllGather || other.type == OpType::kAllGatherV ||
                         other.type == OpType::kAllToAll || other.type == OpType::kBroadcast || other.type == OpType::kBarrier ||
                         other.reduce_op == first.reduce_op);
      ZRT_CHECK_AS(CommError, same, "[rank ", rank,
                   "] collective mismatch between ranks: rank 0 called ", first.describe(),
                   " but rank ", k, " called ", other.describe());
    }
  }

  void rendezvous(int rank, const OpInfo& info, const char* phase) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!aborted_.empty()) throw CommError(aborted_);
    const uint64_t gen = generation_;
    arrived_[rank] = true;
    if (++count_ == size_) {
      count_ = 0;
      std::fill(arrived_.begin(), arrived_.end(), false);
      ++generation_;
      cv_.notify_all();
      return;
    }
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_);
    const bool ok =
        cv_.wait_until(lock, deadline, [&] { return generation_ != gen || !aborted_.empty(); });
    if (generation_ != gen) return;
    if (!ok && aborted_.empty()) {
      std::string missing;
      for (int k = 0; k < size_; ++k) {
        if (!arrived_[k]) missing += str(missing.empty() ? "" : ", ", k);
      }
      aborted_ = str("[rank ", rank, "] communication timeout: ", info.describe(), " (", phase,
                     ") on the local communicator did not complete after ", timeout_,
                     " s; rank(s) ", missing, " never joined it");
      cv_.notify_all();
    }
    throw CommError(aborted_);
  }

  const int size_;
  const double timeout_;
  const std::vector<int> host_of_;
  std::vector<Slot> slots_;
  std::vector<std::vector<uint8_t>> partials_;
  std::vector<std::pair<int, int>> requests_;        // run_split: (color, key) per rank
  std::vector<std::shared_ptr<LocalWorld>> made_;  // run_split: the worlds made

  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<bool> arrived_;
  int count_ = 0;
  uint64_t generation_ = 0;
  std::string aborted_;
};

namespace {

class LocalComm final : public Comm {
 public:
  LocalComm(std::shared_ptr<LocalWorld> world, int rank, const CommOptions& options)
      : world_(std::move(world)),
        rank_(rank),
        options_(options),
        queue_("local", rank, options.timeout_seconds) {}

  int rank() const override { return rank_; }
  int size() const override { return world_->size(); }
  int local_rank() const override { return world_->local_rank(rank_); }
  int local_size() const override { return world_->local_size(rank_); }
  std::string backend_name() const override { return "local"; }
  at::DeviceType device_type() const override { return at::kCPU; }
  double timeout_seconds() const override { return queue_.timeout_seconds(); }
  CommTimes times() const override { return queue_.times(); }

 protected:
  std::shared_ptr<Work> all_reduce_impl(const at::Tensor& t, const OpInfo& info) override {
    return queue_.submit(
        info, [w = world_.get(), r = rank_, t, info] { w->run_all_reduce(r, t, info); }, {t});
  }
  std::shared_ptr<Work> reduce_scatter_impl(const at::Tensor& out, const at::Tensor& in,
                                            const OpInfo& info) override {
    std::vector<int64_t> counts(world_->size(), out.numel());
    return queue_.submit(info,
                         [w = world_.get(), r = rank_, out, in, info, counts] {
                           w->run_reduce_scatter(r, out, in, info, counts);
                         },
                         {out, in});
  }
  std::shared_ptr<Work> reduce_scatter_v_impl(const at::Tensor& out, const at::Tensor& in,
                                              const OpInfo& info) override {
    return queue_.submit(info,
                         [w = world_.get(), r = rank_, out, in, info] {
                           w->run_reduce_scatter(r, out, in, info, info.counts);
                         },
                         {out, in});
  }
  std::shared_ptr<Work> all_gather_impl(const at::Tensor& out, const at::Tensor& in,
                                        const OpInfo& info) override {
    std::vector<int64_t> counts(world_->size(), in.numel());
    return queue_.submit(info,
                         [w = world_.get(), r = rank_, out, in, info, counts] {
                           w->run_all_gather(r, out, in, info, counts);
                         },
                         {out, in});
  }
  std::shared_ptr<Work> all_gather_v_impl(const at::Tensor& out, const at::Tensor& in,
                                          const OpInfo& info) override {
    return queue_.submit(info,
                         [w = world_.get(), r = rank_, out, in, info] {
                           w->run_all_gather(r, out, in, info, info.counts);
                         },
                         {out, in});
  }
  std::shared_ptr<Work> broadcast_impl(const at::Tensor& t, const OpInfo& info) override {
    return queue_.submit(
        info, [w = world_.get(), r = rank_, t, info] { w->run_broadcast(r, t, info); }, {t});
  }
  std::shared_ptr<Work> barrier_impl(const OpInfo& info) override {
    return queue_.submit(info, [w = world_.get(), r = rank_, info] { w->run_barrier(r, info); },
                         {});
  }
  std::shared_ptr<Work> all_to_all_impl(const at::Tensor& out, const at::Tensor& in,
                                        const OpInfo& info) override {
    return queue_.submit(
        info, [w = world_.get(), r = rank_, out, in, info] { w->run_all_to_all(r, out, in, info); },
        {out, in});
  }
  std::shared_ptr<Comm> split_impl(int color, int key) override {
    OpInfo info;
    info.type = OpType::kBarrier;
    info.root = -1;  // tells a split from a barrier in the mismatch check
    std::pair<std::shared_ptr<LocalWorld>, int> made;
    queue_.submit(info, [&, w = world_.get(), r = rank_] { made = w->run_split(r, color, key, info); },
                  {})
        ->wait();
    return std::make_shared<LocalComm>(std::move(made.first), made.second, options_);
  }
  std::shared_ptr<Comm> split_by_host_impl() override {
    return split_impl(world_->host_of(rank_), rank_);
  }

 private:
  std::shared_ptr<LocalWorld> world_;  // outlives queue_ (declared first, destroyed last)
  int rank_;
  CommOptions options_;
  OpQueue queue_;
};

}  // namespace

namespace {

std::shared_ptr<LocalWorld> new_world(int size, const CommOptions& options) {
  ZRT_CHECK_AS(ConfigError, size >= 1, "local world size must be >= 1, got ", size);
  const int per_host = options.local_ranks_per_host > 0 ? options.local_ranks_per_host : size;
  ZRT_CHECK_AS(ConfigError, size % per_host == 0, "local world of ", size,
               " ranks cannot be cut into hosts of local_ranks_per_host = ", per_host);
  std::vector<int> host_of(size);
  for (int r = 0; r < size; ++r) host_of[r] = r / per_host;
  return std::make_shared<LocalWorld>(std::move(host_of), options.timeout_seconds);
}

}  // namespace

std::vector<std::shared_ptr<Comm>> make_local_world(int size, const CommOptions& options) {
  auto world = new_world(size, options);
  std::vector<std::shared_ptr<Comm>> comms;
  comms.reserve(size);
  for (int r = 0; r < size; ++r) comms.push_back(std::make_shared<LocalComm>(world, r, options));
  return comms;
}

void run_local_world(int size, const std::function<void(Comm&)>& fn, const CommOptions& options) {
  auto world = new_world(size, options);
  std::vector<std::shared_ptr<Comm>> comms;
  for (int r = 0; r < size; ++r) comms.push_back(std::make_shared<LocalComm>(world, r, options));
  std::vector<std::exception_ptr> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(*comms[r]);
      } catch (const std::exception& e) {
        errors[r] = std::current_exception();
        world->abort(str("[rank ", r, "] raised: ", e.what()));
      } catch (...) {
        errors[r] = std::current_exception();
        world->abort(str("[rank ", r, "] raised an unknown exception"));
      }
    });
  }
  for (auto& t : threads) t.join();
  comms.clear();
  // Prefer the root cause over the CommErrors it provoked on other ranks.
  for (const auto& e : errors) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const CommError&) {
      continue;
    } catch (...) {
      throw;
    }
  }
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace zrt::comm
