#!/usr/bin/env python3
"""accel on Ray: Ray Train's TorchTrainer starts one worker (a Python actor) per training process, and each worker
runs the accel program as a subprocess: the program is one rank of the job, as under `torchrun --no_python`.

In every worker Ray Train sets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK (ray.train.torch's
_set_torch_distributed_env_vars), MASTER_ADDR / MASTER_PORT (rank 0's node and a free port there), and accel
programs read them as they read torchrun's (NODE_RANK is not needed). One thing must change:
Ray has already opened torch's process group of the workers on MASTER_PORT (its store lives in rank 0's worker), so
rank 0 picks another free port for the program's own rendezvous and tells the others over that process group.

The rendezvous token: a secret made here, in the driver, reaches every worker through Ray's runtime_env (not a
command line, which `ps` shows), so the program's store serves only this job's processes.

Run: `python3 ray_train.py [PROGRAM]` on a Ray cluster's head node (ray.init() joins it), with the program on
every node's PATH. tests/cli/test_cluster_examples.py runs this file with Ray's variables set as Ray Train sets
them (two single-worker "nodes" on one host) and checks that it trains as `accel launch -n 2`.
"""
import os
import secrets
import socket
import subprocess
import sys

import ray
import ray.train
import torch.distributed as dist
from ray.train import ScalingConfig
from ray.train.torch import TorchConfig, TorchTrainer

NUM_WORKERS = 2  # training processes: one per Ray worker (the test reads it from here)
PROGRAM = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("TRAIN", "train_mlp")


def free_port():
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def train_loop_per_worker(config):
    # The program's rendezvous port: rank 0's choice (Ray's MASTER_PORT is taken by its own process group).
    port = [free_port() if ray.train.get_context().get_world_rank() == 0 else 0]
    dist.broadcast_object_list(port, src=0)
    env = dict(os.environ, MASTER_PORT=str(port[0]))
    done = subprocess.run([config["program"]], env=env)
    if done.returncode != 0:
        raise RuntimeError("%s exited with status %d" % (config["program"], done.returncode))


if __name__ == "__main__":
    ray.init(runtime_env={"env_vars": {"ACCEL_RDZV_TOKEN": secrets.token_hex(32), "OMP_NUM_THREADS": "1"}})
    trainer = TorchTrainer(train_loop_per_worker, train_loop_config={"program": PROGRAM},
                           scaling_config=ScalingConfig(num_workers=NUM_WORKERS, use_gpu=False),
                           torch_config=TorchConfig(backend="gloo"))
    trainer.fit()
