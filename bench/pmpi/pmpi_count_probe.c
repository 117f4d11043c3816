// pmpi_count_probe: known point-to-point and collective calls, run under
// LD_PRELOAD=libzrt_pmpi_count.so by tests/comm/pmpi_count_test.sh. It reads the library's
// counters (looked up with dlsym, so it fails when the preload is missing) and checks them exactly
// against the numbers Note [What the PMPI counter counts] and Note [Same host or other host]
// prescribe:
//   pmpi_count_probe          2 ranks: every counted function, the totals and their host split;
//   pmpi_count_probe hosts    any number of ranks on any hosts: rings of sends on MPI_COMM_WORLD
//                             and on communicators made by Comm_split, Comm_dup and
//                             Comm_split_type, and collectives on the world and on one host; the
//                             same-host / other-host bytes each rank must count.
// Which ranks share a host comes from MPI_Get_processor_name (the host name), not from MPI's
// shared-memory split the library uses. Exit 0 when all match, 1 otherwise (the mismatches
// printed).
#define _GNU_SOURCE
#include <mpi.h>

#include "zrt_pmpi_count.h"
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_failures = 0;

// g_names[r]: the host name of world rank r.
static char (*g_names)[MPI_MAX_PROCESSOR_NAME];

static void gather_host_names(int n) {
  char mine[MPI_MAX_PROCESSOR_NAME] = {0};
  int len = 0;
  MPI_Get_processor_name(mine, &len);
  g_names = calloc((size_t)n, sizeof *g_names);
  MPI_Allgather(mine, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, g_names, MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
                MPI_COMM_WORLD);
}

static int same_host(int world_a, int world_b) {
  return strcmp(g_names[world_a], g_names[world_b]) == 0;
}

static void expect(zrt_pmpi_function_fn query, int rank, const char* name, long long calls,
                   long long bytes) {
  long long got_calls = -1;
  long long got_bytes = -1;
  if (!query(name, &got_calls, &got_bytes) || got_calls != calls || got_bytes != bytes) {
    fprintf(stderr, "rank %d: %s: expected %lld calls / %lld bytes, counted %lld / %lld\n", rank,
            name, calls, bytes, got_calls, got_bytes);
    ++g_failures;
  }
}

static void expect_total(const long long* totals, int index, long long value, int rank) {
  if (totals[index] != value) {
    fprintf(stderr, "rank %d: total %d: expected %lld, counted %lld\n", rank, index, value,
            totals[index]);
    ++g_failures;
  }
}

// The four host-split totals of `totals` minus `before` against the expected ones.
static void expect_split(const long long* totals, const long long* before, const long long* want,
                         int rank) {
  static const char* const kNames[4] = {"p2p same host", "p2p other host", "coll one host",
                                        "coll cross host"};
  for (int i = 0; i < 4; ++i) {
    const int t = ZRT_PMPI_P2P_SEND_BYTES_SAME_HOST + i;
    if (totals[t] - before[t] != want[i]) {
      fprintf(stderr, "rank %d: %s: expected %lld B, counted %lld B\n", rank, kNames[i], want[i],
              totals[t] - before[t]);
      ++g_failures;
    }
  }
}

// Point-to-point: 4000 B Isend, 2000 B Sendrecv; rank 0 also sends 12 B and a 24 B derived type
// to rank 1; every rank sends once to MPI_PROC_NULL (0 B).
static void point_to_point(int rank, int n) {
  const int right = (rank + 1) % n;
  const int left = (rank - 1 + n) % n;
  int ints_out[1000] = {0};
  int ints_in[1000];
  MPI_Request requests[2];
  MPI_Irecv(ints_in, 1000, MPI_INT, left, 1, MPI_COMM_WORLD, &requests[0]);
  MPI_Isend(ints_out, 1000, MPI_INT, right, 1, MPI_COMM_WORLD, &requests[1]);
  MPI_Waitall(2, requests, MPI_STATUSES_IGNORE);
  double d_out[250] = {0};
  double d_in[250];
  MPI_Sendrecv(d_out, 250, MPI_DOUBLE, right, 2, d_in, 250, MPI_DOUBLE, left, 2, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
  MPI_Datatype triple;
  MPI_Type_contiguous(3, MPI_INT, &triple);
  MPI_Type_commit(&triple);
  float f[3] = {1, 2, 3};
  int t[6] = {0};
  if (rank == 0) {
    MPI_Send(f, 3, MPI_FLOAT, 1, 3, MPI_COMM_WORLD);
    MPI_Send(t, 2, triple, 1, 4, MPI_COMM_WORLD);
  } else if (rank == 1) {
    MPI_Recv(f, 3, MPI_FLOAT, 0, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Recv(t, 2, triple, 0, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  MPI_Type_free(&triple);
  MPI_Send(f, 3, MPI_FLOAT, MPI_PROC_NULL, 5, MPI_COMM_WORLD);
}

// Collectives on n = 2 ranks.
static void collectives(void) {
  float a[100] = {0};
  float b[100];
  MPI_Allreduce(a, b, 100, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);  // 400 B
  double c[50] = {0};
  MPI_Allreduce(MPI_IN_PLACE, c, 50, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);  // 400 B
  MPI_Reduce_scatter_block(a, b, 10, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);   // 10 x 2 x 4 = 80 B
  int g[14] = {0};
  MPI_Allgather(g, 7, MPI_INT, g + 7, 7, MPI_INT, MPI_COMM_WORLD);  // 28 B
  int v[8] = {0};
  const int counts[2] = {3, 5};
  const int displs[2] = {0, 3};
  MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, v, counts, displs, MPI_INT,
                 MPI_COMM_WORLD);  // rank 0: 12 B, rank 1: 20 B
  char bytes[64] = {0};
  MPI_Bcast(bytes, 64, MPI_BYTE, 0, MPI_COMM_WORLD);  // root 64 B, others 0
  MPI_Barrier(MPI_COMM_WORLD);
}

// Prints this rank's verdict; 0 when no rank found a mismatch. Ends MPI.
static int finish(int rank) {
  printf("rank %d: %s\n", rank, g_failures == 0 ? "all counts exact" : "MISMATCH");
  int failed = g_failures;
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any == 0 ? 0 : 1;
}

// One ring step on `comm`: `bytes` to the next rank of `comm`, from the previous one.
static void ring(MPI_Comm comm, int bytes) {
  int r = 0;
  int n = 0;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &n);
  char* out = calloc((size_t)bytes, 1);
  char* in = malloc((size_t)bytes);
  MPI_Request requests[2];
  MPI_Irecv(in, bytes, MPI_BYTE, (r - 1 + n) % n, 9, comm, &requests[0]);
  MPI_Isend(out, bytes, MPI_BYTE, (r + 1) % n, 9, comm, &requests[1]);
  MPI_Waitall(2, requests, MPI_STATUSES_IGNORE);
  free(out);
  free(in);
}

// pmpi_count_probe hosts: rings and collectives whose same-host / other-host bytes follow from the
// host names.
static int hosts(int rank, int n, zrt_pmpi_function_fn query, zrt_pmpi_totals_fn totals_of,
                 const long long* before) {
  long long want[4] = {0, 0, 0, 0};  // p2p same, p2p other, coll one host, coll cross host
  int world_hosts = 1;
  for (int r = 0; r < n; ++r) world_hosts = world_hosts && same_host(r, rank);
  // 4000 B around MPI_COMM_WORLD.
  ring(MPI_COMM_WORLD, 4000);
  want[same_host(rank, (rank + 1) % n) ? 0 : 1] += 4000;
  // 3000 B around the world in reverse (Comm_split with key n - 1 - rank: the comm rank of world
  // rank w is n - 1 - w), so its ranks are not the world's.
  MPI_Comm reversed;
  MPI_Comm_split(MPI_COMM_WORLD, 0, n - 1 - rank, &reversed);
  ring(reversed, 3000);
  want[same_host(rank, n - 1 - (n - rank) % n) ? 0 : 1] += 3000;
  MPI_Comm_free(&reversed);
  // 2000 B around a duplicate of the world, made after `reversed` was freed (a reused handle must
  // not keep `reversed`'s ranks).
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  ring(dup, 2000);
  want[same_host(rank, (rank + 1) % n) ? 0 : 1] += 2000;
  // 700 B around this rank's host (Comm_split_type): always the same host.
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int node_n = 0;
  MPI_Comm_size(node, &node_n);
  ring(node, 700);
  want[0] += 700;
  // Collectives: on the world (one host only if every rank is on this one), and on the node.
  float a[100] = {0};
  float b[100];
  MPI_Allreduce(a, b, 100, MPI_FLOAT, MPI_SUM, dup);  // 400 B
  want[world_hosts ? 2 : 3] += 400;
  MPI_Allreduce(a, b, 20, MPI_FLOAT, MPI_SUM, node);  // 80 B
  want[2] += 80;
  int* send = calloc((size_t)(2 * n), sizeof(int));
  int* recv = malloc(sizeof(int) * 2 * n);
  MPI_Request request;
  MPI_Ialltoall(send, 2, MPI_INT, recv, 2, MPI_INT, MPI_COMM_WORLD, &request);  // 8 n B
  MPI_Wait(&request, MPI_STATUS_IGNORE);
  want[world_hosts ? 2 : 3] += 8LL * n;
  MPI_Alltoall(send, 1, MPI_INT, recv, 1, MPI_INT, node);  // 4 node_n B
  want[2] += 4LL * node_n;
  free(send);
  free(recv);
  MPI_Comm_free(&node);
  MPI_Comm_free(&dup);
  expect(query, rank, "MPI_Ialltoall", 1, 8LL * n);
  long long totals[ZRT_PMPI_NUM_TOTALS];
  totals_of(totals);
  expect_split(totals, before, want, rank);
  long long got[4];
  for (int i = 0; i < 4; ++i) {
    const int t = ZRT_PMPI_P2P_SEND_BYTES_SAME_HOST + i;
    got[i] = totals[t] - before[t];
  }
  printf(
      "rank %d on %s: p2p same host %lld B (expected %lld), other host %lld B (expected %lld); "
      "coll one host %lld B (expected %lld), cross host %lld B (expected %lld)\n",
      rank, g_names[rank], got[0], want[0], got[1], want[1], got[2], want[2], got[3], want[3]);
  return finish(rank);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int n = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  zrt_pmpi_function_fn query = (zrt_pmpi_function_fn)dlsym(RTLD_DEFAULT, "zrt_pmpi_function");
  zrt_pmpi_totals_fn totals_of = (zrt_pmpi_totals_fn)dlsym(RTLD_DEFAULT, "zrt_pmpi_totals");
  const int hosts_mode = argc > 1 && strcmp(argv[1], "hosts") == 0;
  if (query == NULL || totals_of == NULL || (!hosts_mode && n != 2)) {
    fprintf(
        stderr,
        "pmpi_count_probe: needs LD_PRELOAD=libzrt_pmpi_count.so (and 2 ranks without hosts)\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  gather_host_names(n);  // counted: one Allgather, not in `before`'s differences
  long long before[ZRT_PMPI_NUM_TOTALS];
  totals_of(before);
  if (hosts_mode) return hosts(rank, n, query, totals_of, before);
  point_to_point(rank, n);
  collectives();
  expect(query, rank, "MPI_Isend", 1, 4000);
  expect(query, rank, "MPI_Irecv", 1, 4000);
  expect(query, rank, "MPI_Sendrecv", 1, 2000);
  expect(query, rank, "MPI_Send", rank == 0 ? 3 : 1, rank == 0 ? 36 : 0);
  expect(query, rank, "MPI_Recv", rank == 1 ? 2 : 0, rank == 1 ? 36 : 0);
  expect(query, rank, "MPI_Allreduce", 2, 800);
  expect(query, rank, "MPI_Reduce_scatter_block", 1, 80);
  expect(query, rank, "MPI_Allgather", 2, MPI_MAX_PROCESSOR_NAME + 28);  // and the host names
  expect(query, rank, "MPI_Allgatherv", 1, rank == 0 ? 12 : 20);
  expect(query, rank, "MPI_Bcast", 1, rank == 0 ? 64 : 0);
  expect(query, rank, "MPI_Barrier", 1, 0);
  long long totals[ZRT_PMPI_NUM_TOTALS];
  totals_of(totals);
  expect_total(totals, ZRT_PMPI_P2P_SEND_CALLS, rank == 0 ? 5 : 3, rank);
  expect_total(totals, ZRT_PMPI_P2P_SEND_BYTES, 6000 + (rank == 0 ? 36 : 0), rank);
  expect_total(totals, ZRT_PMPI_COLL_CALLS, 8, rank);  // and gather_host_names's
  const long long names = MPI_MAX_PROCESSOR_NAME;
  expect_total(totals, ZRT_PMPI_COLL_BYTES, names + 800 + 80 + 28 + (rank == 0 ? 12 + 64 : 20),
               rank);
  // Every send goes to the other rank, every collective is on MPI_COMM_WORLD.
  const int together = same_host(0, 1);
  const long long p2p = totals[ZRT_PMPI_P2P_SEND_BYTES] - before[ZRT_PMPI_P2P_SEND_BYTES];
  const long long coll = totals[ZRT_PMPI_COLL_BYTES] - before[ZRT_PMPI_COLL_BYTES];
  const long long want[4] = {together ? p2p : 0, together ? 0 : p2p, together ? coll : 0,
                             together ? 0 : coll};
  expect_split(totals, before, want, rank);
  return finish(rank);
}
