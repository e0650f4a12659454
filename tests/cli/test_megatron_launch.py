#!/usr/bin/env python3
"""accel launch --use_megatron_lm and its --megatron_lm_* flags, and a config file's MEGATRON_LM with
megatron_lm_config (issue 36): the workers get what Accelerate 0.24.1's launcher exports (ACCELERATE_USE_MEGATRON_LM,
MEGATRON_LM_*), and libaccel's MegatronLMPlugin mapping runs the pipeline they ask for. dist_pp (tests/distributed)
trains its 4-block gpt on 2 processes; every rank's file (losses, held parameters, logits) must equal, byte for byte,
the same run configured by parallelism_config, and each stage holds only its own blocks.
Usage: test_megatron_launch.py BUILD_DIR"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

BUILD = sys.argv[1]
ACCEL = os.path.join(BUILD, "bin", "accel")
DIST_PP = os.path.join(BUILD, "tests", "distributed", "dist_pp")
tmp = tempfile.mkdtemp(prefix="accel_megatron_")
failures = []
BASE = {k: v for k, v in os.environ.items()
        if not k.startswith(("ACCELERATE_", "MEGATRON_LM_", "PARALLELISM_CONFIG_", "PET_", "SLURM_"))}
BASE.update(HF_HOME=os.path.join(tmp, "hf"), OMP_NUM_THREADS="1")


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


def launch(args, code=0):
    p = subprocess.run([ACCEL, "launch", "-q", "--main_process_port", "0"] + args, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True, env=BASE, cwd=tmp, timeout=120)
    check(p.returncode == code, "accel launch %s: exit %d, expected %d\n%s%s"
          % (" ".join(args), p.returncode, code, p.stdout, p.stderr))
    return p


def train(name, launch_args, config=None, code=0, ranks=2):
    """dist_pp on 2 processes, 3 steps of per-process batch 4; every rank's file text."""
    prefix = os.path.join(tmp, name)
    p = launch(launch_args + [DIST_PP, prefix, "4", "3"] + ([json.dumps(config)] if config else []), code)
    if code:  # refused after training: its stderr, and the losses written
        return p.stderr, [[l for l in text.splitlines() if l.startswith("loss")] for text in rank_files(prefix, ranks)]
    return rank_files(prefix, ranks)


def rank_files(prefix, ranks=2):
    """Each rank's file text ("" when it wrote none: a failure already recorded)."""
    return [open("%s.%d.txt" % (prefix, r)).read() if os.path.exists("%s.%d.txt" % (prefix, r)) else ""
            for r in range(ranks)]


# The pipeline as parallelism_config asks for it: what MegatronLMPlugin's pp_degree 2 and num_micro_batches 2
# map onto (dp_replicate = world / pp, Megatron's 1F1B without virtual stages).
PIPE = {"parallelism_config": {"pp_size": 2, "dp_replicate_size": 1, "num_micro_batches": 2, "pp_schedule": "1f1b"}}
want = train("parallelism_config", ["-n", "2"], PIPE)
check("loss 2 " in want[0] and "param transformer.h.0." in want[0] and "param transformer.h.3." not in want[0] and
      "param transformer.h.3." in want[1] and "param transformer.h.0." not in want[1],
      "the reference run is a pipeline (stage 0 holds blocks 0-1, stage 1 blocks 2-3):\n%s" % want)

got = train("flags", ["-n", "2", "--use_megatron_lm", "--megatron_lm_pp_degree", "2",
                      "--megatron_lm_num_micro_batches=2", "--megatron_lm_gradient_clipping", "0"])
check(got == want, "--use_megatron_lm --megatron_lm_pp_degree 2: not the parallelism_config pipeline:\n%s\n%s" % (got, want))

# tp_degree alone (pp_degree 1): parallelism_config.tp_size, the rest replicating; sequence_parallelism onto
# tp_handler.sequence_parallel.
# Under sequence parallelism dist_pp's closing 5-token prompt is refused (5 positions do not split over tp 2),
# naming tp_handler.sequence_parallel: the same refusal and the same losses before it. (The launcher stops the
# other rank when one fails, maybe before its file is flushed: every rank reports the same loss, so each run's
# non-empty files are compared.)
for sp in (False, True):
    tp = {"parallelism_config": {"tp_size": 2, "dp_replicate_size": 1, "tp_handler": {"sequence_parallel": sp}}}
    want_tp = train("tp_config_%s" % sp, ["-n", "2"], tp, code=int(sp))
    check(("loss 2" in str(want_tp[1]) and "tp_handler.sequence_parallel splits" in want_tp[0]) if sp else
          ("loss 2 " in want_tp[0] and want_tp[0] != want[0]), "the tp reference run (sequence_parallel %s): %s"
          % (sp, want_tp))
    got = train("tp_flags_%s" % sp, ["-n", "2", "--use_megatron_lm", "--megatron_lm_tp_degree", "2",
                                     "--megatron_lm_sequence_parallelism", str(sp).lower(),
                                     "--megatron_lm_gradient_clipping", "0"], code=int(sp))
    if sp:
        losses = [l for l in got[1] + want_tp[1] if l]
        same = (any(got[1]) and any(want_tp[1]) and all(l == losses[0] for l in losses) and
                "tp_handler.sequence_parallel splits" in got[0])
    else:
        same = got == want_tp
    check(same, "--megatron_lm_tp_degree 2, sequence_parallelism %s: not the parallelism_config run:\n%s\n%s"
          % (sp, got, want_tp))

# use_distributed_optimizer (Megatron's optimizer state sharded over the data-parallel group): ZeRO-1.
# (ZeRO-1 trains as DDP does, bit for bit here: the effective configuration shows the engine.)
ZERO1 = ["-n", "2", "--use_megatron_lm", "--megatron_lm_use_distributed_optimizer", "true",
         "--megatron_lm_gradient_clipping", "0"]
want_zero = train("zero1_config", ["-n", "2"], {"deepspeed_plugin": {"zero_stage": 1}})
got = train("zero1_flags", ZERO1)
check("loss 2 " in want_zero[0] and got == want_zero,
      "--megatron_lm_use_distributed_optimizer true: not the ZeRO-1 run:\n%s\n%s" % (got, want_zero))
created = os.path.join(tmp, "created")
os.makedirs(created)
launch(ZERO1 + [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "create_accelerator.py"),
                BUILD, created])
for r in range(2):
    f = os.path.join(created, "rank%d.json" % r)
    cfg = (json.load(open(f)).get("config") or {}) if os.path.exists(f) else {}
    check((cfg.get("deepspeed_plugin") or {}).get("zero_stage") == 1,
          "rank %d's effective configuration under --megatron_lm_use_distributed_optimizer: %s" % (r, cfg))

# pp 2 x tp 2 (4 processes): each stage split over tp, as parallelism_config's pp x tp.
PPTP = {"parallelism_config": {"pp_size": 2, "tp_size": 2, "dp_replicate_size": 1, "num_micro_batches": 2,
                               "pp_schedule": "1f1b"}}
want_pptp = train("pptp_config", ["-n", "4"], PPTP, ranks=4)
got = train("pptp_flags", ["-n", "4", "--use_megatron_lm", "--megatron_lm_pp_degree", "2", "--megatron_lm_tp_degree",
                           "2", "--megatron_lm_num_micro_batches", "2", "--megatron_lm_gradient_clipping", "0"], ranks=4)
check("loss 2 " in want_pptp[0] and got == want_pptp,
      "--megatron_lm_pp_degree 2 --megatron_lm_tp_degree 2: not the parallelism_config run:\n%s\n%s" % (got, want_pptp))

# The config file `accelerate config` writes for Megatron-LM (0.24.1's cluster.py: the flags' names as keys).
for ext in (".yaml", ".json"):
    path = os.path.join(tmp, "megatron" + ext)
    with open(path, "w") as f:
        json.dump({"compute_environment": "LOCAL_MACHINE", "distributed_type": "MEGATRON_LM", "num_processes": 2,
                   "mixed_precision": "no", "use_cpu": False, "megatron_lm_config": {
                       "megatron_lm_tp_degree": 1, "megatron_lm_pp_degree": 2, "megatron_lm_num_micro_batches": 2,
                       "megatron_lm_recompute_activations": False, "megatron_lm_use_distributed_optimizer": False,
                       "megatron_lm_gradient_clipping": 0.0}}, f)
    got = train("file" + ext[1:], ["--config_file", path])
    check(got == want, "%s: not the parallelism_config pipeline:\n%s" % (path, got))
    # The variables as Accelerate's launcher writes them (str() of the loaded values), flags winning over the file.
    p = launch(["--config_file", path, "--megatron_lm_num_micro_batches", "4", "sh", "-c",
                "echo ENV $ACCELERATE_USE_MEGATRON_LM $MEGATRON_LM_TP_DEGREE $MEGATRON_LM_PP_DEGREE "
                "$MEGATRON_LM_NUM_MICRO_BATCHES $MEGATRON_LM_RECOMPUTE_ACTIVATIONS "
                "$MEGATRON_LM_USE_DISTRIBUTED_OPTIMIZER $MEGATRON_LM_GRADIENT_CLIPPING "
                "${MEGATRON_LM_SEQUENCE_PARALLELISM:-unset}"])
    check(p.stdout.count("ENV true 1 2 4 False False 0.0 unset") == 2, "%s exported: %s" % (path, p.stdout))

# The flags' values as Accelerate's argparse spells them (int(), float(), the text of a true/false).
p = launch(["-n", "1", "--use_megatron_lm", "--megatron_lm_tp_degree", "1", "--megatron_lm_gradient_clipping", "1",
            "--megatron_lm_sequence_parallelism", "True", "sh", "-c",
            "echo ENV $MEGATRON_LM_TP_DEGREE $MEGATRON_LM_PP_DEGREE $MEGATRON_LM_GRADIENT_CLIPPING "
            "$MEGATRON_LM_SEQUENCE_PARALLELISM ${MEGATRON_LM_NUM_MICRO_BATCHES:-unset}"])
check("ENV 1 1 1.0 True unset" in p.stdout, "flag values: " + p.stdout + p.stderr)
p = launch(["-n", "1", "--use_megatron_lm", "sh", "-c", "echo ENV $ACCELERATE_USE_MEGATRON_LM $MEGATRON_LM_TP_DEGREE "
            "$MEGATRON_LM_PP_DEGREE $MEGATRON_LM_GRADIENT_CLIPPING"])
check("ENV true 1 1 1.0" in p.stdout, "--use_megatron_lm alone: the launcher's defaults: " + p.stdout + p.stderr)

# Refused by name: a flag without --use_megatron_lm, a bad value, another engine, an unknown key of the section.
p = launch(["-n", "1", "--megatron_lm_pp_degree", "2", "sh", "-c", "echo RAN"], code=2)
check("--megatron_lm_pp_degree needs --use_megatron_lm" in p.stderr and "RAN" not in p.stdout, p.stderr)
p = launch(["-n", "1", "--use_megatron_lm", "--megatron_lm_pp_degree", "two", "true"], code=2)
check('--megatron_lm_pp_degree: expected an integer in 1..65536, got "two"' in p.stderr, p.stderr)
p = launch(["-n", "1", "--use_megatron_lm", "--megatron_lm_recompute_activations", "maybe", "true"], code=2)
check("--megatron_lm_recompute_activations: expected true or false" in p.stderr, p.stderr)
p = launch(["-n", "1", "--use_megatron_lm", "--use_fsdp", "true"], code=2)
check("--use_megatron_lm and --use_fsdp exclude each other" in p.stderr, p.stderr)
bad = os.path.join(tmp, "bad.yaml")
with open(bad, "w") as f:
    f.write("distributed_type: MEGATRON_LM\nnum_processes: 1\nmegatron_lm_config:\n  megatron_lm_pp_dgree: 2\n")
p = launch(["--config_file", bad, "sh", "-c", "echo RAN"], code=1)
check("megatron_lm_config.megatron_lm_pp_dgree: unknown key" in p.stderr and "RAN" not in p.stdout, p.stderr)
# Megatron's clipping (the launcher exports 1.0 by default) clips the gradients inside each optimizer step, over both
# stages: the same run as parallelism_config's pipeline with megatron_lm_plugin's gradient_clipping, byte for byte,
# and (at 0.05, where this model's gradients are clipped) not the unclipped run.
for clip in (None, "0.05"):
    flags = ["--megatron_lm_gradient_clipping", clip] if clip else []
    want_clip = train("clip_config_%s" % clip, ["-n", "2"], dict(PIPE, megatron_lm_plugin={
        "gradient_clipping": float(clip or "1.0")}))
    got = train("clip_flags_%s" % clip, ["-n", "2", "--use_megatron_lm", "--megatron_lm_pp_degree", "2",
                                         "--megatron_lm_num_micro_batches", "2"] + flags)
    check("loss 2 " in want_clip[0] and got == want_clip and (clip is None or got != want),
          "--use_megatron_lm --megatron_lm_gradient_clipping %s: not the clipped parallelism_config pipeline:\n%s\n%s"
          % (clip or "(default 1.0)", got, want_clip))

if failures:
    print("\n\n".join(failures))
    print("\n%d failure(s); files in %s" % (len(failures), tmp))
    sys.exit(1)
shutil.rmtree(tmp, ignore_errors=True)
print("accel launch --use_megatron_lm: all checks passed")
