"""Reads a ZeroRT checkpoint the way DeepSpeed's zero_to_fp32 does (docs/DEEPSPEED.md §4.6),
written here independently, and compares the result with an expected state dict.

  /usr/bin/python3 zero_to_fp32_check.py SAVE_DIR EXPECTED.pt

Every .pt file of the tag must load without executing anything. Model-states files: with
torch.load(weights_only=True) on torch >= 2; on Debian's 1.13, whose weights_only reader lacks the
BINFLOAT opcode, through an allowlist-only unpickler (tensors, storages, OrderedDict, torch.Size).
Optimizer-states files hold DeepSpeed's LossScaler / DynamicLossScaler objects and (stages 1/2)
its fragment_address dataclasses, as DeepSpeed's own do: the allowlist unpickler reads them into a
plain stand-in that only keeps the attributes (and torch dtypes), so no DeepSpeed code runs. Prints "OK <n>" and exits 0 when all expected
tensors are reproduced exactly.
"""
import glob
import os
import pickle
import re
import sys
import types

import torch

ALLOWED = {("collections", "OrderedDict"), ("torch._utils", "_rebuild_tensor_v2"), ("torch", "Size")}
DATA_CLASSES = {("deepspeed.runtime.fp16.loss_scaler", "LossScaler"),
                ("deepspeed.runtime.fp16.loss_scaler", "DynamicLossScaler"),
                ("deepspeed.utils.tensor_fragment", "fragment_address")}


class AttributesOnly:
    """What an optimizer file's DeepSpeed object becomes: its attributes, nothing of its class."""


class _Restricted(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) in DATA_CLASSES:
            return AttributesOnly
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        if (module, name) not in ALLOWED and not (module == "torch" and name.endswith("Storage")):
            raise pickle.UnpicklingError(f"{module}.{name} is not on the allowlist")
        return super().find_class(module, name)


_restricted = types.ModuleType("restricted_pickle")
_restricted.Unpickler = _Restricted
_restricted.load = pickle.load


def natural_key(text):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def load(path):
    if int(torch.__version__.split(".")[0]) >= 2 and not path.endswith("_optim_states.pt"):
        return torch.load(path, map_location="cpu", weights_only=True)
    return torch.load(path, map_location="cpu", pickle_module=_restricted, weights_only=False)


def consolidate(tag_dir):
    for path in sorted(glob.glob(os.path.join(tag_dir, "*.pt"))):
        load(path)  # every file must be readable without executing anything
    optim_files = sorted(glob.glob(os.path.join(tag_dir, "*_optim_states.pt")), key=natural_key)
    states = [load(f)["optimizer_state_dict"] for f in optim_files]
    for f, s in zip(optim_files, states):
        scaler = s["loss_scaler"]
        if not isinstance(scaler, AttributesOnly) or scaler.cur_scale <= 0:
            raise ValueError(f"{f}: the loss scaler is {scaler!r}, not DeepSpeed's LossScaler")
    stage = int(states[0]["zero_stage"])
    counts = states[0]["partition_count"]
    world = max(counts) if stage <= 2 else int(counts)
    if len(states) != world:
        raise ValueError(f"Expected {world} of '*_optim_states.pt' but found {len(states)} files")
    model_files = sorted(glob.glob(os.path.join(tag_dir, "*_model_states.pt")), key=natural_key)
    param_shapes = load(model_files[0])["param_shapes"]
    out = {}
    if stage <= 2:
        for g, shapes in enumerate(param_shapes):
            full = torch.cat([s["single_partition_of_fp32_groups"][g] for s in states])
            offset = 0
            for name, shape in shapes.items():
                n = shape.numel()
                out[name] = full[offset:offset + n].view(shape)
                offset += n
            align = 2 * world
            if (offset + align - 1) // align != (full.numel() + align - 1) // align:
                raise ValueError(f"consumed {offset} numels out of {full.numel()} - something is wrong")
    else:
        flats = [torch.cat(list(s["fp32_flat_groups"])) for s in states]
        offset = 0
        for shapes in param_shapes:
            for name, shape in shapes.items():
                n = shape.numel()
                pn = -(-n // world)
                out[name] = torch.cat([f[offset:offset + pn] for f in flats])[:n].view(shape)
                offset += pn
        if offset * world != sum(f.numel() for f in flats):
            raise ValueError("stage-3 partitions do not add up")
    return out


def main():
    save_dir, expected_path = sys.argv[1], sys.argv[2]
    tag = open(os.path.join(save_dir, "latest")).read().strip()
    got = consolidate(os.path.join(save_dir, tag))
    expected = load(expected_path)
    for name, tensor in expected.items():
        if name not in got:
            raise SystemExit(f"missing {name}")
        if not torch.equal(got[name], tensor):
            diff = (got[name] - tensor).abs().max().item()
            raise SystemExit(f"{name} differs by {diff}")
    print("OK", len(got))


if __name__ == "__main__":
    main()
