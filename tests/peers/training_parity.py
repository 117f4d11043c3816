"""Training parity with the real DeepSpeed (issue 14; label `peer`).

The same model, initial weights, config, data order and world size on both sides: ZeroRT's
zrt-train on 2 MPI ranks (zrt-launch) and DeepSpeed 0.19.8 on 2 gloo ranks (its CPU accelerator),
both starting from one safetensors file of the twins' weights (tests/peers/twins.py). Each case
trains STEPS optimizer steps with DeepSpeed's AdamW (FusedAdam) and its WarmupDecayLR scheduler
and compares, step by step, the loss (mean of the step's micro-batch losses over both ranks, what
zrt-train logs to trainer_state.json), the learning rate after the step, the gradient norm
(before clipping), the loss scale and the skipped steps; then the final fp32 master weights
(zrt-ckpt to-fp32 of ZeroRT's checkpoint; DeepSpeed's zero_to_fp32 of its checkpoint at stages
1-3, its fp32 weights in memory at stage 0), element by element.

The matrix: MLP twin (width 32, 2 blocks: 2,722 parameters; reduce/allgather buckets of 512
elements, stage-3 persistence threshold 0, so every stage splits the model into several buckets
and partitions) x ZeRO stage 0-3 x {fp32, bf16} x gradient accumulation {1, 4} x clipping
{off, 0.05} = 32 cases; plus the GPT twin (models/gpt.h: width 32, 2 heads, 2 layers, context
16, 42,368 parameters) at stages 2 and 3 in fp32 and bf16 (GA 4, clipping on), plus the GPT at
stage 3 in fp32 with activation checkpointing on both sides (every block through
torch.utils.checkpoint in DeepSpeed's run, as HF's gradient_checkpointing; zrt-train
--gradient_checkpointing) = 37 in all with --full (about 4 minutes here). Without --full (CI,
about 2 minutes) 11 cases drawn with --seed (default: ZRT_PARITY_SEED, else 0): for each dtype
one MLP case per stage, the four (GA, clipping) pairs each once, one GPT case per dtype, and the
checkpointed GPT.

fp16 is not in the matrix: DeepSpeed's CPU accelerator refuses fp16 on a CPU without
AVX512-FP16 (docs/PEERS.md), so fp16 parity (and with it the dynamic loss scale and skipped
steps, which only fp16 has) cannot be measured on this machine. In fp32 and bf16 the loss scale
is 1 and no step is skipped on either side, which the test checks.

Tolerances, per element |zrt - ds| <= atol + rtol |ds|, with S = the sum of the scheduler's lr
after each of the 6 steps (0.0325, more than the lr the steps applied: 0.0275):
  fp32: loss and grad norm rtol 1e-5, lr 1e-12 (exact), weights rtol 1e-5, atol 1e-4 S (3.3e-6).
    Both sides compute the same fp32 maths in another order: a loss or norm differs by a few
    ulp (measured <= 3.7e-6). DeepSpeed's Adam takes beta^t as running fp32 products, ZeroRT
    from pow() in double: 1 - beta2^t then differs by up to 6e-5 relative in the first steps,
    so each step's update lr m/(sqrt(v)+eps) (|m/sqrt(v)| <~ 1) by ~3e-5 lr; summed over the
    steps, 3e-5 S, with room for what it feeds forward: atol 1e-4 S. Measured: <= 0.05 of the
    bound for the MLP, 0.31 for the GPT; ZeroRT's old weight-decay difference (fixed, see
    docs/PEERS.md) was up to 20x it.
  bf16: loss and grad norm rtol 2^-8 (one bf16 rounding of the outputs), lr exact, weights
    rtol 1e-5 (the fp32 masters), atol r 2^-8 S. The forward and backward are the same LibTorch
    bf16 kernels on both sides; the gradients differ only in roundings to bf16 that one side
    makes and the other makes elsewhere (GA - 1 accumulations and the reduction: r = GA + 1),
    each <= 2^-8 relative in a gradient and so in an update. Stage 0 is held to DeepSpeed's
    stage 1 (reference_case) with twice that: ZeroRT accumulates there in fp32, and two
    legitimate accumulations in DeepSpeed itself, its stages 1 and 2, differ by 1.22 of the
    single bound at GA 4 (printed as "DeepSpeed against itself"). Measured: ZeroRT within 0.06
    of the bound of DeepSpeed's same stage at stages 1-3 (bit-identical losses at GA 1), 0.45
    at stage 0, 0.35 for the GPT.
  The GPT's key biases have a zero gradient in exact arithmetic (softmax ignores a shift of all
  scores); Adam turns their rounding noise into steps of ~lr, so they get atol 2 S.

    python tests/peers/training_parity.py --bin build/bin [--full] [--seed N] [--keep DIR]
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

from peer_launch import run_ranks

STEPS, MICRO, LR, WD, WARMUP, CLIP, SEED = 6, 4, 1e-2, 0.01, 2, 0.05, 42
MLP = {"width": 32, "layers": 2}
GPT = {"width": 32, "heads": 2, "layers": 2, "context": 16}
BUCKET = 512
LRS = [0.0, LR / 2, LR, LR * 3 / 4, LR / 2, LR / 4]  # WarmupDecayLR's lr after each step
BF16_EPS = 2.0 ** -8  # bf16's relative rounding error (8 significant bits)


def tolerances(case):
    """(rtol of loss and grad norm, rtol of lr, rtol of weights, atol of weights): see the
    module's docstring for where each comes from."""
    if case["dtype"] == "fp32":
        return 1e-5, 1e-12, 1e-5, 1e-4 * sum(LRS)
    roundings = (case["ga"] + 1) * (2 if case["stage"] == 0 else 1)
    return BF16_EPS, 1e-12, 1e-5, roundings * BF16_EPS * sum(LRS)


def noise_driven(case, name):
    """The elements whose gradient is zero in exact arithmetic, or None: the GPT's key biases
    (adding b to every key adds q.b to a query's scores, which softmax ignores). Their gradient is
    rounding noise, which Adam scales to a step of about lr of either sign, so the two sides may
    move them apart by up to 2 sum(lr) wherever their roundings differ."""
    if case["model"] != "gpt" or not name.endswith("attn.qkv.bias"):
        return None
    return slice(GPT["width"], 2 * GPT["width"])


def reference_case(case):
    """The DeepSpeed case ZeroRT's loss, gradient norm and weights are compared with: the same
    case, except bf16 at stage 0, where DeepSpeed 0.19.8 accumulates and all-reduces the
    gradients in bf16 (FP16_Optimizer) and ZeroRT in fp32 (docs/PEERS.md): there DeepSpeed's
    stage 1, whose gradient arithmetic ZeroRT's stage 0 shares (fp32 master update of the
    reduced gradients)."""
    if case["dtype"] == "bf16" and case["stage"] == 0:
        ref = dict(case, stage=1)
        ref["name"] = case["name"].replace("_z0_", "_z1_")
        return ref
    return case


def all_cases():
    cases = []
    for stage in range(4):
        for dtype in ("fp32", "bf16"):
            for ga in (1, 4):
                for clip in (False, True):
                    cases.append({"model": "mlp", "stage": stage, "dtype": dtype, "ga": ga,
                                  "clip": clip})
    for stage in (2, 3):
        for dtype in ("fp32", "bf16"):
            cases.append({"model": "gpt", "stage": stage, "dtype": dtype, "ga": 4, "clip": True})
    # Activation checkpointing on both sides: DeepSpeed's engine with every block through
    # torch.utils.checkpoint (as HF's gradient_checkpointing) and an activation_checkpointing
    # section, zrt-train --gradient_checkpointing.
    cases.append({"model": "gpt", "stage": 3, "dtype": "fp32", "ga": 4, "clip": True,
                  "checkpointing": True})
    for c in cases:
        c["name"] = (f"{c['model']}_z{c['stage']}_{c['dtype']}_ga{c['ga']}"
                     f"_{'clip' if c['clip'] else 'noclip'}"
                     f"{'_ckpt' if c.get('checkpointing') else ''}")
    return cases


def ci_cases(seed):
    """10 cases: for each dtype and stage one MLP case, the (GA, clipping) pairs shuffled so that
    each appears once per dtype; plus one GPT case per dtype."""
    rng = random.Random(seed)
    cases = all_cases()
    picked = []
    for dtype in ("fp32", "bf16"):
        combos = [(1, False), (1, True), (4, False), (4, True)]
        rng.shuffle(combos)
        for stage in range(4):
            ga, clip = combos[stage]
            picked += [c for c in cases if c["model"] == "mlp" and c["stage"] == stage and
                       c["dtype"] == dtype and c["ga"] == ga and c["clip"] == clip]
    gpts = [c for c in cases if c["model"] == "gpt" and not c.get("checkpointing")]
    picked.append(rng.choice([c for c in gpts if c["dtype"] == "fp32"]))
    picked.append(rng.choice([c for c in gpts if c["dtype"] == "bf16"]))
    picked += [c for c in cases if c.get("checkpointing")]
    return picked


def ds_config(case, monitor):
    """One DeepSpeed config, given as is to DeepSpeed and to zrt-train (HF flags matching it);
    the csv monitor writes into `monitor` (one folder per side)."""
    zero = {"stage": case["stage"], "reduce_bucket_size": BUCKET, "allgather_bucket_size": BUCKET}
    if case["stage"] == 3:
        zero.update({"stage3_param_persistence_threshold": 0,
                     "stage3_prefetch_bucket_size": BUCKET})
    return {
        "train_micro_batch_size_per_gpu": MICRO,
        "gradient_accumulation_steps": case["ga"],
        "train_batch_size": MICRO * case["ga"] * 2,
        "gradient_clipping": CLIP if case["clip"] else 0.0,
        "optimizer": {"type": "AdamW", "params": {"lr": LR, "betas": [0.9, 0.999], "eps": 1e-8,
                                                  "weight_decay": WD}},
        "scheduler": {"type": "WarmupDecayLR",
                      "params": {"warmup_min_lr": 0, "warmup_max_lr": LR,
                                 "warmup_num_steps": WARMUP, "total_num_steps": STEPS,
                                 "warmup_type": "linear"}},
        "bf16": {"enabled": case["dtype"] == "bf16"},
        "zero_optimization": zero,
        "csv_monitor": {"enabled": True, "output_path": monitor, "job_name": "job"},
        "steps_per_print": 100000,
        **({"activation_checkpointing": {"partition_activations": False,
                                         "cpu_checkpointing": False, "profile": False}}
           if case.get("checkpointing") else {}),
    }


def make_model(case):
    from twins import Gpt, Mlp
    if case["model"] == "mlp":
        return Mlp(MLP["width"], MLP["layers"])
    return Gpt(context=GPT["context"], width=GPT["width"], heads=GPT["heads"],
               layers=GPT["layers"], checkpointing=bool(case.get("checkpointing")))


def training_data(case, work):
    """The training set zrt-train builds for the case's model (the GPT's from work/corpus.txt)."""
    from twins import byte_windows, regression_data
    if case["model"] == "mlp":
        return regression_data(4096, 1)
    with open(os.path.join(work, "corpus.txt"), "rb") as f:
        return byte_windows(f.read(), GPT["context"])


def loss_of(case, out, y):
    import torch
    from twins import gpt_loss
    return torch.nn.functional.mse_loss(out, y) if case["model"] == "mlp" else gpt_loss(out, y)


def ds_fp32_weights(engine, case, work):
    """DeepSpeed's fp32 master weights after training: its own zero_to_fp32 of a checkpoint at
    stages 1-3; at stage 0 the module (fp32) or FP16_Optimizer's fp32 groups (bf16)."""
    import torch
    if case["stage"] > 0:
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
        ckpt = os.path.join(work, "ds_" + case["name"])
        engine.save_checkpoint(ckpt)
        torch.distributed.barrier()
        return get_fp32_state_dict_from_zero_checkpoint(ckpt) if engine.global_rank == 0 else {}
    names = {id(p): n for n, p in engine.module.named_parameters()}
    if case["dtype"] == "fp32":
        return {n: p.detach().clone() for n, p in engine.module.named_parameters()}
    opt = engine.optimizer
    out = {}
    for lp_group, flat in zip(opt.fp16_groups, opt.fp32_groups_flat):
        offset = 0
        for p in lp_group:
            out[names[id(p)]] = flat[offset:offset + p.numel()].view_as(p).detach().clone()
            offset += p.numel()
    return out


def ds_case(case, work):
    """Trains one case in DeepSpeed on this rank; rank 0 returns the per-step records."""
    import torch
    import deepspeed
    from safetensors.torch import load_file, save_file
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    model = make_model(case)
    model.load_state_dict(load_file(os.path.join(work, f"init_{case['model']}.safetensors")))
    monitor = os.path.join(work, "ds_" + case["name"] + "_monitor")
    if rank == 0:  # the csv monitor appends: a crashed attempt's rows (peer_launch) must go
        shutil.rmtree(monitor, ignore_errors=True)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=ds_config(case, monitor))
    x, y = training_data(case, work)
    sampler = torch.utils.data.DistributedSampler(range(x.shape[0]), num_replicas=world,
                                                  rank=rank, shuffle=True, seed=SEED)
    sampler.set_epoch(0)
    idx = list(sampler)
    dtype = torch.bfloat16 if case["dtype"] == "bf16" else torch.float32
    rec = {"loss": [], "lr": [], "grad_norm": [], "loss_scale": [], "skipped": 0}
    micro = 0
    for _ in range(STEPS):
        losses = []
        for _ in range(case["ga"]):
            batch = idx[micro * MICRO:(micro + 1) * MICRO]
            micro += 1
            xb = x[batch] if case["model"] == "gpt" else x[batch].to(dtype)
            loss = loss_of(case, engine(xb), y[batch])
            engine.backward(loss)
            engine.step()
            losses.append(loss.item())
        mean = torch.tensor([sum(losses) / len(losses)], dtype=torch.float64)
        torch.distributed.all_reduce(mean)
        rec["loss"].append(mean.item() / world)
        rec["lr"].append(engine.get_lr()[0])
        norm = engine.get_global_grad_norm()
        # None (NaN here) where DeepSpeed computed no norm (stage 0 fp32 without clipping).
        rec["grad_norm"].append(float(norm) if norm is not None else float("nan"))
        scale = getattr(engine.optimizer, "cur_scale", getattr(engine.optimizer, "loss_scale", 1.0))
        # DeepSpeed's bf16 optimizers keep no loss scale (None); unscaled is 1, as ZeroRT reports.
        rec["loss_scale"].append(float(scale) if scale is not None else 1.0)
    rec["skipped"] = int(engine.skipped_steps)
    if rank == 0:
        rec.update(monitor_files(monitor))
    rec["global_steps"] = int(engine.global_steps)
    weights = ds_fp32_weights(engine, case, work)
    if rank == 0:
        save_file({k: v.float().contiguous() for k, v in weights.items()},
                  os.path.join(work, f"ds_{case['name']}.safetensors"))
    if hasattr(engine, "destroy"):
        engine.destroy()
    return rec if rank == 0 else None


def rank_main(args):
    import torch
    import deepspeed
    deepspeed.init_distributed(dist_backend="gloo")
    torch.set_num_threads(1)
    with open(os.path.join(args.work, "cases.json")) as f:
        cases = json.load(f)
    for case in cases:
        rec = ds_case(case, args.work)
        if rec is not None:
            with open(os.path.join(args.work, f"ds_{case['name']}.json"), "w") as f:
                json.dump(rec, f)


def zrt_case(args, case, work):
    """Trains one case with zrt-train on 2 MPI ranks; returns its records and fp32 weights."""
    from safetensors.torch import load_file
    out = os.path.join(work, "zrt_" + case["name"])
    cfg = os.path.join(work, case["name"] + ".json")
    with open(cfg, "w") as f:
        json.dump(ds_config(case, os.path.join(out, "monitor")), f)
    dims = MLP if case["model"] == "mlp" else GPT
    cmd = [os.path.join(args.bin, "zrt-launch"), "--np", "2", "--timeout", "300", "--",
           os.path.join(args.bin, "zrt-train"), "--model", case["model"], "--deepspeed", cfg,
           "--output_dir", out, "--max_steps", str(STEPS), "--per_device_train_batch_size",
           str(MICRO), "--gradient_accumulation_steps", str(case["ga"]), "--learning_rate",
           str(LR), "--weight_decay", str(WD), "--warmup_steps", str(WARMUP), "--max_grad_norm",
           str(CLIP if case["clip"] else 0.0), "--logging_steps", "1", "--save_strategy",
           "steps", "--save_steps", str(STEPS), "--seed", str(SEED), "--model_name_or_path",
           os.path.join(work, f"init_{case['model']}.safetensors")]
    for k, v in dims.items():
        cmd += [f"--{k}", str(v)]
    if case["model"] == "gpt":
        cmd += ["--train_file", os.path.join(work, "corpus.txt")]
    if case["dtype"] == "bf16":
        cmd += ["--bf16"]
    if case.get("checkpointing"):
        cmd += ["--gradient_checkpointing", "--gradient_checkpointing_kwargs",
                '{"use_reentrant": false}']
    env = dict(os.environ, OMP_NUM_THREADS="1", ZRT_PROGRESS="lines")
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=400, env=env)
    if run.returncode != 0:
        print(run.stdout[-4000:] + run.stderr[-4000:])
        raise SystemExit(f"zrt-train failed ({run.returncode}): {' '.join(cmd)}")
    with open(os.path.join(out, "trainer_state.json")) as f:
        history = [e for e in json.load(f)["log_history"] if "loss" in e]
    fp32 = os.path.join(work, f"zrt_{case['name']}.safetensors")
    conv = subprocess.run([os.path.join(args.bin, "zrt-ckpt"), "to-fp32",
                           os.path.join(out, f"checkpoint-{STEPS}"), fp32],
                          capture_output=True, text=True, timeout=120)
    if conv.returncode != 0:
        raise SystemExit(f"zrt-ckpt to-fp32 failed: {conv.stdout}{conv.stderr}")
    return ({"loss": [e["loss"] for e in history], "lr": [e["learning_rate"] for e in history],
             "grad_norm": [e.get("grad_norm") for e in history], "steps": [e["step"] for e in history],
             **monitor_files(os.path.join(out, "monitor"))},
            load_file(fp32))


def monitor_files(monitor):
    """The csv monitor's learning rates ([samples, lr] rows) and loss scales (None: no file)."""
    def rows(event):
        path = os.path.join(monitor, "job", f"Train_Samples_{event}.csv")
        if not os.path.exists(path):
            return None
        with open(path) as f:
            lines = f.read().split("\n")
        if lines[0] != f"step,{event}":
            raise SystemExit(f"{path}: header {lines[0]!r}, expected 'step,{event}'")
        return [[float(v) for v in line.split(",")] for line in lines[1:] if line]
    return {"monitor_lr": rows("lr"), "monitor_loss_scale": rows("loss_scale")}


def tolerance_ratio(got, want, bound):
    """|got - want| / bound element-wise: 0 where the two are equal (also where the bound is 0),
    inf where either is NaN or the difference is not finite, so that a NaN never passes."""
    import torch
    diff = (got - want).abs()
    ratio = torch.where(diff == 0, torch.zeros_like(diff), diff / bound)
    return ratio.nan_to_num(nan=float("inf"))


def worst(got, want, rtol, atol=0.0):
    """(passes, worst |diff| / (atol + rtol |want|), where) over paired sequences or tensors."""
    import torch
    got, want = torch.as_tensor(got, dtype=torch.float64), torch.as_tensor(want, dtype=torch.float64)
    ratio = tolerance_ratio(got, want, atol + rtol * want.abs())
    i = int(ratio.argmax())
    return bool(ratio.max() <= 1), float(ratio.max()), i


def rel(got, want):
    """Largest per-element relative difference |got - want| / |want| (for the report)."""
    import torch
    got, want = torch.as_tensor(got, dtype=torch.float64), torch.as_tensor(want, dtype=torch.float64)
    return float(((got - want).abs() / want.abs().clamp_min(1e-30)).nan_to_num(0.0).max())


def compare(case, ds, ref, zrt, zrt_w, ref_w):
    """Failures of one case, each naming what differs, at which step or element, by how much.
    ds: DeepSpeed's run of the case (lr, loss scale, skipped steps, monitor); ref, ref_w: the
    DeepSpeed run the loss, gradient norm and weights are held to (reference_case)."""
    rtol, lr_rtol, w_rtol, w_atol = tolerances(case)
    fails = []
    if zrt["steps"] != list(range(1, STEPS + 1)):
        fails.append(f"zrt-train logged steps {zrt['steps']}, expected 1..{STEPS}")
        return fails
    for key, tol, want in (("loss", rtol, ref), ("lr", lr_rtol, ds), ("grad_norm", rtol, ref)):
        got, expected = zrt[key], want[key]
        if key == "grad_norm":
            # Only the steps DeepSpeed computed a norm for (none at stage 0 in fp32 without
            # clipping: NaN in its record); ZeroRT must log a number at every step.
            steps = [i for i, w in enumerate(expected) if w == w]
            if any(g is None or g != g for g in got):
                fails.append(f"grad_norm: zrt-train logged {got}")
                continue
            got, expected = [got[i] for i in steps], [expected[i] for i in steps]
        else:
            steps = list(range(len(expected)))
        if not steps:
            continue
        ok, ratio, i = worst(got, expected, tol)
        if not ok:
            fails.append(f"{key} at step {steps[i] + 1}: zrt {got[i]:.9g} vs ds {expected[i]:.9g} "
                         f"({ratio:.3g} x the tolerance rtol {tol:g})")
    if any(abs(a - b) > 1e-12 for a, b in zip(ds["lr"], LRS)):
        fails.append(f"DeepSpeed's lr {ds['lr']} is not LRS {LRS}, which the bounds assume")
    if ds["skipped"] != 0 or ds["global_steps"] != STEPS or any(s != 1.0 for s in ds["loss_scale"]):
        fails.append(f"DeepSpeed skipped {ds['skipped']} steps / loss scales {ds['loss_scale']}")
    for side, rec in (("zrt", zrt), ("ds", ds)):
        if rec["monitor_loss_scale"] is not None:
            fails.append(f"{side}'s csv monitor logged a loss scale in {case['dtype']}")
    if zrt["monitor_lr"] != ds["monitor_lr"] or zrt["monitor_lr"] is None:
        fails.append(f"csv monitor Train/Samples/lr: zrt {zrt['monitor_lr']} vs ds "
                     f"{ds['monitor_lr']}")
    if sorted(zrt_w) != sorted(ref_w):
        fails.append(f"parameter names differ: {sorted(set(zrt_w) ^ set(ref_w))}")
        return fails
    for name in sorted(ref_w):
        a, b = zrt_w[name].double(), ref_w[name].double()
        if a.shape != b.shape:
            fails.append(f"{name}: shape {tuple(a.shape)} vs DeepSpeed's {tuple(b.shape)}")
            continue
        bound = w_atol + w_rtol * b.abs()
        if noise_driven(case, name) is not None:
            bound[noise_driven(case, name)] = 2 * sum(LRS)
        ratio = tolerance_ratio(a, b, bound)
        if ratio.max() > 1:
            j = int(ratio.argmax())
            fails.append(f"weight {name}[{j}]: zrt {a.flatten()[j]:.9g} vs ds "
                         f"{b.flatten()[j]:.9g} ({float(ratio.max()):.3g} x the tolerance "
                         f"{w_atol:.3g} + {w_rtol:g} |ds|)")
    return fails


def weights_ratio(a, b, case):
    """Largest |a - b| / (atol + rtol |b|) over all elements, with the case's weight tolerance."""
    _, _, rtol, atol = tolerances(case)
    worst_ratio = 0.0
    for n in b:
        ratio = tolerance_ratio(a[n].double(), b[n].double(), atol + rtol * b[n].double().abs())
        if noise_driven(case, n) is not None:
            ratio[noise_driven(case, n)] = 0.0  # reported by compare() against its own bound
        worst_ratio = max(worst_ratio, float(ratio.max()))
    return worst_ratio


def write_inputs(work, cases):
    """The initial weights of both twins, the GPT's corpus and the case list, for both sides."""
    import torch
    from safetensors.torch import save_file
    torch.manual_seed(11)
    for model in ("mlp", "gpt"):
        state = make_model({"model": model}).state_dict()
        save_file({k: v.contiguous() for k, v in state.items()},
                  os.path.join(work, f"init_{model}.safetensors"))
    rng = random.Random(7)
    words = ["the", "cat", "a", "dog", "sees", "likes", "river", "ball", "moon", "apple", "old"]
    text = " ".join(rng.choice(words) for _ in range(5000)) + "\n"
    with open(os.path.join(work, "corpus.txt"), "w") as f:
        f.write(text)
    with open(os.path.join(work, "cases.json"), "w") as f:
        json.dump(cases, f)


def ds_self_spread(cases, ds, ds_w):
    """DeepSpeed against itself: each case against DeepSpeed's run of the same model, dtype, GA
    and clipping at the lowest stage with the same gradient arithmetic (fp32: stage 0; bf16:
    stage 1, see reference_case), i.e. another summation order of the same maths. Per dtype:
    the largest relative loss difference and weight difference in units of the tolerance."""
    spread = {}
    for c in cases:
        base = next((reference_case(b) for b in cases if b["stage"] == 0 and
                     all(b[k] == c[k] for k in ("model", "dtype", "ga", "clip"))), None)
        if base is None or base["name"] == c["name"] or base["name"] not in ds or c["stage"] == 0:
            continue
        loss = rel(ds[c["name"]]["loss"], ds[base["name"]]["loss"])
        w = weights_ratio(ds_w[c["name"]], ds_w[base["name"]], c)
        old = spread.get(c["dtype"], (0.0, 0.0))
        spread[c["dtype"]] = (max(old[0], loss), max(old[1], w))
    return spread


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", help="ZeroRT's build/bin (required)")
    parser.add_argument("--full", action="store_true", help="all 36 cases (default: 10 seeded)")
    parser.add_argument("--seed", type=int, default=None, help="the CI subset's seed")
    parser.add_argument("--only", help="run only the cases whose name contains this")
    parser.add_argument("--keep", help="work in this directory and keep it")
    parser.add_argument("--timeout", type=float, default=800, help="DeepSpeed's ranks deadline")
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--rank-main", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_main:
        rank_main(args)
        return 0
    if not args.bin:
        parser.error("--bin is required")
    seed = args.seed if args.seed is not None else int(os.environ.get("ZRT_PARITY_SEED", "0") or 0)
    cases = all_cases() if args.full else ci_cases(seed)
    if args.only:
        cases = [c for c in all_cases() if args.only in c["name"]]
    print(f"training_parity: {len(cases)} cases{'' if args.full else f' (seed {seed})'}: "
          + ", ".join(c["name"] for c in cases), flush=True)
    from safetensors.torch import load_file
    tmp = None if args.keep else tempfile.TemporaryDirectory(prefix="zrt_parity_")
    work = args.keep or tmp.name
    if args.keep and os.path.exists(args.keep) and os.listdir(args.keep):
        parser.error(f"--keep {args.keep}: not empty (the monitors would append to old files)")
    os.makedirs(work, exist_ok=True)
    ds_cases = list({c["name"]: c for c in cases + [reference_case(c) for c in cases]}.values())
    write_inputs(work, ds_cases)
    t0 = time.monotonic()
    if run_ranks([os.path.abspath(__file__), "--rank-main", "--work", work], 2, args.timeout,
                 "training_parity"):
        return 1
    t1 = time.monotonic()
    ds, ds_w, failed = {}, {}, []
    for case in ds_cases:
        with open(os.path.join(work, f"ds_{case['name']}.json")) as f:
            ds[case["name"]] = json.load(f)
        ds_w[case["name"]] = load_file(os.path.join(work, f"ds_{case['name']}.safetensors"))
    for case in cases:
        name, ref = case["name"], reference_case(case)["name"]
        zrt, zrt_w = zrt_case(args, case, work)
        fails = compare(case, ds[name], ds[ref], zrt, zrt_w, ds_w[ref])
        against = "" if ref == name else f" (against DeepSpeed's {ref}; its own stage 0: loss " \
            f"{rel(zrt['loss'], ds[name]['loss']):.2e}, weights " \
            f"{weights_ratio(zrt_w, ds_w[name], case):.3g} x the tolerance)"
        print(f"training_parity: {name}: loss {ds[ref]['loss'][0]:.5f} -> "
              f"{ds[ref]['loss'][-1]:.5f}; zrt vs ds: max rel diff of loss "
              f"{rel(zrt['loss'], ds[ref]['loss']):.2e}, lr {rel(zrt['lr'], ds[name]['lr']):.2e}, "
              f"grad norm {rel(zrt['grad_norm'], ds[ref]['grad_norm']):.2e}; weights "
              f"{weights_ratio(zrt_w, ds_w[ref], case):.3g} x the tolerance{against}: "
              f"{'OK' if not fails else 'DIFFERS'}", flush=True)
        for f in fails:
            print(f"    {f}")
        if fails:
            failed.append(name)
    t2 = time.monotonic()
    for dtype, (loss, w) in ds_self_spread(ds_cases, ds, ds_w).items():
        print(f"training_parity: DeepSpeed against itself ({dtype}, the stages against "
              f"{'stage 0' if dtype == 'fp32' else 'stage 1'}): "
              f"loss rel {loss:.2e}, weights {w:.3g} x the same-stage weight tolerance")
    print(f"training_parity: DeepSpeed {t1 - t0:.0f} s, ZeroRT {t2 - t1:.0f} s; "
          f"{len(cases) - len(failed)}/{len(cases)} cases agree"
          + (f"; differ: {', '.join(failed)}" if failed else ""))
    print("training_parity: " + ("OK" if not failed else "FAILED"))
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
