"""DeepSpeed's way out of its checkpoint layout, with Python's torch only: the float32 weights rebuilt from every
rank's optimizer states file by the protocol of DeepSpeed's zero_to_fp32.py (checkpoint-format.md 2.2), which is
what a DeepSpeed user runs on such a folder. DeepSpeed itself is not installed here: its files pickle two of its
classes (LossScaler, ZeroStageEnum), so minimal stand-ins with those names are registered, as torch.load only
needs them importable.

Usage: ds_zero_to_fp32.py CKPT PARAMS.f32 STAGE WORLD
  CKPT: a save_state folder holding `latest` and its tag folder; PARAMS.f32: the saving run's parameters at the
  save (float32, model order); the MLP's parameters are compared bit for bit."""
import math
import os
import struct
import sys

import torch

ckpt, params_path, stage, world = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

# Stand-ins for the two DeepSpeed classes the files name: those of the zero_to_fp32.py accel leaves in the
# checkpoint (only the classes are taken from it; the reconstruction below is this test's own).
sys.path.insert(0, ckpt)
import zero_to_fp32  # noqa: E402

zero_to_fp32._stand_ins()
LossScaler = sys.modules["deepspeed.runtime.fp16.loss_scaler"].LossScaler
ZeroStageEnum = sys.modules["deepspeed.runtime.zero.config"].ZeroStageEnum

tag = open(os.path.join(ckpt, "latest")).read().strip()
folder = os.path.join(ckpt, tag)
optim = [torch.load(os.path.join(folder, "zero_pp_rank_%d_mp_rank_00_optim_states.pt" % r), map_location="cpu")
         for r in range(world)]
osd = [o["optimizer_state_dict"] for o in optim]
assert int(osd[0]["zero_stage"]) == stage and osd[0]["zero_stage"] == ZeroStageEnum(stage), osd[0]["zero_stage"]
count = osd[0]["partition_count"]
assert (max(count) if isinstance(count, list) else count) == world, count
assert isinstance(osd[0]["loss_scaler"], LossScaler) and osd[0]["loss_scaler"].cur_scale == 1.0
model_file = "zero_pp_rank_0_mp_rank_00_model_states.pt" if stage == 3 else "mp_rank_00_model_states.pt"
model = torch.load(os.path.join(folder, model_file), map_location="cpu")
for key in ("module", "buffer_names", "param_shapes", "dp_world_size", "ds_version", "global_steps"):
    assert key in model, key
assert model["dp_world_size"] == world
param_shapes = model["param_shapes"]
assert all(isinstance(s, torch.Size) for group in param_shapes for s in group.values())

state = {}
if stage <= 2:
    # Each group: the ranks' partitions joined, then the parameters back to back (padding at the end only).
    for g, shapes in enumerate(param_shapes):
        vector = torch.cat([o["single_partition_of_fp32_groups"][g] for o in osd])
        offset = 0
        for name, shape in shapes.items():
            state[name] = vector.narrow(0, offset, shape.numel()).view(shape)
            offset += shape.numel()
        align = 2 * world
        assert math.ceil(offset / align) * align == math.ceil(vector.numel() / align) * align, (offset, vector.numel())
        # The base optimizer's state is over the padded partition.
        base = osd[0]["base_optimizer_state"]
        for key, value in base["state"][g].items():
            if torch.is_tensor(value) and key != "step":
                assert value.numel() == osd[0]["single_partition_of_fp32_groups"][g].numel() + osd[0]["group_paddings"][g]
else:
    # Each parameter: ceil(numel / world) elements from every rank, in parameter order.
    flats = [torch.cat(o["fp32_flat_groups"]) for o in osd]
    offset = 0
    for shapes in param_shapes:
        for name, shape in shapes.items():
            n = shape.numel()
            part = math.ceil(n / world)
            state[name] = torch.cat([f.narrow(0, offset, part) for f in flats]).narrow(0, 0, n).view(shape)
            offset += part
    assert offset == flats[0].numel(), (offset, flats[0].numel())
    for name in model["module"]:
        if name not in model["buffer_names"]:
            assert model["module"][name].numel() == 0, name  # ZeRO-3 parameters are empty in the module

raw = open(params_path, "rb").read()
want = struct.unpack("<%df" % (len(raw) // 4), raw)
got = [float(x) for t in state.values() for x in t.reshape(-1).tolist()]
assert len(got) == len(want), (len(got), len(want))
bad = sum(1 for x, y in zip(got, want) if struct.pack("<f", x) != struct.pack("<f", y))
assert bad == 0, "%d of %d elements differ from the saving run's parameters" % (bad, len(want))
print("rebuilt %d parameters (%d elements) from %d ranks' files, equal to the saving run's bit for bit"
      % (len(state), len(got), world))
