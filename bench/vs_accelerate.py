"""The real Python Accelerate 0.24.1's side of bench/vs_accelerate.sh: the training bench/vs_accelerate.c runs
through accel's C API, written as an Accelerate user writes it (prepare, then per batch: forward, loss,
accelerator.backward, optimizer.step, optimizer.zero_grad), on the same data (the same formula).

Run with PYTHONPATH=tests/peers/accelerate-0.24.1 on Debian's python3-torch; several processes get torchrun's
variables (Gloo on this CPU). Usage: vs_accelerate.py [STEPS] [WARMUP] [plain|set_to_none]. Prints on the main
process `steps/s X` for the STEPS steps after WARMUP, timed as a whole (the data loader included, as in the C loop)."""
import sys
import time

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed

IN, OUT, BATCH = 512, 10, 64
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
warmup = int(sys.argv[2]) if len(sys.argv) > 2 else 10
# "plain": the same loop in PyTorch without Accelerate (1 process), to tell Accelerate's cost from Python's.
# "set_to_none": zero_grad(set_to_none=True), what accel does (Accelerate 1.x's default on torch 2; 0.24.1 on
# torch 1.13 zeroes the gradients in place instead, and the next backward adds into them).
mode = sys.argv[3] if len(sys.argv) > 3 else ""
if mode not in ("", "plain", "set_to_none"):
    sys.exit("usage: vs_accelerate.py [STEPS] [WARMUP] [plain|set_to_none]")
plain = mode == "plain"

accelerator = None if plain else Accelerator(cpu=True)
set_seed(0)
world = 1 if plain else accelerator.num_processes
# Every rank holds the whole data set; the prepared loader gives each its share, as accel's does.
n = BATCH * world * (steps + warmup)
x = ((torch.arange(n * IN, dtype=torch.int64) * 7919 % 1000).double() / 1000.0 - 0.5).float().reshape(n, IN)
y = torch.arange(n, dtype=torch.int64) % OUT
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=BATCH, shuffle=False)
# accel's {"type": "mlp", "widths": [512, 1024, 1024, 10]}: Linear, ReLU between layers, none after the last.
model = torch.nn.Sequential(torch.nn.Linear(IN, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                            torch.nn.ReLU(), torch.nn.Linear(1024, OUT))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
if not plain:
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
loss_fn = torch.nn.CrossEntropyLoss()

t0, done = time.monotonic(), 0
for i, (inputs, labels) in enumerate(loader):
    if i == warmup:
        t0 = time.monotonic()
    loss = loss_fn(model(inputs), labels)
    loss.backward() if plain else accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True) if mode == "set_to_none" else optimizer.zero_grad()
    if i >= warmup:
        done += 1
    if i + 1 == steps + warmup:
        break
seconds = time.monotonic() - t0
if plain or accelerator.is_main_process:
    print("%s processes %d steps %d seconds %.3f steps/s %.2f last loss %.4f threads %d"
          % (mode or "accelerate", world, done, seconds, done / seconds, loss.item(), torch.get_num_threads()))
