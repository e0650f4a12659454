"""Trains two steps through an installed accel Python package and says where accel and libaccel came from."""
import array
import os

import accel

N, F = 128, 8
x = array.array("f", [((i * 7 + f * 13) % 17 - 8) / 8.0 for i in range(N) for f in range(F)])
y = array.array("q", [1 if x[i * F] > 0 else 0 for i in range(N)])
accel.set_seed(42)
losses = []
with accel.Accelerator('{}') as acc:
    features = accel.tensor(x, shape=[N, F])
    labels = accel.tensor(y, shape=[N])
    model = accel.Model.from_json('{"type": "mlp", "widths": [8, 16, 2]}')
    opt = accel.Optimizer(model, '{"type": "sgd", "lr": 0.1}')
    dl = accel.DataLoader(features, labels, '{"batch_size": 64}')
    acc.prepare(model, opt, dl)
    for batch in dl:
        with batch:
            losses.append(acc.train_step(model, opt, None, batch, "cross_entropy"))
        if len(losses) == 2:
            break
lib = next(line.split()[-1] for line in open("/proc/self/maps") if "libaccel.so" in line)
print("module", os.path.dirname(accel.__file__))
print("accel %s from %s: %d steps, loss %.4f -> %.4f" % (accel.__version__, lib, len(losses), losses[0], losses[-1]))
