// comm_bench: collective bandwidth of the ZeroRT MPI backend next to the raw MPI calls on the same
// buffers, in the style of nccl-tests. Run under mpirun:
//
//   mpirun -np 2 build/bench/comm_bench [--sizes 1K:256M] [--ops all_reduce,reduce_scatter,...]
//                                       [--json]
//
// For each op and total size S (float32; nccl-tests' convention: S is the full array, for
// reduce_scatter the input, for all_gather the output) it prints the median time over ranks'
// maxima, algbw = S / t and busbw = algbw × factor (all_reduce 2(n−1)/n, reduce_scatter and
// all_gather (n−1)/n; see bench/README.md), #wrong from one checked run, and the same figures for
// the backend's two algorithms and for raw MPI. "best raw" is the best raw MPI way to compute the
// op (for reduce_scatter: MPI_Reduce_scatter_block, or MPI_Allreduce keeping a slice).
#define OMPI_SKIP_MPICXX 1
#include <cstdlib>
#include <map>
#include <sstream>

#include <ATen/ATen.h>
#include <mpi.h>

#include "bench/harness.h"
#include "comm/comm.h"
#include "comm/mpi_comm.h"
#include "core/error.h"

namespace zrt::bench {
namespace {

int64_t parse_size(const std::string& s) {
  char unit = s.empty() ? ' ' : s.back();
  int64_t mult = 1;
  std::string digits = s;
  if (unit == 'K' || unit == 'k') mult = 1024;
  if (unit == 'M' || unit == 'm') mult = 1024 * 1024;
  if (unit == 'G' || unit == 'g') mult = 1024LL * 1024 * 1024;
  if (mult != 1) digits.pop_back();
  return std::stoll(digits) * mult;
}

double bus_factor(const std::string& op, int n) {
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  return static_cast<double>(n - 1) / n;
}

struct Variant {
  std::string name;
  std::function<void()> run;
};

struct Row {
  std::string op;
  int64_t bytes = 0;
  std::map<std::string, double> seconds;  // variant → time
  int64_t wrong = 0;
};

double max_over_ranks(double v) {
  double out = 0;
  MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

double time_variant(const Variant& v, int64_t bytes) {
  const int iters = bytes >= (64 << 20) ? 5 : bytes >= (4 << 20) ? 10 : 20;
  std::vector<double> t;
  for (int i = 0; i < 2 + iters; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double s = now_seconds();
    v.run();
    const double e = now_seconds() - s;
    if (i >= 2) t.push_back(max_over_ranks(e));
  }
  return median(t);
}

// One checked run of ZeroRT's op: every element must equal the closed form.
int64_t count_wrong(comm::Comm& comm, const std::string& op, int64_t count) {
  const int n = comm.size();
  const int r = comm.rank();
  at::Tensor bad;
  if (op == "all_reduce") {
    at::Tensor t = at::full({count}, r + 1.0f);
    comm.all_reduce(t);
    bad = t.ne(n * (n + 1) / 2.0f);
  } else if (op == "reduce_scatter") {
    at::Tensor in = at::arange(count, at::kFloat).remainder(7).add(r);
    at::Tensor out = at::empty({count / n});
    comm.reduce_scatter(out, in);
    at::Tensor want = at::arange(count, at::kFloat)
                          .remainder(7)
                          .mul(n)
                          .add(n * (n - 1) / 2.0f)
                          .narrow(0, r * (count / n), count / n);
    bad = out.ne(want);
  } else {
    at::Tensor in = at::full({count / n}, static_cast<float>(r));
    at::Tensor out = at::empty({count});
    comm.all_gather(out, in);
    at::Tensor want = at::arange(n, at::kFloat).repeat_interleave(count / n);
    bad = out.ne(want);
  }
  return bad.sum().item<int64_t>();
}

std::vector<Variant> variants(const std::string& op, comm::Comm& zrt, comm::Comm& ring,
                              comm::Comm& native, at::Tensor& in, at::Tensor& out,
                              at::Tensor& scratch) {
  const int n = zrt.size();
  const int count = static_cast<int>(in.numel());
  float* pin = in.data_ptr<float>();
  float* pout = out.data_ptr<float>();
  float* pscr = scratch.data_ptr<float>();
  if (op == "all_reduce") {
    return {{"zrt", [&] { zrt.all_reduce(in); }},
            {"mpi",
             [=] { MPI_Allreduce(MPI_IN_PLACE, pin, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); }}};
  }
  if (op == "reduce_scatter") {
    return {{"zrt", [&] { zrt.reduce_scatter(out, in); }},
            {"zrt_ring", [&] { ring.reduce_scatter(out, in); }},
            {"zrt_native", [&] { native.reduce_scatter(out, in); }},
            {"mpi",
             [=] {
               MPI_Reduce_scatter_block(pin, pout, count / n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
             }},
            {"mpi_allreduce",
             [=] { MPI_Allreduce(pin, pscr, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); }}};
  }
  // all_gather: `in` is the full output here, `out` the per-rank input.
  return {{"zrt", [&] { zrt.all_gather(in, out); }},
          {"zrt_ring", [&] { ring.all_gather(in, out); }},
          {"zrt_native", [&] { native.all_gather(in, out); }},
          {"mpi", [=] {
             MPI_Allgather(pout, count / n, MPI_FLOAT, pin, count / n, MPI_FLOAT, MPI_COMM_WORLD);
           }}};
}

std::shared_ptr<comm::Comm> comm_with_algo(const char* algo) {
  ::setenv("ZRT_MPI_ALGO", algo, 1);
  auto c = comm::make_mpi_comm();
  ::unsetenv("ZRT_MPI_ALGO");
  return c;
}

int run(int argc, char** argv) {
  auto zrt = comm::make_mpi_comm();
  auto ring = comm_with_algo("ring");
  auto native = comm_with_algo("native");
  const int n = zrt->size();
  const int rank = zrt->rank();
  const bool json = has_flag(argc, argv, "--json");
  const std::string sizes = flag_value(argc, argv, "--sizes", "1K:256M");
  const std::string ops_arg =
      flag_value(argc, argv, "--ops", "all_reduce,reduce_scatter,all_gather");
  const auto colon = sizes.find(':');
  const int64_t lo = parse_size(sizes.substr(0, colon));
  const int64_t hi = colon == std::string::npos ? lo : parse_size(sizes.substr(colon + 1));
  std::vector<std::string> ops;
  std::stringstream ss(ops_arg);
  for (std::string op; std::getline(ss, op, ',');) ops.push_back(op);

  const double memcpy_gbps = max_over_ranks(measure_memcpy_gbps(256 << 20, 1));
  if (rank == 0 && !json) {
    std::printf("# comm_bench: %d ranks, float32, %s\n", n, comm::mpi_library_version().c_str());
    std::printf("# memcpy bandwidth (1 thread, 256 MiB, slowest rank): %.2f GB/s\n", memcpy_gbps);
  }
  std::vector<Row> rows;
  for (const std::string& op : ops) {
    if (rank == 0 && !json) {
      std::printf("\n# %s\n%10s %10s %8s %8s %7s | %s\n", op.c_str(), "size", "zrt us", "algbw",
                  "busbw", "#wrong", "other variants: us busbw");
    }
    for (int64_t bytes = lo; bytes <= hi; bytes *= 4) {
      const int64_t count = bytes / 4 / n * n;
      if (count == 0) continue;
      at::Tensor in = at::ones({count});
      at::Tensor out = at::ones({count / n});
      at::Tensor scratch = at::empty({op == "reduce_scatter" ? count : 1});
      Row row;
      row.op = op;
      row.bytes = count * 4;
      row.wrong = count_wrong(*zrt, op, count);
      for (const Variant& v : variants(op, *zrt, *ring, *native, in, out, scratch)) {
        row.seconds[v.name] = time_variant(v, row.bytes);
      }
      rows.push_back(row);
      if (rank == 0 && !json) {
        const double t = row.seconds["zrt"];
        const double algbw = row.bytes / t / 1e9;
        std::printf("%10s %10.1f %8.2f %8.2f %7lld |", format_bytes(row.bytes).c_str(), t * 1e6,
                    algbw, algbw * bus_factor(op, n), static_cast<long long>(row.wrong));
        for (const auto& [name, secs] : row.seconds) {
          if (name == "zrt") continue;
          std::printf(" %s %.1f %.2f", name.c_str(), secs * 1e6,
                      row.bytes / secs / 1e9 * bus_factor(op, n));
        }
        std::printf("\n");
        std::fflush(stdout);
      }
    }
  }
  if (rank == 0 && json) {
    std::printf("{\"ranks\": %d, \"memcpy_gbps\": %.3f, \"rows\": [\n", n, memcpy_gbps);
    for (size_t i = 0; i < rows.size(); ++i) {
      std::printf("  {\"op\": \"%s\", \"bytes\": %lld, \"wrong\": %lld", rows[i].op.c_str(),
                  static_cast<long long>(rows[i].bytes), static_cast<long long>(rows[i].wrong));
      for (const auto& [name, secs] : rows[i].seconds) {
        std::printf(", \"%s_busbw\": %.4f", name.c_str(),
                    rows[i].bytes / secs / 1e9 * bus_factor(rows[i].op, n));
      }
      std::printf("}%s\n", i + 1 < rows.size() ? "," : "");
    }
    std::printf("]}\n");
  }
  int64_t wrong = 0;
  for (const Row& r : rows) wrong += r.wrong;
  return wrong == 0 ? 0 : 1;
}

}  // namespace
}  // namespace zrt::bench

int main(int argc, char** argv) { return zrt::bench::run(argc, argv); }
