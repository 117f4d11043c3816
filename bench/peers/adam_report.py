"""Statistics, markdown tables and the SVG bar chart of bench/peers/adam.py."""

import html
import statistics

BYTES_PER_PARAM = 28  # both variants: fp32 4+4+4+4 read, 4+4+4 written; bf16 4+2+4+4 / 4+4+4+2
LABELS = {"zerort": "ZeroRT fused", "deepspeed": "DeepSpeedCPUAdam",
          "torch_fused": "torch AdamW fused", "torch_foreach": "torch AdamW foreach",
          "plain": "plain loop (limit)"}
COLORS = {"zerort": "#1f77b4", "deepspeed": "#d62728", "torch_fused": "#2ca02c",
          "torch_foreach": "#98df8a", "plain": "#7f7f7f"}


def format_count(n):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= (1 << shift) and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


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


def _svg_text(x, y, text, size=11, anchor="middle", extra=""):
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
            f'font-family="sans-serif"{extra}>{html.escape(str(text))}</text>')


def _svg_axis(out, left, top, plot_h, ymax, width):
    step = next(s for s in (0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.5, 1, 2, 5, 10)
                if ymax / s <= 8)
    y = 0.0
    while y <= ymax + 1e-9:
        py = top + plot_h * (1 - y / ymax)
        out.append(f'<line x1="{left}" y1="{py:.1f}" x2="{width - 10}" y2="{py:.1f}" '
                   'stroke="#ddd"/>')
        out.append(_svg_text(left - 6, py + 4, f"{y:g}", anchor="end"))
        y += step
    out.append(_svg_text(14, top + plot_h / 2, "Gparam/s (median, whisker: min-max)",
                         extra=f' transform="rotate(-90 14 {top + plot_h / 2:.1f})"'))


def write_svg(results, path, info):
    """Grouped bars: one group per (variant, size, threads), one bar per implementation."""
    groups = []
    for r in results:
        key = (r["variant"], r["params"], r["threads"])
        if not groups or groups[-1][0] != key:
            groups.append((key, []))
        groups[-1][1].append(r)
    impls = list(dict.fromkeys(r["impl"] for r in results))
    bar, gap, left, top, plot_h = 16, 24, 60, 50, 300
    group_w = bar * len(impls) + gap
    width = max(left + group_w * len(groups) + 20, 680)  # room for the title and legend
    height = top + plot_h + 60 + 18 * ((len(impls) + 2) // 3)
    ymax = max(r["gparams_per_s_max"] for r in results) * 1.1
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">',
           '<rect width="100%" height="100%" fill="white"/>',
           _svg_text(width / 2, 20, f"Adam step throughput, {info['cpu']} "
                     f"({info['date']}): higher is better", size=13)]
    _svg_axis(out, left, top, plot_h, ymax, width)
    for gi, ((variant, size, threads), rows) in enumerate(groups):
        x0 = left + gap / 2 + gi * group_w
        for r in rows:
            x = x0 + impls.index(r["impl"]) * bar
            y = top + plot_h * (1 - r["gparams_per_s"] / ymax)
            out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar - 2}" '
                       f'height="{top + plot_h - y:.1f}" fill="{COLORS[r["impl"]]}">'
                       f'<title>{html.escape(LABELS[r["impl"]])}: '
                       f'{r["gparams_per_s"]:.3f} Gparam/s</title></rect>')
            ylo = top + plot_h * (1 - r["gparams_per_s_min"] / ymax)
            yhi = top + plot_h * (1 - r["gparams_per_s_max"] / ymax)
            cx = x + (bar - 2) / 2
            out.append(f'<line x1="{cx:.1f}" y1="{ylo:.1f}" x2="{cx:.1f}" y2="{yhi:.1f}" '
                       'stroke="black"/>')
        label = f"{variant} {format_count(size)} {threads}t"
        out.append(_svg_text(x0 + bar * len(impls) / 2, top + plot_h + 16, label, size=10))
    for i, impl in enumerate(impls):
        lx = left + (i % 3) * 200
        ly = top + plot_h + 40 + 18 * (i // 3)
        out.append(f'<rect x="{lx}" y="{ly - 10}" width="12" height="12" '
                   f'fill="{COLORS[impl]}"/>')
        out.append(_svg_text(lx + 18, ly, LABELS[impl], anchor="start"))
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
