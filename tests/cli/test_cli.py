#!/usr/bin/env python3
"""The `accel` command from a user's point of view: `config` (questionnaire with answers on stdin,
`default`, `update`), `env`, and `launch` reading the files they write. Config files round-trip with
Python's yaml (python3-yaml) in Accelerate's key layout. Usage: test_cli.py BUILD_DIR"""
import json
import os
import re
import subprocess
import sys
import tempfile

import yaml

BUILD = sys.argv[1]
ACCEL = os.path.join(BUILD, "bin", "accel")
failures = []


def run(args, env=None, stdin=None, code=None):
    e = dict(os.environ)
    for k in ("ACCELERATE_CONFIG_FILE", "HF_HOME", "XDG_CACHE_HOME"):
        e.pop(k, None)
    for k, v in (env or {}).items():  # None: not in the environment
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    p = subprocess.run([ACCEL] + args, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, env=e, timeout=120)
    if code is not None and p.returncode != code:
        failures.append("accel %s: exit %d, expected %d\nstdout: %s\nstderr: %s"
                        % (" ".join(args), p.returncode, code, p.stdout, p.stderr))
    return p


def check(cond, what):
    if not cond:
        failures.append(what)


tmp = tempfile.mkdtemp(prefix="accel_cli_")
home = os.path.join(tmp, "hf")  # HF_HOME for every run that must not touch the user's files
HF = {"HF_HOME": home}

# ---- the program and its help -------------------------------------------------------------------
p = run([], code=1)
check("config" in p.stderr and "env" in p.stderr, "usage lists config and env: " + p.stderr)
for cmd in (["config"], ["config", "default"], ["config", "update"], ["env"], ["launch"]):
    p = run(cmd + ["--help"], code=0)
    check(p.stdout.startswith("usage: accel " + cmd[0]), "%s --help: %s" % (cmd, p.stdout))
run(["config", "default", "--bogus"], code=2)
run(["config", "default", "--mixed_precision", "fp32"], code=2)

# ---- config default ------------------------------------------------------------------------------
path = os.path.join(tmp, "sub", "default_config.yaml")
p = run(["config", "default", "--config_file", path, "--mixed_precision", "bf16"], code=0)
check("saved at " + path in p.stdout, "config default says where: " + p.stdout)
text = open(path).read()
# (Accelerate 1.x also writes enable_cpu_affinity: false; accel leaves it out, as 0.24.1 refuses the key:
# test_accelerate_real.py reads this file with the real 0.24.1 loader.)
expected = {"compute_environment": "LOCAL_MACHINE", "debug": False, "distributed_type": "NO", "downcast_bf16": False,
            "machine_rank": 0, "main_training_function": "main",
            "mixed_precision": "bf16", "num_machines": 1, "num_processes": 1, "rdzv_backend": "static",
            "same_network": False, "tpu_use_cluster": False, "tpu_use_sudo": False, "use_cpu": True}
check(json.loads(text) == expected, "config default writes Accelerate's basic config as JSON: " + text)
check(text == json.dumps(expected, indent=2, sort_keys=True) + "\n", "2-space indents, sorted keys: " + text)
check(yaml.safe_load(text) == expected, "and YAML reads it")
p = run(["config", "default", "--config_file", path], code=0)
check("already exists" in p.stdout and open(path).read() == text, "config default never overwrites")
# the default location: HF_HOME, else XDG_CACHE_HOME/huggingface
run(["config", "default"], env=HF, code=0)
check(os.path.exists(os.path.join(home, "accelerate", "default_config.yaml")), "HF_HOME/accelerate/default_config.yaml")
xdg = os.path.join(tmp, "xdg")
run(["config", "default"], env={"XDG_CACHE_HOME": xdg}, code=0)
check(os.path.exists(os.path.join(xdg, "huggingface", "accelerate", "default_config.yaml")), "XDG_CACHE_HOME")

# ---- the questionnaire, answers on stdin ---------------------------------------------------------
qpath = os.path.join(tmp, "q.yaml")
# multi-CPU, 1 machine, no debug checks, 2 processes, bf16, no DeepSpeed, no FSDP, no Megatron-LM
p = run(["config", "--config_file", qpath], stdin="1\n\nno\n2\n2\nno\n\n\n", code=0)
q = yaml.safe_load(open(qpath))
check(q["distributed_type"] == "MULTI_CPU" and q["num_processes"] == 2 and q["mixed_precision"] == "bf16" and
      q["use_cpu"] is True and q["num_machines"] == 1 and q["debug"] is False, "questionnaire answers: %s" % q)
check(set(expected) <= set(q), "questionnaire writes every ClusterConfig key: %s" % sorted(q))
check("Which type of machine" in p.stdout and "mixed precision" in p.stdout, "questions shown: " + p.stdout)
# DeepSpeed and FSDP answers: Accelerate's deepspeed_config / fsdp_config, which launch and `accel test` use
dpath, spath2 = os.path.join(tmp, "ds.yaml"), os.path.join(tmp, "fsdp.yaml")
run(["config", "--config_file", dpath], stdin="1\n\nno\n2\n0\nyes\n3\n2\nyes\n0.5\n", code=0)
d = yaml.safe_load(open(dpath))
check(d["distributed_type"] == "DEEPSPEED" and d["deepspeed_config"] == {
    "zero_stage": 3, "gradient_accumulation_steps": 2, "gradient_clipping": 0.5, "offload_optimizer_device": "none",
    "offload_param_device": "none", "zero3_init_flag": False, "zero3_save_16bit_model": False}, "DeepSpeed: %s" % d)
run(["config", "--config_file", spath2], stdin="1\n\nno\n2\n0\nno\nyes\n1\n0\nlinear\n\n", code=0)
f2 = yaml.safe_load(open(spath2))
# the strategy as its number (2: SHARD_GRAD_OP), which Accelerate 0.24.1's FSDP plugin needs and 1.x's reads too
check(f2["distributed_type"] == "FSDP" and f2["fsdp_config"] == {
    "fsdp_sharding_strategy": 2, "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
    "fsdp_transformer_layer_cls_to_wrap": "linear", "fsdp_sync_module_states": True, "fsdp_offload_params": False,
    "fsdp_state_dict_type": "FULL_STATE_DICT"}, "FSDP: %s" % f2)
p = run(["launch", "--config_file", spath2, "--main_process_port", "0", "sh", "-c",
         "echo ENV $ACCELERATE_USE_FSDP $FSDP_SHARDING_STRATEGY $FSDP_TRANSFORMER_CLS_TO_WRAP"], code=0)
check(p.stdout.count("ENV true 2 linear") == 2, "the FSDP file exported by launch: " + p.stdout + p.stderr)
# Megatron-LM (Accelerate 0.24.1's questions after DeepSpeed and FSDP): megatron_lm_config with the launcher's flag
# names, which launch exports as MEGATRON_LM_*. tp 2 (sequence parallelism: default yes), pp 2 with 4 micro-batches,
# recomputation no, clipping 0.5 (the distributed optimizer is not asked with tp or pp: no); then tp 1, pp 1 and
# every default (distributed optimizer yes, clipping 1.0); a bad degree is asked again.
mpath, mpath2 = os.path.join(tmp, "megatron.yaml"), os.path.join(tmp, "megatron2.yaml")
p = run(["config", "--config_file", mpath], stdin="1\n\nno\n4\n0\nno\nno\nyes\n2\n\n2\n4\nno\n0.5\n", code=0)
mg = yaml.safe_load(open(mpath))
check(mg["distributed_type"] == "MEGATRON_LM" and mg["num_processes"] == 4 and mg["megatron_lm_config"] == {
    "megatron_lm_tp_degree": 2, "megatron_lm_sequence_parallelism": True, "megatron_lm_pp_degree": 2,
    "megatron_lm_num_micro_batches": 4, "megatron_lm_recompute_activations": False,
    "megatron_lm_use_distributed_optimizer": False, "megatron_lm_gradient_clipping": 0.5}, "Megatron-LM: %s" % mg)
check("What is the Tensor Parallelism degree/size? [1]:" in p.stdout and "distributed optimizer is not built" in p.stdout,
      "Megatron-LM questions: " + p.stdout)
p = run(["launch", "--config_file", mpath, "--main_process_port", "0", "sh", "-c",
         "echo ENV $ACCELERATE_USE_MEGATRON_LM $MEGATRON_LM_TP_DEGREE $MEGATRON_LM_PP_DEGREE "
         "$MEGATRON_LM_NUM_MICRO_BATCHES $MEGATRON_LM_SEQUENCE_PARALLELISM $MEGATRON_LM_GRADIENT_CLIPPING"], code=0)
check(p.stdout.count("ENV true 2 2 4 True 0.5") == 4, "the Megatron-LM file exported by launch: " + p.stdout + p.stderr)
p = run(["config", "--config_file", mpath2], stdin="2\n\nno\n2\n\n0\nno\nno\nyes\ntwo\n\n\n\n\n\n", code=0)
mg = yaml.safe_load(open(mpath2))
check(mg["distributed_type"] == "MEGATRON_LM" and mg["megatron_lm_config"] == {
    "megatron_lm_tp_degree": 1, "megatron_lm_pp_degree": 1, "megatron_lm_recompute_activations": True,
    "megatron_lm_use_distributed_optimizer": True, "megatron_lm_gradient_clipping": 1.0}, "Megatron-LM defaults: %s" % mg)
check("Please enter an integer in 1..65536" in p.stdout, "a bad degree asked again: " + p.stdout)
# a wrong answer is asked again; stdin ending is an error naming the question
p = run(["config", "--config_file", os.path.join(tmp, "q2.yaml")], stdin="7\n0\nyes\n", code=1)
check("Please enter" in p.stdout and "no answer (stdin ended)" in p.stderr and "mixed precision" in p.stderr,
      "re-ask and EOF: %s / %s" % (p.stdout, p.stderr))
# fp8: the TE questions, written in Accelerate's fp8_config layout
fpath = os.path.join(tmp, "fp8.yaml")
run(["config", "--config_file", fpath], stdin="0\nyes\n3\n1\nno\n1\n2\n16\n0\n", code=0)
f = yaml.safe_load(open(fpath))
check(f["mixed_precision"] == "fp8" and f["fp8_config"] == {
    "backend": "TE", "fp8_format": "E4M3", "use_autocast_during_eval": False, "margin": 1, "interval": 2,
    "amax_history_length": 16, "amax_compute_algorithm": "max"}, "fp8_config: %s" % f)

# ---- launch reads what config wrote --------------------------------------------------------------
show = 'echo "ENV $WORLD_SIZE $ACCELERATE_MIXED_PRECISION $ACCELERATE_USE_CPU $ACCELERATE_FP8_FORMAT $ACCELERATE_FP8_AMAX_HISTORY_LEN"'
p = run(["launch", "--config_file", qpath, "--main_process_port", "0", "sh", "-c", show], code=0)
check(p.stdout.count("ENV 2 bf16 True") == 2, "launch from the questionnaire's file: " + p.stdout + p.stderr)
p = run(["launch", "--config_file", fpath, "sh", "-c", show], code=0)
check("ENV 1 fp8 True E4M3 16" in p.stdout, "fp8_config exported as ACCELERATE_FP8_*: " + p.stdout + p.stderr)
# precedence: --config_file > ACCELERATE_CONFIG_FILE > HF_HOME default; flags beat the file
p = run(["launch", "sh", "-c", show], env=dict(HF, ACCELERATE_CONFIG_FILE=qpath), code=0)
check(p.stdout.count("ENV 2 bf16") == 2, "ACCELERATE_CONFIG_FILE: " + p.stdout + p.stderr)
p = run(["launch", "--config_file", path, "sh", "-c", show], env=dict(ACCELERATE_CONFIG_FILE=qpath), code=0)
check("ENV 1 bf16 True" in p.stdout, "--config_file wins over ACCELERATE_CONFIG_FILE: " + p.stdout)
p = run(["launch", "sh", "-c", show], env=HF, code=0)
check("ENV 1 no True" in p.stdout, "the HF_HOME default file: " + p.stdout + p.stderr)
p = run(["launch", "--mixed_precision", "no", "--config_file", qpath, "--main_process_port", "0", "sh", "-c", show], code=0)
check(p.stdout.count("ENV 2 no") == 2, "a flag beats the file: " + p.stdout)

# ---- update: a file as Python's accelerate writes it ---------------------------------------------
upath = os.path.join(tmp, "from_python.yaml")
accelerate_file = {"compute_environment": "LOCAL_MACHINE", "distributed_type": "MULTI_CPU", "mixed_precision": "no",
                   "num_processes": 3, "use_cpu": True, "rdzv_backend": "c10d",
                   "fsdp_config": {"fsdp_sharding_strategy": "FULL_SHARD", "fsdp_offload_params": False}}
with open(upath, "w") as fh:
    yaml.safe_dump(accelerate_file, fh)
p = run(["config", "update", "--config_file", upath], code=0)
check("Successfully updated" in p.stdout, "update: " + p.stdout)
check("rdzv_backend" in p.stderr and "fsdp_config" in p.stderr, "keys that do not apply are named: " + p.stderr)
u = yaml.safe_load(open(upath))
check(all(u[k] == v for k, v in accelerate_file.items()), "update keeps every value: %s" % u)
check(u["main_training_function"] == "main" and u["tpu_use_sudo"] is False and u["debug"] is False,
      "update fills in the defaults: %s" % u)
keys = [l.split(":")[0] for l in open(upath) if l and not l.startswith(" ")]
check(keys == sorted(keys), "sorted keys: %s" % keys)
check("mixed_precision: 'no'" in open(upath).read(), "'no' quoted so that YAML 1.1 reads a string")
jpath = os.path.join(tmp, "c.json")
with open(jpath, "w") as fh:
    json.dump({"distributed_type": "NO", "mixed_precision": "fp16"}, fh)
run(["config", "update", "--config_file", jpath], code=0)
check(json.load(open(jpath))["tpu_use_cluster"] is False, "a .json file stays JSON")
p = run(["config", "update", "--config_file", os.path.join(tmp, "missing.yaml")], code=1)
check("missing.yaml" in p.stderr and "doesn't exist" in p.stderr, "update of a missing file: " + p.stderr)

# ---- bad files: the file and the key are named, nothing launches ---------------------------------
bad = os.path.join(tmp, "bad.yaml")
for content, fragment in (("distributed_type: MULTI_CPU\nnum_procesess: 2\n", "bad.yaml: num_procesess: unknown key"),
                          ("distributed_type: MULTI_CPU\nnum_processes: two\n", "bad.yaml: num_processes: expected an integer"),
                          ("debug: true\n", "bad.yaml: distributed_type: missing"),
                          ("distributed_type: XLA\n", "bad.yaml: distributed_type: XLA is not yet supported"),
                          ("distributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n  fsdp_sharding: FULL_SHARD\n",
                           "bad.yaml: fsdp_config.fsdp_sharding: unknown key"),
                          ("distributed_type: [\n", "bad.yaml:"),
                          ("distributed_type: NO\nuse_cpu: maybe\n", "bad.yaml: use_cpu: expected true or false")):
    with open(bad, "w") as fh:
        fh.write(content)
    p = run(["launch", "--config_file", bad, "sh", "-c", "echo RAN"], code=1)
    check(fragment in p.stderr and "RAN" not in p.stdout, "launch with %r: %s" % (content, p.stderr))
    p = run(["env", "--config_file", bad], code=1)
    check(fragment in p.stderr, "env with %r: %s" % (content, p.stderr))
    run(["config", "update", "--config_file", bad], code=1)
p = run(["launch", "--config_file", os.path.join(tmp, "nope.yaml"), "true"], code=2)
check("nope.yaml" in p.stderr, "a missing --config_file is named: " + p.stderr)

# ---- env -----------------------------------------------------------------------------------------
p = run(["env", "--config_file", qpath], code=0)
for fragment in ("Copy-and-paste the text below in your GitHub issue", "- `accel` version: ", "- LibTorch version: 1.",
                 "- Communication backends compiled: single, gloo", "- System RAM: ", "- CPU count: ",
                 "- `accel` config passed: " + qpath, "\t- distributed_type: MULTI_CPU", "\t- num_processes: 2"):
    check(fragment in p.stdout, "env shows %r:\n%s" % (fragment, p.stdout))
p = run(["env"], env={"HF_HOME": os.path.join(tmp, "empty")}, code=0)
check("default config:\n\tNot found" in p.stdout, "env without a config file: " + p.stdout)
p = run(["env"], env=HF, code=0)
check("\t- mixed_precision: 'no'" in p.stdout and "\t- use_cpu: true" in p.stdout, "env shows the default file: " + p.stdout)

# ---- BLAS kernels: env reports OpenBLAS's; launch names the ones for a CPU OpenBLAS does not know, keeps the user's
p = run(["env"], env={"OPENBLAS_CORETYPE": None}, code=0)
lines = [l for l in p.stdout.splitlines() if l.startswith("- OpenBLAS kernels: ")]
check(len(lines) == 1, "env names OpenBLAS's kernels: " + p.stdout)
m = re.search(r"OPENBLAS_CORETYPE=(\w+) set before", lines[0] if lines else "")
advice = m.group(1) if m else ""
show = "echo CORE=$OPENBLAS_CORETYPE"
p = run(["launch", "-n", "2", "--main_process_port", "0", "sh", "-c", show], env={"OPENBLAS_CORETYPE": None}, code=0)
check(p.stdout.count("CORE=%s\n" % advice) == 2, "launch gives %r (as env advises): %s" % (advice, p.stdout))
check(("running with OPENBLAS_CORETYPE=" + advice in p.stderr) == bool(advice), "launch says so: " + p.stderr)
p = run(["launch", "-n", "2", "--main_process_port", "0", "sh", "-c", show], env={"OPENBLAS_CORETYPE": "Haswell"}, code=0)
check(p.stdout.count("CORE=Haswell\n") == 2 and "OPENBLAS_CORETYPE" not in p.stderr, "the user's value is kept: " + p.stdout)
p = run(["env"], env={"OPENBLAS_CORETYPE": "Haswell"}, code=0)
check("- OpenBLAS kernels: Haswell\n" in p.stdout, "env reports the kernels the variable chose: " + p.stdout)
# An accelerator warns once where nothing chose the kernels (here: accel test's worker started by hand, in one
# process); a value of the variable keeps it quiet. accel test itself gives its one-process reference the
# kernels launch gave its workers, so it prints no warning.
warning = "accel: warning: OpenBLAS does not know this CPU"
with tempfile.TemporaryDirectory() as alone:
    with open(os.path.join(alone, "plan"), "w") as f:  # what the distributed run leaves: model, accumulation,
        f.write("mlp 1 0 no 1 0 0 4 1\n\n")  # clipping, precision, processes, DeepSpeed blocks, batch, compare; file
    p = run(["test", "--worker", alone, "--reference"], env=dict(HF, OPENBLAS_CORETYPE=None), code=0)
    check(p.stderr.count(warning) == (1 if advice else 0), "the accelerator's warning (%r advised): %s" % (advice, p.stderr))
    p = run(["test", "--worker", alone, "--reference"], env=dict(HF, OPENBLAS_CORETYPE="Haswell"), code=0)
    check(warning not in p.stderr, "no warning with the variable set: " + p.stderr)
p = run(["test", "-n", "2", "--main_process_port", "0"], env=dict(HF, OPENBLAS_CORETYPE=None), code=0)
check(warning not in p.stderr, "accel test's reference runs with launch's kernels: " + p.stderr)

# ---- a busy rendezvous port (issue 43.8) -------------------------------------------------------------
# Two jobs on the same fixed port: the second fails at once, its message names the port and how to pick
# another, and LibTorch's glog lines (c10d's bind warnings, "Logging before InitGoogleLogging()") are not
# printed unless TORCH_CPP_LOG_LEVEL asks for them. The jobs create accelerators through libaccel's C API.
JOB = r"""
import ctypes, os, sys, time
lib = ctypes.CDLL(os.path.join(sys.argv[1], "libaccel.so"))
lib.accel_last_error_message.restype = ctypes.c_char_p
# Rank 0 first: on a port held by the other job, a rank 1 that came first would reach that job's store (same
# keys), fail on its own ("connecting ... to its peers failed") and end the job before rank 0's busy-port failure,
# whose message is what is checked (seen once in a loaded CI run).
if os.environ.get("RANK", "0") != "0":
    time.sleep(3)
acc = ctypes.c_void_p()
st = lib.accel_accelerator_create(None, ctypes.byref(acc))
if st != 0:
    sys.stderr.write("create: %d: %s\n" % (st, lib.accel_last_error_message().decode()))
    sys.exit(1)
print("READY", flush=True)
for _ in range(600):  # until the test is done with this job
    if os.path.exists(sys.argv[2]):
        break
    time.sleep(0.1)
lib.accel_accelerator_free(acc)
"""
import socket
with socket.socket() as sk:
    sk.bind(("127.0.0.1", 0))
    busy = str(sk.getsockname()[1])
job = os.path.join(tmp, "job.py")
with open(job, "w") as fh:
    fh.write(JOB)
stop = os.path.join(tmp, "job.stop")
e = {k: v for k, v in os.environ.items() if k not in ("TORCH_CPP_LOG_LEVEL", "GLOG_minloglevel")}
first = subprocess.Popen([ACCEL, "launch", "-n", "2", "--main_process_port", busy, "/usr/bin/python3", job, BUILD, stop],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, env=e)
ready = 0
while ready < 2:  # both ranks of the first job hold their accelerators (rank 0 hosts the store on the port)
    line = first.stdout.readline()
    if not line:
        break
    ready += "READY" in line
check(ready == 2, "the first job on port %s did not start: %s" % (busy, first.stderr.read() if ready < 2 else ""))
glog = re.compile(r"^(\[rank\d+\]: )?([IWEF]\d{8} |WARNING: Logging before InitGoogleLogging)", re.M)
p = run(["launch", "-n", "2", "--main_process_port", busy, "/usr/bin/python3", job, BUILD, stop],
        env={"TORCH_CPP_LOG_LEVEL": None, "GLOG_minloglevel": None}, code=1)
check("port %s is already in use" % busy in p.stderr and "--main_process_port 0" in p.stderr
      and "are all 2 processes started" not in p.stderr, "a busy port is named, with how to pick another: " + p.stderr)
check(not glog.search(p.stderr), "no glog lines for a busy port: " + p.stderr)
# LibTorch's store logs only where it hosts the job's store: a job of several machines (no generated rendezvous token;
# rank 0 alone here, failing on the busy port before any peer is needed).
p = run(["launch", "-n", "2", "--num_machines", "2", "--machine_rank", "0", "--main_process_ip", "127.0.0.1",
         "--main_process_port", busy, "/usr/bin/python3", job, BUILD, stop], env={"TORCH_CPP_LOG_LEVEL": "WARNING"}, code=1)
check(glog.search(p.stderr) and "port %s is already in use" % busy in p.stderr,
      "TORCH_CPP_LOG_LEVEL=WARNING shows LibTorch's warnings: " + p.stderr)
p = run(["launch", "-n", "2", "--main_process_port", "0", "/usr/bin/python3", job, BUILD, stop],
        env={"TORCH_CPP_LOG_LEVEL": "chatty"}, code=1)
check("TORCH_CPP_LOG_LEVEL" in p.stderr and '"chatty"' in p.stderr, "a bad TORCH_CPP_LOG_LEVEL is named: " + p.stderr)
open(stop, "w").close()
first.wait(timeout=60)
check(first.returncode == 0, "the first job ends normally: %s" % first.stderr.read())

# ---- estimate-memory ------------------------------------------------------------------------------
# GPT-2 small (124,439,808 parameters; the token embedding is the largest layer): Accelerate's figures.
p = run(["estimate-memory", '{"type": "gpt"}'], code=0)
rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:5]] for line in p.stdout.splitlines()
        if line.startswith("│") and line.count("│") == 5}
check(rows.get("float32") == ["147.24 MB", "474.7 MB", "1.85 GB"], "gpt-2 float32 row: %s" % p.stdout)
check(rows.get("float16") == ["73.62 MB", "237.35 MB", "949.4 MB"], "gpt-2 float16 row: %s" % p.stdout)
check(rows.get("int4") == ["18.4 MB", "59.34 MB", "N/A"], "gpt-2 int4 row: %s" % p.stdout)
check("Memory Usage for loading" in p.stdout and "┌" in p.stdout and "┘" in p.stdout, "table: " + p.stdout)
# A llama spec: a decoder layer (model.layers.<i>, 65,664 parameters = 256.5 KB) is one layer, larger than the
# embedding (6,400); 144,192 parameters in all.
p = run(["estimate-memory", '{"type": "llama", "vocab_size": 100, "hidden_size": 64, "intermediate_size": 256, '
         '"num_hidden_layers": 2, "num_attention_heads": 4}', "--dtypes", "float32"], code=0)
rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:5]] for line in p.stdout.splitlines()
        if line.startswith("│") and line.count("│") == 5}
check(rows.get("float32") == ["256.5 KB", "563.25 KB", "2.2 MB"], "llama float32 row: %s" % p.stdout)


def write_safetensors(path, tensors):
    """tensors: name -> (dtype, shape); zero data (only the header is read)."""
    import json
    import struct
    size = {"F32": 4, "BF16": 2}
    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        n = size[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header).encode()
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(text)) + text + bytes(offset))


# A sharded folder (index + two files): sizes count elements at float32 whatever the stored dtype, and a
# GPT-2 block (h.<i>) is one layer: h.0 = 2 x 256 x 256 elements beats the 100 x 256 embedding.
shards = os.path.join(tmp, "sharded")
os.makedirs(shards)
write_safetensors(os.path.join(shards, "model-00001-of-00002.safetensors"),
                  {"wte.weight": ("BF16", [100, 256]), "h.0.attn.c_attn.weight": ("F32", [256, 256])})
write_safetensors(os.path.join(shards, "model-00002-of-00002.safetensors"), {"h.0.mlp.c_fc.weight": ("BF16", [256, 256])})
with open(os.path.join(shards, "model.safetensors.index.json"), "w") as fh:
    fh.write('{"metadata": {}, "weight_map": {"wte.weight": "model-00001-of-00002.safetensors", '
             '"h.0.attn.c_attn.weight": "model-00001-of-00002.safetensors", '
             '"h.0.mlp.c_fc.weight": "model-00002-of-00002.safetensors"}}')
p = run(["estimate-memory", shards, "--dtypes", "float32", "bfloat16"], code=0)
rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:5]] for line in p.stdout.splitlines()
        if line.startswith("│") and line.count("│") == 5}
check(rows.get("float32") == ["512.0 KB", "612.0 KB", "2.39 MB"], "sharded safetensors, float32: " + p.stdout)
check(rows.get("bfloat16") == ["256.0 KB", "306.0 KB", "1.2 MB"], "sharded safetensors, bfloat16: " + p.stdout)
p = run(["estimate-memory", os.path.join(tmp, "missing.safetensors")], code=1)
check("does not exist" in p.stderr, "missing file named: " + p.stderr)
with open(os.path.join(tmp, "cut.safetensors"), "wb") as fh:
    fh.write(b"\xff\xff\xff\xff\x00\x00\x00\x00{")
p = run(["estimate-memory", os.path.join(tmp, "cut.safetensors")], code=1)
check("ACCEL_ERR_DATA_LOSS" in p.stderr and "cut.safetensors" in p.stderr, "damaged file named: " + p.stderr)
p = run(["estimate-memory", '{"type": "gpt", "n_layr": 2}'], code=1)
check("n_layr" in p.stderr, "bad spec key named: " + p.stderr)
p = run(["estimate-memory", '{"type": "mlp", "widths": [4, 8]}', "--dtypes", "float64"], code=2)
check("float64" in p.stderr, "bad dtype named: " + p.stderr)
p = run(["estimate-memory", "--help"], code=0)
check("usage: accel estimate-memory MODEL" in p.stdout, "help: " + p.stdout)

# ---- test -----------------------------------------------------------------------------------------
p = run(["test", "-n", "2", "--main_process_port", "0"], env=HF, code=0)
check("Test is a success!" in p.stdout and "collectives ok" in p.stdout and "training ok" in p.stdout
      and "equal to one process" in p.stdout, "accel test -n 2: " + p.stdout + p.stderr)
# The config file launch would read: written by `accel config default`, 3 processes, bf16.
cfg3 = os.path.join(tmp, "three.yaml")
run(["config", "default", "--config_file", cfg3, "--mixed_precision", "bf16"], env=HF, code=0)
with open(cfg3) as fh:
    y3 = yaml.safe_load(fh)
y3.update({"num_processes": 3, "distributed_type": "MULTI_CPU"})
with open(cfg3, "w") as fh:
    yaml.safe_dump(y3, fh)
p = run(["test", "--config_file", cfg3, "--main_process_port", "0"], env=HF, code=0)
check("3 process(es)" in p.stdout and "mixed precision bf16" in p.stdout and "Test is a success!" in p.stdout,
      "accel test with a config file: " + p.stdout + p.stderr)
# A config that cannot train here says why, and fails.
p = run(["test", "--mixed_precision", "fp16", "--main_process_port", "0"], env=HF, code=1)
check("FAILED" in p.stderr and "fp16" in p.stderr and "Test is a success" not in p.stdout,
      "accel test with fp16 on this CPU: " + p.stdout + p.stderr)
p = run(["test", "--config_file", os.path.join(tmp, "missing.yaml")], env=HF, code=2)  # as launch: bad options
check("missing.yaml" in p.stderr, "accel test with a missing config file: " + p.stderr)
# Sharded training from a config file (distributed_type FSDP / DEEPSPEED) and from launch's flags.
for doc, expect_strategy in (({"fsdp_config": {"fsdp_sharding_strategy": "SHARD_GRAD_OP", "fsdp_auto_wrap_policy":
                                               "SIZE_BASED_WRAP", "fsdp_min_num_params": 10}, "distributed_type": "FSDP"},
                              "SHARD_GRAD_OP"),
                             ({"deepspeed_config": {"zero_stage": 3, "gradient_clipping": 1.0},
                               "distributed_type": "DEEPSPEED"}, "ZERO_3")):
    spath = os.path.join(tmp, "sharded.yaml")
    with open(spath, "w") as fh:
        yaml.safe_dump(dict(doc, num_processes=2, mixed_precision="no", use_cpu=True), fh)
    p = run(["test", "--config_file", spath, "--main_process_port", "0"], env=HF, code=0)
    check("training ok (%s," % expect_strategy in p.stdout and "Test is a success!" in p.stdout,
          "accel test with %s: %s%s" % (doc["distributed_type"], p.stdout, p.stderr))
p = run(["test", "-n", "2", "--use_fsdp", "--fsdp_sharding_strategy", "NO_SHARD", "--main_process_port", "0"],
        env=HF, code=0)
check("training ok (NO_SHARD," in p.stdout, "accel test --use_fsdp: " + p.stdout + p.stderr)
# Configs that train must pass (issue 43.2): gradient accumulation (a step after the save is a micro-step: the
# check steps until the optimizer does, and the reference accumulates alike), the questionnaire's ZeRO-3 file
# (accumulation 2, clipping 0.5: DeepSpeed clips inside its step, so the reference clips too), and FSDP wrap
# classes the built-in MLP lacks (the test trains a model that has them).
p = run(["test", "-n", "2", "--gradient_accumulation_steps", "2", "--main_process_port", "0"], env=HF, code=0)
check("Test is a success!" in p.stdout and "accumulating 2 micro-steps" in p.stdout,
      "accel test --gradient_accumulation_steps 2: " + p.stdout + p.stderr)
p = run(["test", "-n", "2", "--gradient_accumulation_steps", "3", "--main_process_port", "0"], env=HF, code=0)
check("Test is a success!" in p.stdout, "accel test --gradient_accumulation_steps 3: " + p.stdout + p.stderr)
run(["config", "--config_file", os.path.join(tmp, "z3.yaml")], stdin="1\n\nno\n2\n0\nyes\n3\n2\nyes\n0.5\n", code=0)
p = run(["test", "--config_file", os.path.join(tmp, "z3.yaml"), "--main_process_port", "0"], env=HF, code=0)
check("training ok (ZERO_3," in p.stdout and "Test is a success!" in p.stdout,
      "accel test with the questionnaire's ZeRO-3 file: " + p.stdout + p.stderr)
dpath = os.path.join(tmp, "clip.yaml")  # a clipping value the MLP's gradients exceed
with open(dpath, "w") as fh:
    yaml.safe_dump({"distributed_type": "DEEPSPEED", "num_processes": 2, "mixed_precision": "no", "use_cpu": True,
                    "deepspeed_config": {"zero_stage": 2, "gradient_clipping": 0.05}}, fh)
p = run(["test", "--config_file", dpath, "--main_process_port", "0"], env=HF, code=0)
check("Test is a success!" in p.stdout, "accel test with DeepSpeed clipping 0.05: " + p.stdout + p.stderr)
# A DeepSpeed config file with optimizer and scheduler blocks (the program passes Accelerate's dummies; the reference
# uses the same file on one process), and one that fixes the batch size per process (no one-process comparison).
for name, ds, expect in (("blocks", {"zero_optimization": {"stage": 3}, "gradient_accumulation_steps": 2,
                                     "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}},
                                     "scheduler": {"type": "WarmupDecayLR", "params": {
                                         "warmup_num_steps": 1, "total_num_steps": "auto"}},
                                     "train_micro_batch_size_per_gpu": "auto", "gradient_clipping": 0.05},
                          "equal to one process"),
                         ("fixed batch", {"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": 8,
                                          "train_batch_size": 16}, "fixes the batch size per process (8)")):
    dsfile = os.path.join(tmp, "ds file.json")  # a space in the name: the plan carries the path
    with open(dsfile, "w") as fh:
        json.dump(ds, fh)
    p = run(["test", "-n", "2", "--use_deepspeed", "--deepspeed_config_file", dsfile, "--main_process_port", "0"],
            env=HF, code=0)
    check(expect in p.stdout and "Test is a success!" in p.stdout,
          "accel test with a DeepSpeed file (%s): %s%s" % (name, p.stdout, p.stderr))
for classes, model in (("gpt_block", "gpt"), ("gpt_block,gpt_embeddings_and_head", "gpt"),
                       ("embedding,transformer_encoder_layer", "tokens"), ("conv2d,layer_norm", "image"),
                       ("linear", "mlp"), ("batch_norm", "image_bn"), ("LlamaDecoderLayer", "llama"),
                       ("Qwen2DecoderLayer", "qwen2"), ("GPT2Block", None)):
    fpath = os.path.join(tmp, "wrap.yaml")
    with open(fpath, "w") as fh:
        yaml.safe_dump({"distributed_type": "FSDP", "num_processes": 2, "mixed_precision": "no", "use_cpu": True,
                        "fsdp_config": {"fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                                        "fsdp_transformer_layer_cls_to_wrap": classes,
                                        "fsdp_sharding_strategy": "FULL_SHARD"}}, fh)
    p = run(["test", "--config_file", fpath, "--main_process_port", "0"], env=HF, code=0 if model else 1)
    if model is None:  # a Python class name: no accel model has it, and the message says so (not "linear, tanh")
        check('no model with layers of every type in ["GPT2Block"]' in p.stderr and "gpt_block" in p.stderr,
              "accel test wrapping GPT2Block: " + p.stdout + p.stderr)
    elif model.endswith("_bn"):  # each process normalizes its own batch: no one-process comparison
        check("model %s" % model in p.stdout and "not compared with one process" in p.stdout and
              "Test is a success!" in p.stdout, "accel test wrapping %s: %s%s" % (classes, p.stdout, p.stderr))
    else:
        check("model %s" % model in p.stdout and "equal to one process" in p.stdout and "Test is a success!" in p.stdout,
              "accel test wrapping %s (model %s): %s%s" % (classes, model, p.stdout, p.stderr))
p = run(["launch", "-n", "1", "--zero_stage", "3", "sh", "-c", "echo RAN"], env=HF, code=2)
check("--zero_stage needs --use_deepspeed" in p.stderr and "RAN" not in p.stdout, "a DeepSpeed flag alone: " + p.stderr)
p = run(["launch", "-n", "1", "--use_fsdp", "--use_deepspeed", "true"], env=HF, code=2)
check("exclude each other" in p.stderr, "two engines: " + p.stderr)
p = run(["launch", "-n", "1", "--use_deepspeed", "--zero_stage", "2", "--gradient_clipping", "0.5", "sh", "-c",
         "echo ENV $ACCELERATE_USE_DEEPSPEED $ACCELERATE_DEEPSPEED_ZERO_STAGE $ACCELERATE_GRADIENT_CLIPPING"], env=HF, code=0)
check("ENV true 2 0.5" in p.stdout, "DeepSpeed flags exported: " + p.stdout)
# --parallelism_config_* flags: exported as accelerate launch exports them, with the switch (issue 33).
p = run(["launch", "-n", "1", "--parallelism_config_dp_replicate_size", "1", "--parallelism_config_dp_shard_size=1",
         "sh", "-c", "echo ENV $ACCELERATE_USE_PARALLELISM_CONFIG $PARALLELISM_CONFIG_DP_REPLICATE_SIZE "
         "$PARALLELISM_CONFIG_DP_SHARD_SIZE ${PARALLELISM_CONFIG_TP_SIZE:-unset}"], env=HF, code=0)
check("ENV true 1 1 unset" in p.stdout, "parallelism flags exported: " + p.stdout + p.stderr)
p = run(["launch", "-n", "1", "--parallelism_config_tp_size", "0", "true"], env=HF, code=2)
check("--parallelism_config_tp_size: expected an integer in 1..4096" in p.stderr, "a bad parallelism size: " + p.stderr)
# A flag whose value was forgotten swallows the program: the message says which flag took what (issue 42.5).
p = run(["launch", "-n", "1", "--use_deepspeed", "--zero_stage", "prog.py"], env=HF, code=2)
check('--zero_stage took "prog.py" as its value' in p.stderr and "--zero_stage=VALUE" in p.stderr,
      "a swallowed command: " + p.stderr)
p = run(["test", "--help"], code=0)
check("usage: accel test" in p.stdout, "help: " + p.stdout)

# ---- Docs: every command's --help has its place in the command reference ----------------------------------
# scripts/docs.sh writes each command's --help, as the built program prints it, where the page says
# <!-- accel-help: CMD -->; a command missing there would be missing from the site.
# ---- compile settings: --dynamo_* flags (config/dynamo.hpp) --------------------------------------
show_dynamo = "echo DYNAMO=$ACCELERATE_DYNAMO_BACKEND,$ACCELERATE_DYNAMO_MODE,$ACCELERATE_DYNAMO_USE_FULLGRAPH"
p = run(["launch", "--dynamo_backend", "eager", "--dynamo_mode", "max-autotune", "--dynamo_use_fullgraph", "sh", "-c",
         show_dynamo], code=0)
check("DYNAMO=EAGER,max-autotune,True" in p.stdout and "warning" not in p.stderr, "--dynamo_backend eager: " + p.stdout + p.stderr)
p = run(["launch", "--dynamo_backend", "inductor", "sh", "-c", show_dynamo], code=0)
check("DYNAMO=INDUCTOR," in p.stdout and "warning: --dynamo_backend: \"inductor\" compiles the model with torch.compile"
      in p.stderr, "--dynamo_backend inductor exported with a warning: " + p.stdout + p.stderr)
p = run(["launch", "--dynamo_backend", "turbo", "sh", "-c", "echo RAN"], code=2)
check("expected one of Accelerate's dynamo backends" in p.stderr and "RAN" not in p.stdout, "bad backend: " + p.stderr)
# ... and libaccel refuses the compiling backend by name when an accelerator is created under it.
create = os.path.join(os.path.dirname(os.path.abspath(__file__)), "create_accelerator.py")
dyn_out = os.path.join(tmp, "dynamo")
os.makedirs(dyn_out)
run(["launch", "--dynamo_backend", "inductor", sys.executable, create, BUILD, dyn_out], code=0)
r0 = json.load(open(os.path.join(dyn_out, "rank0.json")))
check(r0["status"] == "ACCEL_ERR_UNIMPLEMENTED" and r0["message"].startswith("ACCELERATE_DYNAMO_BACKEND: \"INDUCTOR\""),
      "accelerator under --dynamo_backend inductor: %s" % r0)
run(["launch", "--dynamo_backend", "eager", sys.executable, create, BUILD, dyn_out], code=0)
r0 = json.load(open(os.path.join(dyn_out, "rank0.json")))
check(r0["status"] == "ACCEL_OK" and r0["config"]["dynamo_backend"] == "eager", "accelerator under eager: %s" % r0)

# ---- --enable_cpu_affinity: disjoint CPU blocks, OMP_NUM_THREADS matching ----------------------------------------
allowed = sorted(os.sched_getaffinity(0))
show_cpus = "echo CPUS=$RANK:$(grep Cpus_allowed_list /proc/self/status | cut -f2):$OMP_NUM_THREADS:$ACCELERATE_CPU_AFFINITY"
if len(allowed) >= 2:
    p = run(["launch", "-n", "2", "--main_process_port", "0", "--enable_cpu_affinity", "sh", "-c", show_cpus], code=0)
    got = dict(m.split(":", 1) for m in re.findall(r"CPUS=(\S+)", p.stdout))
    half = len(allowed) // 2 + len(allowed) % 2

    sets = {}
    for rank, rest in got.items():
        cpus_text, threads, flag = rest.split(":")
        cpus = set()
        for part in cpus_text.split(","):
            lo, _, hi = part.partition("-")
            cpus.update(range(int(lo), int(hi or lo) + 1))
        sets[rank] = cpus
        check(threads == str(len(cpus)) and flag == "1", "rank %s: OMP_NUM_THREADS %s for CPUs %s" % (rank, threads, cpus))
    check(sorted(sets) == ["0", "1"] and not (sets["0"] & sets["1"]) and sets["0"] | sets["1"] == set(allowed)
          and len(sets["0"]) == half, "--enable_cpu_affinity blocks: %s of %s\n%s" % (sets, allowed, p.stdout + p.stderr))
    # the config file's enable_cpu_affinity does the same
    aff = os.path.join(tmp, "affinity.yaml")
    with open(aff, "w") as fh:
        fh.write("distributed_type: MULTI_CPU\nnum_processes: 2\nuse_cpu: true\nenable_cpu_affinity: true\n")
    p = run(["launch", "--config_file", aff, "--main_process_port", "0", "sh", "-c", show_cpus], code=0)
    check(p.stdout.count("CPUS=") == 2 and "warning" not in p.stderr and len(set(re.findall(r"CPUS=\d+:([^:]+):", p.stdout))) == 2,
          "enable_cpu_affinity from the file: " + p.stdout + p.stderr)
# More processes than CPUs: no disjoint sets, a warning, not pinned.
p = run(["launch", "-n", str(len(allowed) + 1), "--main_process_port", "0", "--enable_cpu_affinity", "true"], code=0)
check("cannot have disjoint CPU sets" in p.stderr, "affinity with too many processes: " + p.stderr)

reference = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "reference",
                              "commands.md")).read()
commands = re.findall(r"(?m)^  ([a-z-]+)  ", run(["--help"], code=0).stdout)
check(len(commands) >= 6, "accel --help lists the commands: %s" % commands)
for cmd in commands:
    run([cmd, "--help"], code=0)
    check("<!-- accel-help: %s -->" % cmd in reference,
          "docs/reference/commands.md has no <!-- accel-help: %s --> for the command's --help" % cmd)

subprocess.run(["rm", "-rf", tmp])
if failures:
    print("\n\n".join(failures))
    print("test_cli: %d failed" % len(failures))
    sys.exit(1)
print("test_cli: all checks passed")
