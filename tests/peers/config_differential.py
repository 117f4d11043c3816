"""Config differential: ZeroRT's zrt-config against the real transformers + accelerate + DeepSpeed.

Random but well-formed cases (config_cases.py: a DeepSpeed config with every key of
config/KEYS.md "auto", explicit or absent, TrainingArguments, world size, training steps, model
hidden sizes) go through the real chain (config_peer.py: TrainingArguments, accelerate's
DeepSpeedPlugin rules, deepspeed_init, accelerate's _prepare_deepspeed, DeepSpeedConfig and the
engine's checks) and through `zrt-config resolve` (the HF-Trainer path, --deepspeed, or the
pure-DeepSpeed path, --config; all cases in one process with --cases). Where both accept, every
value ZeroRT's resolved dump writes must equal DeepSpeed's; where both refuse, ZeroRT's error must
name a key that the peer's error names. Every difference must match an entry of
config_known.py, each of which is explained in config/README.md ("Differences from DeepSpeed and
transformers"); anything else fails the test. The LR schedules are compared the same way
(schedule_differential.py: DeepSpeed's lr_schedules and transformers' get_scheduler against
`zrt-config schedule`, every step).

    python tests/peers/config_differential.py --zrt_config build/bin/zrt-config [--seed 1]
        [--cases 2000] [--schedule_cases 300] [--show N] [--verbose] [--dump ALL.jsonl]
    # replay cases (a failing case is printed with this command, its JSON quoted; or give the
    # file written by --save_failures FILE, one case per line):
    python tests/peers/config_differential.py --zrt_config build/bin/zrt-config --replay CASE

CI (ctest peer_config_differential) runs seed 1 with 2,000 config and 300 schedule cases; a longer
run by hand takes another seed and more cases. Exit status 1 when any difference is unexplained
(or, in a run of 500 cases or more, a key of KEYS.md was never generated).
"""
import argparse
import json
import math
import os
import random
import re
import shlex
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import config_cases  # noqa: E402
import config_known  # noqa: E402


def argv_for(case):
    """The zrt-config resolve arguments of a case."""
    config = json.dumps(case["config"])
    if case["mode"] == "deepspeed":
        argv = ["--config", config, "--world_size", str(case["world_size"])]
        return argv + (["--client_optimizer"] if case["client_optimizer"] else [])
    argv = ["--deepspeed", config, "--world_size", str(case["world_size"]),
            "--num_training_steps", str(case["num_training_steps"])]
    model = case["model"]
    if "hidden_size" in model:
        argv += ["--hidden_size", str(model["hidden_size"])]
    if "hidden_sizes" in model:
        argv += ["--hidden_sizes", ",".join(str(h) for h in model["hidden_sizes"])]
    if case["inference"]:
        argv += ["--inference"]
    for key, value in case["args"].items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, dict):
            value = json.dumps(value)
        argv += [f"--{key}", str(value)]
    return argv


def run_zrt(zrt_config, subcommand, argvs, tmpdir):
    path = os.path.join(tmpdir, f"{subcommand}_cases.jsonl")
    with open(path, "w") as f:
        for i, argv in enumerate(argvs):
            f.write(json.dumps({"id": i, "argv": argv}) + "\n")
    run = subprocess.run([zrt_config, subcommand, "--cases", path], capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"zrt-config {subcommand} --cases failed ({run.returncode}): "
                         f"{run.stderr[-2000:]}")
    out = [json.loads(line) for line in run.stdout.splitlines() if line.strip()]
    if len(out) != len(argvs):
        raise SystemExit(f"zrt-config {subcommand} --cases: {len(out)} results for {len(argvs)} cases")
    return out


def flatten(value, prefix=""):
    out = {}
    for key, v in value.items():
        path = f"{prefix}{key}"
        if isinstance(v, dict):
            out.update(flatten(v, path + "."))
        else:
            out[path] = v
    return out


def zrt_view(resolved):
    view = flatten({k: v for k, v in resolved.items() if k != "zrt"})
    if "optimizer.type" in view:
        # ZeroRT writes the type as given; DeepSpeed lower-cases its own optimizers' names.
        if view["optimizer.type"].lower() in ("adam", "adamw"):
            view["optimizer.type"] = view["optimizer.type"].lower()
    return view


def same(a, b):
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b or math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def documented_keys():
    doc = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "config", "KEYS.md")
    return set(re.findall(r"^\| `([^`]+)` \|", open(doc).read(), re.M))


DOCUMENTED_KEYS = documented_keys()


def keys_named(message, case):
    """The config keys (of the case, or documented) and TrainingArguments names a message
    mentions."""
    candidates = set(flatten(case["config"])) | set(flatten(case["args"])) | DOCUMENTED_KEYS
    for key in list(candidates):
        parts = key.split(".")
        candidates.update(".".join(parts[:i]) for i in range(1, len(parts)))
    candidates |= {"train_batch_size", "train_micro_batch_size_per_gpu",
                   "gradient_accumulation_steps", "optimizer", "zero_optimization"}
    named = set()
    for key in candidates:
        last = key.split(".")[-1]
        if re.search(rf"(?<![\w.]){re.escape(key)}(?!\w)", message) or (
                len(last) >= 5 and re.search(rf"(?<!\w){re.escape(last)}(?!\w)", message)):
            named.add(key)
    return named


PYDANTIC_SECTIONS = {"DeepSpeedZeroConfig": "zero_optimization", "DeepSpeedFP16Config": "fp16",
                     "DeepSpeedBF16Config": "bf16",
                     "DeepSpeedZeroOffloadParamConfig": "zero_optimization.offload_param",
                     "DeepSpeedZeroOffloadOptimizerConfig": "zero_optimization.offload_optimizer"}


def message_texts(message):
    """The sentences of a peer error that ZeroRT may repeat: the first line, and each of a pydantic
    ValidationError's messages; plus the dotted keys a pydantic error names ("section.field")."""
    body = message.split(": ", 1)[-1].strip()
    texts = [body.splitlines()[0]]
    m = re.match(r"\d+ validation errors? for (\w+)", body)
    if m:
        section = PYDANTIC_SECTIONS.get(m.group(1), "")
        for loc, msg in re.findall(r"\n(?:(\S[^\n]*)\n)?  ([^\n]*?) \[type=", body):
            texts.append(re.sub(r"^(Assertion failed|Value error), ", "", msg))
            if loc:
                texts.append(f"{section}.{loc}" if section else loc)
    return texts


def compare(case, peer, zrt):
    """The differences of one case: a list of (kind, detail) tuples."""
    if peer["ok"] and zrt["exit"] == 0:
        pv, zv = peer["view"], zrt_view(zrt["resolved"])
        diffs = []
        for key in sorted(zv):
            if key not in pv:
                diffs.append(("value", {"key": key, "peer": "<absent>", "zrt": zv[key]}))
            elif not same(pv[key], zv[key]) and not (
                    # accelerate's inf and ZeroRT's unset both mean "never print"
                    key == "steps_per_print" and pv[key] == math.inf and zv[key] is None):
                diffs.append(("value", {"key": key, "peer": pv[key], "zrt": zv[key]}))
        for key in sorted(set(pv) - set(zv)):
            if key.startswith(("optimizer.", "scheduler.")):
                diffs.append(("value", {"key": key, "peer": pv[key], "zrt": "<absent>"}))
        return diffs
    if peer["ok"]:
        return [("zrt_refuses", {"error": zrt["error"]})]
    if zrt["exit"] == 0:
        return [("peer_refuses", {"stage": peer["stage"], "error": peer["error"]})]
    peer_keys = keys_named("\n".join([peer["error"]] + message_texts(peer["error"])), case)
    zrt_keys = keys_named(zrt["error"], case)
    if peer_keys & zrt_keys:
        return []
    # A message without key names (an assertion's text) must then be ZeroRT's word for word.
    if any(len(text) > 20 and text in zrt["error"] for text in message_texts(peer["error"])):
        return []
    return [("keys", {"stage": peer["stage"], "peer_error": peer["error"],
                      "zrt_error": zrt["error"], "peer_keys": sorted(peer_keys),
                      "zrt_keys": sorted(zrt_keys)})]


def check_coverage(cases):
    """Every key of config/KEYS.md must have appeared in some case."""
    documented = DOCUMENTED_KEYS
    seen = set()
    for case in cases:
        for key in flatten(case["config"]):
            parts = key.split(".")
            seen.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return sorted(documented - seen)


def signature(kind, detail):
    """A short name for a difference, to group them."""
    if kind == "value":
        return f"value {detail['key']}"
    text = (detail.get("peer_error") or detail.get("error") or json.dumps(detail)).strip()
    first = text.splitlines()[0] if text else ""
    return f"{kind} {detail.get('stage', '')}: {re.sub(r'[0-9]+', 'N', first)[:90]}"


def show(case, kind, detail, zrt_config):
    print(f"--- case {case['id']} ({kind}, mode {case['mode']}): {json.dumps(detail, default=str)}")
    print(f"    case: {json.dumps(case)}")
    if "config" in case:
        print(f"    replay: python {sys.argv[0]} --zrt_config {zrt_config} "
              f"--replay {shlex.quote(json.dumps(case))}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--zrt_config", required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--schedule_cases", type=int, default=300)
    parser.add_argument("--replay", help="a case as JSON text, or a file of cases (one per line)")
    parser.add_argument("--show", type=int, default=3, help="known differences shown per kind")
    parser.add_argument("--save_failures", help="write the unexplained cases to this JSONL file")
    parser.add_argument("--verbose", action="store_true", help="also list why cases were refused")
    parser.add_argument("--dump", help="write every difference (explained or not) to this JSONL "
                        "file: case, kind, detail, reason")
    cli = parser.parse_args()
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="zrt_config_diff_") as tmpdir:
        import config_peer
        import schedule_differential
        peer = config_peer.Peer(tmpdir)
        if cli.replay:  # one case as JSON text, or a file of cases, one per line
            if os.path.exists(cli.replay):
                cases = [json.loads(line) for line in open(cli.replay) if line.strip()]
            else:
                cases = [json.loads(cli.replay)]
            cli.schedule_cases = 0
        else:
            rng = random.Random(cli.seed)
            cases = [config_cases.make_case(rng, i) for i in range(cli.cases)]
        setup = time.time() - started
        zrt = run_zrt(cli.zrt_config, "resolve", [argv_for(c) for c in cases], tmpdir)
        zrt_time = time.time() - started - setup
        peers = [peer.run(c) for c in cases]
        peer_time = time.time() - started - setup - zrt_time
        unexplained, known = [], {}
        both_ok = both_failed = 0
        refusals = {}
        for case, p, z in zip(cases, peers, zrt):
            both_ok += p["ok"] and z["exit"] == 0
            both_failed += (not p["ok"]) and z["exit"] != 0
            if not p["ok"] and z["exit"] != 0:
                sig = signature("both", {"stage": p["stage"], "error": p["error"]})
                refusals[sig] = refusals.get(sig, 0) + 1
            for kind, detail in compare(case, p, z):
                reason = config_known.explain(case, kind, detail, p, z)
                if reason is None:
                    unexplained.append((case, kind, detail))
                else:
                    known.setdefault(reason, []).append((case, kind, detail))
        print(f"config_differential: {peer.versions}; seed {cli.seed}")
        print(f"  {len(cases)} cases ({sum(c['mode'] == 'hf' for c in cases)} HF Trainer, "
              f"{sum(c['mode'] == 'deepspeed' for c in cases)} pure DeepSpeed): {both_ok} accepted "
              f"by both, {both_failed} refused by both")
        print(f"  time: set-up {setup:.1f}s, zrt-config {zrt_time:.1f}s, peers {peer_time:.1f}s")
        if cli.verbose:
            for sig, n in sorted(refusals.items(), key=lambda kv: -kv[1]):
                print(f"  refused by both [{sig}]: {n}")
        for reason, items in sorted(known.items()):
            cases_hit = len({case["id"] for case, _, _ in items})
            print(f"  documented difference [{reason}]: {len(items)} difference(s) in {cases_hit} "
                  f"case(s)")
            for case, kind, detail in items[:cli.show]:
                print(f"      case {case['id']} {kind}: {json.dumps(detail, default=str)[:300]}")
        if not cli.replay and cli.cases >= 500:
            missing = check_coverage(cases)
            if missing:
                print(f"  KEYS.md keys no case used: {missing}")
                unexplained.append(({"id": "-", "mode": "-"}, "coverage", {"missing": missing}))
        sched_unexplained = schedule_differential.run(cli, peer, tmpdir) if cli.schedule_cases else []
        groups = {}
        for case, kind, detail in unexplained:
            groups.setdefault(signature(kind, detail), []).append((case, kind, detail))
        for sig, items in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            print(f"  UNEXPLAINED [{sig}]: {len(items)} difference(s)")
            for case, kind, detail in items[:cli.show]:
                show(case, kind, detail, cli.zrt_config)
        if cli.dump:
            with open(cli.dump, "w") as f:
                for reason, items in [(None, unexplained)] + list(known.items()):
                    for case, kind, detail in items:
                        f.write(json.dumps({"reason": reason, "kind": kind, "detail": detail,
                                            "sig": signature(kind, detail), "case": case},
                                           default=str) + "\n")
        if cli.save_failures:
            with open(cli.save_failures, "w") as f:
                for case, _, _ in unexplained:
                    f.write(json.dumps(case) + "\n")
        total = len(unexplained) + len(sched_unexplained)
        print(f"config_differential: {len(unexplained)} unexplained config difference(s), "
              f"{len(sched_unexplained)} unexplained schedule difference(s); "
              f"{time.time() - started:.1f}s")
        return 0 if total == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
