"""Reference for optimizer parameter groups (tests/capi/test_optimizer.c, mode "reference"), with Python's
torch only: the same MLP from accel's initial weights (DIR/init/model.safetensors), the same data (DIR/x.bin,
DIR/y.bin: float32 [32, 6], int64 [32], raw little-endian), trained STEPS full-batch steps with
torch.optim.AdamW over two groups as Hugging Face's scripts build them (weight decay except on biases; here the
biases also at another lr and betas) and get_linear_schedule_with_warmup's LambdaLR. Checks accel's losses
(DIR/losses.txt), its final weights and the optimizer.bin / scheduler.bin of its save_state (DIR/state) against
this run: same group layout and hyperparameters, same state.

Usage: param_groups_reference.py DIR STEPS"""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import safetensors_io  # noqa: E402

D, STEPS = sys.argv[1], int(sys.argv[2])
WARMUP, TOTAL = 2, 10
TOL = 1e-6
failures = []


def expect(ok, what):
    if not ok:
        failures.append(what)


def read_safetensors(path):
    tensors = safetensors_io.read_with_dtypes(path)
    assert all(dtype == "F32" for dtype, _ in tensors.values()), path
    return {name: t for name, (_, t) in tensors.items()}


def raw(path, dtype, shape):
    with open(path, "rb") as f:
        return torch.frombuffer(bytearray(f.read()), dtype=dtype).reshape(shape)


x, y = raw(D + "/x.bin", torch.float32, (32, 6)), raw(D + "/y.bin", torch.int64, (32,))
model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
model.load_state_dict(read_safetensors(D + "/init/model.safetensors"))
named = list(model.named_parameters())
decay = [p for n, p in named if not n.endswith(".bias")]
no_decay = [p for n, p in named if n.endswith(".bias")]
opt = torch.optim.AdamW([{"params": decay}, {"params": no_decay, "weight_decay": 0.0, "lr": 0.03, "betas": (0.8, 0.99)}],
                        lr=0.01, weight_decay=0.1)
sched = torch.optim.lr_scheduler.LambdaLR(
    opt, lambda s: s / max(1, WARMUP) if s < WARMUP else max(0.0, (TOTAL - s) / max(1, TOTAL - WARMUP)))
losses = []
for _ in range(STEPS):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    sched.step()
    losses.append(loss.item())

with open(D + "/losses.txt") as f:
    theirs = [float.fromhex(line) for line in f.read().split()]
expect(len(theirs) == STEPS, "losses: %d of %d" % (len(theirs), STEPS))
worst_loss = max(abs(a - b) for a, b in zip(losses, theirs))
expect(worst_loss <= TOL, "losses differ by %g" % worst_loss)

final = read_safetensors(D + "/state/model.safetensors")
expect(sorted(final) == sorted(model.state_dict()), "weights: keys %s" % sorted(final))
worst_w = max((final[k] - v).abs().max().item() for k, v in model.state_dict().items())
expect(worst_w <= TOL, "weights differ by %g" % worst_w)

# optimizer.bin: PyTorch's layout, group by group, with each group's hyperparameters and this run's state.
mine, ref = torch.load(D + "/state/optimizer.bin"), opt.state_dict()
expect(len(mine["param_groups"]) == 2, "optimizer.bin: %d groups" % len(mine["param_groups"]))
for g, (a, b) in enumerate(zip(mine["param_groups"], ref["param_groups"])):
    expect(a["params"] == b["params"], "group %d params %s, Python's %s" % (g, a["params"], b["params"]))
    for key in ("lr", "weight_decay", "eps", "amsgrad"):
        expect(math.isclose(float(a[key]), float(b[key]), rel_tol=1e-12), "group %d %s %s, Python's %s" % (g, key, a[key], b[key]))
    expect(tuple(a["betas"]) == tuple(b["betas"]), "group %d betas %s, Python's %s" % (g, a["betas"], b["betas"]))
worst_s = 0.0
expect(sorted(mine["state"]) == sorted(ref["state"]), "optimizer.bin: state of %s" % sorted(mine["state"]))
for i, st in ref["state"].items():
    got = mine["state"].get(i, {})
    expect(float(got.get("step", -1)) == float(st["step"]), "state[%d] step %s, Python's %s" % (i, got.get("step"), st["step"]))
    for key in ("exp_avg", "exp_avg_sq"):
        if key in got:
            worst_s = max(worst_s, (got[key] - st[key]).abs().max().item())
        else:
            failures.append("state[%d] has no %s" % (i, key))
expect(worst_s <= TOL, "optimizer state differs by %g" % worst_s)

sch = torch.load(D + "/state/scheduler.bin")
expect([round(v, 12) for v in sch["base_lrs"]] == [0.01, 0.03], "scheduler.bin base_lrs %s" % sch["base_lrs"])
expect(all(math.isclose(a, b, rel_tol=1e-12) for a, b in zip(sch["_last_lr"], sched.get_last_lr())),
       "scheduler.bin _last_lr %s, Python's %s" % (sch["_last_lr"], sched.get_last_lr()))

print("param_groups_reference: max |loss diff| %.3g, |weight diff| %.3g, |state diff| %.3g over %d steps; lrs %s"
      % (worst_loss, worst_w, worst_s, STEPS, sched.get_last_lr()))
if failures:
    sys.exit("param_groups_reference: " + "; ".join(failures))
