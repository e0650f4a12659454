#!/usr/bin/env python3
"""Train an MLP on a synthetic classification set through accel's Python bindings.

    python3 examples/python/train_mlp.py ['<accelerator config JSON>']

The same program as examples/c/train_mlp.c: the same data generator and seed, so it prints the same
losses; like it, it logs every step's loss and learning rate to the trackers of the config's "log_with"
and draws a progress bar on a terminal (main process only). Exits non-zero if training accuracy stays
below 95 %.
"""

import array
import math
import sys
import time

import accel
from progress import Progress

NUM_SAMPLES, NUM_FEATURES, NUM_CLASSES, EPOCHS = 2048, 16, 4, 8


class Lcg:
    """The C example's generator: a 64-bit LCG and Box-Muller, so the data set is the same everywhere."""

    def __init__(self):
        self.state = 0x9E3779B97F4A7C15

    def uniform(self):
        self.state = (self.state * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
        return ((self.state >> 11) + 0.5) / 9007199254740992.0

    def gaussian(self):
        u1 = self.uniform()
        u2 = self.uniform()
        return math.sqrt(-2.0 * math.log(u1)) * math.cos(6.283185307179586 * u2)


def make_dataset():
    rng = Lcg()
    centers = [[1.0 * rng.gaussian() for _ in range(NUM_FEATURES)] for _ in range(NUM_CLASSES)]
    x = array.array("f")
    y = array.array("q")
    for i in range(NUM_SAMPLES):
        c = i % NUM_CLASSES
        y.append(c)
        x.extend(centers[c][f] + rng.gaussian() for f in range(NUM_FEATURES))
    return x, y


def accuracy(model, features, labels):
    """Fraction of samples whose arg-max logit is the label, with the model in eval mode."""
    model.eval()
    logits = array.array("f", bytes(4 * NUM_SAMPLES * NUM_CLASSES))
    with model.forward_no_grad(features) as outputs:
        outputs.copy_to_bytes(logits)
    model.train()
    correct = 0
    for i in range(NUM_SAMPLES):
        row = logits[i * NUM_CLASSES:(i + 1) * NUM_CLASSES]
        correct += max(range(NUM_CLASSES), key=row.__getitem__) == labels[i]
    return correct / NUM_SAMPLES


def main(argv):
    x, y = make_dataset()
    accel.set_seed(42)
    with accel.Accelerator(argv[1] if len(argv) > 1 else None) as acc:
        features = accel.tensor(x, shape=[NUM_SAMPLES, NUM_FEATURES])
        labels = accel.tensor(y, shape=[NUM_SAMPLES])
        model = accel.Model.from_json('{"type": "mlp", "widths": [16, 64, 64, 4], "activation": "relu"}')
        opt = accel.Optimizer(model, '{"type": "adamw", "lr": 0.003}')
        dl = accel.DataLoader(features, labels, '{"batch_size": 64, "shuffle": true, "seed": 42}')
        steps_total = EPOCHS * len(dl) // acc.gradient_accumulation_steps()
        sched = accel.Scheduler(
            opt, '{"type": "cosine", "num_warmup_steps": 10, "num_training_steps": %d}' % steps_total)
        acc.prepare(model, opt, dl, sched)

        acc.init_trackers("train_mlp", '{"lr": 0.003, "batch_size": 64, "epochs": %d}' % EPOCHS)
        bar = Progress(acc)
        acc_value = final_loss = 0.0
        global_step = 0
        for epoch in range(1, EPOCHS + 1):
            start = time.process_time()
            bar.restart()
            loss_sum, steps = 0.0, 0
            for batch in dl:
                with batch:
                    loss = acc.train_step(model, opt, sched, batch, "cross_entropy")
                acc.log('{"loss": %.9g, "lr": %.9g}' % (loss, sched.get_last_lr()), global_step)
                global_step += 1
                loss_sum += loss
                steps += 1
                bar.draw("epoch %d/%d" % (epoch, EPOCHS), steps, len(dl), steps * 64 * acc.num_processes(), "samples",
                         loss_sum / steps)
            bar.clear()
            acc_value = accuracy(model, features, y)
            final_loss = loss_sum / steps
            acc.print("epoch %d/%d  loss %.4f  train accuracy %5.1f%%  lr %.5f  (%.2f s)" % (
                epoch, EPOCHS, final_loss, 100.0 * acc_value, sched.get_last_lr(), time.process_time() - start))
        acc.print("final loss %.8f" % final_loss)
        acc.end_training()
    if acc_value < 0.95:
        print("train_mlp.py: training accuracy %.1f%% is below 95%%" % (100.0 * acc_value), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except accel.AccelError as e:
        print("train_mlp.py: %s: %s" % (e.status_name, e), file=sys.stderr)
        sys.exit(1)
