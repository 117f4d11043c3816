"""The documented differences between ZeroRT and the real transformers + accelerate + DeepSpeed.

Each rule recognises one difference the config differential finds and names the section of
config/README.md ("Differences from DeepSpeed and transformers") that explains it. A difference
no rule recognises fails the test. Keep the rules narrow: each should match only the cases its
README entry describes.
"""
import re

NOT_IMPLEMENTED = re.compile(r"not supported by ZeroRT|not implemented by ZeroRT|"
                             r"ZeroRT does not implement")


def _stage(zrt):
    return zrt.get("resolved", {}).get("zero_optimization", {}).get("stage")


def _contains_auto(value):
    if isinstance(value, dict):
        return any(_contains_auto(v) for v in value.values())
    return value == "auto"


def _offload_device(case):
    z = case["config"].get("zero_optimization")
    if not isinstance(z, dict):
        return None
    if "offload_optimizer" in z:
        return z["offload_optimizer"].get("device")
    return "cpu" if z.get("cpu_offload") is True else None  # the deprecated switch


def effective_values(case, kind, d, peer, zrt):
    """The dump writes what ZeroRT will do; DeepSpeedConfig keeps what the config says."""
    if kind != "value":
        return False
    key, stage = d["key"], _stage(zrt)
    if key.startswith("zero_optimization.offload_param.") and stage != 3:
        return key.endswith(".device") and d["zrt"] == "none"
    if key.startswith("zero_optimization.offload_optimizer.") and stage == 0:
        return key.endswith(".device") and d["zrt"] == "none"
    if key == "zero_optimization.contiguous_gradients":
        return stage in (1, 2) and d["zrt"] is True and _offload_device(case) in ("cpu", "nvme")
    return False


def bf16_without_zero(case, kind, d, peer, zrt):
    """Without ZeRO, ZeroRT's bf16 accumulates gradients in fp32 (DeepSpeed 0.19: in bf16)."""
    text = d.get("error", "") + d.get("peer_error", "")
    if kind == "value":
        return (d["key"] == "data_types.grad_accum_dtype" and _stage(zrt) == 0
                and d["zrt"] == "fp32" and d["peer"] == "bf16")
    return ("unsupported mix of model_dtype=torch.bfloat16 and grad_accum_dtype=torch.float32"
            in text or "Bfloat16 wrapper must use a gradient accumulation type of fp32" in text)


def legacy_bool_zero(case, kind, d, peer, zrt):
    """accelerate crashes on "zero_optimization": true/false; ZeroRT names the key."""
    return (kind == "keys" and isinstance(case["config"].get("zero_optimization"), bool)
            and "'bool' object has no attribute 'get'" in d["peer_error"]
            and "zero_optimization" in d["zrt_error"])


def not_implemented(case, kind, d, peer, zrt):
    """Features ZeroRT does not implement are refused up front (the peer failed on another)."""
    return kind == "keys" and bool(NOT_IMPLEMENTED.search(d["zrt_error"]))


def client_optimizer(case, kind, d, peer, zrt):
    """DeepSpeed's client optimizer replaces the config's; ZeroRT's is used only without one."""
    if not (case["mode"] == "deepspeed" and case["client_optimizer"]
            and "optimizer" in case["config"]):
        return False
    return kind == "value" and d["key"].startswith("optimizer.") and d["peer"] == "<absent>"


def _error_lines(text):
    lines = text.splitlines()
    return lines[1:] if len(lines) > 1 and lines[0].endswith("problems in the DeepSpeed config:") \
        else lines


def client_optimizer_offload(case, kind, d, peer, zrt):
    """ZeroRT's client optimizer is its own (CPU Adam under offload), not a torch optimizer; on
    the HF path accelerate misses the deprecated cpu_offload key and DeepSpeed then refuses the
    HF torch optimizer."""
    z = case["config"].get("zero_optimization")
    deprecated = isinstance(z, dict) and z.get("cpu_offload") is True
    return (kind == "peer_refuses"
            and (case["client_optimizer"] or (case["mode"] == "hf" and deprecated
                                              and "optimizer" not in case["config"]))
            and "You are using ZeRO-Offload with a client provided optimizer" in d["error"])


def no_optimizer_no_scheduler(case, kind, d, peer, zrt):
    """Without any optimizer DeepSpeed builds no scheduler; ZeroRT still reads the section."""
    no_optimizer = (case["mode"] == "deepspeed" and not case["client_optimizer"]
                    and "optimizer" not in case["config"]) or case["inference"]
    return (kind == "value" and no_optimizer and d["key"].startswith("scheduler.")
            and d["peer"] == "<absent>")


def zero_division(case, kind, d, peer, zrt):
    """A zero in the batch triad: DeepSpeed divides by it, ZeroRT gives the "> 0" assertion."""
    return (kind == "keys" and d["peer_error"].startswith("ZeroDivisionError")
            and "has to be greater than 0" in d["zrt_error"])


def auto_without_trainer(case, kind, d, peer, zrt):
    """Pure-DeepSpeed mode refuses every "auto" (DeepSpeed's pydantic sections drop it)."""
    return (kind == "keys" and case["mode"] == "deepspeed" and _contains_auto(case["config"])
            and 'is "auto"' in d["zrt_error"])


def first_error_differs(case, kind, d, peer, zrt):
    """Both refuse; DeepSpeed stops at its first problem, found late (engine, scheduler), while
    ZeroRT reports the problems it finds in one pass over the config. ZeroRT checks the HF
    schedule's arguments when it plans the run, the Trainer when it creates the schedule (after
    accelerate's prepare)."""
    if kind != "keys":
        return False
    if d["stage"] in ("engine", "scheduler", "Trainer.create_scheduler"):
        return bool(d["zrt_keys"])
    return d["stage"] == "accelerate prepare" and any(
        line.startswith(("lr_scheduler_kwargs", "--lr_scheduler_type"))
        for line in _error_lines(d["zrt_error"]))


# ZeroRT refusals where DeepSpeed goes on (config/README.md, "Where ZeroRT is stricter").
# Checks DeepSpeed makes in its ZeRO optimizer's constructor (stage_1_and_2.py), past the part of
# deepspeed.initialize the peer runs: ZeroRT makes them when it resolves the config.
OPTIMIZER_BUILD = re.compile(r"compute_grad_norm=false (requires gradient_clipping=0|does not "
                             r"support)")

STRICTER = re.compile(r"^(optimizer|scheduler)\.type: missing|"
                      r"^zero_optimization\.(allgather|reduce)_bucket_size: expected a positive "
                      r"integer, got 0")


def line_reason(case, line):
    """Why ZeroRT refuses this one line of its error where the peer does not, or None."""
    optimizer = case["config"].get("optimizer")
    untyped = isinstance(optimizer, dict) and "type" not in optimizer
    no_optimizer = ((case["mode"] == "deepspeed" and not case["client_optimizer"]
                     and "optimizer" not in case["config"]) or case["inference"] or untyped)
    if "Bfloat16 wrapper must use a gradient accumulation type of fp32" in line:
        return "bf16 without ZeRO accumulates in fp32"
    if NOT_IMPLEMENTED.search(line):
        return "not implemented by ZeroRT"
    if OPTIMIZER_BUILD.search(line):
        return "checked where DeepSpeed builds its ZeRO optimizer"
    if STRICTER.search(line) or (untyped and line.startswith("optimizer")):
        # (an optimizer section without "type" is no optimizer for DeepSpeed: nothing in it is read)
        return "ZeroRT is stricter"
    if no_optimizer and line.startswith("scheduler"):
        return "no optimizer, no scheduler"
    if (case["mode"] == "deepspeed" and case["client_optimizer"] and "optimizer" in case["config"]
            and line.startswith("optimizer")):
        return "client optimizer replaces the config's"
    if case["mode"] == "deepspeed" and 'is "auto"' in line:
        return "\"auto\" without the HF Trainer"
    return None


def aio_thread_count(case, kind, d, peer, zrt):
    """ZeroRT reads aio.thread_count, DeepSpeed's older name of intra_op_parallelism, which
    DeepSpeed 0.19 ignores."""
    aio = case["config"].get("aio")
    return (kind == "value" and d["key"] == "aio.intra_op_parallelism" and isinstance(aio, dict)
            and "thread_count" in aio and "intra_op_parallelism" not in aio
            and d["zrt"] == aio["thread_count"])


def zrt_refuses(case, kind, d, peer, zrt):
    if kind != "zrt_refuses":
        return None
    reasons = [line_reason(case, line) for line in _error_lines(d["error"])]
    return " + ".join(sorted(set(reasons))) if reasons and None not in reasons else None


RULES = [
    ("effective values in the dump", effective_values),
    ("bf16 without ZeRO accumulates in fp32", bf16_without_zero),
    ("legacy boolean zero_optimization on the HF path", legacy_bool_zero),
    ("not implemented by ZeroRT", not_implemented),
    ("client optimizer replaces the config's", client_optimizer),
    ("client optimizer with ZeRO-Offload", client_optimizer_offload),
    ("no optimizer, no scheduler", no_optimizer_no_scheduler),
    ("zero divisor in the batch triad", zero_division),
    ("\"auto\" without the HF Trainer", auto_without_trainer),
    ("first error differs", first_error_differs),
    ("aio.thread_count is read", aio_thread_count),
]


def explain(case, kind, detail, peer, zrt):
    if kind == "zrt_refuses":
        return zrt_refuses(case, kind, detail, peer, zrt)
    for name, rule in RULES:
        if rule(case, kind, detail, peer, zrt):
            return name
    return None


def explain_schedule(case, kind, detail, peer, zrt):
    return None
