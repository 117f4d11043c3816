// libzrt_pmpi_count.so: a PMPI interposition library that counts, per rank, the calls and bytes a
// program hands to MPI, measured where they enter the MPI library rather than computed from a
// formula. Loaded with LD_PRELOAD (mpirun -x LD_PRELOAD=.../libzrt_pmpi_count.so); every MPI_X
// defined here counts, then forwards to PMPI_X. At MPI_Finalize each rank appends one JSON line
// to the file named by ZRT_PMPI_OUT (bench/README.md, "Measured bytes", shows the format).
//
// Note [What the PMPI counter counts]
// Bytes are count x MPI_Type_size(datatype) of the arguments of each call, summed per function:
//   - point-to-point sends (Send, Isend, Ssend, Issend, Rsend, Bsend, Sendrecv,
//     Sendrecv_replace): the message this rank sends; a send to MPI_PROC_NULL counts the call and
//     0 bytes. ZeroRT's ring collectives are built from Isend/Irecv, so for them this is the
//     payload that went to the transport.
//   - receives (Recv, Irecv): the posted buffer's capacity (the real message may be shorter);
//     never added to the send totals. Sendrecv counts only its send half.
//   - collectives: the data this rank hands in, independent of the algorithm MPI runs inside:
//     Allreduce, Iallreduce, Reduce: count; Reduce_scatter_block, Ireduce_scatter_block:
//     recvcount x size(comm); Reduce_scatter: the sum of recvcounts; Allgather, Iallgather,
//     Allgatherv, Gather: sendcount (with MPI_IN_PLACE this rank's receive block); Alltoall,
//     Ialltoall: sendcount x size(comm); Alltoallv: the sum of sendcounts; Bcast, Ibcast,
//     Scatter: the root's data on the root, 0 elsewhere; Barrier: 0.
// Both totals are also split by host: Note [Same host or other host].
// PMPI cannot see the messages a collective sends inside the library. Open MPI's own transport
// counters can: run with `--mca pml_monitoring_enable 2 --mca pml_monitoring_enable_output 3
// --mca pml_monitoring_filename DIR/prof` and each rank writes DIR/prof.<rank>.prof at
// MPI_Finalize, with the bytes its point-to-point layer sent to each peer for user messages ("E"
// lines, which must equal p2p_send_bytes here) and for collectives' internal messages ("I").
// bench/pmpi/pmpi_report.py reads both. (Open MPI 4.1.4 does not publish the pml monitoring
// counters through MPI_T when the component wraps another pml, so they are not read here.)
//
// Note [Same host or other host]
// Hosts are MPI's own: at MPI_Init each rank splits MPI_COMM_WORLD with MPI_COMM_TYPE_SHARED
// (the processes that can share memory with it, i.e. its node) and the ranks allgather the world
// rank of their node's first rank, the host id: g_host_of[world rank]. These PMPI calls are not
// counted.
//   - a point-to-point send goes to the SAME_HOST or OTHER_HOST total by the host of its
//     destination: the destination's rank on the communicator is translated to a world rank
//     (MPI_Group_translate_ranks; the remote group of an intercommunicator) once per
//     communicator. A destination outside MPI_COMM_WORLD (a spawned or connected job) counts as
//     another host. This split is exact: it is where each message goes.
//   - a collective's bytes go to ONE_HOST when every member of its communicator is on this
//     rank's host, and to CROSS_HOST otherwise. MPI does not say which of a collective's internal
//     messages leave the host, so CROSS_HOST is "handed to a collective that spans hosts", an
//     upper bound on what this rank's share could put on the network, not a measurement of it.
//     ZeroRT's ring algorithms (ZRT_MPI_ALGO=ring) are point-to-point sends, so for them the
//     point-to-point split is exact.
// The per-communicator translation is cached as an MPI attribute (g_keyval): MPI frees it
// whenever the communicator is freed, whatever frees it, so a new communicator that reuses a
// freed handle never sees a stale entry, and every communicator (Comm_dup, Comm_split,
// Comm_split_type, Comm_create, ...) gets its own entry at its first counted call.
#define _GNU_SOURCE
#include "zrt_pmpi_count.h"

#include <mpi.h>

#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// X(name, kind): every function this library defines.
// clang-format off
#define ZRT_PMPI_FUNCTIONS(X)                                                                   \
  X(Send, KIND_SEND) X(Isend, KIND_SEND) X(Ssend, KIND_SEND) X(Issend, KIND_SEND)               \
  X(Rsend, KIND_SEND) X(Bsend, KIND_SEND) X(Sendrecv, KIND_SEND) X(Sendrecv_replace, KIND_SEND) \
  X(Recv, KIND_RECV) X(Irecv, KIND_RECV)                                                        \
  X(Allreduce, KIND_COLL) X(Iallreduce, KIND_COLL) X(Reduce, KIND_COLL)                         \
  X(Reduce_scatter, KIND_COLL) X(Reduce_scatter_block, KIND_COLL)                               \
  X(Ireduce_scatter_block, KIND_COLL) X(Allgather, KIND_COLL) X(Iallgather, KIND_COLL)          \
  X(Allgatherv, KIND_COLL) X(Gather, KIND_COLL) X(Scatter, KIND_COLL) X(Alltoall, KIND_COLL)    \
  X(Ialltoall, KIND_COLL) X(Alltoallv, KIND_COLL) X(Bcast, KIND_COLL) X(Ibcast, KIND_COLL)      \
  X(Barrier, KIND_COLL)
// clang-format on

enum { KIND_SEND, KIND_RECV, KIND_COLL };

#define ZRT_PMPI_ENUM(name, kind) FN_##name,
enum { ZRT_PMPI_FUNCTIONS(ZRT_PMPI_ENUM) FN_COUNT };
#define ZRT_PMPI_NAME(name, kind) "MPI_" #name,
static const char* const kNames[FN_COUNT] = {ZRT_PMPI_FUNCTIONS(ZRT_PMPI_NAME)};
#define ZRT_PMPI_KIND(name, kind) kind,
static const int kKinds[FN_COUNT] = {ZRT_PMPI_FUNCTIONS(ZRT_PMPI_KIND)};

static long long g_calls[FN_COUNT];
static long long g_bytes[FN_COUNT];
// Only the host-split indices (ZRT_PMPI_P2P_SEND_BYTES_SAME_HOST, ...) are used.
static long long g_by_host[ZRT_PMPI_NUM_TOTALS];
static int g_rank = -1;
static int g_world = 0;

// Note [Same host or other host]. Set once at MPI_Init, read-only afterwards.
static int* g_host_of = NULL;  // g_host_of[world rank]: its host id; NULL before MPI_Init
static int g_hosts = 0;        // distinct hosts in MPI_COMM_WORLD
static MPI_Group g_world_group = MPI_GROUP_NULL;
static int g_keyval = MPI_KEYVAL_INVALID;  // a communicator's CommHosts
static pthread_mutex_t g_keyval_lock = PTHREAD_MUTEX_INITIALIZER;

// ---- counting ---------------------------------------------------------------------------------

static void add(int fn, long long bytes) {
  __atomic_fetch_add(&g_calls[fn], 1, __ATOMIC_RELAXED);
  __atomic_fetch_add(&g_bytes[fn], bytes, __ATOMIC_RELAXED);
}

static long long type_bytes(long long count, MPI_Datatype type) {
  if (count <= 0 || type == MPI_DATATYPE_NULL) return 0;
  int size = 0;
  PMPI_Type_size(type, &size);
  return count * size;
}

static int comm_size(MPI_Comm comm) {
  int n = 0;
  PMPI_Comm_size(comm, &n);
  return n;
}

static int comm_rank(MPI_Comm comm) {
  int r = 0;
  PMPI_Comm_rank(comm, &r);
  return r;
}

static long long sum_counts(const int counts[], int n) {
  long long total = 0;
  for (int i = 0; i < n; ++i) total += counts[i];
  return total;
}

// ---- hosts (Note [Same host or other host]) ---------------------------------------------------

// The hosts of one communicator's peers.
typedef struct {
  int one_host;   // every member (both groups of an intercommunicator) is on this rank's host
  int size;       // of the group a destination rank names (the remote one of an intercommunicator)
  int host_of[];  // host id of each rank of that group; -1: not a process of MPI_COMM_WORLD
} CommHosts;

// Fills `hosts[0..size(group))` with the host of each rank of `group`; returns whether all are on
// `host`.
static int group_hosts(MPI_Group group, int* hosts, int host) {
  int n = 0;
  PMPI_Group_size(group, &n);
  int* ranks = malloc(sizeof(int) * (n > 0 ? n : 1));
  for (int i = 0; i < n; ++i) ranks[i] = i;
  PMPI_Group_translate_ranks(group, n, ranks, g_world_group, hosts);
  free(ranks);
  int all = 1;
  for (int i = 0; i < n; ++i) {
    hosts[i] = hosts[i] == MPI_UNDEFINED ? -1 : g_host_of[hosts[i]];
    all = all && hosts[i] == host;
  }
  return all;
}

static CommHosts* new_comm_hosts(MPI_Comm comm) {
  int inter = 0;
  PMPI_Comm_test_inter(comm, &inter);
  MPI_Group group;
  if (inter) {
    PMPI_Comm_remote_group(comm, &group);
  } else {
    PMPI_Comm_group(comm, &group);
  }
  int n = 0;
  PMPI_Group_size(group, &n);
  CommHosts* c = malloc(sizeof(CommHosts) + sizeof(int) * n);
  const int mine = g_host_of[g_rank];
  c->size = n;
  c->one_host = group_hosts(group, c->host_of, mine);
  PMPI_Group_free(&group);
  if (inter) {  // the local group too
    PMPI_Comm_group(comm, &group);
    PMPI_Group_size(group, &n);
    int* local = malloc(sizeof(int) * n);
    c->one_host = group_hosts(group, local, mine) && c->one_host;
    free(local);
    PMPI_Group_free(&group);
  }
  return c;
}

static int delete_comm_hosts(MPI_Comm comm, int keyval, void* value, void* extra) {
  (void)comm, (void)keyval, (void)extra;
  free(value);
  return MPI_SUCCESS;
}

// `comm`'s CommHosts, made at its first use; NULL before MPI_Init.
static const CommHosts* comm_hosts(MPI_Comm comm) {
  if (g_host_of == NULL || comm == MPI_COMM_NULL) return NULL;
  void* value = NULL;
  int found = 0;
  PMPI_Comm_get_attr(comm, g_keyval, &value, &found);
  if (found) return value;
  // Made under a lock: a second thread setting the attribute would free the first one's entry.
  pthread_mutex_lock(&g_keyval_lock);
  PMPI_Comm_get_attr(comm, g_keyval, &value, &found);
  if (!found) {
    value = new_comm_hosts(comm);
    PMPI_Comm_set_attr(comm, g_keyval, value);
  }
  pthread_mutex_unlock(&g_keyval_lock);
  return value;
}

static void add_by_host(int total, long long bytes) {
  __atomic_fetch_add(&g_by_host[total], bytes, __ATOMIC_RELAXED);
}

// A send of `count` x `type` to rank `dest` of `comm`.
static void add_send(int fn, int count, MPI_Datatype type, int dest, MPI_Comm comm) {
  const long long bytes = dest == MPI_PROC_NULL ? 0 : type_bytes(count, type);
  add(fn, bytes);
  if (bytes == 0) return;
  const CommHosts* c = comm_hosts(comm);
  if (c == NULL || dest < 0 || dest >= c->size) return;
  const int same = c->host_of[dest] == g_host_of[g_rank];
  add_by_host(same ? ZRT_PMPI_P2P_SEND_BYTES_SAME_HOST : ZRT_PMPI_P2P_SEND_BYTES_OTHER_HOST, bytes);
}

// A receive: the posted capacity, in no total.
static void add_recv(int fn, int count, MPI_Datatype type, int source) {
  add(fn, source == MPI_PROC_NULL ? 0 : type_bytes(count, type));
}

// A collective on `comm` handed `bytes`.
static void add_coll(int fn, long long bytes, MPI_Comm comm) {
  add(fn, bytes);
  if (bytes == 0) return;
  const CommHosts* c = comm_hosts(comm);
  if (c == NULL) return;
  add_by_host(c->one_host ? ZRT_PMPI_COLL_BYTES_ONE_HOST : ZRT_PMPI_COLL_BYTES_CROSS_HOST, bytes);
}

// Note [Same host or other host]: g_host_of from MPI's shared-memory split of MPI_COMM_WORLD.
static void find_hosts(void) {
  MPI_Comm node;
  PMPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int host = g_rank;  // key 0 keeps world order: the node's rank 0 is its lowest world rank
  PMPI_Bcast(&host, 1, MPI_INT, 0, node);
  PMPI_Comm_free(&node);
  int* host_of = malloc(sizeof(int) * g_world);
  PMPI_Allgather(&host, 1, MPI_INT, host_of, 1, MPI_INT, MPI_COMM_WORLD);
  g_hosts = 0;
  for (int r = 0; r < g_world; ++r) g_hosts += host_of[r] == r;
  PMPI_Comm_group(MPI_COMM_WORLD, &g_world_group);
  PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_comm_hosts, &g_keyval, NULL);
  g_host_of = host_of;
}

// ---- the query interface (zrt_pmpi_count.h) --------------------------------------------------

void zrt_pmpi_totals(long long* out) {
  memset(out, 0, sizeof(long long) * ZRT_PMPI_NUM_TOTALS);
  for (int fn = 0; fn < FN_COUNT; ++fn) {
    const long long calls = __atomic_load_n(&g_calls[fn], __ATOMIC_RELAXED);
    const long long bytes = __atomic_load_n(&g_bytes[fn], __ATOMIC_RELAXED);
    if (kKinds[fn] == KIND_SEND) {
      out[ZRT_PMPI_P2P_SEND_CALLS] += calls;
      out[ZRT_PMPI_P2P_SEND_BYTES] += bytes;
    } else if (kKinds[fn] == KIND_COLL) {
      out[ZRT_PMPI_COLL_CALLS] += calls;
      out[ZRT_PMPI_COLL_BYTES] += bytes;
    }
  }
  for (int t = ZRT_PMPI_P2P_SEND_BYTES_SAME_HOST; t <= ZRT_PMPI_COLL_BYTES_CROSS_HOST; ++t) {
    out[t] = __atomic_load_n(&g_by_host[t], __ATOMIC_RELAXED);
  }
}

int zrt_pmpi_function(const char* name, long long* calls, long long* bytes) {
  for (int fn = 0; fn < FN_COUNT; ++fn) {
    if (strcmp(kNames[fn], name) != 0) continue;
    *calls = __atomic_load_n(&g_calls[fn], __ATOMIC_RELAXED);
    *bytes = __atomic_load_n(&g_bytes[fn], __ATOMIC_RELAXED);
    return 1;
  }
  return 0;
}

// Appends printf-style text to `buf` (capacity `cap`, used `*len`), truncating at the end.
static void append(char* buf, size_t cap, size_t* len, const char* format, ...) {
  if (*len >= cap) return;
  va_list args;
  va_start(args, format);
  const int n = vsnprintf(buf + *len, cap - *len, format, args);
  va_end(args);
  if (n > 0) *len += (size_t)n < cap - *len ? (size_t)n : cap - *len - 1;
}

void zrt_pmpi_write(const char* label) {
  const char* path = getenv("ZRT_PMPI_OUT");
  if (path == NULL || path[0] == '\0') return;
  long long t[ZRT_PMPI_NUM_TOTALS];
  zrt_pmpi_totals(t);
  char line[8192];
  size_t len = 0;
  append(line, sizeof line, &len,
         "{\"label\": \"%s\", \"rank\": %d, \"world\": %d, \"pid\": %d, \"p2p_send_calls\": %lld, "
         "\"p2p_send_bytes\": %lld, \"coll_calls\": %lld, \"coll_bytes\": %lld, \"hosts\": %d, "
         "\"p2p_send_bytes_same_host\": %lld, \"p2p_send_bytes_other_host\": %lld, "
         "\"coll_bytes_one_host\": %lld, \"coll_bytes_cross_host\": %lld, \"functions\": {",
         label, g_rank, g_world, (int)getpid(), t[ZRT_PMPI_P2P_SEND_CALLS],
         t[ZRT_PMPI_P2P_SEND_BYTES], t[ZRT_PMPI_COLL_CALLS], t[ZRT_PMPI_COLL_BYTES], g_hosts,
         t[ZRT_PMPI_P2P_SEND_BYTES_SAME_HOST], t[ZRT_PMPI_P2P_SEND_BYTES_OTHER_HOST],
         t[ZRT_PMPI_COLL_BYTES_ONE_HOST], t[ZRT_PMPI_COLL_BYTES_CROSS_HOST]);
  const char* sep = "";
  for (int fn = 0; fn < FN_COUNT; ++fn) {
    long long calls = 0;
    long long bytes = 0;
    zrt_pmpi_function(kNames[fn], &calls, &bytes);
    if (calls == 0) continue;
    append(line, sizeof line, &len, "%s\"%s\": {\"calls\": %lld, \"bytes\": %lld}", sep, kNames[fn],
           calls, bytes);
    sep = ", ";
  }
  append(line, sizeof line, &len, "}}\n");
  // One write(2) with O_APPEND: lines of concurrent ranks do not interleave.
  const int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0 || write(fd, line, len) != (ssize_t)len) {
    fprintf(stderr, "zrt_pmpi_count: cannot append to ZRT_PMPI_OUT=%s\n", path);
  }
  if (fd >= 0) close(fd);
}

// ---- initialisation and finalisation ---------------------------------------------------------

static void after_init(void) {
  PMPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  PMPI_Comm_size(MPI_COMM_WORLD, &g_world);
  find_hosts();
}

int MPI_Init(int* argc, char*** argv) {
  const int rc = PMPI_Init(argc, argv);
  if (rc == MPI_SUCCESS) after_init();
  return rc;
}

int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  const int rc = PMPI_Init_thread(argc, argv, required, provided);
  if (rc == MPI_SUCCESS) after_init();
  return rc;
}

int MPI_Finalize(void) {
  zrt_pmpi_write("finalize");
  if (g_keyval != MPI_KEYVAL_INVALID) PMPI_Comm_free_keyval(&g_keyval);
  if (g_world_group != MPI_GROUP_NULL) PMPI_Group_free(&g_world_group);
  return PMPI_Finalize();
}

// ---- point-to-point ---------------------------------------------------------------------------

int MPI_Send(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  add_send(FN_Send, count, type, dest, comm);
  return PMPI_Send(buf, count, type, dest, tag, comm);
}

int MPI_Ssend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  add_send(FN_Ssend, count, type, dest, comm);
  return PMPI_Ssend(buf, count, type, dest, tag, comm);
}

int MPI_Rsend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  add_send(FN_Rsend, count, type, dest, comm);
  return PMPI_Rsend(buf, count, type, dest, tag, comm);
}

int MPI_Bsend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  add_send(FN_Bsend, count, type, dest, comm);
  return PMPI_Bsend(buf, count, type, dest, tag, comm);
}

int MPI_Isend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
              MPI_Request* request) {
  add_send(FN_Isend, count, type, dest, comm);
  return PMPI_Isend(buf, count, type, dest, tag, comm, request);
}

int MPI_Issend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
               MPI_Request* request) {
  add_send(FN_Issend, count, type, dest, comm);
  return PMPI_Issend(buf, count, type, dest, tag, comm, request);
}

int MPI_Sendrecv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag,
                 void* recvbuf, int recvcount, MPI_Datatype recvtype, int source, int recvtag,
                 MPI_Comm comm, MPI_Status* status) {
  add_send(FN_Sendrecv, sendcount, sendtype, dest, comm);
  return PMPI_Sendrecv(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype,
                       source, recvtag, comm, status);
}

int MPI_Sendrecv_replace(void* buf, int count, MPI_Datatype type, int dest, int sendtag, int source,
                         int recvtag, MPI_Comm comm, MPI_Status* status) {
  add_send(FN_Sendrecv_replace, count, type, dest, comm);
  return PMPI_Sendrecv_replace(buf, count, type, dest, sendtag, source, recvtag, comm, status);
}

int MPI_Recv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
             MPI_Status* status) {
  add_recv(FN_Recv, count, type, source);
  return PMPI_Recv(buf, count, type, source, tag, comm, status);
}

int MPI_Irecv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
              MPI_Request* request) {
  add_recv(FN_Irecv, count, type, source);
  return PMPI_Irecv(buf, count, type, source, tag, comm, request);
}

// ---- collectives (bytes: Note [What the PMPI counter counts]) ---------------------------------

int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
                  MPI_Comm comm) {
  add_coll(FN_Allreduce, type_bytes(count, type), comm);
  return PMPI_Allreduce(sendbuf, recvbuf, count, type, op, comm);
}

int MPI_Iallreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
                   MPI_Comm comm, MPI_Request* request) {
  add_coll(FN_Iallreduce, type_bytes(count, type), comm);
  return PMPI_Iallreduce(sendbuf, recvbuf, count, type, op, comm, request);
}

int MPI_Reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
               int root, MPI_Comm comm) {
  add_coll(FN_Reduce, type_bytes(count, type), comm);
  return PMPI_Reduce(sendbuf, recvbuf, count, type, op, root, comm);
}

int MPI_Reduce_scatter(const void* sendbuf, void* recvbuf, const int recvcounts[],
                       MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  add_coll(FN_Reduce_scatter, type_bytes(sum_counts(recvcounts, comm_size(comm)), type), comm);
  return PMPI_Reduce_scatter(sendbuf, recvbuf, recvcounts, type, op, comm);
}

int MPI_Reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype type,
                             MPI_Op op, MPI_Comm comm) {
  add_coll(FN_Reduce_scatter_block, type_bytes((long long)recvcount * comm_size(comm), type), comm);
  return PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, type, op, comm);
}

int MPI_Ireduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype type,
                              MPI_Op op, MPI_Comm comm, MPI_Request* request) {
  const long long n = comm_size(comm);
  add_coll(FN_Ireduce_scatter_block, type_bytes(recvcount * n, type), comm);
  return PMPI_Ireduce_scatter_block(sendbuf, recvbuf, recvcount, type, op, comm, request);
}

// This rank's contribution to a gather: its send block, or its receive block when in place.
static long long gather_bytes(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                              int recvcount, MPI_Datatype recvtype) {
  if (sendbuf == MPI_IN_PLACE) return type_bytes(recvcount, recvtype);
  return type_bytes(sendcount, sendtype);
}

int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  add_coll(FN_Allgather, gather_bytes(sendbuf, sendcount, sendtype, recvcount, recvtype), comm);
  return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

int MPI_Iallgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                   int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
  add_coll(FN_Iallgather, gather_bytes(sendbuf, sendcount, sendtype, recvcount, recvtype), comm);
  return PMPI_Iallgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request);
}

int MPI_Allgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                   const int recvcounts[], const int displs[], MPI_Datatype recvtype,
                   MPI_Comm comm) {
  const int mine = sendbuf == MPI_IN_PLACE ? recvcounts[comm_rank(comm)] : 0;
  add_coll(FN_Allgatherv, gather_bytes(sendbuf, sendcount, sendtype, mine, recvtype), comm);
  return PMPI_Allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm);
}

int MPI_Gather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
               int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
  add_coll(FN_Gather, gather_bytes(sendbuf, sendcount, sendtype, recvcount, recvtype), comm);
  return PMPI_Gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
}

int MPI_Scatter(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
  const long long n = comm_size(comm);
  add_coll(FN_Scatter, comm_rank(comm) == root ? type_bytes(sendcount * n, sendtype) : 0, comm);
  return PMPI_Scatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
}

int MPI_Alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                 int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  add_coll(FN_Alltoall, type_bytes((long long)sendcount * comm_size(comm), sendtype), comm);
  return PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

int MPI_Ialltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
  add_coll(FN_Ialltoall, type_bytes((long long)sendcount * comm_size(comm), sendtype), comm);
  return PMPI_Ialltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request);
}

int MPI_Alltoallv(const void* sendbuf, const int sendcounts[], const int sdispls[],
                  MPI_Datatype sendtype, void* recvbuf, const int recvcounts[], const int rdispls[],
                  MPI_Datatype recvtype, MPI_Comm comm) {
  add_coll(FN_Alltoallv, type_bytes(sum_counts(sendcounts, comm_size(comm)), sendtype), comm);
  return PMPI_Alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls,
                        recvtype, comm);
}

int MPI_Bcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  add_coll(FN_Bcast, comm_rank(comm) == root ? type_bytes(count, type) : 0, comm);
  return PMPI_Bcast(buffer, count, type, root, comm);
}

int MPI_Ibcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm,
               MPI_Request* request) {
  add_coll(FN_Ibcast, comm_rank(comm) == root ? type_bytes(count, type) : 0, comm);
  return PMPI_Ibcast(buffer, count, type, root, comm, request);
}

int MPI_Barrier(MPI_Comm comm) {
  add_coll(FN_Barrier, 0, comm);
  return PMPI_Barrier(comm);
}
