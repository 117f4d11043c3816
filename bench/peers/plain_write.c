/* The device ceiling for bench/peers/ckpt.py: the same number of bytes in the same number of
 * files as a ZeroRT checkpoint, written the plainest way that is still durable.
 *
 *   plain_write [--no-kick] DIR RANK:SIZE [RANK:SIZE ...]
 *
 * One thread per rank (as ZeroRT has one process per rank) writes its files one after the other
 * from memory filled and touched beforehand: write(2) in 8 MiB pieces, after every 8 MiB
 * sync_file_range(SYNC_FILE_RANGE_WRITE) of what was just written (as checkpoint/storage.cpp,
 * Note [Early writeback]), fsync, close; when every thread is done, one fsync of DIR. No
 * checksums, no pickling, no temp names or renames. Prints {"seconds": S, "bytes": B, "files": F}
 * with S from the threads' common start to the directory fsync's return. --no-kick leaves out
 * sync_file_range (the kernel then writes back when it decides to, and at fsync).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define KICK ((size_t)8 << 20)
#define MAX_FILES 4096

static int kick = 1;

struct file_spec {
  int rank;
  size_t size;
  char path[4096];
};

struct rank_job {
  int rank;
  struct file_spec *files;
  int nfiles;
  char *data; /* as large as the rank's largest file */
  pthread_barrier_t *start;
  int failed;
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int write_one(const char *path, const char *data, size_t size) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return -1;
  size_t done = 0, kicked = 0;
  while (done < size) {
    size_t n = size - done < KICK ? size - done : KICK;
    ssize_t w = write(fd, data + done, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      close(fd);
      return -1;
    }
    done += (size_t)w;
    if (kick && done - kicked >= KICK) {
      sync_file_range(fd, (off64_t)kicked, (off64_t)(done - kicked), SYNC_FILE_RANGE_WRITE);
      kicked = done;
    }
  }
  if (fsync(fd) != 0) {
    close(fd);
    return -1;
  }
  return close(fd);
}

static void *rank_main(void *arg) {
  struct rank_job *job = arg;
  pthread_barrier_wait(job->start);
  for (int i = 0; i < job->nfiles; ++i) {
    if (job->files[i].rank != job->rank) continue;
    if (write_one(job->files[i].path, job->data, job->files[i].size) != 0) {
      fprintf(stderr, "plain_write: %s: %s\n", job->files[i].path, strerror(errno));
      job->failed = 1;
      return NULL;
    }
  }
  return NULL;
}

static int parse(int argc, char **argv, struct file_spec *files, int *nranks) {
  *nranks = 0;
  for (int i = 2; i < argc; ++i) {
    char *colon = strchr(argv[i], ':');
    if (!colon || i - 2 >= MAX_FILES) return -1;
    struct file_spec *f = &files[i - 2];
    f->rank = atoi(argv[i]);
    f->size = (size_t)strtoull(colon + 1, NULL, 10);
    if (f->rank < 0 || f->rank > 1023) return -1;
    snprintf(f->path, sizeof(f->path), "%s/file_%d_%d.bin", argv[1], f->rank, i - 2);
    if (f->rank + 1 > *nranks) *nranks = f->rank + 1;
  }
  return argc - 2;
}

int main(int argc, char **argv) {
  static struct file_spec files[MAX_FILES];
  int nranks;
  if (argc > 1 && strcmp(argv[1], "--no-kick") == 0) {
    kick = 0;
    ++argv;
    --argc;
  }
  int nfiles = argc >= 3 ? parse(argc, argv, files, &nranks) : -1;
  if (nfiles <= 0) {
    fprintf(stderr, "usage: plain_write [--no-kick] DIR RANK:SIZE [RANK:SIZE ...]\n");
    return 2;
  }
  struct rank_job *jobs = calloc((size_t)nranks, sizeof(*jobs));
  pthread_t *threads = calloc((size_t)nranks, sizeof(*threads));
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, (unsigned)nranks + 1);
  size_t bytes = 0;
  for (int r = 0; r < nranks; ++r) {
    size_t largest = 1;
    for (int i = 0; i < nfiles; ++i) {
      if (files[i].rank == r && files[i].size > largest) largest = files[i].size;
    }
    jobs[r] = (struct rank_job){r, files, nfiles, malloc(largest), &start, 0};
    if (!jobs[r].data) return 3;
    for (size_t k = 0; k < largest; ++k) jobs[r].data[k] = (char)(k * 2654435761u >> 24);
    pthread_create(&threads[r], NULL, rank_main, &jobs[r]);
  }
  for (int i = 0; i < nfiles; ++i) bytes += files[i].size;
  pthread_barrier_wait(&start);
  double t0 = now_s();
  int failed = 0;
  for (int r = 0; r < nranks; ++r) {
    pthread_join(threads[r], NULL);
    failed |= jobs[r].failed;
  }
  int dfd = open(argv[1], O_RDONLY | O_DIRECTORY);
  if (failed || dfd < 0 || fsync(dfd) != 0) {
    fprintf(stderr, "plain_write: failed in %s\n", argv[1]);
    return 1;
  }
  close(dfd);
  double seconds = now_s() - t0;
  printf("{\"seconds\": %.6f, \"bytes\": %zu, \"files\": %d}\n", seconds, bytes, nfiles);
  for (int r = 0; r < nranks; ++r) free(jobs[r].data);
  free(jobs);
  free(threads);
  return 0;
}
