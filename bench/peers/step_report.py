"""Tables, ratios and the bar chart of bench/peers/step.py, from its per-variant results
({name: {"variant", "rows": [launch JSON rows], "error"}})."""

from common import format_load, loadavg, print_table, spread, write_bar_svg

TIME_TARGET_DS = 0.7   # ZeroRT / DeepSpeed step time, same stage, N and dtype
TIME_TARGET_TORCH = 1.0  # stage 0 / best DDP, stage 3 / best FSDP2
RSS_TARGET = 1.0       # ZeroRT / DeepSpeed peak RSS


def summarize(res):
    """Median/min/max over every timed step of every round, peak RSS over launches and ranks."""
    rows = res["rows"]
    if not rows:
        return None
    steps = [t for r in rows for t in r["steps_ms"]]
    return {"time": spread(steps), "rss": max(r["peak_rss_mib"] for r in rows),
            "loss_first": rows[0]["loss_first"], "loss_last": rows[0]["loss_last"],
            "params": rows[0]["params"], "launches": len(rows),
            "rss_per_rank": [max(v) for v in zip(*(r["rss_per_rank_mib"] for r in rows))],
            "vmhwm_per_rank": [max(v) for v in zip(*(r["vmhwm_per_rank_mib"] for r in rows))]}


def best_of(summaries, framework):
    """The name of `framework`'s faster AdamW row (lower median), or None."""
    names = [n for n in summaries if n.startswith(framework + " ") and summaries[n]]
    return min(names, key=lambda n: summaries[n]["time"]["median"]) if names else None


def ratio_rows(summaries):
    """(what, value, target, meets) of every ratio that both sides measured."""
    out = []

    def add(what, num, den, key, target):
        a, b = summaries.get(num), summaries.get(den)
        if not a or not b:
            return
        va = a["time"]["median"] if key == "time" else a["rss"]
        vb = b["time"]["median"] if key == "time" else b["rss"]
        out.append((what, va / vb, target, va / vb <= target))
    for dtype in ("fp32", "bf16"):
        for s in range(4):
            add(f"time zerort/deepspeed z{s} {dtype}", f"zerort z{s} {dtype}",
                f"deepspeed z{s} {dtype}", "time", TIME_TARGET_DS)
    ddp, fsdp = best_of(summaries, "ddp"), best_of(summaries, "fsdp2")
    if ddp:
        add(f"time zerort z0 fp32 / {ddp} (best DDP)", "zerort z0 fp32", ddp, "time",
            TIME_TARGET_TORCH)
    if fsdp:
        add(f"time zerort z3 fp32 / {fsdp} (best FSDP2)", "zerort z3 fp32", fsdp, "time",
            TIME_TARGET_TORCH)
    for dtype in ("fp32", "bf16"):
        for s in range(4):
            add(f"peak RSS zerort/deepspeed z{s} {dtype}", f"zerort z{s} {dtype}",
                f"deepspeed z{s} {dtype}", "rss", RSS_TARGET)
    return out


def loss_note(name, summaries):
    """The first step's loss relative to DeepSpeed's same stage and dtype (same weights and
    data: they should agree up to rounding), for ZeroRT rows."""
    if not name.startswith("zerort ") or "+offload" in name:
        return ""
    peer = summaries.get(name.replace("zerort", "deepspeed", 1))
    mine = summaries.get(name)
    if not peer or not mine:
        return ""
    rel = abs(mine["loss_first"] - peer["loss_first"]) / abs(peer["loss_first"])
    return f"step-1 loss vs DS {rel:.1e}"


def print_report(model, ranks, results, emit, args):
    summaries = {n: summarize(r) for n, r in results.items()}
    best = {best_of(summaries, "ddp"), best_of(summaries, "fsdp2")}
    loads = [r["loadavg"][0] for res in results.values() for r in res["rows"]]
    header = ["variant", "params", "median ms", "min", "max", "steps", "peak RSS MiB (max rank)",
              "loss first -> last", "note"]
    rows = []
    for name, res in results.items():
        s = summaries[name]
        label = name + (" (best)" if name in best else "")
        if s is None:
            rows.append([label, "", "", "", "", "", "", "", "FAILED: " + res["error"]])
            continue
        t = s["time"]
        rows.append([label, f"{s['params'] / 1e6:.2f}M", f"{t['median']:.1f}", f"{t['min']:.1f}",
                     f"{t['max']:.1f}", t["n"], f"{s['rss']:.0f}",
                     f"{s['loss_first']:.4f} -> {s['loss_last']:.4f}",
                     loss_note(name, summaries) + ("; " + res["error"] if res["error"] else "")])
        emit({"kind": "summary", "model": model, "ranks": ranks, "variant": name,
              "best": name in best, "step_ms": t, "peak_rss_mib": s["rss"],
              "rss_per_rank_mib": s["rss_per_rank"], "vmhwm_per_rank_mib": s["vmhwm_per_rank"],
              "loss_first": s["loss_first"], "loss_last": s["loss_last"], "params": s["params"]})
    load_now = format_load(loadavg())
    during = f"{min(loads):.2f}-{max(loads):.2f}" if loads else "n/a"
    print_table(header, rows, title=f"{model}, N={ranks}: training step ({args.rounds} rounds x "
                f"{args.steps} timed steps; load now {load_now}, 1-min load during the launches "
                f"{during})")
    ratios = ratio_rows(summaries)
    if ratios:
        print_table(["ratio", "value", "target", "meets"],
                    [[w, f"{v:.2f}", f"<= {t:g}", "yes" if ok else "NO"] for w, v, t, ok in ratios],
                    title=f"{model}, N={ranks}: ratios (load {load_now})")
    for w, v, t, ok in ratios:
        emit({"kind": "ratio", "model": model, "ranks": ranks, "what": w, "value": v,
              "target": t, "meets": ok})


def write_svg(path, groups):
    """One group of bars per (model, N): each variant's median step time, whiskers min-max."""
    bars = []
    for model, ranks, results in groups:
        items = []
        for name, res in results.items():
            s = summarize(res)
            if s:
                t = s["time"]
                items.append((name, t["median"], t["min"], t["max"]))
        if items:
            bars.append((f"{model} N={ranks}", items))
    if bars:
        write_bar_svg(path, "Training step time (median, min-max over all timed steps)",
                      "ms per step", bars)
