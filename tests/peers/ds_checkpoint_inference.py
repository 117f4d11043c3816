"""DeepSpeed-written checkpoints serve ZeroRT inference (issue 19; label `peer`).

The real DeepSpeed trains the MLP twin of zrt-train's `--model mlp` (tests/peers/twins.py) on 2
ranks (gloo, CPU accelerator) at ZeRO stages 2 and 3 and writes its checkpoint. zrt-train then
loads that checkpoint, module weights only, into ZeRO-3 inference on 1 and 2 ranks
(--do_predict --model_name_or_path) and predicts the example's evaluation set. The predictions
must equal the twin's forward of DeepSpeed's own consolidation of the same checkpoint
(deepspeed.utils.zero_to_fp32.get_fp32_state_dict_from_zero_checkpoint), bit for bit: one
example per forward on both sides, the same fp32 weights, the same LibTorch.

    python tests/peers/ds_checkpoint_inference.py --bin build/bin [--keep DIR]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from peer_launch import run_ranks

WIDTH, LAYERS = 24, 2


def rank_main(args):
    import torch
    import deepspeed
    from twins import Mlp, regression_data

    deepspeed.init_distributed(dist_backend="gloo")
    rank = torch.distributed.get_rank()
    world = torch.distributed.get_world_size()
    torch.manual_seed(11)
    model = Mlp(WIDTH, LAYERS)
    config = {
        "train_micro_batch_size_per_gpu": 8,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.01}},
        "zero_optimization": {"stage": args.stage},
        "steps_per_print": 1000,
    }
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=config)
    x, y = regression_data(256, 1)
    for step in range(5):
        lo = (step * world + rank) * 8
        loss = torch.nn.functional.mse_loss(engine(x[lo:lo + 8]), y[lo:lo + 8])
        engine.backward(loss)
        engine.step()
    engine.save_checkpoint(args.out)


def zrt_predict(args, np, checkpoint, out):
    cmd = [os.path.join(args.bin, "zrt-launch"), "--np", str(np), "--timeout", "300", "--",
           os.path.join(args.bin, "zrt-train"), "--model", "mlp", "--width", str(WIDTH),
           "--layers", str(LAYERS), "--deepspeed",
           os.path.join(args.src, "examples", "configs", "zero3_inference.json"),
           "--do_predict", "--per_device_eval_batch_size", "1", "--output_dir", out,
           "--model_name_or_path", checkpoint]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    if run.returncode != 0:
        print(run.stdout + run.stderr)
        raise SystemExit(f"zrt-train failed ({run.returncode}): {' '.join(cmd)}")
    return os.path.join(out, "predictions.safetensors")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", help="ZeroRT's build/bin (required)")
    parser.add_argument("--src", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--stage", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--rank-main", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_main:
        rank_main(args)
        return 0
    if not args.bin:
        parser.error("--bin is required")

    import torch
    from safetensors.torch import load_file
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
    from twins import Mlp, regression_data

    x, y = regression_data(512, 2)  # zrt-train's evaluation set for --model mlp
    ok = True
    with tempfile.TemporaryDirectory(prefix="zrt_ds_infer_") as tmp:
        for stage in (2, 3):
            ckpt = os.path.join(tmp, f"ds_stage{stage}")
            argv = [os.path.abspath(__file__), "--rank-main", "--stage", str(stage), "--out", ckpt]
            if run_ranks(argv, 2, args.timeout, "ds_checkpoint_inference"):
                return 1
            twin = Mlp(WIDTH, LAYERS)
            twin.load_state_dict(get_fp32_state_dict_from_zero_checkpoint(ckpt), strict=True)
            with torch.no_grad():
                expected = torch.stack([twin(x[i:i + 1])[0] for i in range(x.shape[0])])
            for np in (1, 2):
                got = load_file(zrt_predict(args, np, ckpt, os.path.join(tmp, f"p{stage}_{np}")))
                same_labels = torch.equal(got["label_ids"], y)
                same = torch.equal(got["predictions"], expected)
                diff = (got["predictions"] - expected).abs().max().item()
                ok &= same and same_labels
                print(f"ds_checkpoint_inference: DeepSpeed stage {stage} checkpoint, ZeroRT "
                      f"ZeRO-3 inference on {np} rank(s): predictions "
                      f"{'bit-identical' if same else f'DIFFER (max |diff| {diff:.3g})'} to the "
                      f"twin's forward of DeepSpeed's zero_to_fp32 weights"
                      f"{'' if same_labels else '; the labels differ (data not the same)'}")
    print("ds_checkpoint_inference: " + ("OK" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
