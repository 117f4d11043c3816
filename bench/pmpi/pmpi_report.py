#!/usr/bin/env python3
"""Reads the per-rank JSON lines of libzrt_pmpi_count.so and, when given, Open MPI's pml
monitoring files, and prints what each rank handed to MPI (bench/README.md, "Measured bytes").

Usage:
  pmpi_report.py OUT.jsonl [--prof PREFIX] [--check] [--ranks N]
                 [--window BEGIN END --steps K] [--json]

OUT.jsonl   the file ZRT_PMPI_OUT named: one line per rank and label ("finalize" at MPI_Finalize,
            others from zrt_pmpi_write, e.g. zero_bench's "steps_begin" / "steps_end").
--prof      the pml_monitoring_filename prefix of a run with `--mca pml_monitoring_enable 2
            --mca pml_monitoring_enable_output 3`: PREFIX.<rank>.prof, whose "E" lines are the
            bytes Open MPI's point-to-point layer sent for user messages and "I" lines those it
            sent inside collectives, per peer.
--check     exit 1 unless every rank has a "finalize" line (N ranks with --ranks), its host
            split adds up (same + other host = p2p_send_bytes, one + cross host = coll_bytes)
            and, with --prof, its p2p_send_bytes equals the transport's "E" bytes.
--window    also print, per rank, the difference END - BEGIN of two labels divided by K.
"""
import argparse
import json
import os
import re
import sys

MIB = float(1 << 20)
# The host split of each total (Note [Same host or other host] in zrt_pmpi_count.c); absent from
# lines written before the split existed.
SPLIT = {"p2p_send_bytes": ("p2p_send_bytes_same_host", "p2p_send_bytes_other_host"),
         "coll_bytes": ("coll_bytes_one_host", "coll_bytes_cross_host")}


def read_lines(path):
    by_rank = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                d = json.loads(line)
                by_rank.setdefault(d["rank"], {})[d["label"]] = d
    return by_rank


def read_prof(prefix, rank):
    """Bytes and messages this rank's pml sent, summed over peers: {"E": (bytes, msgs), "I": ...}."""
    out = {"E": [0, 0], "I": [0, 0]}
    with open(f"{prefix}.{rank}.prof") as f:
        for line in f:
            m = re.match(r"^([EI])\t\d+\t\d+\t(\d+) bytes\t(\d+) msgs sent", line)
            if m:
                out[m.group(1)][0] += int(m.group(2))
                out[m.group(1)][1] += int(m.group(3))
    return out


def window(lines, begin, end, steps):
    a, b = lines[begin], lines[end]
    keys = ["p2p_send_calls", "p2p_send_bytes", "coll_calls", "coll_bytes"]
    keys += [k for pair in SPLIT.values() for k in pair if k in a and k in b]
    return {k: (b[k] - a[k]) / steps for k in keys}


def split_text(d):
    """ " (same host X B, other host Y B)" for p2p, likewise for collectives, or "" """
    if "p2p_send_bytes_same_host" not in d:
        return "", ""
    return (f" (same host {d['p2p_send_bytes_same_host']:.0f} B, other host "
            f"{d['p2p_send_bytes_other_host']:.0f} B)",
            f" (on one host {d['coll_bytes_one_host']:.0f} B, spanning hosts "
            f"{d['coll_bytes_cross_host']:.0f} B)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--prof")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--ranks", type=int)
    ap.add_argument("--window", nargs=2, metavar=("BEGIN", "END"))
    ap.add_argument("--steps", type=float, default=1.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    by_rank = read_lines(args.out)
    failures = []
    if args.ranks is not None and sorted(by_rank) != list(range(args.ranks)):
        failures.append(f"ranks {sorted(by_rank)} in {args.out}, expected 0..{args.ranks - 1}")
    rows = []
    for rank in sorted(by_rank):
        lines = by_rank[rank]
        fin = lines.get("finalize")
        if fin is None:
            failures.append(f"rank {rank}: no finalize line")
            continue
        row = {"rank": rank, "p2p_send_bytes": fin["p2p_send_bytes"],
               "coll_bytes": fin["coll_bytes"], "functions": fin["functions"]}
        if "hosts" in fin:
            row["hosts"] = fin["hosts"]
        for total, pair in SPLIT.items():
            if not all(k in fin for k in pair):
                continue
            row.update({k: fin[k] for k in pair})
            if fin[pair[0]] + fin[pair[1]] != fin[total]:
                failures.append(f"rank {rank}: {pair[0]} + {pair[1]} = "
                                f"{fin[pair[0]] + fin[pair[1]]}, {total} = {fin[total]}")
        if args.prof and not os.path.exists(f"{args.prof}.{rank}.prof"):
            failures.append(f"rank {rank}: no {args.prof}.{rank}.prof (pml monitoring off?)")
        elif args.prof:
            prof = read_prof(args.prof, rank)
            row["pml_user_bytes"], row["pml_coll_internal_bytes"] = prof["E"][0], prof["I"][0]
            if prof["E"][0] != fin["p2p_send_bytes"]:
                failures.append(f"rank {rank}: PMPI counted {fin['p2p_send_bytes']} point-to-point "
                                f"bytes, Open MPI's pml sent {prof['E'][0]} user bytes")
        if args.window:
            row["window"] = window(lines, args.window[0], args.window[1], args.steps)
        rows.append(row)
    for row in rows:
        if args.json:
            print(json.dumps(row))
            continue
        p2p_split, coll_split = split_text(row)
        text = (f"rank {row['rank']}: whole run: p2p sent {row['p2p_send_bytes']} B{p2p_split}, "
                f"handed to collectives {row['coll_bytes']} B{coll_split}")
        if "hosts" in row:
            text += f"; {row['hosts']} host(s)"
        if "pml_user_bytes" in row:
            text += (f"; Open MPI pml sent {row['pml_user_bytes']} B user + "
                     f"{row['pml_coll_internal_bytes']} B inside collectives")
        if "window" in row:
            w = row["window"]
            p2p_split, coll_split = split_text(w)
            text += (f"\n  {args.window[0]}..{args.window[1]} per step: p2p sent "
                     f"{w['p2p_send_bytes']:.0f} B = {w['p2p_send_bytes'] / MIB:.3f} MiB "
                     f"({w['p2p_send_calls']:g} calls){p2p_split}, handed to collectives "
                     f"{w['coll_bytes']:.0f} B ({w['coll_calls']:g} calls){coll_split}")
        print(text)
        for name, c in sorted(row["functions"].items()):
            print(f"  {name:28s} {c['calls']:8d} calls {c['bytes']:16d} B")
    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    return 1 if args.check and failures else 0


if __name__ == "__main__":
    sys.exit(main())
