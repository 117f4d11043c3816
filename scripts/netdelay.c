// netdelay: a fixed one-way delay for the emulated hosts of scripts/netns_cluster.sh, where the
// kernel has no netem qdisc. An iptables rule (NFQUEUE target) in a host's namespace sends its outgoing packets to
// an NFQUEUE queue; this program, running in that namespace, holds each packet for DELAY
// microseconds and then accepts it. Packets leave in arrival order (one queue, a constant delay),
// so one batch verdict releases everything that is due. Only packet metadata is copied to user
// space, and GSO packets stay whole, so the cost per byte is nil and per packet small.
//
//   netdelay QUEUE DELAY_US        (runs until killed; prints "ready" once it holds the queue)
//
// Built by scripts/netns_cluster.sh with: cc -O2 netdelay.c -lnetfilter_queue -lnfnetlink
#define _GNU_SOURCE  // ppoll
#include <arpa/inet.h>
#include <errno.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define RING (1u << 20)  // packets held at once (a 1 s delay at ~1M packets/s)

struct held {
  uint32_t id;
  int64_t due_ns;
};

static struct held ring[RING];
static uint32_t head, tail;  // ring[head..tail) are held, oldest first
static int64_t delay_ns;
static unsigned long long dropped;

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int on_packet(struct nfq_q_handle* qh, struct nfgenmsg* msg, struct nfq_data* nfa,
                     void* data) {
  (void)msg;
  (void)data;
  struct nfqnl_msg_packet_hdr* ph = nfq_get_msg_packet_hdr(nfa);
  if (ph == NULL) return 0;
  const uint32_t id = ntohl(ph->packet_id);
  if (tail - head == RING) {  // full: this one goes without delay rather than being lost
    ++dropped;
    return nfq_set_verdict(qh, id, NF_ACCEPT, 0, NULL);
  }
  ring[tail % RING] = (struct held){id, now_ns() + delay_ns};
  ++tail;
  return 0;
}

static void die(const char* what) {
  fprintf(stderr, "netdelay: %s: %s\n", what, strerror(errno));
  exit(1);
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: netdelay QUEUE DELAY_US\n");
    return 2;
  }
  const int queue = atoi(argv[1]);
  delay_ns = (int64_t)(atof(argv[2]) * 1000.0);
  struct nfq_handle* h = nfq_open();
  if (h == NULL) die("nfq_open");
  if (nfq_bind_pf(h, AF_INET) < 0) die("nfq_bind_pf");
  struct nfq_q_handle* qh = nfq_create_queue(h, (uint16_t)queue, on_packet, NULL);
  if (qh == NULL) die("nfq_create_queue (is another netdelay holding the queue?)");
  if (nfq_set_mode(qh, NFQNL_COPY_META, 0) < 0) die("nfq_set_mode");
  nfq_set_queue_maxlen(qh, RING);
  nfq_set_queue_flags(qh, NFQA_CFG_F_GSO, NFQA_CFG_F_GSO);
  nfnl_rcvbufsiz(nfq_nfnlh(h), 64 << 20);
  const int fd = nfq_fd(h);
  printf("ready\n");
  fflush(stdout);
  static char buf[1 << 16];
  for (;;) {
    const int64_t now = now_ns();
    uint32_t last = 0;
    int release = 0;
    while (head != tail && ring[head % RING].due_ns <= now) {
      last = ring[head % RING].id;
      ++head;
      release = 1;
    }
    if (release) nfq_set_verdict_batch(qh, last, NF_ACCEPT);
    int64_t wait_ns = head != tail ? ring[head % RING].due_ns - now : 1000000000;
    if (wait_ns < 0) wait_ns = 0;
    struct timespec timeout = {wait_ns / 1000000000, wait_ns % 1000000000};
    struct pollfd pfd = {fd, POLLIN, 0};
    if (ppoll(&pfd, 1, &timeout, NULL) < 0 && errno != EINTR) die("ppoll");
    if (pfd.revents & POLLIN) {
      for (;;) {
        const ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
        if (n < 0 && errno == ENOBUFS) {  // the kernel dropped messages: say so, keep going
          fprintf(stderr, "netdelay: receive buffer overrun (packets lost)\n");
          continue;
        }
        if (n <= 0) die("recv");
        nfq_handle_packet(h, buf, (int)n);
      }
    }
  }
}
