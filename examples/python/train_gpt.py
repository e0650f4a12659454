#!/usr/bin/env python3
"""Train a character-level GPT on Debian's licence texts through accel's Python bindings.

    python3 examples/python/train_gpt.py [--steps N] [--eval-every N] [--max-val-loss X] [--save DIR]
        [--save-every N] [--stop-at N] [--resume DIR/step_N] [--text-dir DIR] [--config JSON]

The same program as examples/c/train_gpt.c (same text, vocabulary, split, model, optimizer, schedule,
data order and seeds, so it prints the same losses): a 4-layer GPT-2 ({"type": "gpt"}) trained on windows
of 128 characters with the "causal_lm" loss, periodic validation, save_state / resume from a folder named
step_<N>, and generated text at the end. Exits non-zero if the final validation loss is above
--max-val-loss. Works unchanged under `accel launch -n 2 python3 examples/python/train_gpt.py`.
"""

import argparse
import array
import os
import re
import sys
import time

import accel
from progress import Progress

BLOCK, BATCH, EVAL_BATCH = 128, 16, 32


def read_texts(folder):
    """Every regular file of the folder (symbolic links skipped), in name order, concatenated."""
    data = bytearray()
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if not name.startswith(".") and os.path.isfile(path) and not os.path.islink(path):
            with open(path, "rb") as f:
                data += f.read()
    return bytes(data)


def evaluate(model, tokens):
    """Mean causal_lm loss over every window of the split (stride BLOCK)."""
    model.eval()
    total, count = 0.0, 0
    dl = accel.DataLoader.from_tokens(tokens, '{"block_size": %d, "batch_size": %d}' % (BLOCK, EVAL_BATCH))
    for batch in dl:
        with batch, batch.inputs() as x, batch.labels() as y, model.forward_no_grad(x) as logits, \
                accel.compute_loss("causal_lm", logits, y) as loss:
            total += loss.item() * batch.size()
            count += batch.size()
    model.train()
    return total / max(count, 1)


def sample(acc, model, chars, index_of, prompt, options, title):
    ids = accel.tensor(array.array("q", (index_of[c] for c in prompt.encode())), shape=[len(prompt)])
    with model.generate(ids, options) as out:
        text = bytes(chars[i] for i in out.tolist()).decode("latin-1")
    acc.print("--- %s ---\n%s" % (title, text))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--max-val-loss", type=float, default=2.35)  # measured 2.221 (600 steps)
    p.add_argument("--save")
    p.add_argument("--save-every", type=int, default=0)
    p.add_argument("--stop-at", type=int, default=0)
    p.add_argument("--resume")
    p.add_argument("--text-dir", default="/usr/share/common-licenses")
    p.add_argument("--config")
    a = p.parse_args()

    text = read_texts(a.text_dir)
    chars = sorted(set(text))
    index_of = {c: i for i, c in enumerate(chars)}
    stream = array.array("q", (index_of[c] for c in text))
    n_train = len(stream) - len(stream) // 10
    train_tokens = accel.tensor(stream[:n_train], shape=[n_train])
    val_tokens = accel.tensor(stream[n_train:], shape=[len(stream) - n_train])

    accel.set_seed(1337)
    with accel.Accelerator(a.config) as acc:
        model = accel.Model.from_json(
            '{"type": "gpt", "vocab_size": %d, "n_positions": %d, "n_embd": 128, "n_layer": 4, "n_head": 4,'
            ' "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}' % (len(chars), BLOCK))
        opt = accel.Optimizer(model, '{"type": "adamw", "lr": 0.003, "weight_decay": 0.01}')
        sched = accel.Scheduler(opt, '{"type": "cosine", "num_warmup_steps": %d, "num_training_steps": %d}'
                                % (a.steps // 20, a.steps))
        train = accel.DataLoader.from_tokens(
            train_tokens, '{"block_size": %d, "stride": %d, "batch_size": %d, "shuffle": true, "seed": 7,'
            ' "drop_last": true}' % (BLOCK, BLOCK // 2, BATCH))
        acc.prepare(model, opt, train, sched)
        step = 0
        if a.resume:
            m = re.fullmatch(r"step_(\d+)", os.path.basename(os.path.normpath(a.resume)))
            if m is None:
                sys.exit("train_gpt.py: --resume expects a folder named step_<N> written by --save")
            step = int(m.group(1))
            acc.load_state(a.resume)
        acc.print("data: %d characters (vocabulary %d), %d training steps, %s step %d"
                  % (len(text), len(chars), a.steps, "resumed at" if a.resume else "from", step))

        stop = a.stop_at if 0 < a.stop_at < a.steps else a.steps
        # Trackers of the config's "log_with" get every step's loss and learning rate (nothing without log_with).
        acc.init_trackers("train_gpt", '{"steps": %d, "block_size": %d, "batch_size": %d}' % (a.steps, BLOCK, BATCH))
        bar = Progress(acc)
        started = time.process_time()
        loss_sum, loss_count, val_loss, state_dir = 0.0, 0, None, None
        while step < stop:
            batch = train.next_batch()
            if batch is None:
                continue  # end of a pass: the next call starts the next one
            with batch:
                loss = acc.train_step(model, opt, sched, batch, "causal_lm")
            step += 1
            loss_sum += loss
            loss_count += 1
            acc.log('{"loss": %.9g, "lr": %.9g}' % (loss, sched.get_last_lr()), step)
            in_interval = (step - 1) % a.eval_every + 1
            bar.draw("step %d/%d" % (step, a.steps), in_interval, a.eval_every,
                     in_interval * BATCH * BLOCK * acc.num_processes(), "tokens", loss_sum / loss_count)
            if step % a.eval_every == 0 or step == a.steps:
                bar.clear()
                bar.restart()
                val_loss = evaluate(model, val_tokens)
                acc.print("step %5d  train loss %.4f  val loss %.4f  (%.0f s CPU)"
                          % (step, loss_sum / loss_count, val_loss, time.process_time() - started))
                loss_sum, loss_count = 0.0, 0
            if a.save and ((a.save_every > 0 and step % a.save_every == 0) or step in (a.steps, a.stop_at)):
                state_dir = os.path.join(a.save, "step_%d" % step)
                acc.save_state(state_dir)
        bar.clear()
        acc.end_training()
        if step < a.steps:
            acc.print("stopped at step %d of %d%s" % (step, a.steps,
                                                       "; continue with --resume " + state_dir if state_dir else ""))
            return 0
        if val_loss is None:  # resumed at the end: nothing trained
            val_loss = evaluate(model, val_tokens)
        sample(acc, model, chars, index_of, "This program is free software", '{"max_new_tokens": 90}', "greedy")
        sample(acc, model, chars, index_of, "Permission ",
               '{"max_new_tokens": 110, "do_sample": true, "top_k": 10, "temperature": 0.8, "seed": 42}',
               "top-k 10, temperature 0.8, seed 42")
        acc.print("final loss %.8f (validation; required <= %.4f)" % (val_loss, a.max_val_loss))
    return 0 if val_loss <= a.max_val_loss else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except accel.AccelError as e:
        print("train_gpt.py: %s: %s" % (e.status_name, e), file=sys.stderr)
        sys.exit(1)
