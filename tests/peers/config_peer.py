"""The real chain a DeepSpeed config goes through, for the config differential.

HF Trainer path (mode "hf"), in the Trainer's order, each step the installed library's own code:
  1. transformers.TrainingArguments(deepspeed=config, **args).__post_init__: HfTrainerDeepSpeedConfig
     + trainer_config_process, then accelerate's DeepSpeedPlugin(hf_ds_config=...) rules.
     The world size is the one thing faked: TrainingArguments.world_size is overridden by a
     subclass (one process cannot be N).
  2. DeepSpeedPlugin.set_mixed_precision(args.mixed_precision), as AcceleratorState does.
  3. transformers.integrations.deepspeed.deepspeed_init(trainer, max_steps, inference): finalize
     (hidden-size and scheduler "auto"s, the mismatch error) and deepspeed_optim_sched, on a stub
     trainer whose create_optimizer builds the torch optimizer Trainer.get_optimizer_cls_and_kwargs
     names.
  4. accelerate.Accelerator._prepare_deepspeed(model, optimizer[, scheduler]) on a stub
     accelerator, with deepspeed.initialize replaced by a catcher of its config_params; an offloaded
     torch optimizer becomes a DeepSpeedCPUAdam that skips loading its C++ op.
Pure DeepSpeed path (mode "deepspeed") starts here with the config as written:
  5. deepspeed.runtime.config.DeepSpeedConfig(config_params, mpu) with torch.distributed set up
     as a 1-rank gloo group and an mpu that reports the case's data-parallel world size (the
     code path DeepSpeed takes under Megatron).
  6. DeepSpeedEngine's own checks, run on an engine shell (DeepSpeedEngine.__new__ with _config
     set, no __init__): _do_sanity_check, the optimizer choice (get_optimizer_configuration) and
     _do_optimizer_sanity_check on an uninitialised instance of the chosen class (DeepSpeed's C++
     optimizers take about a second each to construct here), and _scheduler_from_config on a torch
     optimizer with the same lr. The few rules that live inside the ZeRO optimizers' constructors
     are restated in zero_optimizer_rules(), with their source lines.
CPU vs CUDA: the accelerator is DeepSpeed's CPU one; its fp16 / bf16 support checks are answered
True, as on a GPU (this CPU has no fp16 support, docs/PEERS.md).
"""
import copy
import inspect
import os
import socket
import types


class Captured(Exception):
    """deepspeed.initialize was reached; its keyword arguments are in .kwargs."""

    def __init__(self, kwargs):
        super().__init__("deepspeed.initialize")
        self.kwargs = kwargs


class Failed(Exception):
    def __init__(self, stage, error):
        super().__init__(f"{stage}: {type(error).__name__}: {error}")
        self.stage = stage
        self.error = error


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Peer:
    """Imports and sets up the peers once; run(case) runs one case."""

    def __init__(self, tmpdir):
        for name in list(os.environ):
            if name.startswith("ACCELERATE_"):
                del os.environ[name]
        os.environ.update(DS_ACCELERATOR="cpu", RANK="0", LOCAL_RANK="0", WORLD_SIZE="1",
                          LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(_free_port()), HF_HUB_OFFLINE="1",
                          TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1")
        import logging
        import warnings
        warnings.filterwarnings("ignore")
        import torch
        import deepspeed
        import transformers
        import accelerate
        from accelerate.utils import DummyOptim, DummyScheduler
        from deepspeed.accelerator import get_accelerator
        from deepspeed.runtime.config import DeepSpeedConfig
        from deepspeed.runtime.engine import DeepSpeedEngine
        from deepspeed.runtime import lr_schedules
        from deepspeed.runtime.zero.offload_config import (DeepSpeedZeroOffloadOptimizerConfig,
                                                           DeepSpeedZeroOffloadParamConfig)
        from transformers import Trainer, TrainingArguments
        from transformers.integrations.deepspeed import deepspeed_init
        import deepspeed.ops.adam as ds_adam

        transformers.logging.set_verbosity_error()
        for name in ("DeepSpeed", "deepspeed", "accelerate", "transformers", "torch"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
        deepspeed.utils.logger.setLevel(logging.CRITICAL)
        # DeepSpeed's CPU backend JIT-builds a shared-memory all-reduce op (minutes on a fresh
        # machine); a 1-rank group never uses it and the config does not depend on it.
        import importlib  # (deepspeed.comm.torch as an attribute is the torch module)
        importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None
        deepspeed.init_distributed(dist_backend="gloo", verbose=False)
        deepspeed.utils.logger.setLevel(logging.CRITICAL)
        acc = get_accelerator()
        acc.is_fp16_supported = lambda: True  # as on a GPU (see the module docstring)
        acc.is_bf16_supported = lambda: True

        def capture(**kwargs):
            raise Captured(kwargs)
        deepspeed.initialize = capture

        self.real_cpu_adam = ds_adam.DeepSpeedCPUAdam
        self.real_fused_adam = ds_adam.FusedAdam

        class LightCPUAdam(ds_adam.DeepSpeedCPUAdam):  # a DeepSpeedCPUAdam without its C++ op
            def __init__(self, params, lr=1e-3, weight_decay=0.0, adamw_mode=True, **kwargs):
                defaults = dict(lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=weight_decay,
                                bias_correction=True, amsgrad=False)
                torch.optim.Optimizer.__init__(self, params, defaults)
                self.adamw_mode = adamw_mode
        ds_adam.DeepSpeedCPUAdam = LightCPUAdam
        self.light_cpu_adam = LightCPUAdam

        self.torch, self.deepspeed, self.accelerate = torch, deepspeed, accelerate
        self.DummyOptim, self.DummyScheduler = DummyOptim, DummyScheduler
        self.DeepSpeedConfig, self.DeepSpeedEngine = DeepSpeedConfig, DeepSpeedEngine
        self.lr_schedules = lr_schedules
        self.offload_defaults = {"offload_param": DeepSpeedZeroOffloadParamConfig(),
                                 "offload_optimizer": DeepSpeedZeroOffloadOptimizerConfig()}
        self.Trainer, self.TrainingArguments = Trainer, TrainingArguments
        self.deepspeed_init = deepspeed_init
        self.tmpdir = tmpdir
        self._world_args = {}
        self.versions = {"deepspeed": deepspeed.__version__,
                         "transformers": transformers.__version__,
                         "accelerate": accelerate.__version__, "torch": torch.__version__}

    # --- the HF Trainer path -----------------------------------------------------------------

    def _args_class(self, world_size):
        if world_size not in self._world_args:
            self._world_args[world_size] = type(
                f"TrainingArgumentsW{world_size}", (self.TrainingArguments,),
                {"world_size": property(lambda self: world_size)})
        return self._world_args[world_size]

    def _model(self, dims):
        model = self.torch.nn.Linear(2, 2)
        if dims:
            model.config = types.SimpleNamespace(**dims)
        return model

    def _trainer(self, args, model, plugin):
        torch = self.torch
        trainer = types.SimpleNamespace(model=model, args=args, lr_scheduler=None, optimizer=None)
        trainer.accelerator = types.SimpleNamespace(
            state=types.SimpleNamespace(deepspeed_plugin=plugin))

        def create_optimizer():
            cls, kwargs = self.Trainer.get_optimizer_cls_and_kwargs(args, model)
            trainer.optimizer = cls([p for p in model.parameters()], **kwargs)
            return trainer.optimizer

        def create_scheduler(num_training_steps, optimizer=None):
            return self.Trainer.create_scheduler(trainer, num_training_steps, optimizer)
        trainer.create_optimizer = create_optimizer
        trainer.create_scheduler = create_scheduler
        return trainer

    def _prepare(self, plugin, args, world_size, objects):
        """accelerate's _prepare_deepspeed up to deepspeed.initialize; returns its kwargs."""
        stub = types.SimpleNamespace(
            deepspeed_plugin=plugin, fp8_backend=None, parallelism_config=None, split_batches=False,
            num_processes=world_size, gradient_accumulation_steps=args.gradient_accumulation_steps,
            device=self.torch.device("cpu"), state=types.SimpleNamespace())
        try:
            self.accelerate.Accelerator._prepare_deepspeed(stub, *objects)
        except Captured as c:
            return c.kwargs
        raise AssertionError("_prepare_deepspeed returned without calling deepspeed.initialize")

    def run_hf(self, case):
        world = case["world_size"]
        stage = "TrainingArguments"
        try:
            args = self._args_class(world)(output_dir=self.tmpdir, report_to="none", use_cpu=True,
                                           deepspeed=copy.deepcopy(case["config"]),
                                           **case["args"])
            plugin = args.deepspeed_plugin
            stage = "accelerate set_mixed_precision"
            plugin.set_mixed_precision(args.mixed_precision)
            model = self._model(case["model"])
            trainer = self._trainer(args, model, plugin)
            stage = "deepspeed_init"
            optimizer, scheduler = self.deepspeed_init(trainer, case["num_training_steps"],
                                                       inference=case["inference"])
            stage = "accelerate prepare"
            if case["inference"]:
                objects = [model]
            elif type(scheduler).__name__ == "DummyScheduler":
                objects = [model, optimizer, scheduler]
            else:
                objects = [model, optimizer]
            kwargs = self._prepare(plugin, args, world, objects)
            if not case["inference"] and "scheduler" not in kwargs["config_params"]:
                # The HF schedule: Trainer.create_scheduler after prepare (or DeepSpeed's call of
                # the lr_scheduler_callable), get_scheduler on an optimizer with the base lr.
                stage = "Trainer.create_scheduler"
                client = kwargs.get("optimizer")
                lr = client.defaults["lr"] if client is not None else (
                    kwargs["config_params"]["optimizer"].get("params", {}).get("lr", 1e-3))
                opt = self.torch.optim.AdamW([self.torch.nn.Parameter(self.torch.zeros(1))],
                                             lr=lr if isinstance(lr, float) else 1e-3)
                trainer.lr_scheduler = None
                trainer.create_scheduler(case["num_training_steps"], opt)
        except Failed:
            raise
        except Exception as e:  # noqa: BLE001 - any failure of the real code is a result
            raise Failed(stage, e)
        client = kwargs.get("optimizer")
        lr = client.defaults["lr"] if client is not None else None
        return self.run_deepspeed(kwargs["config_params"], world, client, lr)

    # --- DeepSpeed itself ---------------------------------------------------------------------

    def _engine_shell(self, ds, client_optimizer):
        eng = self.DeepSpeedEngine.__new__(self.DeepSpeedEngine)
        self.torch.nn.Module.__init__(eng)
        eng._config = ds
        eng.global_rank = 0
        eng.client_optimizer = client_optimizer
        eng.client_lr_scheduler = None
        eng.pipeline_parallelism = False
        eng.zenflow = False
        return eng

    def _optimizer_choice(self, eng, ds):
        """The class DeepSpeed builds for the config's optimizer, and its effective parameters."""
        name = eng.optimizer_name()
        params = dict(ds.optimizer_params or {})
        if "max_grad_norm" in params:  # engine.py _configure_basic_optimizer
            raise ValueError("'max_grad_norm' is not supported as an optimizer parameter, please "
                             "switch to using the deepspeed parameter 'gradient_clipping'")
        if name in ("adam", "adamw"):
            adam_w_mode = params.pop("adam_w_mode", True)
            effective = name == "adamw" or adam_w_mode
            torch_adam = params.get("torch_adam", False)
            cls, extra = eng.get_optimizer_configuration(params, effective)
            if cls is self.light_cpu_adam:
                cls = self.real_cpu_adam
            merged = {**params, **extra}
            merged.pop("fp32_optimizer_states", None)
            view = {"adam_w_mode": bool(effective), "torch_adam": bool(torch_adam)}
        elif name in ("adagrad", "lamb", "lion", "onebitadam", "zerooneadam", "onebitlamb",
                      "muadam", "muadamw", "musgd", "muon"):
            # DeepSpeed builds these (ZeroRT refuses them: compared as a difference). Their
            # construction and acceptance are not emulated here.
            return None, {}
        else:
            cls = getattr(self.torch.optim, name)
            merged, view = params, {}
        sig = inspect.signature(cls.__init__)
        sig.bind(None, [], **merged)  # TypeError for an unknown keyword, as construction would
        dumped = ("lr", "betas", "eps", "weight_decay", "bias_correction", "momentum", "dampening",
                  "nesterov")  # the parameters ZeroRT's dump writes
        for pname, p in sig.parameters.items():
            if p.default is not inspect.Parameter.empty and pname in dumped:
                view.setdefault(pname, merged.get(pname, p.default))
        if cls in (self.torch.optim.AdamW, self.torch.optim.Adam, self.torch.optim.SGD):
            cls([self.torch.nn.Parameter(self.torch.zeros(1))], **merged)  # its own value checks
        instance = cls.__new__(cls)
        return instance, {k: list(v) if isinstance(v, tuple) else v for k, v in view.items()}

    def run_deepspeed(self, config, world_size, client_optimizer=None, client_lr=None):
        torch = self.torch
        stage = "DeepSpeedConfig"
        try:
            mpu = types.SimpleNamespace(get_data_parallel_world_size=lambda: world_size,
                                        get_model_parallel_world_size=lambda: 1)
            ds = self.DeepSpeedConfig(copy.deepcopy(config), mpu=mpu)
            stage = "engine"
            eng = self._engine_shell(ds, client_optimizer)
            eng._do_sanity_check()
            optimizer_view = None
            basic = client_optimizer
            if client_optimizer is None and eng.optimizer_name() is not None:
                basic, optimizer_view = self._optimizer_choice(eng, ds)
            if basic is not None:
                if (client_optimizer is not None and eng.zero_use_cpu_optimizer()
                        and not isinstance(basic, self.real_cpu_adam)
                        and eng.zero_force_ds_cpu_optimizer()):
                    raise RuntimeError("You are using ZeRO-Offload with a client provided optimizer")
                eng._do_optimizer_sanity_check(basic)
            has_optimizer = client_optimizer is not None or eng.optimizer_name() is not None
            zero_optimizer_rules(ds, has_optimizer)
            stage = "scheduler"
            lr = client_lr if client_lr is not None else (optimizer_view or {}).get("lr", 1e-3)
            scheduler_view = None
            if eng.scheduler_name() is not None and has_optimizer:
                has_betas = optimizer_view is None or "betas" in optimizer_view
                opt_cls = torch.optim.AdamW if has_betas else torch.optim.SGD
                opt = opt_cls([torch.nn.Parameter(torch.zeros(1))], lr=lr)
                sched = eng._scheduler_from_config(opt)
                scheduler_view = scheduler_params_view(sched, eng.scheduler_params() or {}, lr)
        except Exception as e:  # noqa: BLE001
            raise Failed(stage, e)
        return peer_view(self, ds, eng, optimizer_view, scheduler_view)

    def run(self, case):
        """{"ok": True, "view": {...}} or {"ok": False, "stage": ..., "error": ...}."""
        try:
            if case["mode"] == "hf":
                view = self.run_hf(case)
            else:
                client = None
                if case["client_optimizer"]:
                    client = self.torch.optim.AdamW([self.torch.nn.Parameter(self.torch.zeros(1))],
                                                    lr=1e-3)
                view = self.run_deepspeed(case["config"], case["world_size"], client,
                                          1e-3 if client else None)
            return {"ok": True, "view": view}
        except Failed as f:
            return {"ok": False, "stage": f.stage,
                    "error": f"{type(f.error).__name__}: {f.error}"}


def zero_optimizer_rules(ds, has_optimizer):
    """Checks made inside the ZeRO optimizers' constructors, which cannot run here."""
    stage = ds.zero_optimization_stage
    z = ds.zero_config
    if stage in (1, 2):
        # engine.py _configure_zero_optimizer
        assert has_optimizer, f"zero stage {stage} requires an optimizer"
        # stage_1_and_2.py DeepSpeedZeroOptimizer.__init__
        assert z.allgather_bucket_size % 2 == 0, (
            "allgather_bucket_size must be a multiple of nccl_start_alignment_factor, 2 ")
    if stage == 2 and z.reduce_scatter:
        assert ds.gradient_predivide_factor == 1.0, (
            "gradient_predivide_factor != 1.0 is not yet supported with ZeRO-2 with reduce scatter "
            "enabled")
        assert not ds.prescale_gradients, (
            "pre-scale gradients is not yet supported with ZeRO-2 with reduce scatter enabled")
    if ds.zero_config.legacy_stage1 and stage > 0:
        raise Exception("The deprecated version of ZeRO Stage 1 is not supported in deepspeed >= "
                        "0.5.9")


def scheduler_params_view(sched, given, lr):
    """The scheduler's parameters as ZeroRT's resolved dump writes them."""
    cls = type(sched)
    sig = inspect.signature(cls.__init__)
    view = {"type": cls.__name__}
    for name, p in sig.parameters.items():
        if name in ("self", "optimizer"):
            continue
        value = given.get(name, p.default if p.default is not inspect.Parameter.empty else None)
        if name == "warmup_type":  # the one the scheduler uses (an unknown name falls back to log)
            value = getattr(sched, name, value)
        view[name] = value
    return view


def _dtype_name(dtype, torch):
    return {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}.get(dtype,
                                                                                       str(dtype))


def peer_view(peer, ds, eng, optimizer_view, scheduler_view):
    """The resolved values, flattened to dotted keys named as in ZeroRT's dump."""
    torch = peer.torch
    v = {}
    for key in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                "gradient_clipping", "steps_per_print", "wall_clock_breakdown", "memory_breakdown",
                "dump_state", "prescale_gradients", "gradient_predivide_factor",
                "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer",
                "dataloader_drop_last"):
        v[key] = getattr(ds, key)
    model_dtype, grad_accum_dtype = eng.get_data_types()
    comm = ds.communication_data_type
    v["communication_data_type"] = _dtype_name(comm if comm is not None else model_dtype, torch)
    v["data_types.grad_accum_dtype"] = _dtype_name(grad_accum_dtype, torch)
    fp16 = ds.float16_config
    for key in ("enabled", "auto_cast", "loss_scale", "initial_scale_power", "loss_scale_window",
                "hysteresis", "consecutive_hysteresis", "min_loss_scale"):
        v[f"fp16.{key}"] = getattr(fp16, key)
    v["bf16.enabled"] = ds.bfloat16_config.enabled
    v["bf16.immediate_grad_update"] = ds.bfloat16_config.immediate_grad_update
    z = ds.zero_config.model_dump()
    aliases = {name: f.alias for name, f in type(ds.zero_config).model_fields.items() if f.alias}
    def plain(val):  # enums to their values, paths to strings
        if hasattr(val, "value"):
            return val.value
        return val if val is None or isinstance(val, (bool, int, float, str)) else str(val)

    for key, value in z.items():
        if key in ("offload_param", "offload_optimizer"):
            section = value if value is not None else peer.offload_defaults[key].model_dump()
            for k, val in section.items():
                v[f"zero_optimization.{key}.{k}"] = plain(val)
            continue
        if isinstance(value, (dict, list)) or value is None and key != "overlap_comm":
            continue
        v[f"zero_optimization.{aliases.get(key, key)}"] = plain(value)
    if optimizer_view is not None:
        v["optimizer.type"] = ds.optimizer_name
        for key, value in optimizer_view.items():
            v[f"optimizer.params.{key}"] = value
    if scheduler_view is not None:
        v["scheduler.type"] = scheduler_view.pop("type")
        for key, value in scheduler_view.items():
            v[f"scheduler.params.{key}"] = value
    mode = "IGNORE" if not ds.checkpoint_tag_validation_enabled else (
        "FAIL" if ds.checkpoint_tag_validation_fail else "WARN")
    v["checkpoint.tag_validation"] = mode
    v["checkpoint.use_node_local_storage"] = ds.use_node_local_storage
    v["checkpoint.load_universal"] = ds.load_universal_checkpoint
    v["checkpoint.parallel_write.pipeline_stage"] = ds.checkpoint_parallel_write_pipeline
    for key, value in ds.aio_config.items():
        v[f"aio.{key}"] = value
    for monitor in ("tensorboard", "csv_monitor"):
        m = getattr(ds.monitor_config, monitor)
        for key in ("enabled", "output_path", "job_name"):
            v[f"{monitor}.{key}"] = getattr(m, key)
    return v
