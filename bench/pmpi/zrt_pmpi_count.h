// The query interface of libzrt_pmpi_count.so, the PMPI interposition library that counts what
// each rank hands to MPI (bench/pmpi/zrt_pmpi_count.c; bench/README.md, "Measured bytes").
//
// A program never links the library: it is loaded with LD_PRELOAD, and a program that wants its
// numbers looks the functions up at run time (dlsym(RTLD_DEFAULT, "zrt_pmpi_totals")), so that
// the same binary runs with and without it.
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

// Indices into the array filled by zrt_pmpi_totals.
enum {
  ZRT_PMPI_P2P_SEND_CALLS = 0,  // point-to-point send calls (Send, Isend, Sendrecv, ...)
  ZRT_PMPI_P2P_SEND_BYTES,      // count x MPI_Type_size of those sends (not to MPI_PROC_NULL)
  ZRT_PMPI_COLL_CALLS,          // collective calls (Allreduce, Bcast, Barrier, ...)
  ZRT_PMPI_COLL_BYTES,          // bytes handed to them, per call as written in zrt_pmpi_count.c
  // The same bytes split by host (Note [Same host or other host] in zrt_pmpi_count.c); each pair
  // sums to the total above.
  ZRT_PMPI_P2P_SEND_BYTES_SAME_HOST,   // sends to a process on this rank's host
  ZRT_PMPI_P2P_SEND_BYTES_OTHER_HOST,  // sends to a process on another host
  ZRT_PMPI_COLL_BYTES_ONE_HOST,        // collectives on a communicator within one host
  ZRT_PMPI_COLL_BYTES_CROSS_HOST,      // collectives on a communicator spanning hosts
  ZRT_PMPI_NUM_TOTALS
};

// Fills `out[ZRT_PMPI_NUM_TOTALS]` with this rank's totals since MPI_Init. Thread-safe. The
// caller's array must be as long as the library's: build both from the same tree.
typedef void (*zrt_pmpi_totals_fn)(long long* out);
void zrt_pmpi_totals(long long* out);

// Calls and bytes of one MPI function by name ("MPI_Isend"); returns 0 if it is not counted.
typedef int (*zrt_pmpi_function_fn)(const char* name, long long* calls, long long* bytes);
int zrt_pmpi_function(const char* name, long long* calls, long long* bytes);

// Appends this rank's JSON line, with "label": `label`, to the file named by ZRT_PMPI_OUT (if
// set). MPI_Finalize writes one with the label "finalize".
typedef void (*zrt_pmpi_write_fn)(const char* label);
void zrt_pmpi_write(const char* label);

#ifdef __cplusplus
}
#endif
