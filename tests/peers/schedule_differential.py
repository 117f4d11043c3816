"""LR-schedule differential (run by config_differential.py): the lr (and OneCycle's beta1) of
every optimizer step, from DeepSpeed's own lr_schedules classes and from transformers'
get_scheduler (through Trainer.create_scheduler), against `zrt-config schedule`.

DeepSpeed schedules: the pure-DeepSpeed path (`zrt-config schedule --config`), the scheduler
built by DeepSpeedEngine._scheduler_from_config on a torch optimizer with the config's lr (AdamW,
or SGD, which has no betas). transformers' schedules: the HF-Trainer path (`--deepspeed` with a
config that has no "scheduler" and no "optimizer", and --lr_scheduler_type, --warmup_steps,
--learning_rate, --lr_scheduler_kwargs). Row k is the lr the k-th optimizer step uses: the
group's lr after construction, then after each step() (Note [Scheduler step convention] in
sched/lr_scheduler.h). Values must agree to 1e-12 relative; a case that one side refuses must
be refused by the other.
"""
import copy
import json
import math

import config_known
from config_differential import run_zrt

HF_TYPES = ["linear", "cosine", "cosine_with_restarts", "polynomial", "constant",
            "constant_with_warmup"]


def _ds_params(g, kind, steps):
    """Valid parameters for a DeepSpeed schedule, with a few edge values."""
    p = {}
    pick, chance = g.choice, g.random

    def maybe(key, *values, probability=0.5):
        if chance() < probability:
            p[key] = pick(values)
    if kind in ("WarmupLR", "WarmupDecayLR"):
        maybe("warmup_min_lr", 0.0, 1e-5, 1e-4, [0.0])
        maybe("warmup_max_lr", 1e-3, 0.01, 0.5)
    if kind in ("WarmupLR", "WarmupDecayLR", "WarmupCosineLR"):
        maybe("warmup_num_steps", 1, 2, 3, 10, steps, steps + 5, 1000, probability=0.8)
        maybe("warmup_type", "log", "linear", "linear")
    if kind in ("WarmupDecayLR", "WarmupCosineLR"):
        p["total_num_steps"] = pick([steps, steps // 2 + 1, steps * 2, 10, 3])
    if kind == "WarmupCosineLR":
        maybe("warmup_min_ratio", 0.0, 0.1, 0.5)
        maybe("cos_min_ratio", 0.0001, 0.0, 0.2)
    if kind == "OneCycle":
        p["cycle_min_lr"] = pick([1e-4, 1e-5, 0.0])
        p["cycle_max_lr"] = pick([1e-3, 0.01, 0.1])
        maybe("decay_lr_rate", 0.0, 0.001, 0.5)
        maybe("cycle_first_step_size", 2000, 5, 3, 10.5, probability=0.8)
        maybe("cycle_second_step_size", 4, 7, 2.5, 0)
        maybe("cycle_first_stair_count", 0, 2, 3)
        maybe("cycle_second_stair_count", 0, 2, 4)
        maybe("decay_step_size", 0, 2, 10)
        maybe("cycle_momentum", True, False)
        maybe("cycle_min_mom", 0.8, 0.85)
        maybe("cycle_max_mom", 0.9, 0.95)
        maybe("decay_mom_rate", 0.0, 0.1)
    if kind == "LRRangeTest":
        maybe("lr_range_test_min_lr", 1e-3, 1e-5)
        maybe("lr_range_test_step_size", 2000, 5, 3, 1)
        maybe("lr_range_test_step_rate", 1.0, 0.5, 5.0)
        maybe("lr_range_test_staircase", True, False)
    maybe("last_batch_iteration", -1, 3, probability=0.05)
    return p


def make_cases(rng, count):
    cases = []
    for i in range(count):
        steps = rng.choice([1, 2, 5, 20, 100, 300])
        if rng.random() < 0.6:
            kind = rng.choice(["WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle",
                               "LRRangeTest"])
            optimizer = rng.choice(["AdamW", "AdamW", "SGD"])
            lr = rng.choice([1e-3, 3e-4, 0.1])
            config = {"train_micro_batch_size_per_gpu": 1,
                      "zero_optimization": {"stage": rng.choice([0, 2])},
                      "optimizer": {"type": optimizer, "params": {"lr": lr}},
                      "scheduler": {"type": kind, "params": _ds_params(rng, kind, steps)}}
            if optimizer == "SGD":
                config["zero_allow_untested_optimizer"] = True
            cases.append({"id": i, "family": "deepspeed", "config": config, "steps": steps})
        else:
            kind = rng.choice(HF_TYPES)
            kwargs = {}
            if kind in ("cosine", "cosine_with_restarts") and rng.random() < 0.4:
                kwargs["num_cycles"] = rng.choice([1, 2, 3]) if kind != "cosine" else rng.choice(
                    [0.5, 1.0, 2.5])
            if kind == "polynomial" and rng.random() < 0.5:
                kwargs = {"power": rng.choice([1.0, 2.0, 0.5]), "lr_end": rng.choice([1e-7, 0.0])}
            args = {"lr_scheduler_type": kind, "learning_rate": rng.choice([5e-5, 1e-3, 0.1]),
                    "warmup_steps": rng.choice([0, 1, 3, 0.1, 0.5, steps, steps + 2])}
            if kwargs:
                args["lr_scheduler_kwargs"] = kwargs
            config = {"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2}}
            cases.append({"id": i, "family": "hf", "config": config, "args": args, "steps": steps})
    return cases


def zrt_argv(case):
    if case["family"] == "deepspeed":
        return ["--config", json.dumps(case["config"]), "--num_training_steps", str(case["steps"])]
    argv = ["--deepspeed", json.dumps(case["config"]), "--num_training_steps", str(case["steps"])]
    for key, value in case["args"].items():
        argv += [f"--{key}", json.dumps(value) if isinstance(value, dict) else str(value)]
    return argv


def peer_curve(peer, case):
    """{"lr": [...], "momentum": [...] or None} or {"error": ...}, from the real classes."""
    torch = peer.torch
    steps = case["steps"]
    try:
        if case["family"] == "deepspeed":
            cfg = case["config"]
            opt_cls = torch.optim.SGD if cfg["optimizer"]["type"] == "SGD" else torch.optim.AdamW
            opt = opt_cls([torch.nn.Parameter(torch.zeros(1))], lr=cfg["optimizer"]["params"]["lr"])
            eng = peer._engine_shell(peer.DeepSpeedConfig(copy.deepcopy(cfg)), None)
            sched = eng._scheduler_from_config(opt)
        else:
            args = peer.TrainingArguments(output_dir=peer.tmpdir, report_to="none", use_cpu=True,
                                          **case["args"])
            opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=args.learning_rate)
            stub = type("TrainerStub", (), {})()
            stub.lr_scheduler, stub.args, stub.optimizer = None, args, opt
            sched = peer.Trainer.create_scheduler(stub, num_training_steps=steps, optimizer=opt)
        momentum = "betas" in opt.defaults and case["family"] == "deepspeed" and (
            case["config"]["scheduler"]["type"] == "OneCycle"
            and getattr(sched, "cycle_momentum", False))
        lrs, moms = [], []
        for _ in range(steps):
            lrs.append(opt.param_groups[0]["lr"])
            moms.append(opt.param_groups[0]["betas"][0] if momentum else None)
            sched.step()
        return {"lr": lrs, "momentum": moms if momentum else None}
    except Exception as e:  # noqa: BLE001
        return {"error": f"{type(e).__name__}: {e}"}


def zrt_curve(result):
    if result["exit"] != 0:
        return {"error": result["error"]}
    lines = result["csv"].strip().splitlines()
    header = lines[0].split(",")
    # An empty momentum: the scheduler has not written betas yet (built with
    # last_batch_iteration != -1), so the optimizer's own beta1 applies: AdamW's 0.9 here.
    rows = [[float(x) if x else 0.9 for x in line.split(",")] for line in lines[1:]]
    momentum = [r[2] for r in rows] if "momentum" in header else None
    return {"lr": [r[1] for r in rows], "momentum": momentum}


def _close(a, b):
    return a == b or math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-300)


def compare(peer, zrt):
    if "error" in peer or "error" in zrt:
        if "error" in peer and "error" in zrt:
            return None
        return ("refuses", {"peer": peer.get("error"), "zrt": zrt.get("error")})
    for key in ("lr", "momentum"):
        a, b = peer[key], zrt[key]
        if (a is None) != (b is None):
            return (key, {"peer": "absent" if a is None else "present",
                          "zrt": "absent" if b is None else "present"})
        if a is None:
            continue
        if len(a) != len(b):
            return (key, {"peer_len": len(a), "zrt_len": len(b)})
        for step, (x, y) in enumerate(zip(a, b)):
            if not _close(x, y):
                return (key, {"step": step, "peer": x, "zrt": y, "peer_head": a[:6], "zrt_head": b[:6]})
    return None


def run(cli, peer, tmpdir):
    import random
    rng = random.Random(cli.seed * 7919 + 1)
    cases = make_cases(rng, cli.schedule_cases)
    zrt = run_zrt(cli.zrt_config, "schedule", [zrt_argv(c) for c in cases], tmpdir)
    unexplained, known, agreed, both_refused = [], {}, 0, 0
    total_steps = 0
    for case, z in zip(cases, zrt):
        p = peer_curve(peer, case)
        zc = zrt_curve(z)
        diff = compare(p, zc)
        if diff is None:
            agreed += "error" not in p
            both_refused += "error" in p
            total_steps += 0 if "error" in p else case["steps"]
            continue
        reason = config_known.explain_schedule(case, diff[0], diff[1], p, zc)
        if reason is None:
            unexplained.append((case, diff))
        else:
            known.setdefault(reason, []).append((case, diff))
    print(f"schedule_differential: {len(cases)} cases ({sum(c['family'] == 'hf' for c in cases)} "
          f"transformers, {sum(c['family'] == 'deepspeed' for c in cases)} DeepSpeed): {agreed} "
          f"agree at every step ({total_steps} steps), {both_refused} refused by both")
    for reason, items in sorted(known.items()):
        print(f"  documented difference [{reason}]: {len(items)} case(s)")
    for case, diff in unexplained[:cli.show + 10]:
        print(f"  UNEXPLAINED schedule case {case['id']}: {json.dumps(diff)[:400]}")
        print(f"      case: {json.dumps(case)}")
        print(f"      zrt-config schedule {' '.join(json.dumps(a) for a in zrt_argv(case))}")
    return unexplained
