#!/usr/bin/env python3
"""A small model of ZeRO step time, checked against the emulated multi-host measurements of
bench/slow_network.py, then used to project step time and memory per rank to large clusters.

  bench/scaling_model.py check RESULTS.jsonl      fit, predict the measured runs, print errors
  bench/scaling_model.py project [options]        the projection table (see --help)
  bench/scaling_model.py project-zeropp [options] ZeRO-3 vs hpZ / qwZ / qgZ on N nodes x G ranks
  bench/scaling_model.py zeropp-volumes [--params P]  expected cross-host bytes of the 2x2 runs

The model (docs/SCALING.md explains each term):

  T_step  = T_compute + T_exposed
  T_comm  = n_coll * alpha + V / B            (a collective's time: a fixed cost per call plus
                                               its bytes over the link's effective bandwidth)
  T_exposed = T_comm - min(T_comm, phi_s * T_compute)

  * alpha, B: relative least-squares fit of comm_bench's reduce_scatter and all_gather times,
    t = alpha + bytes_on_link / B, per link setting and layout (bytes_on_link = (n-1)/n of the buffer, what
    a ring moves over each rank's link);
  * n_coll: collectives per step, V: bytes that cross a rank's link per step, both measured on
    the fast link (they do not depend on the link);
  * T_compute: step time minus the waited-for communication, on the fastest link setting;
  * phi_s: the share of compute that communication can hide behind, one number per ZeRO stage,
    fitted on the fastest and the slowest link setting; every other setting is a prediction.
"""
import argparse
import json
import statistics
import sys
from collections import defaultdict


def load(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    return [r for r in rows if r["kind"] == "collective"], [r for r in rows if r["kind"] == "step"]


def fit_alpha_beta(coll):
    """Per (link, layout): alpha (s) and B (bytes/s) from reduce_scatter + all_gather rows."""
    fits = {}
    groups = defaultdict(list)
    for r in coll:
        if r["op"] not in ("reduce_scatter", "all_gather"):
            continue
        n = r["ranks"]
        on_link = r["bytes"] * (n - 1) / n
        seconds = on_link / (r["busbw_gbps"] * 1e9)  # busbw = bytes * (n-1)/n / t
        groups[(r["link"], r["layout"])].append((on_link, seconds))
    for key, pts in groups.items():
        # Relative least squares (weights 1/t^2): a 16 KiB call counts as much as a 16 MiB one,
        # so alpha is not drowned by the noise of the large calls. Closed form for t = a + x*c.
        w = [1 / (y * y) for _, y in pts]
        sw = sum(w)
        swx = sum(wi * x for wi, (x, _) in zip(w, pts))
        swy = sum(wi * y for wi, (_, y) in zip(w, pts))
        swxx = sum(wi * x * x for wi, (x, _) in zip(w, pts))
        swxy = sum(wi * x * y for wi, (x, y) in zip(w, pts))
        slope = (sw * swxy - swx * swy) / (sw * swxx - swx * swx)
        alpha = max((swy - slope * swx) / sw, 0.0)
        fits[key] = (alpha, 1.0 / slope)
    return fits


def medians(steps):
    out = {}
    groups = defaultdict(list)
    for r in steps:
        groups[(r["link"], r["layout"], r["stage"])].append(r)
    for key, rs in groups.items():
        out[key] = {f: statistics.median(r[f] for r in rs)
                    for f in ("step_s", "comm_busy_s", "comm_exposed_s", "collectives",
                              "link_bytes")}
        out[key]["min"] = min(r["step_s"] for r in rs)
        out[key]["max"] = max(r["step_s"] for r in rs)
    return out


def t_comm(fit, n_coll, volume):
    alpha, bandwidth = fit
    return n_coll * alpha + volume / bandwidth


def predict(t_compute, comm, phi):
    return t_compute + comm - min(comm, phi * t_compute)


def check(path):
    coll, steps = load(path)
    fits = fit_alpha_beta(coll)
    med = medians(steps)
    links = list(dict.fromkeys(r["link"] for r in steps))
    fast, slow = links[0], links[-1]
    layouts = sorted({k[1] for k in med})
    stages = sorted({k[2] for k in med})
    print("## alpha-beta fits (reduce_scatter + all_gather, 16 KiB - 16 MiB)\n")
    print("| link | layout | alpha (us) | B (MB/s) |\n|---|---|---|---|")
    for (link, layout), (a, b) in sorted(fits.items(), key=lambda kv: (links.index(kv[0][0]),
                                                                       kv[0][1])):
        print(f"| {link} | {layout} | {a * 1e6:.0f} | {b / 1e6:.0f} |")
    # Link-independent inputs, from the fast link: compute time, collectives, volume per rank.
    base = {}
    for layout in layouts:
        for s in stages:
            m = med[(fast, layout, s)]
            hosts, per_host = (int(v) for v in layout.split("x"))
            # zrt-h2's veth carries both directions of its per_host ranks' ring traffic.
            base[(layout, s)] = (m["step_s"] - m["comm_exposed_s"], m["collectives"],
                                 m["link_bytes"] / 2)
    # phi per stage: least squares over the fast and slow settings (a 1-D search suffices).
    phis = {}
    for s in stages:
        def err(phi):
            e = 0.0
            for link in (fast, slow):
                for layout in layouts:
                    tc, n, v = base[(layout, s)]
                    pred = predict(tc, t_comm(fits[(link, layout)], n, v), phi)
                    e += (pred / med[(link, layout, s)]["step_s"] - 1) ** 2
            return e
        phis[s] = min((i / 100 for i in range(0, 101)), key=err)  # a share: 0..1
    print("\n## overlap capacity phi per stage (fitted on", fast, "and", slow, ")\n")
    print(" ".join(f"stage {s}: {phis[s]:.2f}" for s in stages))
    print("\n## predicted vs measured step time\n")
    print("| link | layout | stage | measured ms (min-max) | predicted ms | error | "
          "comm model ms | comm measured ms | fitted on |")
    print("|---|---|---|---|---|---|---|---|---|")
    errors = []
    for link in links:
        for layout in layouts:
            for s in stages:
                m = med[(link, layout, s)]
                tc, n, v = base[(layout, s)]
                comm = t_comm(fits[(link, layout)], n, v)
                pred = predict(tc, comm, phis[s])
                err = pred / m["step_s"] - 1
                held_out = link not in (fast, slow)
                if held_out:
                    errors.append(abs(err))
                print(f"| {link} | {layout} | {s} | {m['step_s'] * 1e3:.0f} "
                      f"({m['min'] * 1e3:.0f}-{m['max'] * 1e3:.0f}) | {pred * 1e3:.0f} | "
                      f"{100 * err:+.0f}% | {comm * 1e3:.0f} | {m['comm_busy_s'] * 1e3:.0f} | "
                      f"{'' if held_out else 'yes'} |")
    if errors:
        print(f"\nheld-out settings: median |error| {100 * statistics.median(errors):.0f}%, "
              f"max {100 * max(errors):.0f}% over {len(errors)} predictions")
    json.dump({"phi": phis}, sys.stderr)
    print(file=sys.stderr)


def project(a):
    """Step time and memory per rank for ZeRO-1/2/3 on a cluster described by the options."""
    psi = a.params
    flops = 6 * psi * a.tokens_per_rank  # forward + backward, dense transformer
    t_compute = flops / (a.tflops * 1e12 * a.mfu)
    # Bytes of a full parameter/gradient buffer in the communication dtype.
    full = psi * a.comm_bytes
    passes = {1: 2, 2: 2, 3: 3}  # RS(grads) + AG(params); stage 3 gathers twice (fwd, bwd)
    print(f"# {psi / 1e9:.1f}B parameters, {a.tokens_per_rank} tokens/rank/step, "
          f"{a.tflops} TFLOP/s at {a.mfu:.0%} MFU -> compute {t_compute * 1e3:.0f} ms/step; "
          f"link {a.link_gbit} Gbit/s per rank at {a.link_eff:.0%}, alpha {a.alpha_us} us/hop, "
          f"bucket {a.bucket_mb} MB, overlap phi = {a.phi}\n")
    print("| ranks | stage | comm ms | step ms | comm hidden | scaling eff. | "
          "model states GB/rank |")
    print("|---|---|---|---|---|---|---|")
    bandwidth = a.link_gbit * 1e9 / 8 * a.link_eff
    for n in a.ranks:
        for s in (1, 2, 3):
            volume = passes[s] * full * (n - 1) / n  # a ring: (n-1)/n of each buffer per rank
            calls = passes[s] * max(1, round(full / (a.bucket_mb * 1e6)))
            comm = calls * (n - 1) * a.alpha_us * 1e-6 + volume / bandwidth
            phi = a.phi[s - 1]
            hidden = min(comm, phi * t_compute)
            step = t_compute + comm - hidden
            # Mixed precision with Adam: 2 B params + 2 B grads + 12 B fp32 master/m/v.
            mem = {1: 4 * psi + 12 * psi / n, 2: 2 * psi + 14 * psi / n, 3: 16 * psi / n}[s]
            print(f"| {n} | {s} | {comm * 1e3:.0f} | {step * 1e3:.0f} | "
                  f"{hidden / comm if comm else 1:.0%} | {t_compute / step:.0%} | "
                  f"{mem / 1e9:.1f} |")


# ---------------------------------------------------------------------------------------------
# ZeRO++ (hpZ, qwZ, qgZ) on a two-level cluster: N nodes x G ranks, a fast link inside a node and
# a slower one between nodes. See docs/SCALING.md, "ZeRO++ projection".

ZEROPP_VARIANTS = ("plain", "hpZ", "qwZ", "qgZ", "all")


def qwz_group_size(numel, target=8000):
    """Elements per scale of a qwZ all-gather of numel elements, by DeepSpeed's rule: the number
    of groups is the smallest g >= ceil(numel / target) that divides numel / 8 (so every group
    holds <= target elements). None when numel is not a multiple of 8 (DeepSpeed asserts)."""
    if numel <= 0 or numel % 8:
        return None
    g = -(-numel // target)
    while (numel // 8) % g:
        g += 1
    return numel // g


def qwz_bytes(group):
    """Bytes per element of a qwZ message: an int8 code plus an fp32 scale per group."""
    return 1 + 4 / group


def qgz_bytes(group):
    """Bytes per element of a qgZ message: a 4-bit code plus an fp32 scale per group."""
    return 0.5 + 4 / group


def zeropp_passes(a, variant):
    """The collectives of one ZeRO-3 step under a variant, as (kind, bytes per element) pairs.

    kind: "ring" (a flat ring over all N*G ranks, (W-1)/W of the buffer per rank), "intra" (within
    the node, (G-1)/G of the buffer per rank: hpZ's gather, qgZ's first all-to-all) or "inter"
    (qgZ's all-to-all across nodes, (N-1)/(N*G) of the buffer per rank)."""
    plain, qw, qg = a.comm_bytes, qwz_bytes(a.qwz_group), qgz_bytes(a.qgz_group)
    return {
        "plain": [("ring", plain), ("ring", plain), ("ring", plain)],  # AG fwd, AG bwd, RS
        "hpZ": [("ring", plain), ("intra", plain), ("ring", plain)],
        "qwZ": [("ring", qw), ("ring", qw), ("ring", plain)],
        "qgZ": [("ring", plain), ("ring", plain), ("intra", qg), ("inter", qg)],
        "all": [("ring", qw), ("intra", plain), ("intra", qg), ("inter", qg)],
    }[variant]


def zeropp_comm(a, nodes, variant):
    """Per rank and step: (cross-node bytes, intra-node bytes, comm seconds) of a variant.

    Byte counts are averages over a node's G ranks (a flat ring leaves each node on one edge
    per ring, which carries (W-1)/W of the buffer; that node egress split over the G ranks).
    A ring pass runs at min(ring_nics * B_inter, B_intra): with --ring_nics 1, the default, the
    ring is paced by the one inter-node link it crosses per node, as in `project`."""
    g, psi = a.ranks_per_node, a.params
    w = nodes * g
    b_inter = a.inter_gbit * 1e9 / 8 * a.link_eff
    b_intra = a.intra_gbyte * 1e9 * a.link_eff
    calls = max(1, round(psi * a.comm_bytes / (a.bucket_mb * 1e6)))
    cross = intra = seconds = 0.0
    for kind, per_elem in zeropp_passes(a, variant):
        if kind == "ring":
            moved = psi * per_elem * (w - 1) / w
            cross += moved / g
            intra += moved * (g - 1) / g
            seconds += moved / min(a.ring_nics * b_inter, b_intra)
            seconds += calls * (w - 1) * a.alpha_us * 1e-6
        elif kind == "intra":
            moved = psi * per_elem * (g - 1) / g
            intra += moved
            seconds += moved / b_intra + calls * (g - 1) * a.alpha_intra_us * 1e-6
        else:
            moved = psi * per_elem * (nodes - 1) / (nodes * g)
            cross += moved
            seconds += moved / b_inter + calls * (nodes - 1) * a.alpha_us * 1e-6
    return cross, intra, seconds


def project_zeropp(a):
    """Step time of ZeRO-3 and its ZeRO++ variants per node count (see --help)."""
    psi, g = a.params, a.ranks_per_node
    t_compute = 6 * psi * a.tokens_per_rank / (a.tflops * 1e12 * a.mfu)
    print(f"# {psi / 1e9:.1f}B parameters, {a.tokens_per_rank} tokens/rank/step, "
          f"{a.tflops} TFLOP/s at {a.mfu:.0%} MFU -> compute {t_compute * 1e3:.0f} ms/step; "
          f"{g} ranks/node; inter-node {a.inter_gbit} Gbit/s per rank, intra-node "
          f"{a.intra_gbyte} GB/s per rank, both at {a.link_eff:.0%}; alpha {a.alpha_us} us "
          f"(intra {a.alpha_intra_us} us); bucket {a.bucket_mb} MB; phi = {a.phi}; qwZ group "
          f"{a.qwz_group}, qgZ group {a.qgz_group}; flat ring over {a.ring_nics} NIC(s)/node\n")
    print("| nodes | ranks | variant | cross-node GB/rank | intra-node GB/rank | comm ms | "
          "step ms | scaling eff. | speedup vs plain | extra GB/rank |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    ratios = []
    for n in a.nodes:
        step_plain = cross_plain = None
        for v in ZEROPP_VARIANTS:
            cross, intra, comm = zeropp_comm(a, n, v)
            step = t_compute + comm - min(comm, a.phi * t_compute)
            if v == "plain":
                step_plain, cross_plain = step, cross
            if v == "all":
                ratios.append((n, cross_plain / cross))
            if v not in a.variants:
                continue
            extra = psi * a.comm_bytes / g if v in ("hpZ", "all") else 0.0
            print(f"| {n} | {n * g} | {v} | {cross / 1e9:.2f} | {intra / 1e9:.2f} | "
                  f"{comm * 1e3:.0f} | {step * 1e3:.0f} | {t_compute / step:.0%} | "
                  f"{step_plain / step:.2f}x | {extra / 1e9:.2f} |")
    print("\ncross-node bytes, plain / all: " +
          ", ".join(f"{r:.2f}x at {n} nodes" for n, r in ratios) + " (paper: 3M -> 0.75M, 4x)")


def expected_cross_host_ratios(params, qwz_group=8000, qgz_group=512):
    """Bytes that cross the host boundary per step in the emulated 2 hosts x 2 ranks setup, per
    variant, for a model of `params` parameters trained (and communicated) in fp32.

    Ring collectives over the 4 ranks, ordered host by host, cross the boundary on 2 of the 4
    ring edges, each carrying (W-1)/W of the buffer: 2 * 3/4 = 1.5 buffers per collective, both
    directions together. qgZ's cross-host all-to-all: each rank sends (N-1)/N of its 1/G share,
    P/4 elements, as 4-bit codes. qwz_group = 8000 is the largest group DeepSpeed's rule allows,
    so the qwZ scale bytes are a lower bound (a few tenths of a percent of the codes at most)."""
    ranks, hosts = 4, 2
    ring = 2 * (ranks - 1) / ranks  # buffers over the boundary per ring collective
    fp32 = 4 * params
    qw = ring * qwz_bytes(qwz_group) * params
    qg_cross = ranks * params * (hosts - 1) / (hosts * (ranks // hosts)) * qgz_bytes(qgz_group)
    volumes = {
        "plain": 3 * ring * fp32,
        "hpZ": 2 * ring * fp32,               # the backward gather stays on the host
        "qwZ": 2 * qw + ring * fp32,          # both gathers int8, the reduce-scatter fp32
        "qgZ": 2 * ring * fp32 + qg_cross,    # intra-host all-to-all first, then across
        "all": qw + qg_cross,                 # qwZ forward, hpZ backward (0), qgZ
    }
    return {v: (b, b / volumes["plain"]) for v, b in volumes.items()}


def zeropp_volumes(a):
    shard = int(a.params) // 4
    rule = qwz_group_size(shard)
    print(f"# {int(a.params)} parameters, fp32, 2 hosts x 2 ranks; qwZ group {a.qwz_group} "
          f"(DeepSpeed's rule on one rank's whole shard of {shard} elements gives "
          f"{rule if rule else 'no valid'} elements), qgZ group {a.qgz_group}\n")
    print("| variant | cross-host MB/step | vs plain |\n|---|---|---|")
    for v, (b, ratio) in expected_cross_host_ratios(a.params, a.qwz_group, a.qgz_group).items():
        print(f"| {v} | {b / 1e6:.2f} | {ratio:.3f} |")


def add_zeropp_parsers(sub):
    z = sub.add_parser("project-zeropp", help="project ZeRO-3 and ZeRO++ to N nodes x G ranks")
    z.add_argument("--params", type=float, default=7e9)
    z.add_argument("--tokens_per_rank", type=int, default=4 * 4096)
    z.add_argument("--tflops", type=float, default=989, help="peak dense bf16 TFLOP/s per rank")
    z.add_argument("--mfu", type=float, default=0.4)
    z.add_argument("--nodes", type=int, nargs="+", default=[2, 4, 8, 16, 32, 64])
    z.add_argument("--ranks_per_node", type=int, default=8, help="G; also hpZ's partition size")
    z.add_argument("--inter_gbit", type=float, default=400,
                   help="inter-node network per rank, Gbit/s (one direction)")
    z.add_argument("--intra_gbyte", type=float, default=450,
                   help="intra-node (NVLink-class) bandwidth per rank, GB/s (one direction)")
    z.add_argument("--link_eff", type=float, default=0.8, help="achieved share of both links")
    z.add_argument("--alpha_us", type=float, default=10, help="latency per inter-node hop, us")
    z.add_argument("--alpha_intra_us", type=float, default=3, help="latency per intra-node hop")
    z.add_argument("--bucket_mb", type=float, default=500, help="bytes per collective call")
    z.add_argument("--comm_bytes", type=int, default=2, help="bytes per element (bf16: 2)")
    z.add_argument("--phi", type=float, default=0.8, help="overlap capacity of stage 3")
    z.add_argument("--qwz_group", type=int, default=8000, help="elements per qwZ scale (<= 8000)")
    z.add_argument("--qgz_group", type=int, default=512, help="elements per qgZ scale")
    z.add_argument("--ring_nics", type=int, default=1,
                   help="inter-node links per node a flat ring's traffic is spread over "
                        "(1: paced by one link, as `project`; G: NCCL-style channels on every NIC)")
    z.add_argument("--variants", nargs="+", default=list(ZEROPP_VARIANTS),
                   choices=ZEROPP_VARIANTS, help="rows to print")
    v = sub.add_parser("zeropp-volumes",
                       help="expected cross-host bytes per step of the emulated 2x2 ZeRO++ runs")
    v.add_argument("--params", type=float, default=3307008,
                   help="parameters (default 3307008: the GPT example of docs/SCALING.md)")
    v.add_argument("--qwz_group", type=int, default=8000)
    v.add_argument("--qgz_group", type=int, default=512)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="fit and check against bench/slow_network.py results")
    c.add_argument("results")
    q = sub.add_parser("project", help="project to a cluster")
    q.add_argument("--params", type=float, default=7e9)
    q.add_argument("--tokens_per_rank", type=int, default=4 * 4096)
    q.add_argument("--tflops", type=float, default=989, help="peak dense bf16 TFLOP/s per rank")
    q.add_argument("--mfu", type=float, default=0.4)
    q.add_argument("--link_gbit", type=float, default=400, help="network per rank, Gbit/s")
    q.add_argument("--link_eff", type=float, default=0.8, help="achieved share of the link")
    q.add_argument("--alpha_us", type=float, default=10, help="latency per ring hop, us")
    q.add_argument("--bucket_mb", type=float, default=500, help="bytes per collective call")
    q.add_argument("--comm_bytes", type=int, default=2, help="bytes per element (bf16: 2)")
    q.add_argument("--phi", type=float, nargs=3, default=[0.0, 0.8, 0.8],
                   help="overlap capacity per stage 1 2 3 (share of compute comm can hide in)")
    q.add_argument("--ranks", type=int, nargs="+", default=[8, 32, 128, 512, 1024])
    add_zeropp_parsers(sub)
    a = p.parse_args()
    if a.cmd == "check":
        check(a.results)
    elif a.cmd == "project":
        project(a)
    elif a.cmd == "project-zeropp":
        project_zeropp(a)
    else:
        zeropp_volumes(a)


if __name__ == "__main__":
    main()
