"""Starting torch.distributed ranks for the peer tests: one process per rank with the env://
rendezvous on a free loopback port, DeepSpeed's CPU accelerator, one thread each; all of them
killed when one fails or the deadline passes, so that a hang never outlives the test.

These ranks run the peers (DeepSpeed, transformers), never ZeroRT. A peer rank killed by a signal
(seen: DeepSpeed's ZeRO-3 on gloo aborting with "terminate called without an active exception",
about once in a few hundred runs) is started again once, all ranks afresh, and said so; a second
crash, a non-zero exit or a deadline fails as before."""
import os
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(argv, world, timeout, name):
    """Runs `python argv...` as `world` ranks; returns None on success, else why it failed."""
    failed, crashed = run_ranks_once(argv, world, timeout)
    if crashed:
        print(f"{name}: a peer rank was killed by signal {-crashed} ({failed}); running all ranks "
              "once more", file=sys.stderr)
        failed, _ = run_ranks_once(argv, world, timeout)
    if failed:
        print(f"{name}: FAILED: {failed}", file=sys.stderr)
    return failed


def run_ranks_once(argv, world, timeout):
    """(why it failed or None, the signal number that killed a rank, negated, or 0)."""
    port = free_port()
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                   LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable] + list(argv), env=env))
    deadline = time.monotonic() + timeout
    failed = None
    while any(p.poll() is None for p in procs):
        bad = [p for p in procs if p.poll() not in (None, 0)]
        if bad or time.monotonic() > deadline:
            failed = (f"rank exited with {bad[0].returncode}" if bad
                      else f"deadline of {timeout} s passed")
            break
        time.sleep(0.2)
    killed = []
    for p in procs:
        if p.poll() is None:
            p.kill()
            killed.append(p)
        p.wait()
    if failed is None and any(p.returncode != 0 for p in procs):
        failed = "exit codes " + str([p.returncode for p in procs])
    crashed = next((p.returncode for p in procs if p.returncode is not None and p.returncode < 0
                    and p not in killed), 0)
    return failed, crashed
