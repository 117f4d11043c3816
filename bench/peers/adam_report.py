"""Statistics, markdown tables and the SVG bar chart of bench/peers/adam.py."""

import statistics

from common import format_count, write_bar_svg

BYTES_PER_PARAM = 28  # both variants: fp32 4+4+4+4 read, 4+4+4 written; bf16 4+2+4+4 / 4+4+4+2
LABELS = {"zerort": "ZeroRT fused", "deepspeed": "DeepSpeedCPUAdam",
          "torch_fused": "torch AdamW fused", "torch_foreach": "torch AdamW foreach",
          "plain": "plain loop (limit)"}


def summarize(variant, size, threads, values, load_before, load_after):
    """One summary row per implementation from its per-process values (ms), with the ratios:
    pct_of_plain = plain time / time (throughput in % of the plain loop's), x_deepspeed and
    x_torch_best = their time / this time (> 1: this one is faster)."""
    med = {impl: statistics.median(v) for impl, v in values.items()}
    torch_impls = [i for i in ("torch_fused", "torch_foreach") if i in med]
    torch_best = min(torch_impls, key=lambda i: med[i]) if torch_impls else None
    rows = []
    for impl, v in values.items():
        ms = med[impl]
        row = {"kind": "summary", "variant": variant, "params": size, "threads": threads,
               "impl": impl, "reps": len(v), "median_ms": ms, "min_ms": min(v), "max_ms": max(v),
               "gparams_per_s": size / ms / 1e6, "gparams_per_s_min": size / max(v) / 1e6,
               "gparams_per_s_max": size / min(v) / 1e6,
               "gbps": BYTES_PER_PARAM * size / ms / 1e6,
               "loadavg_before": load_before, "loadavg_after": load_after,
               "torch_best": torch_best}
        if "plain" in med:
            row["pct_of_plain"] = 100.0 * med["plain"] / ms
        if "deepspeed" in med:
            row["x_deepspeed"] = med["deepspeed"] / ms
        if torch_best:
            row["x_torch_best"] = med[torch_best] / ms
        rows.append(row)
    return rows


def _opt(row, key, fmt):
    return fmt.format(row[key]) if key in row else "-"


def print_main_table(results):
    print("## Time per step (median over processes [min, max]) and throughput\n")
    print("| variant | params | threads | implementation | ms median | ms min | ms max | "
          "Gparam/s | GB/s (28 B/param) | % of plain loop |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['variant']} | {format_count(r['params'])} | {r['threads']} | "
              f"{LABELS[r['impl']]} | {r['median_ms']:.2f} | {r['min_ms']:.2f} | "
              f"{r['max_ms']:.2f} | {r['gparams_per_s']:.3f} | {r['gbps']:.2f} | "
              f"{_opt(r, 'pct_of_plain', '{:.1f}%')} |")
    print()


def print_ratio_table(results):
    print("## ZeroRT against the limit and the peers (targets: >= 95% of the plain loop, "
          ">= 1.0x DeepSpeedCPUAdam)\n")
    print("| variant | params | threads | ZeroRT / plain loop | vs DeepSpeedCPUAdam | "
          "torch best | vs torch best | load avg before -> after |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        if r["impl"] != "zerort":
            continue
        before = " ".join(f"{x:.2f}" for x in r["loadavg_before"])
        after = " ".join(f"{x:.2f}" for x in r["loadavg_after"])
        torch_best = r["torch_best"].replace("torch_", "") if r["torch_best"] else "-"
        print(f"| {r['variant']} | {format_count(r['params'])} | {r['threads']} | "
              f"{_opt(r, 'pct_of_plain', '{:.1f}%')} | {_opt(r, 'x_deepspeed', '{:.2f}x')} | "
              f"{torch_best} | {_opt(r, 'x_torch_best', '{:.2f}x')} | {before} -> {after} |")
    print()


def print_tables(results, info, load_end, seconds):
    print_main_table(results)
    if any(r["impl"] == "zerort" for r in results):
        print_ratio_table(results)
    load = " ".join(f"{x:.2f}" for x in info["loadavg"])
    print(f"Load average (1/5/15 min, /proc/loadavg): {load} at the start, "
          f"{' '.join(f'{x:.2f}' for x in load_end)} at the end; {seconds:.0f} s of measurement. "
          f"{info['reps']} processes per row and implementation, each {info['warmup']} warm-up + "
          f"{info['steps']} timed steps (its value: the median of those). ZeroRT's SIMD path: "
          f"{info.get('zerort_isa') or '-'}. Plain loop: {info['plain_compiler']}.")


def write_svg(results, path, info):
    """Grouped bars: one group per (variant, size, threads), one bar per implementation."""
    groups = []
    for r in results:
        label = f"{r['variant']} {format_count(r['params'])} {r['threads']}t"
        if not groups or groups[-1][0] != label:
            groups.append((label, []))
        groups[-1][1].append((LABELS[r["impl"]], r["gparams_per_s"], r["gparams_per_s_min"],
                              r["gparams_per_s_max"]))
    write_bar_svg(path, f"Adam step throughput, {info['cpu']} ({info['date']}): higher is better",
                  "Gparam/s (median, whisker: min-max)", groups)
