"""Config keys peer test: every key the installed DeepSpeed reads is a key zrt-config accepts.

DeepSpeedConfig runs on dicts that record each key looked up in them, every section in turn given
a probe; a section handed to a pydantic model is walked field by field, aliases and nested models
included. For each key a minimal config sets it to DeepSpeed's default inside its parent sections,
and `zrt-config resolve --config FILE` must exit 0 (one --cases process for all). Keys DeepSpeed
removed, and keys inside a section that turns on a feature ZeroRT refuses by design
(FEATURE_REFUSALS), must be refused, but not as unknown. Top-level keys answered "unknown
top-level key, ignored" are listed (failures with --strict). --keep DIR keeps the case configs.

    python tests/peers/ds_config_keys.py --zrt_config build/bin/zrt-config [--strict] [--keep DIR]
    python tests/peers/ds_config_keys.py --list     # the enumerated keys only (no zrt-config)
"""
import argparse
import collections.abc
import contextlib
import enum
import json
import logging
import os
import subprocess
import sys
import tempfile
import typing

PROBE = "__zrt_probe__"
MIN_KEYS = 300  # DeepSpeed 0.19.8 reads 366
MISSING = object()
BASE = {"train_micro_batch_size_per_gpu": 1}  # the smallest config zrt-config resolves
EXTRA_TOP = {"sequence_parallel_size": None, "data_parallel_size": None}  # deepspeed.initialize()
SKIP_SUBTREES = {("optimizer",), ("scheduler",)}  # keys by "type": config_differential.py
# Sections whose presence turns on a DeepSpeed feature that changes what training computes and
# that ZeroRT refuses by design: every key inside is refused, but not as an unknown key.
FEATURE_REFUSALS = {
    ("zero_optimization", "zenflow"):
        "a zenflow object turns ZenFlow on (its delayed top-k updates change the result); "
        "ZeroRT does not implement it; null, the default, is accepted",
}


def under(path, section):
    return len(path) > len(section) and path[:len(section)] == section


def expected_refusal(path):
    """Why zrt-config must refuse the key (DeepSpeed's own message for a removed key), or None."""
    from deepspeed.runtime import config as ds_config
    if len(path) == 1 and path[0] in ds_config._REMOVED_TOP_LEVEL_CONFIG_KEYS:
        return ds_config._REMOVED_TOP_LEVEL_CONFIG_KEYS[path[0]]
    if len(path) == 2 and path[0] == "zero_optimization":
        return ds_config._REMOVED_ZERO_CONFIG_KEYS.get(path[1])
    return next((why for s, why in FEATURE_REFUSALS.items() if under(path, s)), None)


class Rec(dict):
    """A dict that records every key looked up in it (with the default given to get())."""
    def __init__(self, path, log, items=()):
        super().__init__(items)
        self.path, self.log = path, log

    def note(self, key, default=MISSING):  # a snapshot: DeepSpeed may fill the default later
        if isinstance(key, str) and not key.startswith(PROBE) \
                and self.log.get(self.path + (key,), MISSING) is MISSING:
            self.log[self.path + (key,)] = default if default is MISSING else jsonable(default)

    def get(self, key, default=None):
        return self.note(key, default) or super().get(key, default)

    def __contains__(self, key):
        return self.note(key) or super().__contains__(key)

    def __getitem__(self, key):
        return self.note(key) or super().__getitem__(key)

    def keys(self):  # `key in d.keys()` (get_optimizer_name, ...) is a look-up too
        keys = type("Keys", (collections.abc.KeysView,), {"__contains__": lambda _, k: k in self})
        return keys(self)


def trace_deepspeed_config():
    """(dict-read keys {path: default}, pydantic roots {path: model class}) of DeepSpeedConfig."""
    from deepspeed.runtime.config import DeepSpeedConfig
    from deepspeed.runtime.config_utils import DeepSpeedConfigModel
    log, roots, tried = {}, {}, set()
    original_init = DeepSpeedConfigModel.__init__

    def init(self, strict=False, **data):
        for key, value in data.items():
            if isinstance(key, str) and key.startswith(PROBE):  # Model(**section)
                roots.setdefault(tuple(json.loads(key[len(PROBE):])), type(self))
            elif isinstance(value, Rec) and any(str(k).startswith(PROBE) for k in dict.keys(value)):
                roots.setdefault(value.path[:-1], type(self))  # Model(section=..., ...)
        original_init(self, strict, **data)

    def run(path, value):
        config = node = Rec((), log, BASE)
        for i, key in enumerate(path[:-1]):
            node = dict.setdefault(node, key, Rec(path[:i + 1], log))
        dict.__setitem__(node, path[-1], value)
        try:
            DeepSpeedConfig(config)
        except Exception:  # noqa: BLE001 - a probe breaks the section it is in; the reads count
            pass

    DeepSpeedConfigModel.__init__ = init
    try:
        run(("train_micro_batch_size_per_gpu",), 1)
        while todo := [p for p in log if p not in tried and len(p) <= 3
                       and not any(under(p, s) for s in SKIP_SUBTREES)]:
            for path in todo:
                tried.add(path)
                if log[path] is MISSING or log[path] is None or isinstance(log[path], dict):
                    run(path, Rec(path, log, {PROBE + json.dumps(list(path)): None}))
                    if len(path) == 1:
                        run(path, True)  # the legacy boolean forms ("zero_optimization": true)
    finally:
        DeepSpeedConfigModel.__init__ = original_init
    return log, roots


def jsonable(value):
    """A default as JSON: enums, pp_int, models; Path, torch.dtype, ... as text."""
    if isinstance(value, enum.Enum) or hasattr(value, "model_dump"):
        return jsonable(value.value if isinstance(value, enum.Enum) else value.model_dump())
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, str, float)):
        return value
    return int(value) if isinstance(value, int) else str(value)


def entry(default, kind, source, alias_of=None):
    return {"value": jsonable(default), "type": kind, "source": source, "alias_of": alias_of}


def submodel(annotation):
    """The pydantic model class in a field's annotation (Optional[Model] included), or None."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and hasattr(candidate, "model_fields"):
            return candidate
    return None


def walk_model(model, path, out, seen=()):
    """Every field and alias of a pydantic model, recursively: out[path] = entry."""
    for name, info in model.model_fields.items():
        default = info.get_default(call_default_factory=True)
        kind = info.annotation.__name__ if isinstance(info.annotation, type) \
            else str(info.annotation).replace("typing.", "")
        aliases = {a for a in (info.alias, info.validation_alias) if isinstance(a, str)} - {name}
        for key in [name] + sorted(aliases):
            out[path + (key,)] = entry(default, kind, model.__name__, None if key == name else name)
            sub = submodel(info.annotation)
            if sub is not None and sub not in seen:
                walk_model(sub, path + (key,), out, seen + (model,))


def enumerate_keys():
    """{path: {"value", "type", "source", "alias_of"}}: every key DeepSpeed reads."""
    import deepspeed  # noqa: F401 - creates DeepSpeed's logger, silenced below
    logging.getLogger("DeepSpeed").setLevel(logging.ERROR)
    log, roots = trace_deepspeed_config()
    keys = {}
    for root, model in sorted(roots.items()):
        if root:
            keys[root] = entry({}, "section", model.__name__)
        walk_model(model, root, keys)
    sections = {p[:i] for p in list(log) + list(keys) for i in range(1, len(p))}
    for path, default in sorted(log.items()):
        if path in keys or any(under(path, s) for s in SKIP_SUBTREES):
            continue
        if default is MISSING:  # looked up with `in` or [...]: {} for a section, else null
            default = {} if path in sections and path not in SKIP_SUBTREES else None
        kind = "section" if path in sections else type(jsonable(default)).__name__
        keys[path] = entry(default, kind, "DeepSpeedConfig dict read")
    for key, default in EXTRA_TOP.items():
        keys.setdefault((key,), entry(default, "int", "deepspeed.initialize()"))
    return keys


def case_config(path, value):
    config = node = dict(BASE)
    if (path[0] not in BASE) or value is not None:  # a base key's null would leave no batch size
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return config


def check(zrt_config, keys, folder, strict):
    paths = sorted(keys)
    with open(os.path.join(folder, "cases.jsonl"), "w") as cases:
        for i, path in enumerate(paths):
            file = os.path.join(folder, f"{i:04d}_{'.'.join(path)}.json")
            with open(file, "w") as f:
                json.dump(case_config(path, keys[path]["value"]), f, indent=1)
            cases.write(json.dumps({"id": i, "argv": ["--config", file]}) + "\n")
    run = subprocess.run([zrt_config, "resolve", "--cases", os.path.join(folder, "cases.jsonl")],
                         capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"zrt-config resolve --cases failed: {run.stderr[-2000:]}")
    results = {r["id"]: r for r in map(json.loads, filter(str.strip, run.stdout.splitlines()))}
    refused, wrong, unknown_top = [], [], []
    for i, path in enumerate(paths):
        r, name = results.get(i, {"exit": -1, "error": "no result"}), ".".join(path)
        error = r.get("error", "").strip().replace("\n", " | ")
        if reason := expected_refusal(path):
            if r["exit"] == 0 or "unknown key" in error:
                wrong.append(f"{name}: got {error or 'exit 0'!r}; must be refused: {reason}")
        elif r["exit"] != 0:
            refused.append(f"{name}: {error}  [{i:04d}_{name}.json]")
        elif len(path) == 1 and any("unknown top-level key" in w for w in r.get("warnings", [])):
            unknown_top.append(name)
    too_few = len(paths) < MIN_KEYS  # a walk that stopped finding DeepSpeed's models
    failed = refused or wrong or (strict and unknown_top) or too_few
    if too_few:
        print(f"ds_config_keys: only {len(paths)} keys found (at least {MIN_KEYS} expected): the "
              f"walk no longer sees DeepSpeed's config models")
    print(f"ds_config_keys: {len(paths)} DeepSpeed keys: {len(refused)} refused, {len(wrong)} not "
          f"refused as they must be, {len(unknown_top)} top-level keys warned unknown: "
          f"{'FAIL' if failed else 'ok'}")
    print("".join(f"  {kind}: {x}\n" for kind, xs in (("refused", refused), ("wrong", wrong),
                  ("warned unknown top-level key", unknown_top)) for x in xs), end="")
    return 1 if failed else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zrt_config", help="path of the zrt-config binary")
    parser.add_argument("--list", action="store_true", help="print the enumerated keys and exit")
    parser.add_argument("--strict", action="store_true",
                        help="also fail on top-level keys zrt-config warns about as unknown")
    parser.add_argument("--keep", help="write the case configs to this folder and keep them")
    args = parser.parse_args()
    keys = enumerate_keys()
    if args.list:
        for path, e in sorted(keys.items()):
            alias = f"  (alias of {e['alias_of']})" if e["alias_of"] else ""
            print(f"{'.'.join(path)}  {e['type']}  default={json.dumps(e['value'])}  "
                  f"[{e['source']}]{alias}")
        print(f"{len(keys)} keys")
        return 0
    if not args.zrt_config:
        parser.error("--zrt_config is required (or --list)")
    with contextlib.nullcontext(args.keep) if args.keep else tempfile.TemporaryDirectory() as tmp:
        os.makedirs(tmp, exist_ok=True)
        return check(args.zrt_config, keys, tmp, args.strict)


if __name__ == "__main__":
    sys.exit(main())
