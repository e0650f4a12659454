#!/usr/bin/env python3
"""Pipeline parallelism over processes against one process (dist_pp under `accel launch`, Gloo).

equivalence: pp --pp stages x dp_replicate --dp (pp x dp processes, --micro micro-batches, --schedule, --chunks) train
  dist_pp's gpt with per-process batch --batch; one process trains it with batch --batch x --dp. Every parameter
  (each from the stage holding it; the replicas of a stage agree bit for bit) and every step's loss (averaged
  over the replicas) equal one process's within --tol. Both runs end with save_model: the pipeline's folder holds
  one process's files, names, shapes and order (the stages gathered on the main process), values within --tol,
  and they equal the parameters the stages hold. Without tp each rank built only its stage: at most 1/pp of one
  process's parameter elements plus the embeddings. The trained model's logits of a fixed prompt (forward through the
  stages) and its greedy tokens (generate), on every rank, are compared the same way.
  --megatron: the parallel run configured by megatron_lm_plugin instead (tp_degree --tp, pp_degree --pp,
  num_micro_batches --micro, gradient_clipping --clip; Megatron's data-parallel size world / (tp x pp), its 1F1B),
  with --pp 1 too (Megatron's micro-batches without a pipeline); one process then runs with megatron_lm_plugin's
  gradient_clipping --clip alone, which must change its training (the clipping is on).
resume: save_state / load_state under pp --pp x dp_replicate --dp (with --plugin: x dp_shard --dp under that sharding
  plugin, FULL_STATE_DICT) in one process's layout: a pipeline run saves after
  10 of 20 steps; loading that folder, the pipeline and one process (on the global batch) each train the last 10
  steps as the uninterrupted run did (every step's loss, averaged over the replicas, and every parameter within
  --tol); a one-process folder saved the same way loads onto the pipeline alike (with --plugin fsdp also one
  process's SHARDED_STATE_DICT folder, each stage reading its tensors' pieces).
  With --plugin zero1 / zero2 / zero3 (deepspeed_plugin): the pipeline's folder holds the files plain ZeRO on --dp
  processes writes (DeepSpeed's layout, the same names); resumed at the same mesh, on one process, and plain ZeRO's
  folder resumed on the pipeline.
  --sharded-state (with --plugin fsdp): the pipeline saves SHARDED_STATE_DICT instead, every rank its pieces under the
  whole model's names (rank{stage x W + r}.safetensors, one metadata.json); that folder is resumed at the same mesh,
  on one process, and under plain FSDP on --dp processes (no pipeline), each as the uninterrupted run.
"""
import argparse
import json
import os
import shutil
import struct
import sys
import tempfile
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_dist import check_close, env_base, launch_cmd, log, mpirun_cmd, run  # noqa: E402
from run_tp import tensors_of  # noqa: E402
from run_dist import run_machines  # noqa: E402


def read_rank(path):
    """({step: loss}, {name: [values]}) of one rank's dist_pp file."""
    losses, params = {}, {}
    for line in open(path):
        f = line.split()
        if f[0] == "loss":
            losses[int(f[1])] = float(f[2])
        elif f[0] == "param":
            params[f[1]] = [float(x) for x in f[2:]]
        elif f[0] in ("logits", "tokens"):  # the trained model's forward and generate: compared as parameters are
            params["<%s>" % f[0]] = [float(x) for x in f[1:]]
        elif f[0] == "sd":  # get_state_dict's whole model (every rank's the same): compared as parameters are
            params["<sd>" + f[1]] = [float(x) for x in f[2:]]
    return losses, params


class Ranks(list):
    """Every rank's (losses, params); under pp x tp also the folder save_model wrote (the ranks hold tp slices)."""
    model = None


def train(a, processes, prefix, batch, config, extra=None, node_dirs=None):
    """dist_pp on `processes` processes (one process when 1); returns every rank's (losses, params). `node_dirs`: the
    processes spread over that many "machines" of this host (accel launch each), each working in its own folder."""
    prog = os.path.join(a.bin, "tests", "distributed", "dist_pp")
    e = env_base()
    e["ACCEL_TEST_SAVE_MODEL"] = prefix + ".model"
    e.update(extra or {})
    if a.llama:
        e["ACCEL_TEST_LLAMA"] = "1"
    if a.sequential:
        e["ACCEL_TEST_SEQUENTIAL"] = "1"
    args = [prog, prefix, str(batch), str(a.steps), json.dumps(config)]
    if processes > 1 and a.cp > 1:
        e["ACCEL_TEST_CP"] = "1"
    if node_dirs:  # save_on_each_node: save_model's folder too is each node's own
        e["ACCEL_TEST_SAVE_MODEL"] = "model"
        machines = types.SimpleNamespace(np=processes, machines=len(node_dirs), bin=a.bin,
                                         timeout=a.timeout)
        run_machines(machines, args, e, cwds=node_dirs)
    elif processes > 1 and a.launcher == "mpirun":  # the mpi backend, asked for by name (a fallback would fail)
        config = dict(config, kwargs_handlers={"init_process_group": {"backend": "mpi"}})
        args[-1] = json.dumps(config)
        exports = sum((["-x", k] for k in sorted(e) if k.startswith("ACCEL_TEST_")), [])
        run(mpirun_cmd(processes) + exports + args, env=e, timeout=a.timeout)
    else:
        run(launch_cmd(a, processes) + args if processes > 1 else args, env=e, timeout=a.timeout)
    ranks = Ranks(read_rank("%s.%d.txt" % (prefix, r)) for r in range(processes))
    if a.tp > 1:  # compared through save_model's whole weights, one process's as well
        ranks.model = e["ACCEL_TEST_SAVE_MODEL"]
    return ranks


def saved_model(folder):
    """save_model's tensors: one model.safetensors, or (a pipeline: each stage writes its own) the numbered shards of
    transformers' sharded layout that model.safetensors.index.json names, each tensor in the shard the index says.
    Read with the format's own header here (no safetensors package needed)."""
    index = os.path.join(folder, "model.safetensors.index.json")
    if not os.path.exists(index):
        return tensors_of(os.path.join(folder, "model.safetensors"))
    weight_map = json.load(open(index))["weight_map"]
    shards = sorted(set(weight_map.values()))
    if shards != ["model-%05d-of-%05d.safetensors" % (i + 1, len(shards)) for i in range(len(shards))]:
        sys.exit("%s: the index names the shards %s" % (folder, shards))
    out = {}
    for shard in shards:
        for k, v in tensors_of(os.path.join(folder, shard)).items():
            if weight_map.get(k) != shard or k in out:
                sys.exit("%s: %s holds %s, which the index puts in %s" % (folder, shard, k, weight_map.get(k)))
            out[k] = v
    if sorted(out) != sorted(weight_map):
        sys.exit("%s: the index names %s, the shards hold %s" % (folder, sorted(weight_map), sorted(out)))
    return out


def merged(ranks, what):
    """Every parameter from the ranks that hold it; replicas must agree exactly. Under pp x tp the ranks hold
    tp slices (and their vocabulary columns of the logits): the whole weights save_model wrote instead."""
    if getattr(ranks, "model", None):
        return {k: list(v[1]) for k, v in saved_model(ranks.model).items()}
    out = {}
    for r, (_, params) in enumerate(ranks):
        for name, values in params.items():
            if name in out and out[name] != values:
                sys.exit("%s: rank %d's %s differs from another rank's copy" % (what, r, name))
            out[name] = values
    return out


# dist_pp's gpt: the embeddings' elements (wte 37 x 16, wpe 8 x 16), which the first stage holds beside its blocks
# (its llama: embed_tokens 37 x 16 alone).
EMBEDDINGS = (37 + 8) * 16
LLAMA_EMBEDDINGS = 37 * 16


def built_elements(prefix, processes):
    """Each rank's "built N": the parameter elements its model held as built, before prepare."""
    out = []
    for r in range(processes):
        out += [int(line.split()[1]) for line in open("%s.%d.txt" % (prefix, r)) if line.startswith("built ")]
    return out


def check_built_by_stage(a, tmp, what):
    """No whole model on any rank: each built only its stage (<= 1/pp of one process's model plus the embeddings).
    Under pp x tp the other stages' parameters keep their shapes on meta until prepare (stage_init.hpp), which the
    element count includes: unit PipelineStageInit.PipelineTimesTensorParallelKeepsShapesUntilPrepare checks it."""
    if a.tp > 1 or a.sequential:  # a JSON-spec model is built whole and cut at prepare
        return
    embeddings = LLAMA_EMBEDDINGS if a.llama else EMBEDDINGS
    whole, = built_elements(os.path.join(tmp, "one"), 1)
    for rank, n in enumerate(built_elements(os.path.join(tmp, "pp"), a.pp * a.dp * a.cp)):
        if n > whole / a.pp + embeddings:
            sys.exit("%s: rank %d built %d parameter elements, more than 1/%d of the whole %d plus the embeddings %d"
                     % (what, rank, n, a.pp, whole, embeddings))
    log("%s: elements built per rank %s, one process %d" % (
        what, built_elements(os.path.join(tmp, "pp"), a.pp * a.dp * a.cp), whole))


def with_cp(a, config):
    """pp x cp: each stage's sequence over --cp processes (sp_size: Ulysses on the same mesh axis)."""
    if a.cp > 1 and a.cp_strategy == "ulysses":
        config["parallelism_config"]["sp_size"] = a.cp
    elif a.cp > 1:
        config["parallelism_config"]["cp_size"] = a.cp
        config["parallelism_config"]["cp_handler"] = {"cp_comm_strategy": a.cp_strategy}


def without_logits(params):
    """All but the forward's logits, which dist_pp does not write under pp x cp (a forward takes a rank's part)."""
    return {k: v for k, v in params.items() if k != "<logits>"}


# --plugin: the sharding configs of pp x sharding.
SHARDING_PLUGINS = {
    "fsdp": {"fsdp_plugin": {"sharding_strategy": "FULL_SHARD", "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                             "transformer_cls_names_to_wrap": ["gpt_block"]}},
    "zero1": {"deepspeed_plugin": {"zero_stage": 1}},
    "zero2": {"deepspeed_plugin": {"zero_stage": 2}},
    "zero3": {"deepspeed_plugin": {"zero_stage": 3}},
}


def sharding_plugin(a, name):
    """SHARDING_PLUGINS[name], fsdp's wrapped blocks named as the model types them (the spec's transformer layers)."""
    out = json.loads(json.dumps(SHARDING_PLUGINS[name]))
    if a.sequential and "fsdp_plugin" in out:
        out["fsdp_plugin"]["transformer_cls_names_to_wrap"] = ["transformer_encoder_layer"]
    return out


def scenario_equivalence(a, tmp):
    one = {"megatron_lm_plugin": {"gradient_clipping": a.clip}} if a.megatron else {}
    if a.bf16:  # the same precision policy on one process: the plugin's engine over it, parameters computing in bf16
        one = dict(sharding_plugin(a, a.plugin), mixed_precision="bf16")
    (ref_losses, ref_params), = train(a, 1, os.path.join(tmp, "one"), a.batch * a.dp, one,
                                      {"ACCEL_TEST_SUMMON": "1"} if a.bf16 else None)
    if a.megatron:
        config = {"megatron_lm_plugin": {"tp_degree": a.tp, "pp_degree": a.pp, "num_micro_batches": a.micro,
                                         "gradient_clipping": a.clip}}
        if a.clip > 0:  # the comparison can fail: one process's training without the clipping differs
            (plain, _), = train(a, 1, os.path.join(tmp, "plain"), a.batch * a.dp, {})
            if max(abs(plain[s] - ref_losses[s]) for s in ref_losses) <= 1e-4:
                sys.exit("gradient_clipping %g does not change one process's losses: %s" % (a.clip, ref_losses))
    else:
        config = {"parallelism_config": {"pp_size": a.pp, "dp_replicate_size": a.dp, "tp_size": a.tp,
                                         "num_micro_batches": a.micro, "pp_schedule": a.schedule}}
    if a.chunks > 1:  # interleaved 1F1B: model chunks per stage
        config["parallelism_config"]["num_virtual_stages_per_pipeline_rank"] = a.chunks
    with_cp(a, config)
    what = "pp %d x dp %d x tp %d x cp %d (%s), %s, %d micro-batches" % (a.pp, a.dp, a.tp, a.cp, a.cp_strategy,
                                                                         a.schedule, a.micro)
    if a.plugin:  # pp x sharding: the stage's --dp processes shard it instead of replicating it
        config["parallelism_config"]["dp_replicate_size"] = 1
        config["parallelism_config"]["dp_shard_size"] = a.dp
        config.update(sharding_plugin(a, a.plugin))
        what += ", sharded (%s)" % a.plugin
        if a.bf16:
            config["mixed_precision"] = "bf16"
            what += ", bf16"
    if a.megatron:
        what = "megatron_lm_plugin (pp_degree %d, tp_degree %d, %d replicas, %d micro-batches), gradient_clipping %g" % (
            a.pp, a.tp, a.dp, a.micro, a.clip)
    ranks = train(a, a.pp * a.dp * a.tp * a.cp, os.path.join(tmp, "pp"), a.batch, config,
                  {"ACCEL_TEST_SHARDED": "1"} if a.plugin else None)
    check_built_by_stage(a, tmp, what)
    got = merged(ranks, what)
    if a.bf16:  # bf16 parameters: the losses and the greedy tokens (the weights' rounding noise is bf16's, not ours)
        ref_params, got = [{"<tokens>": p["<tokens>"]} for p in (ref_params, got)]
    if a.tp > 1:  # the ranks hold their vocabulary columns of the logits: compared through save_model's weights
        ref_params = {k: v for k, v in ref_params.items() if not k.startswith("<")}
    if a.cp > 1:  # no logits under cp (a forward takes each rank's part); generation runs whole, compared
        ref_params = without_logits(ref_params)
    if sorted(got) != sorted(ref_params):
        sys.exit("%s: the stages hold %s, one process %s" % (what, sorted(got), sorted(ref_params)))
    names = sorted(ref_params)
    check_close([x for n in names for x in ref_params[n]], [x for n in names for x in got[n]], a.tol,
                "%s: parameters after %d steps" % (what, a.steps))
    for name, values in got.items():  # get_state_dict: what the stage holding each parameter has, bit for bit
        if "<sd>" + name in got and got["<sd>" + name] != values:
            sys.exit("%s: get_state_dict's %s is not what the stage holding it has" % (what, name))
    steps = sorted(ref_losses)
    if any(sorted(losses) != steps for losses, _ in ranks):
        sys.exit("%s: a rank reported losses for other steps than %s" % (what, steps))
    mean = [sum(losses[s] for losses, _ in ranks) / len(ranks) for s in steps]
    check_close([ref_losses[s] for s in steps], mean, a.tol, "%s: losses (mean over the replicas)" % what)
    if a.bf16:
        return
    # The stages wrote their own shards (at least one each; the index by the main process), one process one file
    # (and so does a run without a pipeline).
    one, mine = tensors_of(os.path.join(tmp, "one.model", "model.safetensors")), saved_model(os.path.join(tmp, "pp.model"))
    wrote = sorted(os.listdir(os.path.join(tmp, "pp.model")))
    shards = [f for f in wrote if f.startswith("model-")]
    config_json = ["config.json"] if os.path.exists(os.path.join(tmp, "one.model", "config.json")) else []  # not a spec's
    if a.pp == 1:  # Megatron's micro-batches without a pipeline: one process's single file
        if wrote != sorted(config_json + ["model.safetensors"]):
            sys.exit("%s: save_model wrote %s, expected %s model.safetensors" % (what, wrote, config_json))
    elif len(shards) < a.pp or wrote != sorted(config_json + ["model.safetensors.index.json"] + shards):
        sys.exit("%s: save_model wrote %s, expected %s the index and at least %d shards" % (what, wrote, config_json, a.pp))
    if sorted((k, v[0]) for k, v in mine.items()) != sorted((k, v[0]) for k, v in one.items()):
        sys.exit("%s: save_model's names or shapes %s differ from one process's %s" %
                 (what, sorted((k, v[0]) for k, v in mine.items()), sorted((k, v[0]) for k, v in one.items())))
    check_close([x for v in one.values() for x in v[1]], [x for k in one for x in mine[k][1]], a.tol,
                "%s: save_model against one process's" % what)
    for name, values in got.items():
        if name in mine and list(mine[name][1]) != [float(struct.unpack("<f", struct.pack("<f", x))[0]) for x in values]:
            sys.exit("%s: save_model's %s is not what the stage holding it has" % (what, name))


def check_deepspeed_folder(folder, zero_folder, what):
    """save_state under pp x deepspeed_plugin: the files of plain ZeRO on the same dp size (DeepSpeed's names), and
    no whole-model files."""
    def files(d):
        return sorted(f for f in os.listdir(d) if not f.startswith("random_states_")) if os.path.isdir(d) else []
    got, want = files(folder), files(zero_folder)
    got_tag, want_tag = files(os.path.join(folder, "pytorch_model")), files(os.path.join(zero_folder, "pytorch_model"))
    if got != want or got_tag != want_tag or not [f for f in got_tag if f.endswith("_optim_states.pt")]:
        sys.exit("%s: save_state wrote %s and pytorch_model/%s; plain ZeRO %s and pytorch_model/%s" %
                 (what, got, got_tag, want, want_tag))


def check_stage_pieces(a, folder, what):
    """save_state's SHARDED_STATE_DICT under pp x fsdp: one rank file per (stage, shard rank), one metadata.json of
    the whole model's world, no whole-model files."""
    shards = a.pp * (a.dp // a.replicas) * a.cp * a.tp
    for sub in ("pytorch_model_fsdp_0", "optimizer_0"):
        d = os.path.join(folder, sub)
        files = sorted(os.listdir(d)) if os.path.isdir(d) else []
        want = sorted(["metadata.json"] + ["rank%d.safetensors" % r for r in range(shards)] +
                      (["state.bin"] if sub == "optimizer_0" else []))
        if files != want:
            sys.exit("%s: save_state's %s holds %s, expected %s" % (what, sub, files, want))
        if json.load(open(os.path.join(d, "metadata.json")))["world_size"] != shards:
            sys.exit("%s: %s/metadata.json's world_size is not %d" % (what, sub, shards))
    if any(f in os.listdir(folder) for f in ("model.safetensors", "optimizer.bin")):
        sys.exit("%s: save_state wrote whole-model files beside the pieces: %s" % (what, sorted(os.listdir(folder))))


def check_node_folders(a, folders, world, what):
    """save_on_each_node: every node's folder holds one process's whole files (the weights the same bytes on every node,
    whichever stage its writer holds; the optimizer's state is checked by loading the last node's on one process: its
    tensors pickled as views or as copies make different bytes) and the RNG states of its own processes."""
    per = world // len(folders)
    for k, d in enumerate(folders):
        files = sorted(os.listdir(d)) if os.path.isdir(d) else []
        want = ["model.safetensors", "optimizer.bin"] + ["random_states_%d.pkl" % r for r in range(k * per, (k + 1) * per)]
        if any(f not in files for f in want):
            sys.exit("%s: node %d's folder holds %s, expected %s among them" % (what, k, files, want))
    first = open(os.path.join(folders[0], "model.safetensors"), "rb").read()
    for k, d in enumerate(folders[1:], 1):
        if open(os.path.join(d, "model.safetensors"), "rb").read() != first:
            sys.exit("%s: node %d's model.safetensors differs from node 0's" % (what, k))


def scenario_resume(a, tmp):
    config = {"parallelism_config": {"pp_size": a.pp, "dp_replicate_size": a.dp, "tp_size": a.tp,
                                     "num_micro_batches": a.micro, "pp_schedule": a.schedule}}
    with_cp(a, config)
    full = a.steps
    half = full // 2
    pipe = "pp %d x dp %d" % (a.pp, a.dp) if a.dp > 1 else "pp %d" % a.pp
    pipe += " x tp %d" % a.tp if a.tp > 1 else ""
    pipe += " x cp %d (%s)" % (a.cp, a.cp_strategy) if a.cp > 1 else ""
    if a.plugin:  # pp x sharding: the stage's --dp processes shard it (FULL_STATE_DICT: one process's layout)
        config["parallelism_config"]["dp_replicate_size"] = a.replicas  # HSDP per stage when > 1
        config["parallelism_config"]["dp_shard_size"] = a.dp // a.replicas
        config.update(sharding_plugin(a, a.plugin))
        pipe += ", sharded (%s)" % a.plugin
        if a.sharded_state:
            config["fsdp_plugin"]["state_dict_type"] = "SHARDED_STATE_DICT"
            pipe += ", SHARDED_STATE_DICT"
    world = a.pp * a.dp * a.tp * a.cp

    def run_of(processes, name, cfg, extra):
        # The pipeline's replicas each take their share of one process's batch.
        if cfg and a.plugin:
            extra = dict(extra, ACCEL_TEST_SHARDED="1")
        return train(a, processes, os.path.join(tmp, name), a.batch if cfg else a.batch * a.dp, cfg, extra)

    def saved(name, processes, cfg):
        folder = os.path.join(tmp, name + ".state")
        ranks = run_of(processes, name, cfg, {"ACCEL_TEST_SAVE_AT": str(half), "ACCEL_TEST_SAVE_DIR": folder})
        return folder, ranks

    def mean_losses(ranks, steps):
        return [sum(losses[s] for losses, _ in ranks) / len(ranks) for s in steps]

    def resumed(name, processes, cfg, folder, whole, what):
        ranks = run_of(processes, name, cfg, {"ACCEL_TEST_LOAD": folder})
        check_close(mean_losses(whole, range(half, full)), mean_losses(ranks, range(full - half)), a.tol,
                    "%s: losses (mean over the replicas)" % what)
        want, got = merged(whole, what), merged(ranks, what)
        if a.cp > 1:
            want, got = without_logits(want), without_logits(got)
        if sorted(got) != sorted(want):
            sys.exit("%s: the parameters %s, the uninterrupted run's %s" % (what, sorted(got), sorted(want)))
        names = sorted(want)
        check_close([x for n in names for x in want[n]], [x for n in names for x in got[n]], a.tol,
                    "%s: parameters after %d more steps" % (what, full - half))

    def resumed_as(name, processes, batch, cfg, extra, whole, what, node_dirs=None):
        ranks = train(a, processes, os.path.join(tmp, name), batch, cfg, extra, node_dirs)
        check_close(mean_losses(whole, range(half, full)), mean_losses(ranks, range(full - half)), a.tol,
                    "%s: losses" % what)
        want, got = merged(whole, what), merged(ranks, what)
        names = sorted(n for n in want if not n.startswith("<"))
        check_close([x for n in names for x in want[n]], [x for n in names for x in got[n]], a.tol,
                    "%s: parameters after %d more steps" % (what, full - half))

    if a.nodes > 1:  # save_on_each_node: each node's local main process writes one process's files
        nodes = [os.path.join(tmp, "node%d" % k) for k in range(a.nodes)]
        for d in nodes:
            os.makedirs(d)
        cfg = dict(config, project_config={"save_on_each_node": True})
        sharded = {"ACCEL_TEST_SHARDED": "1"}
        # "ckpt" is relative: each node's own folder (its working folder), as on a node's local disk.
        node_run = train(a, world, os.path.join(tmp, "nodes"), a.batch, cfg,
                         dict(sharded, ACCEL_TEST_SAVE_AT=str(half), ACCEL_TEST_SAVE_DIR="ckpt"), nodes)
        folders = [os.path.join(d, "ckpt") for d in nodes]
        check_node_folders(a, folders, world, pipe)
        a.steps = full - half
        resumed_as("nodes_nodes", world, a.batch, cfg, dict(sharded, ACCEL_TEST_LOAD="ckpt"), node_run,
                   "%s, save_on_each_node on %d nodes -> the same" % (pipe, a.nodes), nodes)
        resumed_as("node_one", 1, a.batch * a.dp, {}, {"ACCEL_TEST_LOAD": folders[-1]}, node_run,
                   "%s, save_on_each_node: the last node's folder -> one process" % pipe)
        a.steps = full
        return
    pp_folder, pp_run = saved("pp", world, config)
    if a.sharded_state:
        check_stage_pieces(a, pp_folder, pipe)
        a.steps = full - half
        resumed("pp_pp", world, config, pp_folder, pp_run, "%s -> %s" % (pipe, pipe))
        resumed("pp_one", 1, {}, pp_folder, pp_run, "%s -> one process" % pipe)

        if a.dp == 2 and a.replicas == 1:  # another pp size on the same processes: pp 2 x pp, each stage unsharded
            other = json.loads(json.dumps(config))
            other["parallelism_config"].update(pp_size=2 * a.pp, dp_shard_size=1)
            resumed_as("pp_other", world, a.batch * a.dp, other, {"ACCEL_TEST_SHARDED": "1", "ACCEL_TEST_LOAD": pp_folder},
                       pp_run, "%s -> pp %d (fsdp 1)" % (pipe, 2 * a.pp))
        # Plain FSDP over --dp processes (no pipeline): the sharded loader of a folder saved without one.
        resumed_as("pp_fsdp", a.dp, a.batch, {"fsdp_plugin": config["fsdp_plugin"]},
                   {"ACCEL_TEST_SUMMON": "1", "ACCEL_TEST_LOAD": pp_folder}, pp_run, "%s -> fsdp %d" % (pipe, a.dp))
        a.steps = full
        return
    if a.plugin and a.plugin.startswith("zero"):  # DeepSpeed's layout: the folder plain ZeRO over --dp processes writes
        zero = {"deepspeed_plugin": config["deepspeed_plugin"]}
        zero_folder = os.path.join(tmp, "zero.state")
        zero_run = train(a, a.dp, os.path.join(tmp, "zero"), a.batch, zero,
                         {"ACCEL_TEST_SAVE_AT": str(half), "ACCEL_TEST_SAVE_DIR": zero_folder, "ACCEL_TEST_SUMMON": "1"})
        check_deepspeed_folder(pp_folder, zero_folder, pipe)
        a.steps = full - half
        resumed("pp_pp", world, config, pp_folder, pp_run, "%s -> %s" % (pipe, pipe))
        resumed("pp_one", 1, {}, pp_folder, pp_run, "%s -> one process" % pipe)
        resumed("zero_pp", world, config, zero_folder, zero_run, "ZeRO on %d processes -> %s" % (a.dp, pipe))
        a.steps = full
        return
    one_folder, one_run = saved("one", 1, {})
    sh_folder = None
    if a.plugin == "fsdp":  # one process's SHARDED_STATE_DICT folder (pieces), which each stage reads its part of
        sh_folder = os.path.join(tmp, "one_sharded.state")
        plugin = dict(sharding_plugin(a, "fsdp")["fsdp_plugin"], state_dict_type="SHARDED_STATE_DICT")
        sh_run = train(a, 1, os.path.join(tmp, "one_sharded"), a.batch * a.dp, {"fsdp_plugin": plugin},
                       {"ACCEL_TEST_SAVE_AT": str(half), "ACCEL_TEST_SAVE_DIR": sh_folder, "ACCEL_TEST_SUMMON": "1"})
        if not os.path.isdir(os.path.join(sh_folder, "pytorch_model_fsdp_0")):
            sys.exit("one process under SHARDED_STATE_DICT wrote %s" % sorted(os.listdir(sh_folder)))
    # One process's layout: the same weights file (names, shapes, order) whichever run saved it.
    for f in ("model.safetensors", "optimizer.bin"):
        if not os.path.exists(os.path.join(pp_folder, f)):
            sys.exit("%s: save_state wrote %s, without %s" % (pipe, sorted(os.listdir(pp_folder)), f))
    pp_w, one_w = [tensors_of(os.path.join(d, "model.safetensors")) for d in (pp_folder, one_folder)]
    if [(k, v[0]) for k, v in pp_w.items()] != [(k, v[0]) for k, v in one_w.items()]:
        sys.exit("%s: save_state's weights %s, one process's %s" %
                 (pipe, [(k, v[0]) for k, v in pp_w.items()], [(k, v[0]) for k, v in one_w.items()]))
    a.steps = full - half
    resumed("pp_pp", world, config, pp_folder, pp_run, "%s -> %s" % (pipe, pipe))
    resumed("pp_one", 1, {}, pp_folder, pp_run, "%s -> one process" % pipe)
    resumed("one_pp", world, config, one_folder, one_run, "one process -> %s" % pipe)
    if sh_folder:
        resumed("one_sharded_pp", world, config, sh_folder, sh_run, "one process's SHARDED_STATE_DICT -> %s" % pipe)
    a.steps = full


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario", choices=["equivalence", "resume"])
    ap.add_argument("--bin", required=True, help="the build directory")
    ap.add_argument("--pp", type=int, default=2)
    ap.add_argument("--dp", type=int, default=1)
    ap.add_argument("--tp", type=int, default=1, help="tp_size: each stage split over tp processes (pp x tp)")
    ap.add_argument("--micro", type=int, default=2)
    ap.add_argument("--schedule", default="gpipe")
    ap.add_argument("--chunks", type=int, default=1, help="model chunks per stage (interleaved_1f1b)")
    ap.add_argument("--cp", type=int, default=1, help="cp_size (or sp_size with --cp-strategy ulysses): pp x cp")
    ap.add_argument("--cp-strategy", default="alltoall", choices=["alltoall", "allgather", "ulysses"])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--timeout", type=int, default=120)
    ap.add_argument("--launcher", default="launch", choices=["launch", "mpirun"],
                    help="start the processes with accel launch (Gloo) or mpirun (the mpi backend)")
    ap.add_argument("--llama", action="store_true", help="dist_pp's llama (grouped-query attention) instead of its gpt")
    ap.add_argument("--sequential", action="store_true",
                    help="dist_pp's JSON-spec sequential model (embedding, transformer layers, head) instead of its gpt")
    ap.add_argument("--megatron", action="store_true", help="configure the parallel run by megatron_lm_plugin")
    ap.add_argument("--clip", type=float, default=0.0, help="megatron_lm_plugin's gradient_clipping (--megatron)")
    ap.add_argument("--plugin", choices=sorted(SHARDING_PLUGINS),
                    help="pp x sharding: each stage's --dp processes shard it (dp_shard_size) under this plugin")
    ap.add_argument("--replicas", type=int, default=1,
                    help="resume with --plugin: of the --dp processes, this many replicas of dp / replicas shards (HSDP)")
    ap.add_argument("--nodes", type=int, default=1,
                    help="resume: the processes on that many machines of this host, project save_on_each_node")
    ap.add_argument("--sharded-state", action="store_true",
                    help="resume with --plugin fsdp: the pipeline saves SHARDED_STATE_DICT (each rank its pieces)")
    ap.add_argument("--bf16", action="store_true",
                    help="with --plugin: mixed_precision bf16 (the engine's bfloat16 parameters), one process under "
                         "the same plugin and policy")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="accel_pp_")
    {"equivalence": scenario_equivalence, "resume": scenario_resume}[a.scenario](a, tmp)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
