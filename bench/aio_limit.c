/* aio_limit: the physical limit ZeroRT's swap traffic is compared against. A plain C loop, no
 * ZeroRT code: one file opened with O_DIRECT, sequential requests of --block-size bytes with
 * --queue-depth in flight through io_uring or libaio, one thread.
 *
 *   aio_limit --dir D --bytes N --block-size B --queue-depth Q [--engine io_uring|libaio]
 *             [--reps R] [--json]
 *
 * Sizes take K, M, G suffixes (powers of 1024). Each repetition writes the N bytes, then calls
 * fdatasync once (included in the write time: the data is on the device when the clock stops),
 * then reads the N bytes back; O_DIRECT bypasses the page cache, so nothing is dropped in between.
 * GB/s are 1e9 bytes per second. The file is checked once (after the first repetition, untimed)
 * and removed at the end. Prints each repetition and the median, min and max; --json prints one
 * JSON line per repetition and a summary line instead. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef ZRT_HAVE_LIBURING
#include <liburing.h>
#endif
#ifdef ZRT_HAVE_LIBAIO
#include <libaio.h>
#endif

#define ALIGNMENT 4096

struct config {
  const char* dir;
  long long bytes, block_size, queue_depth;
  const char* engine;
  int reps, json;
};

struct job {
  int fd, write;
  long long bytes, block_size, queue_depth;
  char* buffer; /* queue_depth slots of block_size bytes */
};

static void die(const char* what, int err) {
  fprintf(stderr, "aio_limit: %s: %s\n", what, strerror(err));
  exit(1);
}

static long long parse_size(const char* flag, const char* text) {
  char* end = NULL;
  long long v = strtoll(text, &end, 10);
  int shift = 0;
  switch (end != text ? *end : '\0') {
    case 'K':
    case 'k':
      shift = 10;
      break;
    case 'M':
    case 'm':
      shift = 20;
      break;
    case 'G':
    case 'g':
      shift = 30;
      break;
  }
  end += shift != 0;
  if (end == text || *end != '\0' || v <= 0 || v > (1LL << (50 - shift))) {
    fprintf(stderr, "aio_limit: %s: expected a positive size (K, M, G suffixes), got '%s'\n", flag,
            text);
    exit(1);
  }
  return v << shift;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Request i of the job: its offset and length (the last one may be shorter). */
static long long request_bytes(const struct job* j, long long offset) {
  long long left = j->bytes - offset;
  return left < j->block_size ? left : j->block_size;
}

#ifdef ZRT_HAVE_LIBURING
static void uring_queue(struct io_uring* ring, const struct job* j, int slot, long long off,
                        long long len) {
  struct io_uring_sqe* sqe = io_uring_get_sqe(ring);
  char* buf = j->buffer + (long long)slot * j->block_size;
  if (j->write)
    io_uring_prep_write(sqe, j->fd, buf, (unsigned)len, (unsigned long long)off);
  else
    io_uring_prep_read(sqe, j->fd, buf, (unsigned)len, (unsigned long long)off);
  io_uring_sqe_set_data64(sqe, ((unsigned long long)off << 16) | (unsigned)slot);
}

/* Sequential pass with io_uring: queue_depth requests in flight, refilled as each completes. */
static void run_uring(struct io_uring* ring, const struct job* j) {
  long long next = 0, in_flight = 0;
  for (int s = 0; s < j->queue_depth && next < j->bytes; ++s) {
    uring_queue(ring, j, s, next, request_bytes(j, next));
    next += request_bytes(j, next), ++in_flight;
  }
  while (in_flight > 0) {
    int rc = io_uring_submit_and_wait(ring, 1);
    if (rc < 0 && rc != -EINTR) die("io_uring_submit_and_wait", -rc);
    struct io_uring_cqe* cqe;
    while (io_uring_peek_cqe(ring, &cqe) == 0) {
      unsigned long long data = cqe->user_data;
      int slot = (int)(data & 0xffff), res = cqe->res;
      long long off = (long long)(data >> 16), len = request_bytes(j, off);
      io_uring_cqe_seen(ring, cqe);
      if (res < 0) die(j->write ? "write" : "read", -res);
      if (res != len) die(j->write ? "short write" : "short read", EIO);
      --in_flight;
      if (next < j->bytes) {
        uring_queue(ring, j, slot, next, request_bytes(j, next));
        next += request_bytes(j, next), ++in_flight;
      }
    }
  }
}
#endif

#ifdef ZRT_HAVE_LIBAIO
static void aio_queue(io_context_t ctx, const struct job* j, struct iocb* cb, int slot,
                      long long off) {
  char* buf = j->buffer + (long long)slot * j->block_size;
  long long len = request_bytes(j, off);
  if (j->write)
    io_prep_pwrite(cb, j->fd, buf, (size_t)len, off);
  else
    io_prep_pread(cb, j->fd, buf, (size_t)len, off);
  cb->data = (void*)(intptr_t)slot;
  struct iocb* list[1] = {cb};
  int rc;
  while ((rc = io_submit(ctx, 1, list)) == -EAGAIN || rc == -EINTR) {
  }
  if (rc != 1) die("io_submit", rc < 0 ? -rc : EIO);
}

/* The same pass with libaio (one io_submit per request: libaio has no submission ring). */
static void run_libaio(io_context_t ctx, const struct job* j, struct iocb* cbs,
                       struct io_event* events) {
  long long next = 0, in_flight = 0;
  for (int s = 0; s < j->queue_depth && next < j->bytes; ++s) {
    aio_queue(ctx, j, &cbs[s], s, next);
    next += request_bytes(j, next), ++in_flight;
  }
  while (in_flight > 0) {
    int n = io_getevents(ctx, 1, (long)j->queue_depth, events, NULL);
    if (n == -EINTR) continue;
    if (n < 0) die("io_getevents", -n);
    for (int i = 0; i < n; ++i) {
      int slot = (int)(intptr_t)events[i].data;
      long res = (long)events[i].res;
      if (res < 0) die(j->write ? "write" : "read", (int)-res);
      if (res != (long)cbs[slot].u.c.nbytes) die(j->write ? "short write" : "short read", EIO);
      --in_flight;
      if (next < j->bytes) {
        aio_queue(ctx, j, &cbs[slot], slot, next);
        next += request_bytes(j, next), ++in_flight;
      }
    }
  }
}
#endif

/* One engine, set up once for all repetitions. */
struct engine {
  int uring;
#ifdef ZRT_HAVE_LIBURING
  struct io_uring ring;
#endif
#ifdef ZRT_HAVE_LIBAIO
  io_context_t ctx;
  struct iocb* cbs;
  struct io_event* events;
#endif
};

static void engine_start(struct engine* e, const struct config* c) {
  memset(e, 0, sizeof(*e));
  e->uring = strcmp(c->engine, "io_uring") == 0;
#ifdef ZRT_HAVE_LIBURING
  if (e->uring) {
    int rc = io_uring_queue_init((unsigned)c->queue_depth, &e->ring, 0);
    if (rc < 0) die("io_uring_queue_init", -rc);
    return;
  }
#endif
#ifdef ZRT_HAVE_LIBAIO
  if (!e->uring) {
    int rc = io_setup((int)c->queue_depth, &e->ctx);
    if (rc < 0) die("io_setup", -rc);
    e->cbs = calloc((size_t)c->queue_depth, sizeof(struct iocb));
    e->events = calloc((size_t)c->queue_depth, sizeof(struct io_event));
    if (!e->cbs || !e->events) die("calloc", ENOMEM);
    return;
  }
#endif
  fprintf(stderr, "aio_limit: engine %s was not compiled in\n", c->engine);
  exit(1);
}

static void engine_run(struct engine* e, const struct job* j) {
#ifdef ZRT_HAVE_LIBURING
  if (e->uring) {
    run_uring(&e->ring, j);
    return;
  }
#endif
#ifdef ZRT_HAVE_LIBAIO
  run_libaio(e->ctx, j, e->cbs, e->events);
#endif
}

static void engine_stop(struct engine* e) {
#ifdef ZRT_HAVE_LIBURING
  if (e->uring) io_uring_queue_exit(&e->ring);
#endif
#ifdef ZRT_HAVE_LIBAIO
  if (!e->uring) {
    io_destroy(e->ctx);
    free(e->cbs);
    free(e->events);
  }
#endif
}

/* Every 8-byte word of a block holds its offset in the block, mixed with a constant. */
static void fill_pattern(char* buffer, long long bytes, long long block_size) {
  for (long long i = 0; i < bytes; i += 8) {
    uint64_t v = (uint64_t)(i % block_size) ^ 0x5a5aa5a5c3c33c3cULL;
    memcpy(buffer + i, &v, 8);
  }
}

/* The untimed check after the first repetition: the file holds the pattern everywhere. */
static void check_file(const struct job* j) {
  char* expect = malloc((size_t)j->block_size);
  if (!expect) die("malloc", ENOMEM);
  fill_pattern(expect, j->block_size, j->block_size);
  for (long long off = 0; off < j->bytes; off += j->block_size) {
    long long len = request_bytes(j, off);
    ssize_t got = pread(j->fd, j->buffer, (size_t)len, off);
    if (got != len) die("check: pread", got < 0 ? errno : EIO);
    if (memcmp(j->buffer, expect, (size_t)len) != 0) {
      fprintf(stderr, "aio_limit: check failed: the block at byte %lld differs\n", off);
      exit(1);
    }
  }
  free(expect);
}

static int compare_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* Sorts v in place; writes median, min, max. */
static void stats(double* v, int n, double* med, double* lo, double* hi) {
  qsort(v, (size_t)n, sizeof(double), compare_double);
  *med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  *lo = v[0];
  *hi = v[n - 1];
}

static void usage(void) {
  fprintf(stderr,
          "usage: aio_limit --dir D --bytes N --block-size B --queue-depth Q "
          "[--engine io_uring|libaio] [--reps R] [--json]\n");
  exit(1);
}

static void parse_args(int argc, char** argv, struct config* c) {
  memset(c, 0, sizeof(*c));
#ifdef ZRT_HAVE_LIBURING
  c->engine = "io_uring";
#else
  c->engine = "libaio";
#endif
  c->reps = 7;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--json") == 0) {
      c->json = 1;
      continue;
    }
    if (v == NULL) usage();
    ++i;
    if (strcmp(a, "--dir") == 0)
      c->dir = v;
    else if (strcmp(a, "--bytes") == 0)
      c->bytes = parse_size(a, v);
    else if (strcmp(a, "--block-size") == 0)
      c->block_size = parse_size(a, v);
    else if (strcmp(a, "--queue-depth") == 0)
      c->queue_depth = parse_size(a, v);
    else if (strcmp(a, "--engine") == 0)
      c->engine = v;
    else if (strcmp(a, "--reps") == 0)
      c->reps = (int)parse_size(a, v);
    else
      usage();
  }
  if (!c->dir || !c->bytes || !c->block_size || !c->queue_depth) usage();
  if (c->bytes % ALIGNMENT || c->block_size % ALIGNMENT || c->block_size > (1LL << 30) ||
      c->queue_depth > 4096) {
    fprintf(stderr,
            "aio_limit: --bytes and --block-size must be multiples of %d (block at most "
            "1G), --queue-depth at most 4096\n",
            ALIGNMENT);
    exit(1);
  }
  if (strcmp(c->engine, "io_uring") != 0 && strcmp(c->engine, "libaio") != 0) usage();
}

static char g_path[4096]; /* removed at exit, also after an error */

static void remove_file(void) {
  if (g_path[0]) unlink(g_path);
}

static int open_file(const struct config* c) {
  snprintf(g_path, sizeof(g_path), "%s/aio_limit.%d.dat", c->dir, (int)getpid());
  int fd = open(g_path, O_CREAT | O_TRUNC | O_RDWR | O_DIRECT | O_CLOEXEC, 0600);
  if (fd < 0) {
    g_path[0] = '\0';
    die(c->dir, errno);
  }
  atexit(remove_file);
  int rc = fallocate(fd, 0, 0, (off_t)c->bytes);
  if (rc != 0 && (errno == EOPNOTSUPP || errno == ENOSYS)) rc = ftruncate(fd, (off_t)c->bytes);
  if (rc != 0) die("reserving the file", errno);
  return fd;
}

static void report_rep(const struct config* c, int rep, double w, double r) {
  if (c->json) {
    printf(
        "{\"rep\": %d, \"engine\": \"%s\", \"bytes\": %lld, \"block_size\": %lld, "
        "\"queue_depth\": %lld, \"write_gbps\": %.4f, \"read_gbps\": %.4f}\n",
        rep, c->engine, c->bytes, c->block_size, c->queue_depth, w, r);
  } else {
    printf("rep %2d   write %8.3f GB/s   read %8.3f GB/s\n", rep, w, r);
  }
  fflush(stdout);
}

static void report_summary(const struct config* c, double* w, double* r) {
  double wm, wl, wh, rm, rl, rh;
  stats(w, c->reps, &wm, &wl, &wh);
  stats(r, c->reps, &rm, &rl, &rh);
  if (c->json) {
    printf(
        "{\"summary\": true, \"engine\": \"%s\", \"dir\": \"%s\", \"bytes\": %lld, "
        "\"block_size\": %lld, \"queue_depth\": %lld, \"reps\": %d, "
        "\"write_gbps_median\": %.4f, \"write_gbps_min\": %.4f, \"write_gbps_max\": %.4f, "
        "\"read_gbps_median\": %.4f, \"read_gbps_min\": %.4f, \"read_gbps_max\": %.4f}\n",
        c->engine, c->dir, c->bytes, c->block_size, c->queue_depth, c->reps, wm, wl, wh, rm, rl,
        rh);
  } else {
    printf("%-8s %10s %10s %10s   (GB/s over %d reps)\n", "", "median", "min", "max", c->reps);
    printf("%-8s %10.3f %10.3f %10.3f\n", "write", wm, wl, wh);
    printf("%-8s %10.3f %10.3f %10.3f\n", "read", rm, rl, rh);
  }
}

int main(int argc, char** argv) {
  struct config c;
  parse_args(argc, argv, &c);
  struct job j = {open_file(&c), 0, c.bytes, c.block_size, c.queue_depth, NULL};
  if (posix_memalign((void**)&j.buffer, ALIGNMENT, (size_t)(c.queue_depth * c.block_size)) != 0)
    die("posix_memalign", ENOMEM);
  struct engine e;
  engine_start(&e, &c);
  if (!c.json) {
    printf(
        "aio_limit: %s, %lld bytes in %s, block %lld, queue depth %lld, O_DIRECT, "
        "write time includes one fdatasync\n",
        c.engine, c.bytes, c.dir, c.block_size, c.queue_depth);
  }
  double* w = calloc((size_t)c.reps, sizeof(double));
  double* r = calloc((size_t)c.reps, sizeof(double));
  if (!w || !r) die("calloc", ENOMEM);
  for (int rep = 0; rep < c.reps; ++rep) {
    fill_pattern(j.buffer, c.queue_depth * c.block_size, c.block_size);
    j.write = 1;
    double t0 = now_s();
    engine_run(&e, &j);
    if (fdatasync(j.fd) != 0) die("fdatasync", errno);
    w[rep] = (double)c.bytes / (now_s() - t0) / 1e9;
    if (rep == 0) check_file(&j);
    j.write = 0;
    t0 = now_s();
    engine_run(&e, &j);
    r[rep] = (double)c.bytes / (now_s() - t0) / 1e9;
    report_rep(&c, rep + 1, w[rep], r[rep]);
  }
  report_summary(&c, w, r);
  engine_stop(&e);
  close(j.fd);
  free(j.buffer);
  free(w);
  free(r);
  return 0;
}
