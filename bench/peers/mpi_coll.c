/* mpi_coll.c: the plain-MPI baselines of bench/peers/collectives.py. Times Open MPI's own
 * collectives and a plain point-to-point ring on float32 buffers, with comm_bench's convention
 * (bench/README.md "comm_bench"): S is the whole array, each iteration starts after a barrier and
 * counts the slowest rank's time, the value is the median over iterations (20 below 4 MiB, 10
 * below 64 MiB, 5 above, after 2 warm-up runs). collectives.py compiles it with
 *
 *   mpicc -O3 mpi_coll.c -o mpi_coll
 *
 * and runs it as `mpirun -np N mpi_coll --ops OPS --impls IMPLS --sizes BYTES,...`, where
 *   OPS   reduce_scatter, all_gather, all_reduce
 *   IMPLS mpi      reduce_scatter: MPI_Reduce_scatter (equal counts), MPI_Reduce_scatter_block,
 *                  MPI_Allreduce keeping one slice; all_gather: MPI_Allgather;
 *                  all_reduce: MPI_Allreduce (in place)
 *         mpi_rs, mpi_rsb, mpi_ar_slice
 *                  only one of the three reduce_scatter ways above (for forced algorithms)
 *         ring     the ring in this file: reduce-scatter in n-1 MPI_Sendrecv steps (the chunk
 *                  received, plus the local one, is the next one sent), all-gather in n-1 steps
 *                  straight into the output, all_reduce = both, in place
 * Rank 0 prints one JSON object per (op, impl, size) on stdout. Before timing, one run per row is
 * checked against the closed form; "wrong" counts the elements that differ. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIZES 32

typedef void (*RunFn)(float* in, float* out, float* tmp, int count, int n, int r);

static double max_over_ranks(double v) {
  double out = 0;
  MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

static int cmp_double(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static double median(double* v, int k) {
  qsort(v, k, sizeof(double), cmp_double);
  return k % 2 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]);
}

/* ---- the ring ---------------------------------------------------------------------------- */

static int mod(int a, int n) { return ((a % n) + n) % n; }

/* Rank r ends with the sum of chunk r of every rank's `in` in `out`; `in` is left unchanged.
 * Step s sends the partial sum of chunk r-s-1 to the right and receives that of chunk r-s-2
 * from the left; tmp holds 2 chunks. */
static void ring_reduce_scatter(float* in, float* out, float* tmp, int count, int n, int r) {
  const int c = count / n, right = mod(r + 1, n), left = mod(r - 1, n);
  float* send = tmp;
  float* recv = tmp + c;
  const float* first = in + (size_t)mod(r - 1, n) * c;
  for (int s = 0; s < n - 1; ++s) {
    MPI_Sendrecv(s == 0 ? first : send, c, MPI_FLOAT, right, 0, recv, c, MPI_FLOAT, left, 0,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    const float* mine = in + (size_t)mod(r - s - 2, n) * c;
    float* dst = s == n - 2 ? out : send;
    for (int i = 0; i < c; ++i) dst[i] = mine[i] + recv[i];
  }
  if (n == 1) memcpy(out, in, (size_t)c * sizeof(float));
}

/* out (count floats) gets every rank's `in` (count/n floats) in rank order. */
static void ring_all_gather(float* in, float* out, float* tmp, int count, int n, int r) {
  (void)tmp;
  const int c = count / n, right = mod(r + 1, n), left = mod(r - 1, n);
  memcpy(out + (size_t)r * c, in, (size_t)c * sizeof(float));
  for (int s = 0; s < n - 1; ++s) {
    MPI_Sendrecv(out + (size_t)mod(r - s, n) * c, c, MPI_FLOAT, right, 0,
                 out + (size_t)mod(r - s - 1, n) * c, c, MPI_FLOAT, left, 0, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
  }
}

/* In place on `in` (count floats): the ring reduce-scatter's steps, adding into `in`, then the
 * ring all-gather of the reduced chunks. tmp holds 1 chunk. */
static void ring_all_reduce(float* in, float* out, float* tmp, int count, int n, int r) {
  (void)out;
  const int c = count / n, right = mod(r + 1, n), left = mod(r - 1, n);
  for (int s = 0; s < n - 1; ++s) {
    MPI_Sendrecv(in + (size_t)mod(r - s - 1, n) * c, c, MPI_FLOAT, right, 0, tmp, c, MPI_FLOAT,
                 left, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    float* acc = in + (size_t)mod(r - s - 2, n) * c;
    for (int i = 0; i < c; ++i) acc[i] += tmp[i];
  }
  /* Rank r now holds the full sum of chunk r; gather the chunks (same indices as above). */
  for (int s = 0; s < n - 1; ++s) {
    MPI_Sendrecv(in + (size_t)mod(r - s, n) * c, c, MPI_FLOAT, right, 0,
                 in + (size_t)mod(r - s - 1, n) * c, c, MPI_FLOAT, left, 0, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
  }
}

/* ---- Open MPI's calls -------------------------------------------------------------------- */

static int* g_counts; /* count/n for every rank, for MPI_Reduce_scatter */

static void mpi_rs(float* in, float* out, float* tmp, int count, int n, int r) {
  (void)tmp, (void)count, (void)n, (void)r;
  MPI_Reduce_scatter(in, out, g_counts, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

static void mpi_rsb(float* in, float* out, float* tmp, int count, int n, int r) {
  (void)tmp, (void)r;
  MPI_Reduce_scatter_block(in, out, count / n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

/* The other way a user gets a reduce-scatter: the whole sum, keeping one slice (tmp: count). */
static void mpi_ar_slice(float* in, float* out, float* tmp, int count, int n, int r) {
  MPI_Allreduce(in, tmp, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  memcpy(out, tmp + (size_t)r * (count / n), (size_t)(count / n) * sizeof(float));
}

static void mpi_ag(float* in, float* out, float* tmp, int count, int n, int r) {
  (void)tmp, (void)r;
  MPI_Allgather(in, count / n, MPI_FLOAT, out, count / n, MPI_FLOAT, MPI_COMM_WORLD);
}

static void mpi_ar(float* in, float* out, float* tmp, int count, int n, int r) {
  (void)out, (void)tmp, (void)n, (void)r;
  MPI_Allreduce(MPI_IN_PLACE, in, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

/* ---- checking and timing ----------------------------------------------------------------- */

/* Fills the input with the pattern the closed forms below assume. */
static void fill(const char* op, float* in, int count, int n, int r) {
  const int len = strcmp(op, "all_gather") == 0 ? count / n : count;
  for (int i = 0; i < len; ++i) {
    in[i] = strcmp(op, "all_gather") == 0 ? (float)(r + i % 5) : (float)(i % 7 + r);
  }
}

/* Elements of this rank's result that differ from the closed form, summed over ranks. */
static long long count_wrong(const char* op, RunFn fn, float* in, float* out, float* tmp,
                             int count, int n, int r) {
  const int c = count / n;
  const float base = (float)(n * (n - 1) / 2);
  long long bad = 0, total = 0;
  fill(op, in, count, n, r);
  fn(in, out, tmp, count, n, r);
  if (strcmp(op, "reduce_scatter") == 0) {
    for (int i = 0; i < c; ++i) bad += out[i] != (float)(n * ((r * c + i) % 7)) + base;
  } else if (strcmp(op, "all_reduce") == 0) {
    for (int i = 0; i < count; ++i) bad += in[i] != (float)(n * (i % 7)) + base;
  } else {
    for (int i = 0; i < count; ++i) bad += out[i] != (float)(i / c + (i % c) % 5);
  }
  MPI_Allreduce(&bad, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  return total;
}

static double time_fn(RunFn fn, float* in, float* out, float* tmp, int count, int n, int r,
                      long long bytes) {
  const int iters = bytes >= (64 << 20) ? 5 : bytes >= (4 << 20) ? 10 : 20;
  double t[32];
  for (int i = 0; i < 2 + iters; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double s = MPI_Wtime();
    fn(in, out, tmp, count, n, r);
    const double e = max_over_ranks(MPI_Wtime() - s);
    if (i >= 2) t[i - 2] = e;
  }
  return median(t, iters);
}

typedef struct {
  const char* op;
  const char* impl;  /* as selected by --impls */
  const char* name;  /* the row's name */
  RunFn fn;
} Entry;

static const Entry kEntries[] = {
    {"reduce_scatter", "mpi_rs", "mpi_reduce_scatter", mpi_rs},
    {"reduce_scatter", "mpi_rsb", "mpi_reduce_scatter_block", mpi_rsb},
    {"reduce_scatter", "mpi_ar_slice", "mpi_allreduce_slice", mpi_ar_slice},
    {"reduce_scatter", "ring", "mpi_ring", ring_reduce_scatter},
    {"all_gather", "mpi_ag", "mpi_allgather", mpi_ag},
    {"all_gather", "ring", "mpi_ring", ring_all_gather},
    {"all_reduce", "mpi_ar", "mpi_allreduce", mpi_ar},
    {"all_reduce", "ring", "mpi_ring", ring_all_reduce},
};

/* `list` is comma-separated; "mpi" selects every Open MPI call. */
static int listed(const char* list, const char* item, int is_mpi_call) {
  char buf[512];
  snprintf(buf, sizeof buf, ",%s,", list);
  char key[64];
  snprintf(key, sizeof key, ",%s,", item);
  return strstr(buf, key) != NULL || (is_mpi_call && strstr(buf, ",mpi,") != NULL);
}

static const char* flag(int argc, char** argv, const char* name, const char* def) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (strcmp(argv[i], name) == 0) return argv[i + 1];
  }
  return def;
}

static void run_entry(const Entry* e, long long bytes, int n, int r) {
  const int count = (int)(bytes / 4 / n * n);
  if (count == 0) return;
  float* in = malloc((size_t)count * sizeof(float));
  float* out = malloc((size_t)count * sizeof(float));
  float* tmp = malloc((size_t)count * sizeof(float));
  if (!in || !out || !tmp) {
    fprintf(stderr, "mpi_coll: out of memory at %lld bytes\n", bytes);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  for (int i = 0; i < count; ++i) in[i] = out[i] = tmp[i] = 1.0f;
  const long long wrong = count_wrong(e->op, e->fn, in, out, tmp, count, n, r);
  for (int i = 0; i < count; ++i) in[i] = 1.0f;
  const double secs = time_fn(e->fn, in, out, tmp, count, n, r, (long long)count * 4);
  if (r == 0) {
    printf("{\"op\": \"%s\", \"impl\": \"%s\", \"bytes\": %lld, \"seconds\": %.9f, "
           "\"wrong\": %lld}\n",
           e->op, e->name, (long long)count * 4, secs, wrong);
    fflush(stdout);
  }
  free(in);
  free(out);
  free(tmp);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int n, r;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  const char* ops = flag(argc, argv, "--ops", "reduce_scatter,all_gather,all_reduce");
  const char* impls = flag(argc, argv, "--impls", "mpi,ring");
  char sizes[512];
  snprintf(sizes, sizeof sizes, "%s", flag(argc, argv, "--sizes", "1048576"));
  long long size_list[MAX_SIZES];
  int nsizes = 0;
  for (char* tok = strtok(sizes, ","); tok && nsizes < MAX_SIZES; tok = strtok(NULL, ",")) {
    size_list[nsizes++] = atoll(tok);
  }
  g_counts = malloc((size_t)n * sizeof(int));
  const int nentries = (int)(sizeof kEntries / sizeof kEntries[0]);
  for (int i = 0; i < nentries; ++i) {
    const Entry* e = &kEntries[i];
    if (!listed(ops, e->op, 0) || !listed(impls, e->impl, strncmp(e->impl, "mpi_", 4) == 0)) {
      continue;
    }
    for (int k = 0; k < nsizes; ++k) {
      for (int j = 0; j < n; ++j) g_counts[j] = (int)(size_list[k] / 4 / n);
      run_entry(e, size_list[k], n, r);
    }
  }
  free(g_counts);
  MPI_Finalize();
  return 0;
}
