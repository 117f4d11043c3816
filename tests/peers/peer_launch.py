"""Starting torch.distributed ranks for the peer tests: one process per rank with the env://
rendezvous on a free loopback port, DeepSpeed's CPU accelerator, one thread each; all of them
killed when one fails or the deadline passes, so that a hang never outlives the test."""
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
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
    if failed is None and any(p.returncode != 0 for p in procs):
        failed = "exit codes " + str([p.returncode for p in procs])
    if failed:
        print(f"{name}: FAILED: {failed}", file=sys.stderr)
    return failed
