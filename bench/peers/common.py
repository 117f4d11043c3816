"""What every side-by-side benchmark in bench/peers/ shares: the machine's description and load,
rotated repetition order, median/min/max summaries, JSON lines, markdown tables and a grouped bar
chart (SVG). Each benchmark imports it from its own folder (`from common import ...`)."""

import html
import importlib.metadata as md
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time


def loadavg():
    """The 1, 5 and 15 minute load averages of /proc/loadavg."""
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def format_load(values):
    return " ".join(f"{x:.2f}" for x in values)


def format_count(n):
    """1048576 -> "1M"; sizes that are no whole power-of-two unit stay digits."""
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= (1 << shift) and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def parse_count(text):
    """"64M" -> 67108864, "256K" -> 262144, "1000" -> 1000."""
    text = text.strip()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper())
    return int(float(text[:-1]) * scale) if scale else int(text)


def choices(ap, flag, text, known):
    """A comma-separated flag value as a list, every item one of `known`, else ap.error naming
    the flag and what it accepts."""
    items = [x for x in text.split(",") if x]
    for x in items:
        if x not in known:
            ap.error(f"{flag}: unknown {x!r} (known: {', '.join(known)})")
    return items


def machine_meta(**extra):
    """The machine, the peers' versions, the command line and the load, as one JSON object."""
    versions = {}
    for pkg in ("torch", "deepspeed", "transformers"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = None
    with open("/proc/cpuinfo") as f:
        cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")),
                   platform.processor())
    info = {"kind": "meta", "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "cpu": cpu,
            "cpus": os.cpu_count(), "versions": versions, "command": " ".join(sys.argv),
            "loadavg": loadavg()}
    info.update(extra)
    return info


def compile_c(compiler, flags, source, out):
    """Compiles one C file of bench/peers/ (`source`, relative to this folder) into `out`; returns
    `out` and the compiler line with its version, for the report."""
    here = os.path.dirname(os.path.abspath(__file__))
    cmd = [compiler] + list(flags) + [os.path.join(here, source), "-o", out]
    subprocess.run(cmd, check=True)
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout
    return out, " ".join([compiler] + list(flags)) + f" ({version.splitlines()[0]})"


def llama_config_folder(work, layers, hidden, **config):
    """examples/make_tiny_llama.py's folder (SentencePiece tokenizer) in work/model, and its
    config.json with `config`'s keys changed in work/config (a --config_name to train from
    scratch); returns the two paths. A None value removes the key."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    folder = os.path.join(work, "model")
    subprocess.run([sys.executable, os.path.join(root, "examples", "make_tiny_llama.py"), folder,
                    "--layers", str(layers), "--hidden", str(hidden), "--tokenizer"], check=True,
                   capture_output=True)
    with open(os.path.join(folder, "config.json")) as f:
        values = json.load(f)
    values.update(config)
    values = {k: v for k, v in values.items() if v is not None}
    out = os.path.join(work, "config")
    os.makedirs(out)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(values, f)
    return folder, out


def free_port():
    """A TCP port on the loopback interface that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_together(launches, timeout):
    """Starts [(argv, env)] at once, each in its own process group with stdout and stderr in
    temporary files; on the first non-zero exit or past `timeout` seconds kills every group still
    running, so that no rank outlives a failure. Returns ([(stdout, stderr)], error or None)."""
    logs = [(tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")) for _ in launches]
    procs = [subprocess.Popen(argv, env=env, stdout=o, stderr=e, start_new_session=True)
             for (argv, env), (o, e) in zip(launches, logs)]
    deadline = time.monotonic() + timeout
    error = None
    while any(p.poll() is None for p in procs):
        bad = [(i, p.returncode) for i, p in enumerate(procs) if p.poll() not in (None, 0)]
        if bad or time.monotonic() > deadline:
            error = (f"process {bad[0][0]} exited with {bad[0][1]}" if bad
                     else f"timed out after {timeout:.0f} s")
            break
        time.sleep(0.1)
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        p.wait()
    if error is None and any(p.returncode != 0 for p in procs):
        error = "exit codes " + str([p.returncode for p in procs])
    texts = []
    for o, e in logs:
        o.seek(0)
        e.seek(0)
        texts.append((o.read(), e.read()))
        o.close()
        e.close()
    return texts, error


def rotations(variants, reps):
    """(rep, position, variant) for reps rounds, each round starting one variant later, so that
    no variant always runs first (after a cold start) or right after the same neighbour."""
    k = len(variants)
    for rep in range(reps):
        order = variants[rep % k:] + variants[:rep % k]
        for pos, v in enumerate(order):
            yield rep, pos, v


def spread(values):
    """Median, min and max of a non-empty list."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values)}


class Jsonl:
    """JSON lines to a file (or nowhere), flushed per line so a killed run keeps its rows."""

    def __init__(self, path):
        self._f = open(path, "w") if path else None

    def __call__(self, obj):
        if self._f:
            self._f.write(json.dumps(obj) + "\n")
            self._f.flush()

    def close(self):
        if self._f:
            self._f.close()


def print_table(header, rows, title=None):
    """A markdown table; rows are lists of already formatted cells."""
    if title:
        print(f"## {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(str(c) for c in r) + " |")
    print()


def _svg_text(x, y, text, size=11, anchor="middle", extra=""):
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
            f'font-family="sans-serif"{extra}>{html.escape(str(text))}</text>')


PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#98df8a", "#ff7f0e", "#9467bd", "#8c564b",
           "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#c5b0d5"]


def _axis(out, left, top, plot_h, ymax, width, ylabel):
    raw = ymax / 8
    mag = 10 ** len(str(int(raw))) / 10 if raw >= 1 else 1.0
    while mag > raw:
        mag /= 10
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    y = 0.0
    while y <= ymax + 1e-12:
        py = top + plot_h * (1 - y / ymax)
        out.append(f'<line x1="{left}" y1="{py:.1f}" x2="{width - 10}" y2="{py:.1f}" '
                   'stroke="#ddd"/>')
        out.append(_svg_text(left - 6, py + 4, f"{y:g}", anchor="end"))
        y += step
    out.append(_svg_text(14, top + plot_h / 2, ylabel,
                         extra=f' transform="rotate(-90 14 {top + plot_h / 2:.1f})"'))


def write_bar_svg(path, title, ylabel, groups):
    """Grouped bars with min-max whiskers. groups: [(group label, [(series, median, lo, hi)])];
    a series keeps one colour across groups."""
    series = list(dict.fromkeys(s for _, bars in groups for s, *_ in bars))
    color = {s: PALETTE[i % len(PALETTE)] for i, s in enumerate(series)}
    bar, gap, left, top, plot_h = 14, 22, 64, 50, 300
    group_w = bar * max(1, max(len(b) for _, b in groups)) + gap
    width = max(left + group_w * len(groups) + 20, 720)
    height = top + plot_h + 70 + 18 * ((len(series) + 2) // 3)
    ymax = max(hi for _, bars in groups for _, _, _, hi in bars) * 1.1 or 1.0
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">',
           '<rect width="100%" height="100%" fill="white"/>', _svg_text(width / 2, 20, title, 13)]
    _axis(out, left, top, plot_h, ymax, width, ylabel)
    for gi, (label, bars) in enumerate(groups):
        x0 = left + gap / 2 + gi * group_w
        for bi, (s, med, lo, hi) in enumerate(bars):
            x = x0 + bi * bar
            y = top + plot_h * (1 - med / ymax)
            out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar - 2}" '
                       f'height="{top + plot_h - y:.1f}" fill="{color[s]}">'
                       f'<title>{html.escape(f"{label} {s}: {med:.4g}")}</title></rect>')
            cx = x + (bar - 2) / 2
            out.append(f'<line x1="{cx:.1f}" y1="{top + plot_h * (1 - lo / ymax):.1f}" '
                       f'x2="{cx:.1f}" y2="{top + plot_h * (1 - hi / ymax):.1f}" stroke="black"/>')
        out.append(_svg_text(x0 + bar * len(bars) / 2, top + plot_h + 16, label, size=9,
                             extra=f' transform="rotate(20 {x0 + bar * len(bars) / 2:.1f} '
                                   f'{top + plot_h + 16})"'))
    for i, s in enumerate(series):
        lx, ly = left + (i % 3) * 230, top + plot_h + 54 + 18 * (i // 3)
        out.append(f'<rect x="{lx}" y="{ly - 10}" width="12" height="12" fill="{color[s]}"/>')
        out.append(_svg_text(lx + 18, ly, s, anchor="start"))
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
