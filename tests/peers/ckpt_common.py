"""What the checkpoint interoperability checks (issue 14 section 3) share: one DeepSpeed config
and the zrt-train command line that means the same training, the MLP twin trained by the real
DeepSpeed on the batches zrt-train's Trainer takes, and bit-level comparisons of state dicts.

The training: zrt-train --model mlp --width 8 --layers 1 (226 parameters), 4 examples per rank
and step, AdamW + WarmupDecayLR over 6 steps, gradient clipping 1.0. Its Trainer draws rank r's
micro-batch b of epoch e from torch's DistributedSampler(shuffle, seed 42) of the 4096-example
regression set; the DeepSpeed side takes the same examples with torch's own DistributedSampler.
"""
import json
import os
import subprocess

WIDTH, LAYERS, MICRO, TOTAL_STEPS, SAVE_AT, SEED, LR = 8, 1, 4, 6, 3, 42, 1e-2


def ds_config(stage, world, bf16=False, ga=1, offload=False, universal=False):
    """A DeepSpeed config without "auto" values; zrt_train_args gives the matching arguments.
    ga: gradient accumulation steps; offload: the optimizer offloaded to the CPU (stages 1-3);
    universal: load universal checkpoints ("checkpoint": {"load_universal": true})."""
    zero = {"stage": stage}
    if offload:
        zero["offload_optimizer"] = {"device": "cpu"}
    extra = {"checkpoint": {"load_universal": True}} if universal else {}
    return extra | {
        "train_micro_batch_size_per_gpu": MICRO,
        "gradient_accumulation_steps": ga,
        "train_batch_size": MICRO * world * ga,
        "gradient_clipping": 1.0,
        "optimizer": {"type": "AdamW", "params": {"lr": LR, "betas": [0.9, 0.999], "eps": 1e-8,
                                                  "weight_decay": 0.01}},
        "scheduler": {"type": "WarmupDecayLR",
                      "params": {"warmup_min_lr": 0, "warmup_max_lr": LR, "warmup_num_steps": 2,
                                 "total_num_steps": TOTAL_STEPS, "warmup_type": "linear"}},
        "zero_optimization": zero,
        "bf16": {"enabled": bf16},
        "steps_per_print": 1000,
    }


def zrt_train_args(config_path, out, bf16=False, ga=1):
    """zrt-train's arguments for ds_config's training (HF's mismatch rules accept them)."""
    args = ["--model", "mlp", "--width", str(WIDTH), "--layers", str(LAYERS),
            "--deepspeed", config_path, "--output_dir", out, "--max_steps", str(TOTAL_STEPS),
            "--save_steps", str(SAVE_AT), "--logging_steps", "1", "--learning_rate", str(LR),
            "--weight_decay", "0.01", "--warmup_steps", "2", "--seed", str(SEED),
            "--per_device_train_batch_size", str(MICRO), "--report_to", "none",
            "--gradient_accumulation_steps", str(ga)]
    return args + (["--bf16"] if bf16 else [])


def run_zrt(bindir, np, args, timeout=300, with_log=False):
    """zrt-train on `np` ranks through zrt-launch; raises with its output when it fails. Returns
    its standard output (and, with_log, its standard error, where the log goes, appended)."""
    cmd = [os.path.join(bindir, "zrt-launch"), "--np", str(np), "--timeout", str(timeout), "--",
           os.path.join(bindir, "zrt-train")] + list(args)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               ZRT_PROGRESS="lines")
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 60, env=env)
    if run.returncode != 0:
        raise RuntimeError(f"zrt-train failed ({run.returncode}): {' '.join(cmd)}\n"
                           + run.stdout[-3000:] + run.stderr[-3000:])
    return run.stdout + run.stderr if with_log else run.stdout


def zrt_to_fp32(bindir, checkpoint, out):
    """zrt-ckpt to-fp32 CHECKPOINT OUT.safetensors; returns the state dict."""
    from safetensors.torch import load_file
    cmd = [os.path.join(bindir, "zrt-ckpt"), "to-fp32", checkpoint, out]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if run.returncode != 0:
        raise RuntimeError(f"zrt-ckpt failed ({run.returncode}): {' '.join(cmd)}\n"
                           + run.stdout + run.stderr)
    return load_file(out)


def ds_to_fp32(checkpoint):
    """DeepSpeed's own consolidation (deepspeed.utils.zero_to_fp32) of a save_dir."""
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
    return {k: v.contiguous() for k, v in
            get_fp32_state_dict_from_zero_checkpoint(checkpoint).items()}


def logged(trainer_state_path, first_step):
    """(losses, learning rates) of the log history's training entries from first_step on."""
    with open(trainer_state_path) as f:
        history = json.load(f)["log_history"]
    rows = [e for e in history if "loss" in e and e["step"] >= first_step]
    return [e["loss"] for e in rows], [e["learning_rate"] for e in rows]


def bitwise_diff(a, b, what):
    """None when the state dicts are bit-identical (keys, dtypes, shapes, bytes), else why not."""
    import torch
    if sorted(a) != sorted(b):
        return f"{what}: keys differ: {sorted(set(a) ^ set(b))}"
    for k in sorted(a):
        x, y = a[k], b[k]
        if x.dtype != y.dtype or x.shape != y.shape:
            return f"{what}: {k}: {x.dtype}{list(x.shape)} vs {y.dtype}{list(y.shape)}"
        if not torch.equal(x.view(-1).view(torch.uint8), y.view(-1).view(torch.uint8)):
            d = (x.double() - y.double()).abs().max().item()
            return f"{what}: {k}: bytes differ (max |diff| {d:.3g})"
    return None


def close_diff(a, b, rtol, atol, what):
    """None when |a-b| <= atol + rtol|b| element-wise for every key, else the worst element."""
    import torch
    if sorted(a) != sorted(b):
        return f"{what}: keys differ: {sorted(set(a) ^ set(b))}"
    worst = (0.0, None)
    for k in sorted(a):
        x, y = a[k].double(), b[k].double()
        # NaN anywhere, or a non-finite difference, is the worst excess (never a pass).
        excess = ((x - y).abs() - (atol + rtol * y.abs())).nan_to_num(nan=float("inf"))
        excess = torch.where(x == y, torch.zeros_like(excess), excess).max().item()
        if excess > worst[0]:
            worst = (excess, f"{k}: max |diff| {(x - y).abs().max().item():.3g}")
    return None if worst[1] is None else f"{what}: {worst[1]} beyond atol {atol} rtol {rtol}"


def close_list(got, want, rtol, atol):
    return len(got) == len(want) and all(abs(g - w) <= atol + rtol * abs(w)
                                         for g, w in zip(got, want))


# --- the DeepSpeed side: runs inside a torch.distributed rank (peer_launch.run_ranks) ---

def ds_engine(stage, bf16, ga=1, offload=False, universal=False):
    """deepspeed.initialize of the MLP twin with ds_config (gloo, CPU accelerator)."""
    import torch
    import deepspeed
    from twins import Mlp
    deepspeed.init_distributed(dist_backend="gloo")
    world = torch.distributed.get_world_size()
    torch.manual_seed(SEED)
    model = Mlp(WIDTH, LAYERS)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=ds_config(stage, world, bf16, ga, offload,
                                                            universal))
    return engine


def ds_train(engine, steps):
    """`steps` optimizer steps from engine.global_steps on, each on the micro-batches zrt-train's
    Trainer takes (one epoch holds far more than TOTAL_STEPS batches); returns the mean loss
    over the ranks and the step's micro-batches, and the learning rate after each step, as
    zrt-train logs them."""
    import torch
    from twins import regression_data
    x, y = regression_data(4096, 1)
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    sampler = torch.utils.data.DistributedSampler(range(4096), num_replicas=world, rank=rank,
                                                  shuffle=True, seed=SEED)
    sampler.set_epoch(0)
    order = list(sampler)
    dtype = next(engine.module.parameters()).dtype
    losses, lrs = [], []
    ga = engine.gradient_accumulation_steps()
    for _ in range(steps):
        total = torch.zeros((), dtype=torch.float64)
        for k in range(ga):
            b = engine.global_steps * ga + k
            idx = torch.tensor(order[b * MICRO:(b + 1) * MICRO])
            loss = torch.nn.functional.mse_loss(engine(x[idx].to(dtype)), y[idx])
            engine.backward(loss)
            engine.step()
            total += loss.detach().double()
        torch.distributed.all_reduce(total)
        losses.append(total.item() / (world * ga))
        lrs.append(engine.get_lr()[0])
    return losses, lrs


def stage0_fp32(engine):
    """Without ZeRO, DeepSpeed's fp32 weights: the module's own (fp32), or its FP16_Optimizer's
    fp32 flat groups cut along the groups' parameters (bf16/fp16)."""
    names = {id(p): n for n, p in engine.module.named_parameters()}
    opt = engine.optimizer
    if not hasattr(opt, "fp32_groups_flat"):
        return {n: p.detach().float().clone() for n, p in engine.module.named_parameters()}
    out = {}
    for params, flat in zip(opt.fp16_groups, opt.fp32_groups_flat):
        offset = 0
        for p in params:
            out[names[id(p)]] = flat[offset:offset + p.numel()].view(p.shape).clone()
            offset += p.numel()
    return out


def peers_agree(what, bf16, got, want):
    """Failures unless two implementations' continued runs ((losses, lrs), weights) agree: fp32
    within ckpt_resume.py's tolerances; bf16 within training_parity.py's bf16 bound (losses rtol
    2^-8, learning rates exact, weights rtol 1e-5 atol 2 * 2^-8 * the steps' summed learning
    rate), for where the two sides round the bf16 gradients differently (a reduction summed in
    another order, a loss computed under another autocast)."""
    from ckpt_resume import compare
    if not bf16:
        return compare(what, False, got[0], want[0], got[1], want[1])
    eps = 2.0 ** -8
    fails = []
    if not close_list(got[0][0], want[0][0], eps, 0.0) or got[0][1] != want[0][1]:
        fails.append(f"{what}: losses/lrs {got[0]} vs {want[0]}")
    atol = 2 * eps * sum(want[0][1])
    diff = close_diff(got[1], want[1], 1e-5, atol, what + ": weights")
    fails += [diff] if diff else []
    worst = max((got[1][k].double() - want[1][k].double()).abs().max().item() for k in want[1])
    print(f"ckpt: {what}: weights |diff| <= {worst:.2g} (atol {atol:.2g}): "
          f"{'OK' if not fails else 'MISMATCH'}")
    return fails
