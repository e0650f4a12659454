"""The Python side of accelerate_interchange.py: ckpt_interchange_driver.c's training, run by the real Hugging Face
Accelerate (PYTHONPATH holding ../shared/peers/accelerate-0.24.1), printing each loss exactly (float.hex).

  accelerate_peer.py save   DIR STEPS FINAL [options]   train STEPS steps, save_state(DIR), train STEPS more
  accelerate_peer.py resume DIR STEPS FINAL [options]   load_state(DIR), skip the STEPS batches already seen
                                                        (0.24.1 keeps no loader position), train STEPS steps
  options: --accum N (gradient_accumulation_steps), --bf16 (mixed_precision), --custom (a registered object),
           --auto (DIR is the project_dir of automatic checkpoint naming with total_limit 2: saves at STEPS/3,
           2*STEPS/3 and STEPS steps; resume loads the newest with load_state())

Every process prints "loss|cont <rank> <step> <hex>" lines as the driver does; the main process writes the final
unwrapped weights to FINAL with torch.save, and with --custom prints "custom <count>". Two processes: start one per
rank with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT set (Gloo). The user's side of the loop is
written as an Accelerate user writes it; only the data order is pinned (a sampler seeded 77, as the driver's
loader), so that both programs see the same batches."""
import argparse
import json
import sys

import torch
from accelerate import Accelerator
from accelerate.utils import ProjectConfiguration, set_seed

ap = argparse.ArgumentParser()
ap.add_argument("mode", choices=["save", "resume"])
ap.add_argument("dir")
ap.add_argument("steps", type=int)
ap.add_argument("final")
ap.add_argument("--accum", type=int, default=1)
ap.add_argument("--bf16", action="store_true")
ap.add_argument("--custom", action="store_true")
ap.add_argument("--auto", action="store_true")
a = ap.parse_args()
save = a.mode == "save"


class Counter:
    """A user's object registered for checkpointing: the number of micro-batches seen. accel's registered objects
    are bytes (the driver's are JSON text), Accelerate's a state_dict: this one reads both."""

    def __init__(self):
        self.count = 0

    def state_dict(self):
        return {"count": self.count}

    def load_state_dict(self, sd):
        self.count = json.loads(sd)["count"] if isinstance(sd, (bytes, bytearray)) else sd["count"]


project = ProjectConfiguration(project_dir=a.dir, automatic_checkpoint_naming=True, total_limit=2) if a.auto else None
accelerator = Accelerator(gradient_accumulation_steps=a.accum, mixed_precision="bf16" if a.bf16 else "no", cpu=True,
                          project_config=project)
# A different seed on resume: everything random must come from the checkpoint.
set_seed(1234 if save else 999, device_specific=True)
rank = accelerator.process_index

N, IN, OUT = 96, 6, 3
i = torch.arange(N, dtype=torch.float64).unsqueeze(1)
j = torch.arange(IN, dtype=torch.float64).unsqueeze(0)
x = torch.sin(0.37 * i + 0.91 * j).to(torch.float32)
y = torch.tensor([(k * 7) % OUT for k in range(N)])
# accel's {"type":"mlp","widths":[6,16,3],"dropout":0.25}
model = torch.nn.Sequential(torch.nn.Linear(IN, 16), torch.nn.ReLU(), torch.nn.Dropout(0.25), torch.nn.Linear(16, OUT))
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
# transformers' get_linear_schedule_with_warmup(optimizer, 2, 40), accel's "linear" schedule
scheduler = torch.optim.lr_scheduler.LambdaLR(
    optimizer, lambda s: float(s) / float(max(1, 2)) if s < 2 else max(0.0, float(40 - s) / float(max(1, 40 - 2))))
dataset = torch.utils.data.TensorDataset(x, y)
# The driver's loader: permutation s of a generator seeded 77 + pass (what 0.24.1's SeedableRandomSampler draws
# with several processes); a generator of the loader's own takes the base seed every DataLoader iterator draws.
sampler = torch.utils.data.RandomSampler(dataset, generator=torch.Generator().manual_seed(77))
loader = torch.utils.data.DataLoader(dataset, batch_size=4, sampler=sampler, generator=torch.Generator())
model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
counter = Counter()
if a.custom:
    accelerator.register_for_checkpointing(counter)

if not save:
    accelerator.load_state(None if a.auto else a.dir)
    loader = accelerator.skip_first_batches(loader, a.steps)

step, total = 0, 2 * a.steps if save else a.steps
model.train()
while step < total:
    for bx, by in loader:
        with accelerator.accumulate(model):
            loss = torch.nn.functional.cross_entropy(model(bx), by)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        counter.count += 1
        after = not save or step >= a.steps
        print(f"{'cont' if after else 'loss'} {rank} {step - a.steps if save and after else step} {loss.item().hex()}")
        step += 1
        if save and (step == a.steps or (a.auto and 3 * step in (a.steps, 2 * a.steps))):
            accelerator.save_state(None if a.auto else a.dir)
            print("saved")
        if step == total:
            break
    else:
        if not save:
            break

accelerator.wait_for_everyone()
if accelerator.is_main_process:
    torch.save(accelerator.unwrap_model(model).state_dict(), a.final)
if a.custom:
    print(f"custom {rank} {counter.count}")
sys.stdout.flush()
