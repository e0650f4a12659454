// The recovery script save_state leaves beside a DeepSpeed-layout checkpoint (<output_dir>/zero_to_fp32.py, where
// DeepSpeed copies its own): accel's, written for the files accel writes, needing only Python's torch.
#include "checkpointing/deepspeed_folder.hpp"

namespace accel::ckpt {

const char *zero_to_fp32_script()
{
    return R"PY(#!/usr/bin/env python3
"""Rebuilds the float32 weights of a DeepSpeed ZeRO checkpoint that accel's save_state wrote (deepspeed_plugin,
ZeRO 1-3) as one torch.save state dict, with Python's torch only (DeepSpeed need not be installed).
`accel merge-weights CHECKPOINT_DIR OUT` does the same without Python.

usage: python zero_to_fp32.py CHECKPOINT_DIR OUTPUT_FILE [-t TAG]"""
import argparse
import collections
import enum
import math
import os
import re
import sys
import types

import torch


def _stand_ins():
    """The files pickle DeepSpeed's LossScaler and ZeroStageEnum; without DeepSpeed, minimal classes of those names."""
    try:
        import deepspeed  # noqa: F401
        return
    except ImportError:
        pass

    class LossScaler:
        def __init__(self, scale=1):
            self.cur_scale = scale
            self.dynamic = False

    class ZeroStageEnum(int, enum.Enum):
        disabled = 0
        optimizer_states = 1
        gradients = 2
        weights = 3

    names = ["deepspeed", "deepspeed.runtime", "deepspeed.runtime.fp16", "deepspeed.runtime.fp16.loss_scaler",
             "deepspeed.runtime.zero", "deepspeed.runtime.zero.config"]
    for name in names:
        sys.modules[name] = types.ModuleType(name)
    sys.modules["deepspeed.runtime.fp16.loss_scaler"].LossScaler = LossScaler
    sys.modules["deepspeed.runtime.zero.config"].ZeroStageEnum = ZeroStageEnum


def _rank(name):
    return int(re.search(r"zero_pp_rank_(\d+)_", name).group(1))


def fp32_state_dict(checkpoint_dir, tag=None):
    _stand_ins()
    if tag is None:
        with open(os.path.join(checkpoint_dir, "latest")) as f:
            tag = f.read().strip()
    folder = os.path.join(checkpoint_dir, tag)
    if any("_mp_rank_00_" not in f and not f.startswith("mp_rank_00_") for f in os.listdir(folder) if f.endswith("_states.pt")):
        sys.exit("%s: holds the tp slices of several model-parallel ranks (mp_rank_01 and on); this script does not "
                 "join them: `accel merge-weights %s OUT` does" % (folder, checkpoint_dir))
    files = sorted((f for f in os.listdir(folder) if f.endswith("_optim_states.pt")), key=_rank)
    optim = [torch.load(os.path.join(folder, f), map_location="cpu")["optimizer_state_dict"] for f in files]
    stage = int(optim[0]["zero_stage"])
    count = optim[0]["partition_count"]
    world = max(count) if isinstance(count, list) else count
    if [_rank(f) for f in files] != list(range(world)):
        sys.exit("%s: expected the optimizer states files of ranks 0..%d, found %s" % (folder, world - 1, files))
    model_file = "zero_pp_rank_0_mp_rank_00_model_states.pt" if stage == 3 else "mp_rank_00_model_states.pt"
    model = torch.load(os.path.join(folder, model_file), map_location="cpu")
    out = collections.OrderedDict()
    if stage <= 2:  # each group: the ranks' partitions back to back, then its parameters in order
        for g, shapes in enumerate(model["param_shapes"]):
            flat = torch.cat([o["single_partition_of_fp32_groups"][g] for o in optim])
            offset = 0
            for name, shape in shapes.items():
                out[name] = flat.narrow(0, offset, shape.numel()).view(shape).clone()
                offset += shape.numel()
    else:  # each parameter: ceil(numel / world) elements from every rank, in order
        flats = [torch.cat(o["fp32_flat_groups"]) for o in optim]
        offset = 0
        for shapes in model["param_shapes"]:
            for name, shape in shapes.items():
                part = math.ceil(shape.numel() / world)
                joined = torch.cat([f.narrow(0, offset, part) for f in flats])
                out[name] = joined.narrow(0, 0, shape.numel()).view(shape).clone()
                offset += part
    module = model["module"]
    for name in model["buffer_names"]:
        out[name] = module[name]
    frozen = model.get("frozen_param_shapes") or {}
    if stage == 1:  # frozen parameters are whole in the module
        for name, t in module.items():
            if name not in out and name not in (model.get("shared_params") or {}):
                out[name] = t
    elif stage == 2:
        for name in frozen:
            out[name] = model["frozen_param_fragments"][name]
    else:
        models = [model] + [torch.load(os.path.join(folder, "zero_pp_rank_%d_mp_rank_00_model_states.pt" % r),
                                       map_location="cpu") for r in range(1, world)] if frozen else [model]
        for name, shape in frozen.items():
            joined = torch.cat([m["frozen_param_fragments"][name].reshape(-1) for m in models])
            out[name] = joined.narrow(0, 0, shape.numel()).view(shape).clone()
    for name, other in (model.get("shared_params") or {}).items():
        out[name] = out[other]
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint_dir", help="the save_state folder (holding `latest`)")
    ap.add_argument("output_file", help="where torch.save writes the state dict")
    ap.add_argument("-t", "--tag", default=None, help="the tag folder (default: the one `latest` names)")
    args = ap.parse_args()
    sd = fp32_state_dict(args.checkpoint_dir, args.tag)
    torch.save(sd, args.output_file)
    print("wrote %d tensors (%d elements) to %s" % (len(sd), sum(t.numel() for t in sd.values()), args.output_file))
)PY";
}

} // namespace accel::ckpt
