"""Reference for frozen parameters (tests/capi/test_frozen.c, mode "reference"), with Python's torch only: the
same MLP from accel's initial weights (DIR/init/model.safetensors) with the same parameters frozen
(requires_grad_(False): 0.weight, 0.bias, 4.bias), torch.optim.AdamW over the trainable ones only, as fine-tuning
scripts build it, and clip_grad_norm_(0.1) each step, full batch (DIR/x.bin, DIR/y.bin: float32 [32, 6], int64
[32]). Checks accel's losses and clip_grad_norm totals (DIR/losses.txt, DIR/norms.txt: the norm over the
trainable parameters only), the final weights of its save_state (DIR/state; frozen ones bit for bit as they
started), and its optimizer.bin: one group of the trainable parameters, state for those only.

Usage: frozen_reference.py DIR STEPS"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import safetensors_io  # noqa: E402

D, STEPS = sys.argv[1], int(sys.argv[2])
TOL = 1e-6
FROZEN = ("0.weight", "0.bias", "4.bias")
failures = []


def expect(ok, what):
    if not ok:
        failures.append(what)


def raw(path, dtype, shape):
    with open(path, "rb") as f:
        return torch.frombuffer(bytearray(f.read()), dtype=dtype).reshape(shape)


def read_hex(path):
    with open(path) as f:
        return [float.fromhex(v) for v in f.read().split()]


x, y = raw(D + "/x.bin", torch.float32, (32, 6)), raw(D + "/y.bin", torch.int64, (32,))
model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16), torch.nn.ReLU(),
                            torch.nn.Linear(16, 3))
init = safetensors_io.read(D + "/init/model.safetensors")
model.load_state_dict(init)
for name, p in model.named_parameters():
    p.requires_grad_(name not in FROZEN)
trainable = [p for p in model.parameters() if p.requires_grad]
opt = torch.optim.AdamW(trainable, lr=0.02, weight_decay=0.1)
losses, norms = [], []
for _ in range(STEPS):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1).item())
    opt.step()
    losses.append(loss.item())

for what, ours, theirs in (("losses", losses, read_hex(D + "/losses.txt")), ("norms", norms, read_hex(D + "/norms.txt"))):
    expect(len(theirs) == STEPS, "%s: %d of %d" % (what, len(theirs), STEPS))
    worst = max(abs(a - b) / max(1.0, abs(a)) for a, b in zip(ours, theirs))
    expect(worst <= TOL, "%s differ by %g: %s, Python's %s" % (what, worst, theirs, ours))
expect(min(norms) > 0.1, "clipping never bit (norms %s)" % norms)
# The norm with the frozen parameters' gradients counted too differs (else the norm check above proves nothing).
whole = torch.nn.Sequential(*[type(m)(m.in_features, m.out_features) if isinstance(m, torch.nn.Linear) else m
                              for m in model])
whole.load_state_dict(init)
torch.nn.functional.cross_entropy(whole(x), y).backward()
with_frozen = torch.nn.utils.clip_grad_norm_(whole.parameters(), float("inf")).item()
expect(abs(with_frozen - norms[0]) > 1e-3, "the first norm %g is the all-parameter norm %g" % (norms[0], with_frozen))

final = safetensors_io.read(D + "/state/model.safetensors")
expect(sorted(final) == sorted(model.state_dict()), "weights: keys %s" % sorted(final))
worst_w = max((final[k] - v).abs().max().item() for k, v in model.state_dict().items())
expect(worst_w <= TOL, "weights differ by %g" % worst_w)
for name in FROZEN:
    expect(torch.equal(final[name], init[name]), "frozen %s changed" % name)

mine = torch.load(D + "/state/optimizer.bin")
ref = opt.state_dict()
expect(len(mine["param_groups"]) == 1 and mine["param_groups"][0]["params"] == ref["param_groups"][0]["params"],
       "optimizer.bin groups %s, Python's %s" % ([g["params"] for g in mine["param_groups"]], ref["param_groups"][0]["params"]))
expect(sorted(mine["state"]) == sorted(ref["state"]) == [0, 1, 2], "optimizer.bin: state of %s" % sorted(mine["state"]))
worst_s = 0.0
for i, st in ref["state"].items():
    got = mine["state"].get(i, {})
    for key in ("exp_avg", "exp_avg_sq"):
        if key in got and got[key].shape == st[key].shape:
            worst_s = max(worst_s, (got[key] - st[key]).abs().max().item())
        else:
            failures.append("state[%d] %s missing or of another shape" % (i, key))
expect(worst_s <= TOL, "optimizer state differs by %g" % worst_s)

print("frozen_reference: %d steps, norms %s, |weight diff| %.3g, |state diff| %.3g"
      % (STEPS, ["%.4f" % n for n in norms], worst_w, worst_s))
if failures:
    sys.exit("frozen_reference: " + "; ".join(failures))
