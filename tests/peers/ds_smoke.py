"""Smoke test of the real DeepSpeed on this CPU machine (label `peer`).

Runs deepspeed.initialize on a small MLP at ZeRO stages 0-3 over 2 processes (DeepSpeed's CPU
accelerator, the gloo backend, DeepSpeed's own CPU Adam op, JIT-built on first use), trains a
few steps at each stage and checks that the loss falls and that both ranks agree on it. The
parent process starts the ranks with the env:// rendezvous and kills them all if one fails or
the deadline passes, so a hang never outlives the test.

    python tests/peers/ds_smoke.py [--stages 0 1 2 3] [--steps 8] [--timeout 600]
"""
import argparse
import json
import os
import sys
import tempfile

from peer_launch import run_ranks


def rank_main(args):
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import torch
    import deepspeed

    torch.manual_seed(0)
    deepspeed.init_distributed(dist_backend="gloo")
    rank = torch.distributed.get_rank()
    world = torch.distributed.get_world_size()
    results = {}
    for stage in args.stages:
        torch.manual_seed(1234)
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(),
                                    torch.nn.Linear(64, 64), torch.nn.GELU(),
                                    torch.nn.Linear(64, 1))
        config = {
            "train_micro_batch_size_per_gpu": 8,
            "gradient_accumulation_steps": 1,
            "gradient_clipping": 1.0,
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.01}},
            "scheduler": {"type": "WarmupLR",
                          "params": {"warmup_min_lr": 0, "warmup_max_lr": 1e-2,
                                     "warmup_num_steps": 2}},
            "zero_optimization": {"stage": stage},
            "steps_per_print": 1000,
        }
        if args.dtype != "fp32":
            config[args.dtype] = {"enabled": True}
        if args.offload and stage > 0:
            config["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                               config=config)
        gen = torch.Generator().manual_seed(7)
        x_all = torch.randn(world * 8, 32, generator=gen)
        y_all = x_all[:, :4].sum(dim=1, keepdim=True)
        x, y = x_all[rank * 8:(rank + 1) * 8], y_all[rank * 8:(rank + 1) * 8]
        losses = []
        for _ in range(args.steps):
            loss = torch.nn.functional.mse_loss(engine(x.to(engine.get_data_types()[0])).float(), y)
            engine.backward(loss)
            engine.step()
            mean = loss.detach().clone()
            torch.distributed.all_reduce(mean)
            losses.append(mean.item() / world)
        results[stage] = {"losses": losses, "optimizer": type(engine.optimizer).__name__,
                          "basic_optimizer": type(engine.basic_optimizer).__name__}
        if args.checkpoint:
            save_dir = os.path.join(os.path.dirname(args.result), f"ckpt_stage{stage}")
            engine.save_checkpoint(save_dir)
            engine.load_checkpoint(save_dir)
            results[stage]["checkpoint"] = sorted(os.listdir(os.path.join(save_dir, "global_step%d" % args.steps)))
        engine.destroy()
    if rank == 0:
        with open(args.result, "w") as f:
            json.dump(results, f)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--stages", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default="fp32")
    parser.add_argument("--offload", action="store_true", help="offload_optimizer to cpu (stages 1-3)")
    parser.add_argument("--checkpoint", action="store_true", help="save_checkpoint + load_checkpoint")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--rank-main", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_main:
        rank_main(args)
        return 0

    with tempfile.TemporaryDirectory(prefix="zrt_ds_smoke_") as tmp:
        result = os.path.join(tmp, "result.json")
        argv = [os.path.abspath(__file__), "--rank-main", "--result", result,
                "--steps", str(args.steps), "--dtype", args.dtype, "--stages"]
        argv += [str(s) for s in args.stages]
        argv += ["--offload"] * args.offload + ["--checkpoint"] * args.checkpoint
        if run_ranks(argv, args.world, args.timeout, "ds_smoke"):
            return 1
        with open(result) as f:
            results = json.load(f)

    ok = True
    for stage, r in sorted(results.items()):
        losses = r["losses"]
        falls = losses[-1] < 0.5 * losses[0]
        ok &= falls
        print(f"ds_smoke: stage {stage} {args.dtype}{' offload' if args.offload else ''}: optimizer "
              f"{r['basic_optimizer']} ({r['optimizer']}), loss {losses[0]:.4f} -> "
              f"{losses[-1]:.4f} {'ok' if falls else 'DID NOT FALL'}"
              + (f", checkpoint files {r['checkpoint']}" if "checkpoint" in r else ""))
    print("ds_smoke: " + ("OK" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
