"""Random but well-formed cases for the config differential (tests/peers/config_differential.py).

A case is a JSON object:

    {"mode": "hf" | "deepspeed",          # HF Trainer path, or deepspeed.initialize alone
     "config": {...},                     # the DeepSpeed config
     "args": {...},                       # TrainingArguments keyword arguments (mode hf)
     "world_size": N, "num_training_steps": N,
     "model": {"hidden_size": H} | {"hidden_sizes": [...]} | {},
     "inference": bool,                   # the Trainer's evaluate-before-train path (mode hf)
     "client_optimizer": bool}            # deepspeed.initialize(optimizer=torch AdamW) (mode deepspeed)

Every key of config/KEYS.md appears in some cases (config_differential.py checks that over a
run), "auto" or explicit or absent; explicit values agree with the TrainingArguments or not.
Values are valid for their key most of the time; a few are out of range on purpose, so that
both sides must refuse them.
"""
import copy
import math
import random

# TrainingArguments values the generator draws from (the first of each is transformers' default).
ARG_CHOICES = {
    "per_device_train_batch_size": [8, 1, 2, 4, 16],
    "gradient_accumulation_steps": [1, 2, 3, 4],
    "learning_rate": [5e-5, 1e-4, 3e-4, 1e-3, 0.01],
    "weight_decay": [0.0, 0.01, 0.1],
    "adam_beta1": [0.9, 0.8],
    "adam_beta2": [0.999, 0.95],
    "adam_epsilon": [1e-8, 1e-6],
    "max_grad_norm": [1.0, 0.5, 0.0, 2.0],
    "warmup_steps": [0, 1, 5, 100, 0.1, 0.5],
    "lr_scheduler_type": ["linear", "cosine", "constant", "constant_with_warmup", "polynomial",
                          "cosine_with_restarts"],
    "optim": ["adamw_torch", "adamw_torch_fused", "sgd"],
}

SCHEDULERS = ["WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle", "LRRangeTest"]

# Top-level DeepSpeed sections ZeroRT does not use (config/KEYS.md), and the keys DeepSpeed 0.19
# removed (an error whatever their value).
IGNORED_SECTIONS = ["flops_profiler", "comms_logger", "wandb", "comet",
                    "autotuning", "timers", "compile", "vocabulary_size",
                    "disable_allgather", "seq_parallel_communication_data_type", "pipeline",
                    "tensor_parallel", "use_data_before_expert_parallelism", "weight_quantization"]
ENABLED_SECTIONS = ["data_efficiency", "hybrid_engine", "torch_autocast"]
REMOVED_SECTIONS = ["nebula", "compression_training", "quantize_training", "eigenvalue",
                    "sparse_attention", "elasticity", "graph_harvesting", "curriculum_learning",
                    "progressive_layer_drop"]


class Gen:
    def __init__(self, rng):
        self.rng = rng

    def p(self, probability):
        return self.rng.random() < probability

    def pick(self, options):
        return self.rng.choice(options)

    def flag(self, default=False):
        return self.pick([default, default, not default])

    def mostly(self, usual, *others, p=0.9):
        """`usual` with probability p, else one of `others` (values that are refused)."""
        return usual if self.p(p) or not others else self.pick(list(others))


def _args(g):
    args = {}
    for key, choices in ARG_CHOICES.items():
        if g.p(0.35):
            args[key] = g.pick(choices)
    precision = g.pick([None, None, "fp16", "bf16", "fp16_full_eval", "bf16_full_eval"])
    if precision:
        args[precision] = True
    if g.p(0.005):
        args["fp16"] = args["bf16"] = True  # transformers refuses both
    if g.p(0.1):
        args["save_on_each_node"] = True
    if g.p(0.05):
        args["lr_scheduler_kwargs"] = g.pick([{"num_cycles": 2}, {"power": 2.0}, {}])
    return args


def _auto_or(g, value, p_auto=0.4, p_absent=0.25):
    """Absent (None), "auto", or the given explicit value."""
    r = g.rng.random()
    if r < p_absent:
        return None
    if r < p_absent + p_auto:
        return "auto"
    return value


def _hf_value(g, consistent, other):
    """The value the TrainingArguments give (mostly), or another one (a mismatch)."""
    return consistent if g.p(0.98) else other


def _put(d, key, value):
    if value is not None:
        d[key] = value


def _batch(g, cfg, args, world, mode):
    if mode == "deepspeed":  # explicit values, as a user of deepspeed.initialize writes them
        mbs, gas = g.pick([1, 2, 4, 8, 16]), g.pick([1, 2, 4])
        values = {"train_batch_size": mbs * gas * world, "train_micro_batch_size_per_gpu": mbs,
                  "gradient_accumulation_steps": gas}
        keys = g.pick([["train_batch_size"], ["train_micro_batch_size_per_gpu"],
                       ["train_micro_batch_size_per_gpu", "gradient_accumulation_steps"],
                       ["train_batch_size", "train_micro_batch_size_per_gpu"],
                       ["train_batch_size", "gradient_accumulation_steps"], list(values)])
        for key in keys:
            cfg[key] = values[key]
        if g.p(0.1):  # a triad that does not add up, a zero, or no batch size at all
            key = g.pick(list(values))
            cfg[key] = g.pick([0, 3, 7, 64])
            if g.p(0.2):
                cfg.pop("train_batch_size", None)
                cfg.pop("train_micro_batch_size_per_gpu", None)
        return
    mbs = args.get("per_device_train_batch_size", 8)
    gas = args.get("gradient_accumulation_steps", 1)
    mismatch = 0.02
    _put(cfg, "train_micro_batch_size_per_gpu",
         _auto_or(g, mbs if not g.p(mismatch) else g.pick([2, 4, 32])))
    _put(cfg, "gradient_accumulation_steps",
         _auto_or(g, gas if not g.p(mismatch) else g.pick([2, 4, 8])))
    _put(cfg, "train_batch_size",
         _auto_or(g, world * mbs * gas if not g.p(mismatch) else g.pick([16, 64, 7])))


def _scalars(g, cfg, args):
    _put(cfg, "gradient_clipping",
         _auto_or(g, _hf_value(g, args.get("max_grad_norm", 1.0), g.pick([0.0, 0.3, 1.0]))))
    simple = {
        "steps_per_print": lambda: g.pick([1, 10, 100, 2000]),
        "wall_clock_breakdown": g.flag, "memory_breakdown": g.flag, "dump_state": g.flag,
        "prescale_gradients": g.flag,
        "gradient_predivide_factor": lambda: g.pick([1.0, 1.0, 2.0]),
        "communication_data_type": lambda: g.mostly(g.pick(["fp32", "fp16", "bf16", "FP16"]), "int8"),
        "zero_allow_untested_optimizer": g.flag,
        "zero_force_ds_cpu_optimizer": lambda: g.flag(True),
        "dataloader_drop_last": g.flag,
    }
    for key, make in simple.items():
        if g.p(0.12):
            cfg[key] = make()
    if g.p(0.01):
        cfg["sparse_gradients"] = g.flag()


def _precision(g, cfg, args):
    half = args.get("fp16") or args.get("fp16_full_eval")
    bf16 = args.get("bf16") or args.get("bf16_full_eval")
    if g.p(0.5):
        fp16 = {}
        _put(fp16, "enabled", _auto_or(g, _hf_value(g, bool(half), not half), 0.5, 0.1))
        dynamic = {"auto_cast": g.flag, "loss_scale": lambda: g.pick([0, 0, 128.0, 0.5]),
                   "initial_scale_power": lambda: g.pick([16, 8, 32, 12]),
                   "loss_scale_window": lambda: g.mostly(g.pick([1000, 100, 500]), 0),
                   "hysteresis": lambda: g.pick([2, 1, 4]), "consecutive_hysteresis": g.flag,
                   "min_loss_scale": lambda: g.mostly(g.pick([1, 2, 0.5]), 0),
                   "fp16_master_weights_and_grads": lambda: g.mostly(False, True)}
        for key, make in dynamic.items():
            if g.p(0.2):
                fp16[key] = make()
        cfg["fp16"] = fp16
    if g.p(0.5):
        section = {}
        _put(section, "enabled", _auto_or(g, _hf_value(g, bool(bf16), not bf16), 0.5, 0.1))
        if g.p(0.2):
            section["immediate_grad_update"] = g.flag()
        cfg["bfloat16" if g.p(0.1) else "bf16"] = section
        if g.p(0.05):
            cfg["bfloat16"] = {"enabled": g.flag()}
    if g.p(0.015):
        cfg["amp"] = {"enabled": g.pick([False, False, True]), "opt_level": "O1"}


def _offload(g, keys):
    section = {"device": g.mostly(g.pick(["cpu", "cpu", "none", "auto"]), "nvme")}
    for key, make in keys.items():
        if g.p(0.2):
            section[key] = make()
    return section


def _zero(g, cfg):
    if g.p(0.015):
        cfg["zero_optimization"] = g.flag()
        if g.p(0.5):
            cfg["allgather_size"] = g.pick([500000000, 200000000, 3])
        return
    if g.p(0.02):
        return  # no zero_optimization section (accelerate refuses that on the Trainer path)
    z = {}
    _put(z, "stage", _auto_or(g, g.pick([0, 1, 2, 3, 3, 2]), 0.05, 0.05))
    count = lambda *vals: (lambda: g.pick(list(vals)))  # noqa: E731
    keys = {
        "contiguous_gradients": g.flag, "reduce_scatter": lambda: g.flag(True),
        "reduce_bucket_size": lambda: g.mostly(g.pick(["auto", "auto", 500000000, 1000]), 0),
        "use_multi_rank_bucket_allreduce": g.flag, "allgather_partitions": g.flag,
        "allgather_bucket_size": lambda: g.mostly(g.pick([500000000, 200000000]), 1001, 0),
        "overlap_comm": g.flag, "load_from_fp32_weights": g.flag,
        "sub_group_size": count(1000000000, 100000), "ignore_unused_parameters": g.flag,
        "round_robin_gradients": g.flag, "memory_efficient_linear": g.flag,
        "pipeline_loading_checkpoint": g.flag, "override_module_apply": g.flag,
        "log_trace_cache_warnings": g.flag, "elastic_checkpoint": lambda: g.mostly(False, True),
        "legacy_stage1": lambda: g.mostly(False, True),
        "zero_hpz_partition_size": lambda: g.mostly(1, 2),
        "zero_quantized_weights": lambda: g.mostly(False, True),
        "zero_quantized_nontrainable_weights": lambda: g.mostly(False, True),
        "zero_quantized_gradients": lambda: g.mostly(False, True),
        "cpu_offload": g.flag, "cpu_offload_param": g.flag,
        "cpu_offload_use_pin_memory": g.flag,
        "stage3_gather_fp16_weights_on_model_save": g.flag,
    }
    for key, make in keys.items():
        if g.p(0.06):
            z[key] = make()
    removed = {"zeropp_loco_param": lambda: {"err_beta": 0.8},
               "mics_shard_size": count(-1, 4), "mics_hierarchical_params_gather": g.flag}
    for key, make in removed.items():
        if g.p(0.01):
            z[key] = make()
    stage3 = [("stage3_prefetch_bucket_size", "prefetch_bucket_size", count("auto", 50000000, 0)),
              ("stage3_param_persistence_threshold", "param_persistence_threshold",
               count("auto", 100000, 10)),
              ("stage3_model_persistence_threshold", "model_persistence_threshold",
               count(9223372036854775807, 1000)),
              ("stage3_max_live_parameters", "max_live_parameters", count(1000000000, 100)),
              ("stage3_max_reuse_distance", "max_reuse_distance", count(1000000000, 100)),
              ("stage3_gather_16bit_weights_on_model_save", "gather_16bit_weights_on_model_save",
               count(True, False, "auto")),
              ("stage3_module_granularity_threshold", "module_granularity_threshold",
               count(0, 100)),
              ("stage3_use_all_reduce_for_fetch_params", "use_all_reduce_for_fetch_params",
               g.flag)]
    for alias, name, make in stage3:
        if g.p(0.15):
            z[alias if g.p(0.7) else name] = make()
            if g.p(0.03):
                z[name] = make()  # both names of one setting
    if g.p(0.3):
        z["offload_param"] = _offload(g, {"nvme_path": lambda: "/tmp/nvme",
                                          "buffer_count": count(5, 2), "buffer_size": count(100000000, 1000),
                                          "max_in_cpu": count(1000000000, 10), "pin_memory": g.flag})
    if g.p(0.35):
        z["offload_optimizer"] = _offload(g, {"nvme_path": lambda: "/tmp/nvme",
                                              "buffer_count": count(4, 8), "pin_memory": g.flag,
                                              "pipeline_read": g.flag, "pipeline_write": g.flag,
                                              "fast_init": g.flag, "ratio": count(1.0, 1.0, 0.5)})
    cfg["zero_optimization"] = z


def _optimizer(g, cfg, args):
    if not g.p(0.6):
        return
    kind = g.mostly(g.pick(["AdamW", "AdamW", "Adam", "adamw", "SGD"]), "Lamb", "Adagrad",
                    "Nonsense", p=0.95)
    params = {}
    lr = args.get("learning_rate", 5e-5)
    _put(params, "lr", _auto_or(g, _hf_value(g, lr, g.pick([1e-3, 3e-4, 0.1]))))
    _put(params, "weight_decay",
         _auto_or(g, _hf_value(g, args.get("weight_decay", 0.0), g.pick([0.0, 0.01, 0.1]))))
    if kind != "SGD":
        betas = [args.get("adam_beta1", 0.9), args.get("adam_beta2", 0.999)]
        _put(params, "betas", _auto_or(g, _hf_value(g, betas, [0.8, 0.99])))
        _put(params, "eps", _auto_or(g, _hf_value(g, args.get("adam_epsilon", 1e-8), 1e-6)))
        extra = {"bias_correction": g.flag, "adam_w_mode": lambda: g.flag(True),
                 "torch_adam": g.flag, "amsgrad": lambda: g.mostly(False, True),
                 "set_grad_none": g.flag}
    else:
        extra = {"momentum": lambda: g.pick([0.0, 0.9]), "dampening": lambda: g.pick([0.0, 0.1]),
                 "nesterov": g.flag, "maximize": lambda: g.mostly(False, True),
                 "foreach": g.flag, "differentiable": lambda: False, "fused": lambda: False}
    for key, make in extra.items():
        if g.p(0.15):
            params[key] = make()
    if g.p(0.01):
        params["max_grad_norm"] = 1.0
    if kind == "SGD" and g.p(0.8):
        cfg["zero_allow_untested_optimizer"] = True
    optimizer = {"type": kind}
    if params or g.p(0.5):
        optimizer["params"] = params
    if g.p(0.05):
        optimizer["legacy_fusion"] = False
    if g.p(0.01):
        del optimizer["type"]
    cfg["optimizer"] = optimizer


def _scheduler_params(g, kind, args, steps):
    p = {}
    count = lambda *vals: (lambda: g.pick(list(vals)))  # noqa: E731
    if kind in ("WarmupLR", "WarmupDecayLR"):
        _put(p, "warmup_min_lr", _auto_or(g, g.pick([0.0, 1e-6])))
        _put(p, "warmup_max_lr",
             _auto_or(g, _hf_value(g, args.get("learning_rate", 5e-5), g.pick([1e-3, 0.01]))))
    if kind in ("WarmupLR", "WarmupDecayLR", "WarmupCosineLR"):
        other = g.mostly(g.pick([1, 2, 5, 10, 100, 1000]), 0)
        _put(p, "warmup_num_steps", _auto_or(g, _hf_value(g, hf_warmup_steps(args, steps), other)))
        if g.p(0.3):
            p["warmup_type"] = g.mostly(g.pick(["log", "linear", "linear"]), "cosine")
    if kind in ("WarmupDecayLR", "WarmupCosineLR"):
        _put(p, "total_num_steps", _auto_or(g, _hf_value(g, steps, g.pick([10, 1000])), 0.5, 0.1))
    if kind == "WarmupCosineLR":
        for key, make in {"warmup_min_ratio": count(0.0, 0.1), "cos_min_ratio": count(0.0001, 0.1)}.items():
            if g.p(0.3):
                p[key] = make()
    if kind == "OneCycle":
        keys = {"cycle_min_lr": count(1e-4, 1e-5), "cycle_max_lr": count(1e-3, 0.01),
                "decay_lr_rate": count(0.0, 0.001, 0.5), "cycle_first_step_size": count(2000, 10, 3),
                "cycle_second_step_size": count(10, 5, 0), "cycle_first_stair_count": count(0, 2),
                "cycle_second_stair_count": count(0, 3), "decay_step_size": count(0, 2, 10),
                "cycle_momentum": g.flag, "cycle_min_mom": count(0.8, 0.85),
                "cycle_max_mom": count(0.9, 0.95), "decay_mom_rate": count(0.0, 0.1)}
        for key, make in keys.items():
            if key in ("cycle_min_lr", "cycle_max_lr") and g.p(0.95) or g.p(0.3):
                p[key] = make()
    if kind == "LRRangeTest":
        keys = {"lr_range_test_min_lr": count(1e-3, 1e-5), "lr_range_test_step_size": count(2000, 5, 3),
                "lr_range_test_step_rate": count(1.0, 0.5, 5.0), "lr_range_test_staircase": g.flag}
        for key, make in keys.items():
            if g.p(0.4):
                p[key] = make()
    if g.p(0.05):
        p["last_batch_iteration"] = g.pick([-1, 5])
    return p


def hf_warmup_steps(args, steps):
    """transformers 5.x: max(1, TrainingArguments.get_warmup_steps(steps)) (trainer_config_finalize)."""
    ws = args.get("warmup_steps", 0)
    return max(1, int(ws) if ws >= 1 else math.ceil(steps * ws))


def _scheduler(g, cfg, args, steps):
    if not g.p(0.5):
        return
    kind = g.pick(SCHEDULERS + ["StepLR"] if g.p(0.01) else SCHEDULERS)
    cfg["scheduler"] = {"type": kind, "params": _scheduler_params(g, kind, args, steps)}


def _other_sections(g, cfg):
    if g.p(0.15):
        ck = {}
        for key, make in {"tag_validation": lambda: g.mostly(g.pick(["Warn", "ignore", "FAIL"]),
                                                             "Sometimes"),
                          "use_node_local_storage": g.flag,
                          "load_universal": lambda: g.mostly(False, True),
                          "parallel_write": lambda: {"pipeline_stage": g.flag()}}.items():
            if g.p(0.4):
                ck[key] = make()
        cfg["checkpoint"] = ck
    if g.p(0.1):
        cfg["data_types"] = {"grad_accum_dtype": g.pick(["fp32", "fp16", "bf16"])}
    for monitor in ("tensorboard", "csv_monitor"):
        if g.p(0.06):
            m = {"enabled": g.flag()}
            if g.p(0.5):
                m["output_path"] = "/tmp/zrt_monitor"
            if g.p(0.5):
                m["job_name"] = "job"
            cfg[monitor] = m
    if g.p(0.05):  # DeepSpeed's activation checkpointing section, valid keys and values
        ac = {}
        for key in ("partition_activations", "cpu_checkpointing", "profile",
                    "contiguous_memory_optimization", "synchronize_checkpoint_boundary"):
            if g.p(0.4):
                ac[key] = g.flag()
        if g.p(0.3):
            ac["number_checkpoints"] = g.pick([None, 1, 4])
        cfg["activation_checkpointing"] = ac
    if g.p(0.06):  # DeepSpeed's aio section (NVMe offload's I/O), valid values
        aio = {}
        for key, make in {"block_size": lambda: g.pick([4096, 262144, 1048576]),
                          "queue_depth": lambda: g.pick([1, 8, 32]),
                          "intra_op_parallelism": lambda: g.pick([1, 2]),
                          "single_submit": g.flag, "overlap_events": lambda: g.flag(True),
                          "use_gds": lambda: False}.items():
            if g.p(0.5):
                aio[key] = make()
        if g.p(0.2):  # the older name, which DeepSpeed 0.19 ignores
            aio["thread_count"] = aio.get("intra_op_parallelism", g.pick([1, 3]))
        cfg["aio"] = aio
    if g.p(0.08):
        key = g.pick(IGNORED_SECTIONS)
        cfg[key] = {} if key not in ("vocabulary_size", "disable_allgather",
                                     "seq_parallel_communication_data_type",
                                     "use_data_before_expert_parallelism") else {
            "vocabulary_size": 32000, "disable_allgather": False,
            "seq_parallel_communication_data_type": "fp32",
            "use_data_before_expert_parallelism": False}[key]
    if g.p(0.02):
        cfg[g.pick(ENABLED_SECTIONS)] = {"enabled": g.pick([False, True])}
    if g.p(0.05):
        cfg[g.pick(REMOVED_SECTIONS)] = {"enabled": g.pick([False, True])}
    if g.p(0.03):
        cfg["zrt"] = {"comm_timeout": 60, "debug_collectives": g.flag()}


def _deepspeed_019_keys(g, cfg, world):
    """Keys DeepSpeed 0.19 added, drawn from their own generator (so the other keys' draws are
    those of earlier versions of this file): values both sides accept, values ZeroRT refuses as
    not supported (a documented difference), and ones both refuse. Values that would make the
    peer build hardware-specific engines (SuperOffload, the fast checkpoint writer, DataStates)
    are not drawn."""
    z = cfg.get("zero_optimization")
    if isinstance(z, dict) and g.p(0.3):
        for key, make in {"compute_grad_norm": lambda: g.mostly(True, False),
                          "parameter_alignment": lambda: g.mostly(False, True),
                          "enable_sanity_checks": g.flag,
                          "save_muon_momentum_buffer_in_memory": g.flag,
                          "zenflow": lambda: g.mostly(None, {"topk_ratio": 0.1}),
                          "leaf_module": lambda: {"classes": g.pick([[], "MoeBlock", ["A", "A"]]),
                                                  "names": ["layers.0.mlp"],
                                                  "name_suffixes": g.pick([[], "experts"])}
                          }.items():
            if g.p(0.3):
                z[key] = make()
        if g.p(0.2):
            z["stage3_allgather_sequential" if g.p(0.5) else "allgather_sequential"] = g.flag()
        if isinstance(z.get("offload_optimizer"), dict) and g.p(0.3):
            z["offload_optimizer"].update(super_offload=False,
                                          cpuadam_cores_perc=g.pick([0.8, 0.5]))
    bf16 = cfg.get("bf16")
    if isinstance(bf16, dict) and g.p(0.3):
        bf16["check_grad_overflow"] = g.flag(True)
        if g.p(0.2):
            bf16["bf16_master_weights_and_grads"] = g.mostly(False, True)
            bf16["bf16_optimizer_states"] = g.mostly(False, True)
    if g.p(0.05):  # an invalid writer type: both refuse it (a valid one makes DeepSpeed build it)
        cfg.setdefault("checkpoint", {})["writer"] = {"type": "disk",
                                                      "data_parallel": g.pick(["replica", "socket"])}
    if g.p(0.05):
        cfg.setdefault("checkpoint", {})["checkpoint_serialization"] = g.flag(True)
    if g.p(0.05) and "fp16" not in cfg and "bf16" not in cfg and "bfloat16" not in cfg:
        cfg["data_types"] = {"param_dtype": "fp32", "buffer_dtype": g.pick(["fp32", "float32"]),
                             "keep_in_fp32_modules": g.pick(["auto", [], ["rotary_emb"]])}
    for key, make in {"gradient_allreduce_op": lambda: g.mostly("mean", "sum"),
                      "managed_gradient_accumulation": lambda: g.mostly(True, False),
                      "log_level": lambda: g.pick(["info", "warning"]),
                      "disable_python_gc": lambda: False,
                      "datastates_ckpt": lambda: {"enabled": False}}.items():
        if g.p(0.03):
            cfg[key] = make()
    if g.p(0.02):
        cfg["expert_parallel"] = {"enabled": g.pick([False, True])}
    if g.p(0.03):  # one of the two (both together make deepspeed.initialize build a mesh)
        if g.p(0.5):
            cfg["sequence_parallel_size"] = 1
        else:
            cfg["data_parallel_size"] = world


def make_case(rng, index):
    g = Gen(rng)
    mode = "deepspeed" if g.p(0.2) else "hf"
    world = g.pick([1, 1, 2, 4, 8, 3])
    steps = g.pick([10, 100, 1000, 3, 5000])
    args = _args(g) if mode == "hf" else {}
    cfg = {}
    _batch(g, cfg, args, world, mode)
    _scalars(g, cfg, args)
    _precision(g, cfg, args)
    _zero(g, cfg)
    _optimizer(g, cfg, args)
    _scheduler(g, cfg, args, steps)
    _other_sections(g, cfg)
    _deepspeed_019_keys(Gen(random.Random(f"deepspeed-0.19-keys-{index}")), cfg, world)
    if mode == "deepspeed":  # no "auto" for deepspeed.initialize alone, mostly
        cfg = _strip_auto(g, cfg)
    model = g.pick([{"hidden_size": g.pick([8, 64, 768, 4096])},
                    {"hidden_sizes": [32, g.pick([64, 96])]}, {"hidden_size": 33}])
    if g.p(0.05):
        model = {}  # a model config without a hidden size
    inference = mode == "hf" and g.p(0.05)
    if inference and isinstance(cfg.get("zero_optimization"), dict) and g.p(0.8):
        cfg["zero_optimization"]["stage"] = 3  # ZeRO inference needs stage 3
    return {"id": index, "mode": mode, "config": cfg, "args": args, "world_size": world,
            "num_training_steps": steps, "model": model if mode == "hf" else {},
            "inference": inference, "client_optimizer": mode == "deepspeed" and g.p(0.25)}


def _strip_auto(g, value):
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if v == "auto" and not g.p(0.05):
                continue
            out[k] = _strip_auto(g, v)
        return out
    return copy.deepcopy(value)
