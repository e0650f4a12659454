"""Runs the real `accelerate launch` (Hugging Face Accelerate at PEER, 0.24.1 in tests) with its own argument parser,
config loader and launchers: accelerate_launch_real.py PEER [accelerate launch arguments...]

Two patches, neither of them in Accelerate's code:
- torch 1.13's torchrun under Python 3.11: Std.from_str("0") returns None there (3.11's Flag iteration leaves out the
  0 member), so torchrun cannot start workers. The patched from_str returns Std.NONE, the value 1.13 means.
- DeepSpeed's presence: Accelerate's DeepSpeed launcher only checks that the package imports; on one machine it then
  starts the workers with torchrun, as for FSDP, without using DeepSpeed itself (Debian has no DeepSpeed)."""
import sys

sys.path.insert(0, sys.argv[1])
import torch113_py311  # noqa: E402  (this folder: the torchrun patch, shared with test_torchrun.py)

torch113_py311.patch()

import accelerate.commands.launch as launch  # noqa: E402

launch.is_deepspeed_available = lambda: True
sys.argv = ["accelerate launch"] + sys.argv[2:]
launch.main()
