"""Summaries, markdown tables and the SVG of bench/peers/ckpt.py."""

import statistics

from common import format_load, print_table, spread, write_bar_svg

LABELS = {"zerort": "ZeroRT", "deepspeed": "DeepSpeed", "plain": "plain writer (ceiling)",
          "plain_nokick": "plain, no sync_file_range"}
PHASES = [("save_s", "save"), ("load_warm_s", "load warm"), ("load_cold_s", "load cold")]


def _phase(ok_runs, key):
    """Spread of seconds and of GB/s (bytes on disk / s, 1e9) of one phase, or None."""
    pairs = [(r[key], r["bytes"]) for r in ok_runs if r.get(key, -1) > 0]
    if not pairs:
        return None
    s = spread([t for t, _ in pairs])
    g = spread([b / t / 1e9 for t, b in pairs])
    return {"s": s, "gbps": g}


def summarize(stage, world, runs, load_before, load_after):
    """One summary row per variant from its launches, and on ZeroRT's row the ratios:
    save_pct_of_plain = ZeroRT's GB/s / the plain writer's (the same bytes and files), and
    x_deepspeed_<phase> = DeepSpeed's seconds / ZeroRT's for the same training state (> 1: ZeroRT
    is faster), gbps_x_deepspeed_<phase> the same in GB/s (the byte counts differ)."""
    rows = {}
    for variant, rs in runs.items():
        ok = [r for r in rs if "error" not in r]
        row = {"kind": "summary", "stage": stage, "world": world, "variant": variant,
               "launches": len(rs), "ok": len(ok), "errors": [r["error"] for r in rs
                                                              if "error" in r],
               "loadavg_before": load_before, "loadavg_after": load_after}
        if ok:
            row["bytes"] = statistics.median(r["bytes"] for r in ok)
            row["allocated"] = statistics.median(r["allocated"] for r in ok)
            row["files"] = ok[-1]["files"]
            row["names"] = ok[-1]["names"]
            row["threads"] = ok[-1]["threads"]
            for key, _ in PHASES:
                ph = _phase(ok, key)
                if ph:
                    row[key] = ph["s"]
                    row[key.replace("_s", "_gbps")] = ph["gbps"]
        rows[variant] = row
    z = rows.get("zerort", {})
    for plain, key in (("plain", "save_pct_of_plain"), ("plain_nokick", "save_pct_of_nokick")):
        if "save_s" in z and "save_gbps" in rows.get(plain, {}):
            z[key] = 100 * z["save_gbps"]["median"] / rows[plain]["save_gbps"]["median"]
    ds = rows.get("deepspeed", {})
    for key, _ in PHASES:
        if key in z and key in ds:
            z["x_deepspeed_" + key[:-2]] = ds[key]["median"] / z[key]["median"]
            gkey = key.replace("_s", "_gbps")
            z["gbps_x_deepspeed_" + key[:-2]] = z[gkey]["median"] / ds[gkey]["median"]
    return list(rows.values())


def _time_cell(row, key):
    if key not in row:
        return "-"
    s = row[key]
    return f"{s['median']:.3f} [{s['min']:.3f}, {s['max']:.3f}]"


def _gbps_cell(row, key):
    g = row.get(key.replace("_s", "_gbps"))
    return f"{g['median']:.3f}" if g else "-"


def _opt(row, key, fmt):
    return fmt.format(row[key]) if key in row else "-"


def print_main_table(results):
    header = ["stage", "N", "framework", "files", "MB on disk", "save s median [min, max]",
              "save GB/s", "load warm s", "warm GB/s", "load cold s", "cold GB/s", "load avg",
              "errors"]
    rows = []
    for r in results:
        mb = f"{r['bytes'] / 1e6:.1f}" if "bytes" in r else "-"
        err = ""
        if r["errors"]:  # the first line of the first error, kept to a table cell
            first = r["errors"][0].splitlines()[0][:160].replace("|", "/")
            err = f"{len(r['errors'])}/{r['launches']}: {first}"
        rows.append([r["stage"], r["world"], LABELS[r["variant"]], r.get("files", "-"), mb,
                     _time_cell(r, "save_s"), _gbps_cell(r, "save_s"),
                     _time_cell(r, "load_warm_s"), _gbps_cell(r, "load_warm_s"),
                     _time_cell(r, "load_cold_s"), _gbps_cell(r, "load_cold_s"),
                     f"{format_load(r['loadavg_before'])} -> {format_load(r['loadavg_after'])}",
                     err])
    print_table(header, rows, "Checkpoint save and load (seconds per launch: median [min, max]; "
                "GB/s = bytes on disk / s, 1e9)")


def print_ratio_table(results):
    header = ["stage", "N", "save: % of plain ceiling", "% of plain, no kicks", "save vs DeepSpeed",
              "load warm vs DeepSpeed", "load cold vs DeepSpeed",
              "GB/s vs DeepSpeed (save/warm/cold)", "load avg"]
    rows = []
    for r in results:
        if r["variant"] != "zerort":
            continue
        gb = "/".join(_opt(r, "gbps_x_deepspeed_" + k, "{:.2f}x") for k in ("save", "load_warm",
                                                                          "load_cold"))
        rows.append([r["stage"], r["world"], _opt(r, "save_pct_of_plain", "{:.1f}%"),
                     _opt(r, "save_pct_of_nokick", "{:.1f}%"),
                     _opt(r, "x_deepspeed_save", "{:.2f}x"),
                     _opt(r, "x_deepspeed_load_warm", "{:.2f}x"),
                     _opt(r, "x_deepspeed_load_cold", "{:.2f}x"), gb,
                     f"{format_load(r['loadavg_before'])} -> {format_load(r['loadavg_after'])}"])
    print_table(header, rows, "ZeroRT against the ceiling and DeepSpeed (targets: save >= 80% of "
                "the plain writer, >= 1.0x DeepSpeed; vs DeepSpeed = its seconds / ours for the "
                "same training state)")


def print_bytes_table(results):
    header = ["stage", "N", "framework", "files", "bytes", "allocated", "file names"]
    rows = [[r["stage"], r["world"], LABELS[r["variant"]], r["files"], r["bytes"],
             r["allocated"], " ".join(r["names"])] for r in results if "bytes" in r]
    print_table(header, rows, "What is on disk (walked after each save)")


def print_tables(results, info, load_end, seconds):
    v = info["versions"]
    print(f"# Checkpoint save/load: {info['cpu']}, {info['cpus']} CPUs, torch {v['torch']}, "
          f"DeepSpeed {v['deepspeed']}, {info['date']}\n")
    print(f"MLP width {info['width']}, {info['layers']} blocks, fp32, AdamW, after one step; "
          f"{info['rounds']} rounds, rotated order, one launch per framework and round; folder "
          f"{info['dir']}.\n")
    print_main_table(results)
    if any(r["variant"] == "zerort" for r in results):
        print_ratio_table(results)
    print_bytes_table(results)
    print(f"Load average (1/5/15 min): {format_load(info['loadavg'])} at the start, "
          f"{format_load(load_end)} at the end; {seconds:.0f} s. Plain writer: "
          f"{info['plain_compiler']}.")


def write_svg(results, path, info):
    groups = []
    for r in results:
        if r["variant"] != "zerort":
            continue
        for key, label in PHASES:
            bars = []
            for o in results:
                g = o.get(key.replace("_s", "_gbps"))
                if o["stage"] == r["stage"] and o["world"] == r["world"] and g:
                    bars.append((LABELS[o["variant"]], g["median"], g["min"], g["max"]))
            if bars:
                groups.append((f"stage {r['stage']} N={r['world']} {label}", bars))
    if groups:
        write_bar_svg(path, f"Checkpoint GB/s (bytes on disk / s), {info['cpu']} "
                      f"({info['date']}): higher is better", "GB/s (median, whisker: min-max)",
                      groups)
