"""Summaries, markdown tables and the SVG chart of bench/peers/collectives.py."""

import os

from common import format_count, format_load, loadavg, print_table, spread, write_bar_svg

ZRT_ROWS = ("zrt", "zrt_ring", "zrt_native")
TARGET_PCT = 95.0  # issue 15: ZeroRT's busbw at >= 95 % of the best baseline's at >= 1 MiB
CANONICAL_MPI = {"reduce_scatter": "mpi_reduce_scatter_block", "all_gather": "mpi_allgather",
                 "all_reduce": "mpi_allreduce"}


def _summary_row(op, impl, size, cell, n, before, after, bus_factor):
    row = {"kind": "summary", "ranks": n, "op": op, "impl": impl, "size": size,
           "bytes": cell["bytes"], "oversubscribed": n > (os.cpu_count() or 1),
           "loadavg_before": before, "loadavg_after": after, "rounds": len(cell["seconds"]),
           "errors": sorted(set(cell["errors"]))}
    if cell["seconds"]:
        secs = spread(cell["seconds"])
        f = bus_factor(op, n)
        row["time_us"] = {k: v * 1e6 if k != "n" else v for k, v in secs.items()}
        # The largest busbw belongs to the shortest time.
        row["busbw"] = {"median": cell["bytes"] / secs["median"] / 1e9 * f,
                        "min": cell["bytes"] / secs["max"] / 1e9 * f,
                        "max": cell["bytes"] / secs["min"] / 1e9 * f, "n": secs["n"]}
        row["algbw"] = row["busbw"]["median"] / f
        row["wrong"] = max(cell["wrong"])
    return row


def summarize(cells, n, before, after, bus_factor):
    """One "summary" row per (op, impl, size) and one "compare" row per (op, size): ZeroRT's
    busbw (row zrt) against the best baseline's (the non-ZeroRT row with the highest median
    among those whose checked run was right)."""
    rows = [_summary_row(op, impl, size, cell, n, before, after, bus_factor)
            for (op, impl, size), cell in sorted(cells.items())]
    for op, size in sorted({(r["op"], r["size"]) for r in rows}):
        here = [r for r in rows if r["op"] == op and r["size"] == size and "busbw" in r]
        zrt = next((r for r in here if r["impl"] == "zrt"), None)
        base = [r for r in here if r["impl"] not in ZRT_ROWS and not r["wrong"]]
        best = max(base, key=lambda r: r["busbw"]["median"]) if base else None
        cmp = {"kind": "compare", "ranks": n, "op": op, "size": size,
               "oversubscribed": n > (os.cpu_count() or 1),
               "zrt_busbw": zrt["busbw"] if zrt else None,
               "best": best["impl"] if best else None,
               "best_busbw": best["busbw"] if best else None,
               "loadavg_before": before, "loadavg_after": after}
        if zrt and best:
            cmp["pct_of_best"] = 100.0 * zrt["busbw"]["median"] / best["busbw"]["median"]
        rows.append(cmp)
    return rows


def _bw(b):
    return f"{b['median']:.2f} [{b['min']:.2f}, {b['max']:.2f}]"


def _cell(r):
    if r is None:
        return "-"
    if "busbw" not in r:
        err = r["errors"][0] if r["errors"] else "no result"
        return err if err.startswith("unsupported") else "FAILED: " + err
    text = _bw(r["busbw"])
    if r["wrong"]:
        text += f" WRONG ({r['wrong']} elements)"
    if r["errors"]:
        text += f" ({len(r['errors'])} failed rounds)"
    return text


def _ranks_title(n, rows):
    over = any(r.get("oversubscribed") for r in rows)
    return f"N = {n}" + (f" (oversubscribed: {n} ranks on {os.cpu_count()} CPUs)" if over else "")


def _load_line(rows):
    r = rows[0]
    return (f"load average before: {format_load(r['loadavg_before'])}, after: "
            f"{format_load(r['loadavg_after'])}, now: {format_load(loadavg())}\n")


def print_op_tables(summaries, n, sizes):
    rows_n = [r for r in summaries if r["kind"] == "summary" and r["ranks"] == n]
    for op in dict.fromkeys(r["op"] for r in rows_n):
        rows = [r for r in rows_n if r["op"] == op]
        impls = list(dict.fromkeys(r["impl"] for r in rows))
        impls.sort(key=lambda i: (i not in ZRT_ROWS, i))
        by = {(r["impl"], r["size"]): r for r in rows}
        print(f"## {op}, {_ranks_title(n, rows)}: busbw GB/s, median over rounds [min, max]\n")
        print(_load_line(rows))
        header = ["variant"] + [f"S = {format_count(s)}" for s in sizes]
        print_table(header, [[i] + [_cell(by.get((i, s))) for s in sizes] for i in impls])


def print_summary(summaries, n):
    rows = [r for r in summaries if r["kind"] == "compare" and r["ranks"] == n]
    if not rows:
        return
    print(f"## Summary, {_ranks_title(n, rows)}: ZeroRT (zrt) against the best baseline "
          f"(target >= {TARGET_PCT:g} % at >= 1 MiB)\n")
    print(_load_line(rows))
    table = []
    for r in rows:
        pct = r.get("pct_of_best")
        mark = "" if pct is None or r["size"] < (1 << 20) else (
            " ok" if pct >= TARGET_PCT else " BELOW")
        table.append([r["op"], format_count(r["size"]),
                      _bw(r["zrt_busbw"]) if r["zrt_busbw"] else "-", r["best"] or "-",
                      _bw(r["best_busbw"]) if r["best_busbw"] else "-",
                      f"{pct:.0f} %{mark}" if pct is not None else "-"])
    print_table(["op", "S", "zrt busbw GB/s", "best baseline", "its busbw GB/s", "zrt / best"],
                table)


def print_report(summaries, info, args, seconds):
    v = info["versions"]
    print(f"# Collectives side by side: {info['cpu']}, {info['cpus']} CPUs, {info['mpi']}, "
          f"torch {v['torch']}, {info['date']}\n")
    print(f"float32; S = the whole array (reduce_scatter input, all_gather output); busbw = "
          f"S / time x (n-1)/n (x 2(n-1)/n for all_reduce); time = slowest rank, median over "
          f"iterations in a launch; {args.reps} launch(es) per variant in rotated order; "
          f"OMP_NUM_THREADS=1 for every rank; {seconds:.0f} s in all.\n")
    for n in args.ranks:
        print_summary(summaries, n)
    for n in args.ranks:
        print_op_tables(summaries, n, args.sizes)


def _best_forced(rows):
    forced = [r for r in rows if " alg " in r["impl"] and "busbw" in r]
    return max(forced, key=lambda r: r["busbw"]["median"]) if forced else None


def write_svg(path, summaries, info):
    """busbw per (op, N, S) for ZeroRT's rows, Open MPI's default call, the plain ring, gloo and
    the fastest forced Open MPI algorithm."""
    groups = []
    rows = [r for r in summaries if r["kind"] == "summary"]
    keys = sorted({(r["op"], r["ranks"], r["size"]) for r in rows})
    for op, n, size in keys:
        here = [r for r in rows if (r["op"], r["ranks"], r["size"]) == (op, n, size)]
        by = {r["impl"]: r for r in here if "busbw" in r}
        picks = [(name, by.get(name)) for name in ZRT_ROWS + (CANONICAL_MPI[op], "mpi_ring",
                                                              "torch_gloo")]
        picks.append(("best forced Open MPI algorithm", _best_forced(here)))
        bars = []
        for name, r in picks:
            if r is not None:
                label = "Open MPI default" if name == CANONICAL_MPI[op] else name
                b = r["busbw"]
                bars.append((label, b["median"], b["min"], b["max"]))
        if bars:
            groups.append((f"{op} N={n} {format_count(size)}", bars))
    if groups:
        write_bar_svg(path, f"Collectives, busbw (GB/s): {info['cpu']}, {info['date']}",
                      "busbw GB/s", groups)
