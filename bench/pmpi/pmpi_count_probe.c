// pmpi_count_probe: known point-to-point and collective calls on 2 ranks, run under
// LD_PRELOAD=libzrt_pmpi_count.so by tests/comm/pmpi_count_test.sh. It reads the library's
// counters (looked up with dlsym, so it fails when the preload is missing) and checks every
// counted function exactly against the numbers Note [What the PMPI counter counts] prescribes.
// Exit 0 when all match, 1 otherwise (the mismatches printed).
#define _GNU_SOURCE
#include <mpi.h>

#include "zrt_pmpi_count.h"
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static int g_failures = 0;

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

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int n = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  zrt_pmpi_function_fn query = (zrt_pmpi_function_fn)dlsym(RTLD_DEFAULT, "zrt_pmpi_function");
  zrt_pmpi_totals_fn totals_of = (zrt_pmpi_totals_fn)dlsym(RTLD_DEFAULT, "zrt_pmpi_totals");
  if (query == NULL || totals_of == NULL || n != 2) {
    fprintf(stderr, "pmpi_count_probe: needs LD_PRELOAD=libzrt_pmpi_count.so and 2 ranks\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  point_to_point(rank, n);
  collectives();
  expect(query, rank, "MPI_Isend", 1, 4000);
  expect(query, rank, "MPI_Irecv", 1, 4000);
  expect(query, rank, "MPI_Sendrecv", 1, 2000);
  expect(query, rank, "MPI_Send", rank == 0 ? 3 : 1, rank == 0 ? 36 : 0);
  expect(query, rank, "MPI_Recv", rank == 1 ? 2 : 0, rank == 1 ? 36 : 0);
  expect(query, rank, "MPI_Allreduce", 2, 800);
  expect(query, rank, "MPI_Reduce_scatter_block", 1, 80);
  expect(query, rank, "MPI_Allgather", 1, 28);
  expect(query, rank, "MPI_Allgatherv", 1, rank == 0 ? 12 : 20);
  expect(query, rank, "MPI_Bcast", 1, rank == 0 ? 64 : 0);
  expect(query, rank, "MPI_Barrier", 1, 0);
  long long totals[ZRT_PMPI_NUM_TOTALS];
  totals_of(totals);
  expect_total(totals, ZRT_PMPI_P2P_SEND_CALLS, rank == 0 ? 5 : 3, rank);
  expect_total(totals, ZRT_PMPI_P2P_SEND_BYTES, 6000 + (rank == 0 ? 36 : 0), rank);
  expect_total(totals, ZRT_PMPI_COLL_CALLS, 7, rank);
  expect_total(totals, ZRT_PMPI_COLL_BYTES, 800 + 80 + 28 + (rank == 0 ? 12 + 64 : 20), rank);
  printf("rank %d: %s\n", rank, g_failures == 0 ? "all counts exact" : "MISMATCH");
  int failed = g_failures;
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any == 0 ? 0 : 1;
}
