"""What zrt-train reports, read by the peers' own readers (label `peer`).

zrt-train runs 2 ranks with --report_to all, evaluation and saving by steps, and a DeepSpeed
config with the `tensorboard` and `csv_monitor` sections. Then:
  - transformers' TrainerState.load_from_json reads every trainer_state.json, whose keys are
    exactly TrainerState's fields; its log_history has the losses, grad norms, learning rates and
    evaluations at the configured steps, and the run summary;
  - tensorboard's EventAccumulator reads the Trainer's event file (output_dir/runs/<run_name>):
    train/loss, train/grad_norm, train/learning_rate, train/epoch and eval/loss at the logged
    steps with the logged values (as float32), and the DeepSpeed monitor's event file
    (output_path/job_name): Train/Samples/train_loss and Train/Samples/lr at every optimizer
    step, x = global samples, the same values as the csv_monitor files;
  - output_dir/log_history.csv has the same rows as log_history.

    python tests/peers/reporting_check.py --bin build/bin
"""
import argparse
import csv
import dataclasses
import glob
import json
import os
import subprocess
import sys
import tempfile

import numpy as np


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("--src", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    cli = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from transformers.trainer_callback import TrainerState

    failures = []

    def check(ok, what):
        if not ok:
            failures.append(what)
        return ok

    with tempfile.TemporaryDirectory(prefix="zrt_reporting_") as tmp:
        with open(os.path.join(cli.src, "examples", "configs", "zero2.json")) as f:
            cfg = json.load(f)
        cfg["tensorboard"] = {"enabled": True, "output_path": os.path.join(tmp, "tb"),
                              "job_name": "dsjob"}
        cfg["csv_monitor"] = {"enabled": True, "output_path": os.path.join(tmp, "csv"),
                              "job_name": "dsjob"}
        cfg_path = os.path.join(tmp, "ds.json")
        with open(cfg_path, "w") as f:
            json.dump(cfg, f)
        out = os.path.join(tmp, "out")
        cmd = [os.path.join(cli.bin, "zrt-launch"), "--np", "2", "--timeout", "300", "--",
               os.path.join(cli.bin, "zrt-train"), "--deepspeed", cfg_path, "--output_dir", out,
               "--width", "32", "--layers", "1", "--heads", "2", "--context", "16",
               "--corpus_bytes", "20000", "--per_device_train_batch_size", "4",
               "--max_steps", "8", "--logging_steps", "2", "--eval_strategy", "steps",
               "--eval_steps", "4", "--save_steps", "4", "--report_to", "all",
               "--run_name", "r1", "--do_train", "--learning_rate", "3e-3"]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
        if run.returncode != 0:
            print(run.stdout[-3000:] + run.stderr[-3000:])
            print("reporting_check: FAILED: zrt-train exited", run.returncode)
            return 1

        # trainer_state.json, by transformers' own reader.
        fields = {f.name for f in dataclasses.fields(TrainerState)}
        for path in [os.path.join(out, "checkpoint-4", "trainer_state.json"),
                     os.path.join(out, "checkpoint-8", "trainer_state.json"),
                     os.path.join(out, "trainer_state.json")]:
            state = TrainerState.load_from_json(path)
            with open(path) as f:
                keys = set(json.load(f))
            check(keys == fields, f"{path}: keys {sorted(keys ^ fields)} differ from TrainerState")
            check(isinstance(state.epoch, float), f"{path}: epoch {state.epoch!r} is not a float")
        with open(os.path.join(out, "checkpoint-4", "trainer_state.json")) as f:
            check(abs(json.load(f)["epoch"] - 4 / 141) < 1e-12, "checkpoint-4: epoch is not 4/141 (141 batches per epoch per rank)")
        state = TrainerState.load_from_json(os.path.join(out, "trainer_state.json"))
        history = state.log_history
        train_logs = [e for e in history if "loss" in e]
        eval_logs = [e for e in history if "eval_loss" in e]
        check([e["step"] for e in train_logs] == [2, 4, 6, 8], f"loss steps {train_logs}")
        check([e["step"] for e in eval_logs] == [4, 8], f"eval steps {eval_logs}")
        check(all({"grad_norm", "learning_rate", "epoch"} <= set(e) for e in train_logs),
              "a training log lacks grad_norm, learning_rate or epoch")
        check("train_runtime" in history[-1] and "total_flos" in history[-1],
              f"no run summary at the end of log_history: {history[-1]}")
        check(state.global_step == 8 and state.max_steps == 8 and state.logging_steps == 2
              and state.eval_steps == 4 and state.save_steps == 4 and state.train_batch_size == 4,
              f"state fields {state}")
        check(state.total_flos > 0, "total_flos is 0")

        # The Trainer's TensorBoard events (transformers' rewrite_logs tags).
        runs = glob.glob(os.path.join(out, "runs", "r1", "events.out.tfevents.*"))
        if check(len(runs) == 1, f"expected one event file in runs/r1, found {runs}"):
            ea = EventAccumulator(runs[0])
            ea.Reload()
            tags = set(ea.Tags()["scalars"])
            for tag, key, logs in [("train/loss", "loss", train_logs),
                                   ("train/grad_norm", "grad_norm", train_logs),
                                   ("train/learning_rate", "learning_rate", train_logs),
                                   ("train/epoch", "epoch", history),
                                   ("eval/loss", "eval_loss", eval_logs)]:
                if not check(tag in tags, f"no {tag} in {sorted(tags)}"):
                    continue
                got = [(s.step, s.value) for s in ea.Scalars(tag)]
                want = [(e["step"], float(np.float32(e[key]))) for e in logs]
                check(got == want, f"{tag}: {got} != {want}")

        # DeepSpeed's tensorboard monitor section, against its csv_monitor twin.
        ds_events = glob.glob(os.path.join(tmp, "tb", "dsjob", "events.out.tfevents.*"))
        if check(len(ds_events) == 1, f"DeepSpeed monitor event files: {ds_events}"):
            ea = EventAccumulator(ds_events[0])
            ea.Reload()
            for tag, name in [("Train/Samples/train_loss", "train_loss"), ("Train/Samples/lr", "lr")]:
                got = [(s.step, s.value) for s in ea.Scalars(tag)]
                with open(os.path.join(tmp, "csv", "dsjob", tag.replace("/", "_") + ".csv")) as f:
                    rows = list(csv.DictReader(f))
                want = [(int(r["step"]), float(r[name])) for r in rows]
                # The CSV holds 6 significant digits, the event file float32.
                same = len(got) == len(want) == 8 and all(
                    gs == ws and abs(gv - wv) <= 1e-5 * abs(wv) for (gs, gv), (ws, wv) in zip(got, want))
                check(same, f"{tag}: {got} != csv {want}")
                check([s for s, _ in got] == [8 * k for k in range(1, 9)],
                      f"{tag}: x is not the global samples: {[s for s, _ in got]}")

        # log_history.csv
        with open(os.path.join(out, "log_history.csv")) as f:
            rows = list(csv.DictReader(f))
        check([int(r["step"]) for r in rows] == [e["step"] for e in history], f"csv rows {rows}")
        check(all(abs(float(r["loss"]) - e["loss"]) <= 1e-6 * abs(e["loss"])
                  for r, e in zip([r for r in rows if r["loss"]], train_logs)),
              "log_history.csv losses differ from log_history")
    print(f"reporting_check: trainer_state.json read by transformers' TrainerState, "
          f"{len(train_logs)} training and {len(eval_logs)} evaluation logs in TensorBoard "
          f"(tensorboard's EventAccumulator) and CSV")
    print("reporting_check: " + ("OK" if not failures else "FAILED:\n  " + "\n  ".join(failures)))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
