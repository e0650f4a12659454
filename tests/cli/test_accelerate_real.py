#!/usr/bin/env python3
"""accel's config files and launcher against the real Hugging Face Accelerate 0.24.1 (its unmodified package source,
tests/peers/ or ../shared/peers/; not a re-creation), on Debian's python3-torch:

A. config files the real 0.24.1 writes (ClusterConfig.to_yaml_file / to_json_file with the values each answer of its
   `accelerate config` questionnaire can give, and write_basic_config), and files in Accelerate 1.x's layout (1.x
   needs torch >= 2: those cases are written from its source, see each), are read by `accel launch`: keys accel does
   not use are warnings, values it uses reach the workers as Accelerate's launcher exports them, and what accel
   cannot do (Megatron-LM, TPU, MS-AMP, mpirun, ...) is an error naming the key;
B1. files `accel config` writes are read by the real 0.24.1 loader (load_config_from_file), with the values accel
   meant (what `accel env` shows for the same file);
B2. the environment `accel launch` gives its workers is the one the real `accelerate launch` gives for the same flags
   or config file, key by key, but for the differences docs/guides/launching.md lists, which DIFFERENCES below
   asserts: a new difference fails, and so does a listed one that went away.

Usage: test_accelerate_real.py BUILD_DIR [PEER_DIR]. Skips (exit 77) when this python has no torch or the peer is
missing."""
import copy
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.abspath(sys.argv[1])
ACCEL = os.path.join(BUILD, "bin", "accel")
PY = sys.executable
DUMP = os.path.join(HERE, "dump_env.py")
REAL_LAUNCH = os.path.join(HERE, "accelerate_launch_real.py")

try:
    import torch  # noqa: F401  (Accelerate 0.24.1 needs it)
    import yaml
except ImportError as e:
    print("SKIP: %s has no %s (Debian: python3-torch, python3-yaml)" % (PY, e.name))
    sys.exit(77)
candidates = sys.argv[2:3] + [os.path.join(REPO, "tests", "peers", "accelerate-0.24.1"),
                              os.path.join(os.path.dirname(REPO), "shared", "peers", "accelerate-0.24.1")]
PEER = next((c for c in candidates if os.path.isfile(os.path.join(c, "accelerate", "__init__.py"))), None)
if PEER is None:
    print("SKIP: Accelerate 0.24.1's source is not in any of %s" % candidates)
    sys.exit(77)
sys.path.insert(0, PEER)
from accelerate.commands.config.config_args import ClusterConfig, load_config_from_file  # noqa: E402
from accelerate.commands.config.default import write_basic_config  # noqa: E402

failures = []
tmp = tempfile.mkdtemp(prefix="accel_real_")


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


def base_env():
    """The launchers' environment: nothing of Accelerate's, no default config file, OpenBLAS's kernels named (else
    accel launch would add OPENBLAS_CORETYPE on a CPU OpenBLAS does not know, which is accel's own)."""
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("ACCELERATE_", "FSDP_", "MEGATRON_LM_", "TORCHELASTIC_")) and
         k not in ("HF_HOME", "XDG_CACHE_HOME", "OMP_NUM_THREADS", "PYTHONPATH", "MASTER_ADDR", "MASTER_PORT",
                   "RANK", "LOCAL_RANK", "WORLD_SIZE", "CUDA_VISIBLE_DEVICES")}
    e["HF_HOME"] = os.path.join(tmp, "no_hf_home")
    e["PYTHONDONTWRITEBYTECODE"] = "1"
    if "OPENBLAS_CORETYPE" not in e:
        out = subprocess.run([ACCEL, "env"], stdout=subprocess.PIPE, universal_newlines=True, env=e).stdout
        m = re.search(r"OPENBLAS_CORETYPE=(\w+) set before", out)
        if m:
            e["OPENBLAS_CORETYPE"] = m.group(1)
    return e


BASE = base_env()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


counter = [0]


def launch(cmd, args):
    """Runs `cmd args... dump_env.py OUT`; returns (process, {rank: the variables the launcher set or changed})."""
    counter[0] += 1
    out = os.path.join(tmp, "env%d" % counter[0])
    os.makedirs(out)
    p = subprocess.run(cmd + args + [DUMP, out], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, env=BASE, cwd=tmp, timeout=180)
    envs = {}
    for name in os.listdir(out):
        with open(os.path.join(out, name)) as f:
            env = json.load(f)
        envs[int(name[4:-5])] = {k: v for k, v in env.items() if BASE.get(k) != v}
    return p, envs


def accel_launch(args):
    return launch([ACCEL, "launch"], args + ["--", PY])  # accelerate launch runs a script with its python


def real_launch(args):
    return launch([PY, REAL_LAUNCH, PEER], args)


def warned_keys(stderr, path):
    return set(re.findall(r"warning: %s: ([\w.]+): " % re.escape(path), stderr))


# ==== A. Accelerate's own files, read by accel launch =============================================================

def questionnaire_0241(**answers):
    """ClusterConfig's arguments as 0.24.1's get_cluster_input (commands/config/cluster.py) passes them when every
    question takes its default; `answers` replace some."""
    kw = dict(compute_environment="LOCAL_MACHINE", distributed_type="NO", num_processes=1, gpu_ids=None,
              mixed_precision="no", downcast_bf16="no", machine_rank=0, num_machines=1, main_process_ip=None,
              main_process_port=None, main_training_function="main", deepspeed_config={}, fsdp_config={},
              megatron_lm_config={}, ipex_config={}, use_cpu=False, rdzv_backend="static", same_network=True,
              commands=None, command_file=None, tpu_env=[], tpu_name=None, tpu_vm=None, tpu_zone=None,
              tpu_use_sudo=False, tpu_use_cluster=False, dynamo_config={}, debug=False)
    kw.update(answers)
    return kw


def questionnaire_1x(**answers):
    """What Accelerate 1.x's get_cluster_input passes ClusterConfig with every default answer, after its to_dict()
    (None values and empty sections left out), from its source (src/accelerate/commands/config/cluster.py and
    config_args.py, main branch after v1.14.0): 1.x drops ipex_config and adds enable_cpu_affinity, fp8_config,
    mpirun_config and parallelism_config."""
    d = dict(compute_environment="LOCAL_MACHINE", distributed_type="NO", num_processes=1, mixed_precision="no",
             downcast_bf16="no", machine_rank=0, num_machines=1, main_training_function="main", use_cpu=False,
             rdzv_backend="static", same_network=True, tpu_env=[], tpu_use_sudo=False, tpu_use_cluster=False,
             debug=False, enable_cpu_affinity=False)
    d.update(answers)
    return d


def write_0241(name, kwargs):
    """The file in both formats, written by 0.24.1's own ClusterConfig (and read back by its loader)."""
    paths = []
    for ext in (".yaml", ".json"):
        path = os.path.join(tmp, name + ext)
        cfg = ClusterConfig(**copy.deepcopy(kwargs))
        (cfg.to_yaml_file if ext == ".yaml" else cfg.to_json_file)(path)
        load_config_from_file(path)
        paths.append(path)
    return paths


def write_1x(name, d):
    """1.x's to_yaml_file (yaml.safe_dump, sorted keys) and to_json_file (2-space indents, sorted keys)."""
    paths = []
    for ext in (".yaml", ".json"):
        path = os.path.join(tmp, name + ext)
        with open(path, "w") as f:
            f.write(yaml.safe_dump(d) if ext == ".yaml" else json.dumps(d, indent=2, sort_keys=True) + "\n")
        paths.append(path)
    return paths


def accepted(name, paths, env, warnings=(), nproc=1, port=True):
    """accel launch reads each file: exit 0, `nproc` workers, `env` in every worker (None: not set), a warning for
    exactly the keys `warnings`."""
    for path in paths:
        p, envs = accel_launch(["--config_file", path] + (["--main_process_port", str(free_port())] if port else []))
        if not check(p.returncode == 0, "A %s: accel launch --config_file %s: exit %d\n%s\n%s"
                     % (name, path, p.returncode, open(path).read(), p.stderr)):
            continue
        check(len(envs) == nproc, "A %s: %d workers, expected %d" % (name, len(envs), nproc))
        for rank, e in envs.items():
            for k, v in env.items():
                check(e.get(k) == v, "A %s (%s) rank %d: %s=%r, expected %r" % (name, path, rank, k, e.get(k), v))
        check(warned_keys(p.stderr, path) == set(warnings), "A %s (%s): warnings for %s, expected %s\n%s"
              % (name, path, sorted(warned_keys(p.stderr, path)), sorted(warnings), p.stderr))


def refused(name, paths, fragments):
    """What accel cannot run: an error naming the file and the key (fragments), nothing started."""
    for path in paths:
        p, envs = accel_launch(["--config_file", path])
        check(p.returncode == 1 and not envs and all(f in p.stderr for f in [path + ": "] + fragments),
              "A %s: accel launch --config_file %s: exit %d, expected 1 naming %s\n%s"
              % (name, path, p.returncode, fragments, p.stderr))


CPU = {"ACCELERATE_USE_CPU": "True"}
# 0.24.1's questionnaire, one file per kind of machine and engine (each value as its question can give it).
accepted("0.24.1 no distributed training, CPU", write_0241("q_no_cpu", questionnaire_0241(
    use_cpu=True, ipex_config={"ipex": False})), dict(CPU, ACCELERATE_MIXED_PRECISION="no", WORLD_SIZE="1"))
accepted("0.24.1 one GPU, fp16, dynamo", write_0241("q_no_gpu", questionnaire_0241(
    gpu_ids="all", mixed_precision="fp16", dynamo_config={
        "dynamo_backend": "INDUCTOR", "dynamo_mode": "max-autotune", "dynamo_use_fullgraph": True,
        "dynamo_use_dynamic": False})),
    {"ACCELERATE_MIXED_PRECISION": "fp16", "ACCELERATE_DYNAMO_BACKEND": "INDUCTOR",
     "ACCELERATE_DYNAMO_MODE": "max-autotune", "ACCELERATE_DYNAMO_USE_FULLGRAPH": "True",
     "ACCELERATE_DYNAMO_USE_DYNAMIC": "False", "CUDA_VISIBLE_DEVICES": None}, ["dynamo_config.dynamo_backend"])
accepted("0.24.1 multi-CPU", write_0241("q_multi_cpu", questionnaire_0241(
    distributed_type="MULTI_CPU", use_cpu=True, debug=True, ipex_config={"ipex": True}, num_processes=2,
    mixed_precision="bf16")),
    dict(CPU, ACCELERATE_MIXED_PRECISION="bf16", ACCELERATE_DEBUG_MODE="true", WORLD_SIZE="2"), ["ipex_config.ipex"],
    nproc=2)
accepted("0.24.1 multi-CPU, machine 1 of 2", write_0241("q_multi_node", questionnaire_0241(
    distributed_type="MULTI_CPU", use_cpu=True, num_machines=2, machine_rank=1, main_process_ip="10.1.2.3",
    main_process_port=29555, same_network=False, rdzv_backend="c10d", num_processes=4, ipex_config={"ipex": False})),
    dict(CPU, MASTER_ADDR="10.1.2.3", MASTER_PORT="29555", WORLD_SIZE="4", GROUP_RANK="1", LOCAL_WORLD_SIZE="2"),
    ["rdzv_backend"], nproc=2, port=False)
accepted("0.24.1 multi-GPU, fp8", write_0241("q_multi_gpu", questionnaire_0241(
    distributed_type="MULTI_GPU", gpu_ids="0,1", num_processes=2, mixed_precision="fp8")),
    {"CUDA_VISIBLE_DEVICES": "0,1", "ACCELERATE_MIXED_PRECISION": "fp8", "ACCELERATE_USE_CPU": "False"}, nproc=2)
accepted("0.24.1 DeepSpeed ZeRO-3 with offload", write_0241("q_ds3", questionnaire_0241(
    distributed_type="DEEPSPEED", num_processes=2, gpu_ids="all", mixed_precision="bf16", deepspeed_config={
        "zero_stage": 3, "offload_optimizer_device": "cpu", "offload_param_device": "nvme",
        "offload_param_nvme_path": "/nvme", "gradient_accumulation_steps": 4, "gradient_clipping": 1.0,
        "zero3_save_16bit_model": True, "zero3_init_flag": False})),
    {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3",
     "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE": "cpu", "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE": "nvme",
     "ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "4", "ACCELERATE_GRADIENT_CLIPPING": "1.0",
     "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL": "true", "ACCELERATE_DEEPSPEED_ZERO3_INIT": "false",
     "ACCELERATE_MIXED_PRECISION": "bf16", "ACCELERATE_CONFIG_DS_FIELDS":
         "gradient_accumulation_steps,gradient_clipping,offload_optimizer_device,offload_param_device,"
         "offload_param_nvme_path,zero3_init_flag,zero3_save_16bit_model,zero_stage,mixed_precision"},
    ["deepspeed_config.offload_param_nvme_path"], nproc=2)
accepted("0.24.1 DeepSpeed JSON file, 2 machines", write_0241("q_ds_json", questionnaire_0241(
    distributed_type="DEEPSPEED", num_processes=4, num_machines=2, main_process_ip="10.0.0.9",
    main_process_port=29777, mixed_precision=None, deepspeed_config={
        "deepspeed_config_file": "/etc/ds.json", "zero3_init_flag": True, "deepspeed_multinode_launcher": "pdsh",
        "deepspeed_hostfile": "/job/hostfile", "deepspeed_exclusion_filter": "node3"})),
    {"ACCELERATE_DEEPSPEED_CONFIG_FILE": "/etc/ds.json", "ACCELERATE_DEEPSPEED_ZERO3_INIT": "true",
     "ACCELERATE_MIXED_PRECISION": "no", "ACCELERATE_DEEPSPEED_ZERO_STAGE": None},
    ["deepspeed_config.deepspeed_multinode_launcher", "deepspeed_config.deepspeed_hostfile",
     "deepspeed_config.deepspeed_exclusion_filter"], nproc=2, port=False)
accepted("0.24.1 DeepSpeed, the JSON file question's default answer", write_0241("q_ds_none", questionnaire_0241(
    distributed_type="DEEPSPEED", num_processes=2, mixed_precision=None, deepspeed_config={
        "deepspeed_config_file": "none", "zero3_init_flag": False})),
    {"ACCELERATE_DEEPSPEED_CONFIG_FILE": None, "ACCELERATE_USE_DEEPSPEED": "true"}, nproc=2)
for strategy in (1, 2, 3, 4, 5):  # the sharding strategy question gives a number: int(answer) + 1
    accepted("0.24.1 FSDP strategy %d" % strategy, write_0241("q_fsdp%d" % strategy, questionnaire_0241(
        distributed_type="FSDP", num_processes=2, gpu_ids="all", mixed_precision="bf16", fsdp_config={
            "fsdp_sharding_strategy": strategy, "fsdp_offload_params": False,
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "fsdp_transformer_layer_cls_to_wrap": "BertLayer",
            "fsdp_backward_prefetch_policy": "BACKWARD_PRE", "fsdp_state_dict_type": "SHARDED_STATE_DICT",
            "fsdp_forward_prefetch": False, "fsdp_use_orig_params": True, "fsdp_cpu_ram_efficient_loading": True,
            "fsdp_sync_module_states": True})),
        {"ACCELERATE_USE_FSDP": "true", "FSDP_SHARDING_STRATEGY": str(strategy), "FSDP_OFFLOAD_PARAMS": "false",
         "FSDP_AUTO_WRAP_POLICY": "TRANSFORMER_BASED_WRAP", "FSDP_TRANSFORMER_CLS_TO_WRAP": "BertLayer",
         "FSDP_BACKWARD_PREFETCH": "BACKWARD_PRE", "FSDP_STATE_DICT_TYPE": "SHARDED_STATE_DICT",
         "FSDP_FORWARD_PREFETCH": "false", "FSDP_USE_ORIG_PARAMS": "true",
         "FSDP_CPU_RAM_EFFICIENT_LOADING": "true", "FSDP_SYNC_MODULE_STATES": "true"}, nproc=2)
accepted("0.24.1 FSDP size-based wrap", write_0241("q_fsdp_size", questionnaire_0241(
    distributed_type="FSDP", num_processes=2, gpu_ids="all", mixed_precision="no", fsdp_config={
        "fsdp_sharding_strategy": 3, "fsdp_offload_params": True, "fsdp_auto_wrap_policy": "SIZE_BASED_WRAP",
        "fsdp_min_num_params": 100000000, "fsdp_backward_prefetch_policy": "NO_PREFETCH",
        "fsdp_state_dict_type": "FULL_STATE_DICT", "fsdp_forward_prefetch": True, "fsdp_use_orig_params": False,
        "fsdp_cpu_ram_efficient_loading": False, "fsdp_sync_module_states": False})),
    {"FSDP_SHARDING_STRATEGY": "3", "FSDP_OFFLOAD_PARAMS": "true", "FSDP_AUTO_WRAP_POLICY": "SIZE_BASED_WRAP",
     "FSDP_MIN_NUM_PARAMS": "100000000", "FSDP_BACKWARD_PREFETCH": "NO_PREFETCH",
     "FSDP_STATE_DICT_TYPE": "FULL_STATE_DICT", "FSDP_SYNC_MODULE_STATES": "false"}, nproc=2)
# TPU answers (downcast_bf16 and tpu_use_sudo are the text typed) under distributed_type NO, which the questionnaire
# would not combine with them, so that accel reads the values rather than stopping at distributed_type TPU.
accepted("0.24.1 TPU answers' values", write_0241("q_tpu_values", questionnaire_0241(
    mixed_precision="bf16", downcast_bf16="yes", main_training_function="train", tpu_use_cluster=True,
    tpu_name="pod", tpu_zone="us-central1-a", tpu_use_sudo="yes", commands=["pip install -e ."],
    tpu_vm=["vm1", "vm2"], tpu_env=["A=1"])), {"ACCELERATE_MIXED_PRECISION": "bf16"},
    ["downcast_bf16", "main_training_function", "tpu_use_cluster", "tpu_name", "tpu_zone", "tpu_use_sudo",
     "commands", "tpu_vm", "tpu_env"])
for mp in ("no", "fp16", "bf16", "fp8"):  # JSON in a file named .yaml, as write_basic_config writes it
    path = os.path.join(tmp, "basic_%s.yaml" % mp)
    write_basic_config(mp, path)
    accepted("0.24.1 write_basic_config(%s)" % mp, [path], dict(CPU, ACCELERATE_MIXED_PRECISION=mp))
# What accel cannot do: an error naming the key (docs/guides/launching.md: "are errors").
# Megatron-LM: megatron_lm_config exported as the launcher exports it (str() of each loaded value); the library maps
# or refuses each value when an accelerator is created (config/megatron_lm_plugin.cpp).
MEGATRON_FILE = {"megatron_lm_tp_degree": 2, "megatron_lm_sequence_parallelism": True, "megatron_lm_pp_degree": 2,
                 "megatron_lm_num_micro_batches": 2, "megatron_lm_recompute_activations": True,
                 "megatron_lm_use_distributed_optimizer": True, "megatron_lm_gradient_clipping": 1.0}
accepted("0.24.1 Megatron-LM", write_0241("q_megatron", questionnaire_0241(
    distributed_type="MEGATRON_LM", num_processes=2, megatron_lm_config=MEGATRON_FILE)),
    {"ACCELERATE_USE_MEGATRON_LM": "true", "MEGATRON_LM_TP_DEGREE": "2", "MEGATRON_LM_SEQUENCE_PARALLELISM": "True",
     "MEGATRON_LM_PP_DEGREE": "2", "MEGATRON_LM_NUM_MICRO_BATCHES": "2", "MEGATRON_LM_RECOMPUTE_ACTIVATIONS": "True",
     "MEGATRON_LM_USE_DISTRIBUTED_OPTIMIZER": "True", "MEGATRON_LM_GRADIENT_CLIPPING": "1.0"}, nproc=2)
refused("0.24.1 TPU", write_0241("q_tpu", questionnaire_0241(
    distributed_type="TPU", mixed_precision="bf16", downcast_bf16="yes", tpu_use_cluster=True, tpu_name="pod")),
    ["distributed_type: TPU is not yet supported"])
refused("0.24.1 multi-XPU", write_0241("q_xpu", questionnaire_0241(
    distributed_type="MULTI_XPU", num_processes=2, ipex_config={"use_xpu": True})),
    ["distributed_type: MULTI_XPU is not yet supported"])

# Accelerate 1.x, from its source (see questionnaire_1x).
FSDP1 = {"fsdp_version": 1, "fsdp_reshard_after_forward": "SHARD_GRAD_OP", "fsdp_offload_params": False,
         "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "fsdp_transformer_layer_cls_to_wrap": "GPT2Block",
         "fsdp_backward_prefetch": "BACKWARD_PRE", "fsdp_state_dict_type": "FULL_STATE_DICT",
         "fsdp_forward_prefetch": False, "fsdp_use_orig_params": True, "fsdp_cpu_ram_efficient_loading": True,
         "fsdp_sync_module_states": True, "fsdp_activation_checkpointing": False}
# FSDP1: 1.x asks the sharding strategy and stores the name under fsdp_reshard_after_forward.
accepted("1.x FSDP1", write_1x("x_fsdp1", questionnaire_1x(
    distributed_type="FSDP", num_processes=2, gpu_ids="all", mixed_precision="bf16", fsdp_config=FSDP1)),
    {"FSDP_VERSION": "1", "FSDP_SHARDING_STRATEGY": "SHARD_GRAD_OP", "FSDP_RESHARD_AFTER_FORWARD": None,
     "FSDP_BACKWARD_PREFETCH": "BACKWARD_PRE", "FSDP_ACTIVATION_CHECKPOINTING": "false",
     "FSDP_USE_ORIG_PARAMS": "true"}, nproc=2)
accepted("1.x FSDP2", write_1x("x_fsdp2", questionnaire_1x(
    distributed_type="FSDP", num_processes=2, mixed_precision="bf16", fsdp_config={
        "fsdp_version": 2, "fsdp_reshard_after_forward": True, "fsdp_offload_params": False,
        "fsdp_auto_wrap_policy": "SIZE_BASED_WRAP", "fsdp_min_num_params": 1000000,
        "fsdp_state_dict_type": "SHARDED_STATE_DICT", "fsdp_cpu_ram_efficient_loading": True,
        "fsdp_activation_checkpointing": True})),
    {"FSDP_VERSION": "2", "FSDP_RESHARD_AFTER_FORWARD": "true", "FSDP_ACTIVATION_CHECKPOINTING": "true",
     "FSDP_MIN_NUM_PARAMS": "1000000"}, nproc=2)
# fp8 with TE: override_linear_precision is a tuple in 1.x's answers, a list in the file.
accepted("1.x fp8 (TE)", write_1x("x_fp8", questionnaire_1x(
    use_cpu=True, mixed_precision="fp8", fp8_config={
        "backend": "TE", "use_autocast_during_eval": False, "margin": 0, "interval": 1, "fp8_format": "E5M2",
        "amax_history_length": 1024, "amax_compute_algorithm": "max",
        "override_linear_precision": [False, True, False]})),
    dict(CPU, ACCELERATE_MIXED_PRECISION="fp8", ACCELERATE_FP8_BACKEND="TE", ACCELERATE_FP8_FORMAT="E5M2",
         ACCELERATE_FP8_AMAX_HISTORY_LEN="1024", ACCELERATE_FP8_AMAX_COMPUTE_ALGO="max",
         ACCELERATE_FP8_OVERRIDE_DGRAD="true", ACCELERATE_FP8_USE_AUTOCAST_DURING_EVAL="false"))
accepted("1.x multi-GPU with CPU affinity and regional compilation", write_1x("x_affinity", questionnaire_1x(
    distributed_type="MULTI_GPU", num_processes=2, gpu_ids="all", enable_cpu_affinity=True, dynamo_config={
        "dynamo_backend": "INDUCTOR", "dynamo_mode": "default", "dynamo_use_fullgraph": False,
        "dynamo_use_dynamic": False, "dynamo_use_regional_compilation": True})),
    {"ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION": "True", "ACCELERATE_CPU_AFFINITY": "1"}, ["dynamo_config.dynamo_backend"],
    nproc=2)
accepted("1.x write_basic_config", write_1x("x_basic", dict(
    compute_environment="LOCAL_MACHINE", mixed_precision="bf16", use_cpu=True, num_processes=1,
    distributed_type="NO", debug=False, enable_cpu_affinity=False, downcast_bf16=False, machine_rank=0,
    main_training_function="main", num_machines=1, rdzv_backend="static", same_network=False,
    tpu_use_cluster=False, tpu_use_sudo=False)), dict(CPU, ACCELERATE_MIXED_PRECISION="bf16"))
# 1.x's examples/config_yaml_templates: only the keys that matter, quoted as there (fp8.yaml uses the launch flags'
# amax_history_len spelling and a list; multi_node.yaml a quoted address).
accepted("1.x template fp8.yaml", write_1x("t_fp8", dict(
    distributed_type="NO", mixed_precision="fp8", fp8_config={
        "backend": "TE", "amax_history_len": 1024, "fp8_format": "E4M3", "interval": 1, "margin": 0,
        "override_linear_precision": [False, False, False], "use_autocast_during_eval": False})),
    {"ACCELERATE_FP8_AMAX_HISTORY_LEN": "1024", "ACCELERATE_FP8_FORMAT": "E4M3"})
accepted("1.x template multi_node.yaml", write_1x("t_multi_node", dict(
    distributed_type="MULTI_GPU", machine_rank=0, main_process_ip="1234", main_process_port=9999, num_machines=2,
    num_processes=8, rdzv_backend="static", same_network=False)),
    {"MASTER_ADDR": "1234", "MASTER_PORT": "9999", "WORLD_SIZE": "8"}, nproc=4, port=False)
refused("1.x fp8 MS-AMP", write_1x("x_msamp", questionnaire_1x(
    mixed_precision="fp8", fp8_config={"backend": "MSAMP", "optimization_level": "O2"})),
    ["fp8_config.backend", "accel emulates TransformerEngine (TE) only"])
refused("1.x fp8 torchao", write_1x("x_ao", questionnaire_1x(
    mixed_precision="fp8", fp8_config={"backend": "AO", "enable_fsdp_float8_all_gather": True,
                                       "pad_inner_dim": True})), ["fp8_config.backend"])
refused("1.x mpirun", write_1x("x_mpirun", questionnaire_1x(
    distributed_type="MULTI_CPU", use_cpu=True, num_processes=4,
    mpirun_config={"mpirun_hostfile": "/home/u/hostfile"})), ["mpirun_config.mpirun_hostfile"])
refused("1.x DeepSpeed MoE", write_1x("x_moe", questionnaire_1x(
    distributed_type="DEEPSPEED", num_processes=2, deepspeed_config={
        "zero_stage": 2, "zero3_init_flag": False, "deepspeed_moe_layer_cls_names": "MixtralSparseMoeBlock"})),
    ["deepspeed_config.deepspeed_moe_layer_cls_names", "mixture-of-experts"])
# sp_size (Ulysses) is built: exported as accelerate launch exports it.
accepted("1.x parallelism config", write_1x("x_parallel", questionnaire_1x(
    distributed_type="FSDP", num_processes=4, fsdp_config={"fsdp_version": 2}, parallelism_config={
        "parallelism_config_dp_replicate_size": 1, "parallelism_config_dp_shard_size": 2,
        "parallelism_config_tp_size": 1, "parallelism_config_cp_size": 1,
        "parallelism_config_sp_size": 2})),
    {"ACCELERATE_USE_PARALLELISM_CONFIG": "true", "PARALLELISM_CONFIG_SP_SIZE": "2",
     "PARALLELISM_CONFIG_DP_SHARD_SIZE": "2"}, nproc=4)
refused("1.x XLA", write_1x("x_xla", questionnaire_1x(distributed_type="XLA")),
        ["distributed_type: XLA is not yet supported"])

# ==== B1. accel config's files, read by the real 0.24.1 loader ====================================================


def accel_config(args, stdin=None):
    p = subprocess.run([ACCEL, "config"] + args, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, env=BASE, timeout=60)
    check(p.returncode == 0, "accel config %s: exit %d\n%s" % (args, p.returncode, p.stderr))


def accel_view(path):
    """What accel reads from the file: `accel env`'s "\t- key: value" lines, values as YAML flow text."""
    out = subprocess.run([ACCEL, "env", "--config_file", path], stdout=subprocess.PIPE, universal_newlines=True,
                         env=BASE).stdout
    return {m.group(1): yaml.safe_load(m.group(2)) for m in re.finditer(r"^\t- (\w+): (.*)$", out, re.M)}


def real_view(path):
    cfg = load_config_from_file(path)
    return {k: getattr(v, "value", v) for k, v in vars(cfg).items()}


def read_by_real(name, path, meant):
    """The real loader reads `path`; every value accel reads is the one it reads; `meant` (what the answers asked
    for) among them."""
    try:
        real = real_view(path)
    except Exception as e:  # noqa: BLE001 (the loader's own errors: unknown keys, bad values)
        check(False, "B1 %s: Accelerate 0.24.1 cannot read %s: %s: %s\n%s"
              % (name, path, type(e).__name__, e, open(path).read()))
        return
    mine = accel_view(path)
    check(bool(mine), "B1 %s: accel env shows no keys for %s" % (name, path))
    for k, v in mine.items():
        # an empty section is None in 0.24.1's loader ({} after __post_init__): the same meaning
        check(real.get(k) == v or (v is None and real.get(k) == {}),
              "B1 %s: %s: accel reads %r, Accelerate 0.24.1 %r" % (name, k, v, real.get(k)))
    for k, v in meant.items():
        check(real.get(k) == v, "B1 %s: %s is %r in Accelerate 0.24.1, accel meant %r" % (name, k, real.get(k), v))


ACCEL_FILES = {}
for ext in (".yaml", ".json"):
    path = os.path.join(tmp, "accel_default%s" % ext)  # write_basic_config writes JSON, whatever the name
    accel_config(["default", "--config_file", path, "--mixed_precision", "fp16"])
    read_by_real("config default", path, {"mixed_precision": "fp16", "use_cpu": True, "num_processes": 1,
                                           "distributed_type": "NO"})
    answers = {  # (stdin, what the answers ask for); the questions are in src/cli/config_command.cpp
        "no_cpu": ("0\nyes\n0\n", {"distributed_type": "NO", "use_cpu": True, "mixed_precision": "no"}),
        "multi_cpu": ("1\n\nyes\n2\n2\nno\nno\nno\n", {"distributed_type": "MULTI_CPU", "num_processes": 2,
                                                   "use_cpu": True, "debug": True, "mixed_precision": "bf16"}),
        "multi_gpu_2_machines": ("2\n2\n1\n10.0.0.5\n29600\nno\nno\n4\n0,1\n1\nno\nno\nno\n", {
            "distributed_type": "MULTI_GPU", "num_machines": 2, "machine_rank": 1, "main_process_ip": "10.0.0.5",
            "main_process_port": 29600, "same_network": False, "num_processes": 4, "gpu_ids": "0,1",
            "mixed_precision": "fp16", "use_cpu": False}),
        "deepspeed": ("1\n\nno\n2\n0\nyes\n3\n2\nyes\n0.5\n", {"distributed_type": "DEEPSPEED", "deepspeed_config": {
            "zero_stage": 3, "gradient_accumulation_steps": 2, "gradient_clipping": 0.5,
            "offload_optimizer_device": "none", "offload_param_device": "none", "zero3_init_flag": False,
            "zero3_save_16bit_model": False}}),
        "megatron": ("2\n\nno\n4\n\n0\nno\nno\nyes\n2\nno\n2\n4\n\n0.5\n", {
            "distributed_type": "MEGATRON_LM", "megatron_lm_config": {
                "megatron_lm_tp_degree": 2, "megatron_lm_sequence_parallelism": False, "megatron_lm_pp_degree": 2,
                "megatron_lm_num_micro_batches": 4, "megatron_lm_recompute_activations": True,
                "megatron_lm_use_distributed_optimizer": False, "megatron_lm_gradient_clipping": 0.5}}),
        "fsdp": ("1\n\nno\n2\n2\nno\nyes\n1\n0\nlinear\n\n", {"distributed_type": "FSDP", "fsdp_config": {
            "fsdp_sharding_strategy": 2, "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_transformer_layer_cls_to_wrap": "linear", "fsdp_sync_module_states": True,
            "fsdp_offload_params": False, "fsdp_state_dict_type": "FULL_STATE_DICT"}}),
    }
    for name, (stdin, meant) in answers.items():
        path = os.path.join(tmp, "accel_%s%s" % (name, ext))
        accel_config(["--config_file", path], stdin)
        read_by_real("questionnaire " + name, path, meant)
        ACCEL_FILES[name + ext] = path
    # update rewrites a file 0.24.1 wrote (its FSDP answers) with every key: 0.24.1 still reads it.
    path = write_0241("upd", questionnaire_0241(distributed_type="FSDP", num_processes=2, fsdp_config={
        "fsdp_sharding_strategy": 1, "fsdp_backward_prefetch_policy": "BACKWARD_PRE",
        "fsdp_cpu_ram_efficient_loading": True, "fsdp_sync_module_states": True}))[ext == ".json"]
    accel_config(["update", "--config_file", path])
    read_by_real("update of a 0.24.1 file", path, {"distributed_type": "FSDP", "fsdp_config": {
        "fsdp_sharding_strategy": 1, "fsdp_backward_prefetch_policy": "BACKWARD_PRE",
        "fsdp_cpu_ram_efficient_loading": True, "fsdp_sync_module_states": True}})
# fp8: 0.24.1 has no fp8_config key (1.x's); its loader refuses such a file (docs/guides/launching.md lists it).
path = os.path.join(tmp, "accel_fp8.yaml")
accel_config(["--config_file", path], "0\nyes\n3\n1\nno\n1\n2\n16\n0\n")
try:
    load_config_from_file(path)
    check(False, "B1 fp8: Accelerate 0.24.1 read fp8_config (docs/guides/launching.md says it refuses the key): update the page")
except ValueError as e:
    check("fp8_config" in str(e), "B1 fp8: 0.24.1's refusal names fp8_config: %s" % e)

# ==== B2. The workers' environment: accel launch and the real accelerate launch ====================================

# torchrun (torch.distributed.run, which Accelerate's multi-GPU, FSDP and DeepSpeed launchers run in-process) sets
# these; accel launch has no elastic agent.
TORCHRUN_ONLY = {"NCCL_ASYNC_ERROR_HANDLING": "accelerate",  # torch 1.13's default for NCCL (2.x: TORCH_NCCL_...)
                 "TORCHELASTIC_ERROR_FILE": "accelerate",  # the agent's error file per worker
                 "TORCHELASTIC_USE_AGENT_STORE": "accelerate"}  # rank 0 must host the store under accel launch
# accel launch starts every process itself; Accelerate's simple launcher (--cpu, or a NO / MULTI_CPU file) starts
# one process and leaves more to mpirun, so these are accel's alone there.
RANKS = {k: "accel" for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                              "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME",
                              "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID")}
# accel sets ACCELERATE_USE_CPU always; Accelerate's torchrun launchers leave it unset (read as false).
USE_CPU = {"ACCELERATE_USE_CPU": "accel"}
# Accelerate's FSDP launcher exports its flag defaults for the settings not given; accel exports only what is given
# and the library applies its defaults (1.x's: they differ from 0.24.1's, e.g. use_orig_params).
FSDP_DEFAULTS = ("FSDP_SHARDING_STRATEGY", "FSDP_OFFLOAD_PARAMS", "FSDP_MIN_NUM_PARAMS", "FSDP_FORWARD_PREFETCH",
                 "FSDP_USE_ORIG_PARAMS", "FSDP_CPU_RAM_EFFICIENT_LOADING", "FSDP_SYNC_MODULE_STATES")


def fsdp_defaults(*keys):
    return {k: "accelerate" for k in keys}


def real_file(name, kwargs):
    return write_0241("b2_" + name, kwargs)[0]


T1 = ["--num_cpu_threads_per_process", "1"]
CASES = [  # (name, accel launch flags, accelerate launch flags, the agreed differences {key: who sets it alone,
    #        or "value" when both set it differently})
    ("--cpu -n 2 bf16", ["--cpu", "--num_processes", "2", "--mixed_precision", "bf16"] + T1, None, RANKS),
    ("-n 2 (--multi_gpu) fp16, gradient accumulation", ["--num_processes", "2", "--mixed_precision", "fp16",
                                                        "--gradient_accumulation_steps", "4"] + T1,
     ["--multi_gpu", "--num_processes", "2", "--mixed_precision", "fp16", "--gradient_accumulation_steps", "4"] + T1,
     # Accelerate's launcher exports the flag for DeepSpeed only; accel for every mode (the library reads it in all)
     dict(TORCHRUN_ONLY, ACCELERATE_GRADIENT_ACCUMULATION_STEPS="accel", **USE_CPU)),
    ("--use_fsdp with every 0.24.1 FSDP flag", ["--use_fsdp", "--num_processes", "2", "--mixed_precision", "bf16",
                                                "--fsdp_sharding_strategy", "2", "--fsdp_offload_params", "true",
                                                "--fsdp_auto_wrap_policy", "SIZE_BASED_WRAP",
                                                "--fsdp_min_num_params", "2000",
                                                "--fsdp_backward_prefetch_policy", "BACKWARD_POST",
                                                "--fsdp_state_dict_type", "FULL_STATE_DICT",
                                                "--fsdp_forward_prefetch", "true", "--fsdp_use_orig_params", "true",
                                                "--fsdp_cpu_ram_efficient_loading", "false",
                                                "--fsdp_sync_module_states", "false"] + T1, None,
     dict(TORCHRUN_ONLY, **USE_CPU)),
    ("--use_fsdp alone", ["--use_fsdp", "--num_processes", "2"] + T1, None,
     dict(TORCHRUN_ONLY, **USE_CPU, **fsdp_defaults(*FSDP_DEFAULTS))),
    ("--use_deepspeed flags", ["--use_deepspeed", "--num_processes", "2", "--mixed_precision", "bf16", "--zero_stage", "2",
                               "--gradient_accumulation_steps", "4", "--gradient_clipping", "1.0",
                               "--offload_optimizer_device", "CPU", "--offload_param_device", "none",
                               "--zero3_init_flag", "false", "--zero3_save_16bit_model", "false"] + T1, None,
     dict(TORCHRUN_ONLY, **USE_CPU)),
    ("0.24.1 MULTI_CPU file", ["--config_file", real_file("multi_cpu", questionnaire_0241(
        distributed_type="MULTI_CPU", use_cpu=True, debug=True, num_processes=2, mixed_precision="bf16"))] + T1,
     None, RANKS),
    ("0.24.1 MULTI_GPU file, dynamo, GPU ids", ["--config_file", real_file("multi_gpu", questionnaire_0241(
        distributed_type="MULTI_GPU", gpu_ids="0,1", num_processes=2, mixed_precision="fp16", dynamo_config={
            "dynamo_backend": "INDUCTOR", "dynamo_mode": "reduce-overhead", "dynamo_use_fullgraph": True,
            "dynamo_use_dynamic": True}))] + T1, None, dict(TORCHRUN_ONLY, **USE_CPU)),
    ("0.24.1 FSDP file", ["--config_file", real_file("fsdp", questionnaire_0241(
        distributed_type="FSDP", num_processes=2, gpu_ids="all", mixed_precision="bf16", fsdp_config={
            "fsdp_sharding_strategy": 2, "fsdp_offload_params": False,
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "fsdp_transformer_layer_cls_to_wrap": "BertLayer",
            "fsdp_backward_prefetch_policy": "BACKWARD_PRE", "fsdp_state_dict_type": "SHARDED_STATE_DICT",
            "fsdp_forward_prefetch": False, "fsdp_use_orig_params": True, "fsdp_cpu_ram_efficient_loading": True,
            "fsdp_sync_module_states": True}))] + T1, None,
     dict(TORCHRUN_ONLY, **USE_CPU, **fsdp_defaults("FSDP_MIN_NUM_PARAMS"))),
    ("0.24.1 DeepSpeed file", ["--config_file", real_file("ds", questionnaire_0241(
        distributed_type="DEEPSPEED", num_processes=2, gpu_ids="all", mixed_precision="bf16", deepspeed_config={
            "zero_stage": 3, "offload_optimizer_device": "cpu", "offload_param_device": "cpu",
            "gradient_accumulation_steps": 2, "gradient_clipping": 1.0, "zero3_save_16bit_model": True,
            "zero3_init_flag": True}))] + T1, None, dict(TORCHRUN_ONLY, **USE_CPU)),
    ("accel config's FSDP file", ["--config_file", ACCEL_FILES["fsdp.yaml"]] + T1, None,
     dict(TORCHRUN_ONLY, **USE_CPU, **fsdp_defaults("FSDP_MIN_NUM_PARAMS", "FSDP_FORWARD_PREFETCH",
                                                    "FSDP_USE_ORIG_PARAMS", "FSDP_CPU_RAM_EFFICIENT_LOADING"))),
    ("accel config's DeepSpeed file", ["--config_file", ACCEL_FILES["deepspeed.json"]] + T1, None,
     dict(TORCHRUN_ONLY, **USE_CPU)),
    ("accel config's MULTI_CPU file", ["--config_file", ACCEL_FILES["multi_cpu.yaml"]] + T1, None, RANKS),
    ("--use_megatron_lm with every 0.24.1 Megatron-LM flag",
     ["--use_megatron_lm", "--num_processes", "2", "--megatron_lm_tp_degree", "2", "--megatron_lm_pp_degree", "1",
      "--megatron_lm_num_micro_batches", "2", "--megatron_lm_sequence_parallelism", "true",
      "--megatron_lm_recompute_activations", "True", "--megatron_lm_use_distributed_optimizer", "false",
      "--megatron_lm_gradient_clipping", "0"] + T1, None, dict(TORCHRUN_ONLY, **USE_CPU)),
    ("--use_megatron_lm alone", ["--use_megatron_lm", "--num_processes", "2"] + T1, None,
     dict(TORCHRUN_ONLY, **USE_CPU)),
    ("0.24.1 Megatron-LM file", ["--config_file", real_file("megatron", questionnaire_0241(
        distributed_type="MEGATRON_LM", num_processes=2, gpu_ids="all", megatron_lm_config=dict(
            MEGATRON_FILE, megatron_lm_tp_degree=1, megatron_lm_gradient_clipping=0.5)))] + T1, None,
     dict(TORCHRUN_ONLY, **USE_CPU)),
]


# accel launch's own channels to its children, not settings: the folder where the ranks tell its watchdog their
# timeout (src/cli/launch_watchdog.hpp), and the rendezvous token it generates for a single-machine job
# (src/distributed/rdzv_wire.hpp; Accelerate's store takes anyone).
LAUNCH_INTERNAL = ("ACCEL_LAUNCH_STATE_DIR", "ACCEL_RDZV_TOKEN")


def differences(mine, real):
    d = {}
    for k in (set(mine) | set(real)) - set(LAUNCH_INTERNAL):
        if k not in real:
            d[k] = "accel"
        elif k not in mine:
            d[k] = "accelerate"
        elif mine[k] != real[k]:
            d[k] = "value"
    return d


for name, accel_args, real_args, agreed in CASES:
    port = ["--main_process_port", str(free_port())]
    pa, mine = accel_launch(accel_args + port)
    pr, real = real_launch((accel_args if real_args is None else real_args) + port)
    if not check(pa.returncode == 0 and pr.returncode == 0 and mine and real,
                 "B2 %s: exit %d (accel) %d (accelerate)\n%s\n%s" % (name, pa.returncode, pr.returncode,
                                                                    pa.stderr, pr.stderr[-3000:])):
        continue
    check(len(mine) == 2 and len(real) == (1 if agreed is RANKS else 2),
          "B2 %s: %d accel workers, %d accelerate workers" % (name, len(mine), len(real)))
    for rank in sorted(real):
        got = differences(mine[rank], real[rank])
        if got != agreed:
            detail = "\n".join("  %s: accel %r, accelerate %r" % (k, mine[rank].get(k), real[rank].get(k))
                               for k in sorted(set(got) ^ set(agreed) | {k for k in got if got[k] != agreed.get(k)}))
            check(False, "B2 %s, rank %d: the differences are not the agreed ones:\n%s" % (name, rank, detail))
        same = sorted(k for k in real[rank] if k not in got)
        print("B2 %s, rank %d: %d variables equal (%s), %d differences as agreed"
              % (name, rank, len(same), " ".join(k for k in same if k.startswith(("ACCELERATE_", "FSDP_", "MEGATRON_LM_"))),
                 len(got)))

# OMP_NUM_THREADS by default (docs/guides/launching.md): Accelerate's simple launcher gives the one process it starts the physical
# cores (when more than 1), torchrun 1; accel launch gives each process the online cores / its processes here.
port = ["--main_process_port", str(free_port())]
pa, mine = accel_launch(["--cpu", "--num_processes", "2"] + port)
pr, real = real_launch(["--cpu", "--num_processes", "2"] + port)
import psutil  # noqa: E402  (Accelerate 0.24.1 needs it)
physical = psutil.cpu_count(logical=False) or 1
check(mine and all(e.get("OMP_NUM_THREADS") == str(max(1, os.cpu_count() // 2)) for e in mine.values()),
      "OMP_NUM_THREADS from accel launch -n 2: %s" % [e.get("OMP_NUM_THREADS") for e in mine.values()])
check(real and real[0].get("OMP_NUM_THREADS") == str(physical if physical > 1 else 1),
      "OMP_NUM_THREADS from accelerate launch --cpu: %s" % [e.get("OMP_NUM_THREADS") for e in real.values()])

# ==== C. Accelerators created under the real launchers' environment ================================================
# A program the real `accelerate launch` starts creates its accelerator from what that launcher exports, defaults
# included: torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE: the agent hosts the store at MASTER_PORT, so rank 0
# must not bind it), FSDP_MIN_NUM_PARAMS whatever the wrap policy, ACCELERATE_DEEPSPEED_CONFIG_FILE=none (the
# questionnaire's default answer), and 1.x's FSDP_SHARDING_STRATEGY / FSDP_RESHARD_AFTER_FORWARD. Each was refused
# at accelerator creation before (issue 43). The worker creates one through libaccel's C API and reports.
CREATE = os.path.join(HERE, "create_accelerator.py")


def created(name, results, expect):
    """Every rank created its accelerator; `expect` maps a path in the effective configuration to its value."""
    if not check(results, "C %s: no worker reported" % name):
        return
    before = len(failures)
    for rank, r in sorted(results.items()):
        if not check(r["status"] == "ACCEL_OK", "C %s, rank %d: %s: %s" % (name, rank, r["status"], r["message"])):
            continue
        for path, want in expect.items():
            got = r["config"]
            for k in path.split("."):
                got = got.get(k) if isinstance(got, dict) else None
            check(got == want, "C %s, rank %d: %s is %r, expected %r" % (name, rank, path, got, want))
    if len(failures) == before:
        print("C %s: %d worker(s) created their accelerator" % (name, len(results)))


def real_created(name, args, expect, nproc=2):
    counter[0] += 1
    out = os.path.join(tmp, "create%d" % counter[0])
    os.makedirs(out)
    try:  # (a rank refused while its peer waits for it can leave torchrun waiting: the timeout is a failure)
        p = subprocess.run([PY, REAL_LAUNCH, PEER] + args + ["--main_process_port", str(free_port()), CREATE, BUILD,
                                                              out], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, env=BASE, cwd=tmp, timeout=90)
        rc, err = p.returncode, p.stderr[-3000:]
    except subprocess.TimeoutExpired as e:
        rc, err = "timeout", str(e.stderr)[-3000:]
    results = {int(f[4:-5]): json.load(open(os.path.join(out, f))) for f in os.listdir(out)}
    check(len(results) == nproc, "C %s: %d workers reported, expected %d (exit %s)\n%s"
          % (name, len(results), nproc, rc, err))
    created(name, results, expect)


def env_created(name, env, expect):
    """One process under an environment written from Accelerate 1.x's launcher source (1.x needs torch 2)."""
    counter[0] += 1
    out = os.path.join(tmp, "create%d" % counter[0])
    os.makedirs(out)
    subprocess.run([PY, CREATE, BUILD, out], env=dict(BASE, **env), cwd=tmp, timeout=120)
    created(name, {int(f[4:-5]): json.load(open(os.path.join(out, f))) for f in os.listdir(out)}, expect)


real_created("0.24.1 --multi_gpu -n 2 (torchrun's agent store)", ["--multi_gpu", "--num_processes", "2"] + T1,
             {"process.world_size": 2, "fsdp_plugin": None})
real_created("0.24.1 --use_fsdp alone (FSDP_MIN_NUM_PARAMS=100000000.0, no wrap policy)",
             ["--use_fsdp", "--num_processes", "2"] + T1,
             {"fsdp_plugin.sharding_strategy": "FULL_SHARD", "fsdp_plugin.auto_wrap_policy": "NO_WRAP"})
real_created("0.24.1 --use_fsdp, transformer wrap", ["--use_fsdp", "--num_processes", "2", "--fsdp_sharding_strategy",
                                                      "2", "--fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP",
                                                      "--fsdp_transformer_layer_cls_to_wrap", "gpt_block"] + T1,
             {"fsdp_plugin.sharding_strategy": "SHARD_GRAD_OP",
              "fsdp_plugin.transformer_cls_names_to_wrap": ["gpt_block"]})
real_created("0.24.1 --use_fsdp, size wrap", ["--use_fsdp", "--num_processes", "2", "--fsdp_auto_wrap_policy",
                                               "SIZE_BASED_WRAP", "--fsdp_min_num_params", "2000"] + T1,
             {"fsdp_plugin.auto_wrap_policy": "SIZE_BASED_WRAP", "fsdp_plugin.min_num_params": 2000})
real_created("0.24.1 DeepSpeed file, deepspeed_config_file: none", ["--config_file", write_0241(
    "c_ds_none", questionnaire_0241(distributed_type="DEEPSPEED", num_processes=2, deepspeed_config={
        "deepspeed_config_file": "none", "zero3_init_flag": False, "zero_stage": 2}))[0]] + T1,
             {"deepspeed_plugin.zero_stage": 2})
real_created("0.24.1 --use_megatron_lm, pipeline of 2", ["--use_megatron_lm", "--num_processes", "2",
                                                       "--megatron_lm_pp_degree", "2", "--megatron_lm_num_micro_batches",
                                                       "4", "--megatron_lm_gradient_clipping", "0"] + T1,
             # (the effective configuration has no pp_size: parallelism_config appears only when given, here by the
             # plugin, with Megatron's data-parallel size world / pp)
             {"parallelism_config.dp_replicate_size": 1, "parallelism_config.tp_size": 1})
# The real launcher's defaults (MEGATRON_LM_GRADIENT_CLIPPING=1.0: Megatron's clipping inside the optimizer step) and
# num_micro_batches without a pipeline (Megatron's micro-batches at pp_degree 1): accepted.
real_created("0.24.1 --use_megatron_lm, its default clipping, micro-batches at pp 1",
             ["--use_megatron_lm", "--num_processes", "2", "--megatron_lm_num_micro_batches", "2"] + T1,
             {"process.world_size": 2})
real_created("0.24.1 --use_deepspeed flags", ["--use_deepspeed", "--num_processes", "2", "--zero_stage", "3",
                                              "--gradient_accumulation_steps", "2"] + T1,
             {"deepspeed_plugin.zero_stage": 3, "gradient_accumulation_steps": 2})

# Accelerate 1.x's launcher (src/accelerate/utils/launch.py, prepare_multi_gpu_env and prepare_deepspeed_cmd_env, main
# branch after v1.14.0) with its flag defaults (commands/launch.py): FSDP_VERSION, FSDP_SHARDING_STRATEGY (FULL_SHARD),
# FSDP_RESHARD_AFTER_FORWARD (str(...).lower(): "true", or an FSDP1 strategy from a config file), FSDP_MIN_NUM_PARAMS
# (str(int(1e8))) and the booleans are always exported. Its plugin takes FSDP_SHARDING_STRATEGY with version 1 (the
# reshard variable only when that one is unset) and ignores it with version 2.
FSDP_1X = {"ACCELERATE_USE_FSDP": "true", "ACCELERATE_MIXED_PRECISION": "no", "ACCELERATE_DYNAMO_BACKEND": "NO",
           "ACCELERATE_DYNAMO_MODE": "default", "ACCELERATE_DYNAMO_USE_FULLGRAPH": "False",
           "ACCELERATE_DYNAMO_USE_DYNAMIC": "False", "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION": "False",
           "FSDP_VERSION": "1", "FSDP_SHARDING_STRATEGY": "FULL_SHARD", "FSDP_RESHARD_AFTER_FORWARD": "true",
           "FSDP_OFFLOAD_PARAMS": "false", "FSDP_MIN_NUM_PARAMS": "100000000", "FSDP_FORWARD_PREFETCH": "false",
           "FSDP_USE_ORIG_PARAMS": "true", "FSDP_CPU_RAM_EFFICIENT_LOADING": "true",
           "FSDP_SYNC_MODULE_STATES": "true", "FSDP_ACTIVATION_CHECKPOINTING": "false"}
env_created("1.x --use_fsdp alone (FSDP1)", FSDP_1X, {"fsdp_plugin.fsdp_version": 1,
                                                       "fsdp_plugin.sharding_strategy": "FULL_SHARD"})
env_created("1.x FSDP1 file, fsdp_reshard_after_forward: SHARD_GRAD_OP (the strategy variable wins, as in 1.x)",
            dict(FSDP_1X, FSDP_RESHARD_AFTER_FORWARD="shard_grad_op", FSDP_AUTO_WRAP_POLICY="TRANSFORMER_BASED_WRAP",
                 FSDP_TRANSFORMER_CLS_TO_WRAP="gpt_block"),
            {"fsdp_plugin.sharding_strategy": "FULL_SHARD", "fsdp_plugin.transformer_cls_names_to_wrap": ["gpt_block"]})
env_created("1.x FSDP1, only the reshard variable (1.x's fallback)",
            {k: v for k, v in dict(FSDP_1X, FSDP_RESHARD_AFTER_FORWARD="shard_grad_op").items()
             if k != "FSDP_SHARDING_STRATEGY"}, {"fsdp_plugin.sharding_strategy": "SHARD_GRAD_OP"})
env_created("1.x FSDP2, reshard_after_forward false", dict(FSDP_1X, FSDP_VERSION="2", FSDP_RESHARD_AFTER_FORWARD="false",
                                                           FSDP_STATE_DICT_TYPE="SHARDED_STATE_DICT"),
            {"fsdp_plugin.fsdp_version": 2, "fsdp_plugin.reshard_after_forward": False})
env_created("1.x FSDP2, size wrap", dict(FSDP_1X, FSDP_VERSION="2", FSDP_AUTO_WRAP_POLICY="SIZE_BASED_WRAP",
                                         FSDP_MIN_NUM_PARAMS="2000"),
            {"fsdp_plugin.reshard_after_forward": True, "fsdp_plugin.min_num_params": 2000})
env_created("1.x --use_deepspeed, config file none", {
    "ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_MIXED_PRECISION": "no", "ACCELERATE_CONFIG_DS_FIELDS": "",
    "ACCELERATE_DEEPSPEED_ZERO_STAGE": "2", "ACCELERATE_DEEPSPEED_CONFIG_FILE": "none"},
            {"deepspeed_plugin.zero_stage": 2})

if failures:
    print("\n\n".join(failures))
    print("\n%d failure(s); files in %s" % (len(failures), tmp))
    sys.exit(1)
shutil.rmtree(tmp, ignore_errors=True)  # kept above, for a failure's files
print("accel against Accelerate 0.24.1 (%s): all checks passed" % PEER)
