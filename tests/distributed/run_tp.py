#!/usr/bin/env python3
"""Tensor parallelism against one process, over Gloo (dist_train's gpt, or its llama with --model llama, or a JSON-spec
model of transformer blocks with --model blocks, under `accel launch`).

Every run ends with save_model (the whole weights, read back here from model.safetensors); dist_train's own file
gives each step's clip_grad_norm total (its parameters are rank 0's slices under tp).

equivalence: tp N (N processes, one tp group, every rank the same batch B) trains as one process with batch B:
  parameters and every step's clip_grad_norm total within --tol. With --dp D (tp N x dp_replicate D) or --plugin
  P --dp D (tp N x dp_shard D inside the sharding engine, FSDP or ZeRO), against one process with batch B x D.
  --sequence-parallel: the same with Megatron's sequence parallelism (tp_handler.sequence_parallel).
dropout: tp dropout's masks (see scenario_dropout), also continued by save_state / load_state.
dropout_sequential: the same rule for a JSON-spec model (see scenario_dropout_sequential).
resume_meshes: FULL_STATE_DICT folders of TP inside FSDP and of DDP resumed on other meshes, DeepSpeed's per-tp-rank
  layout (tp x ZeRO-2/3) and SHARDED_STATE_DICT's per-rank pieces of tp slices on the same and other meshes, checked
  against the file names, the pieces' metadata and merge-weights (scenario_resume_meshes).
resume: save_state at tp --save-tp (x dp_replicate --dp) after N steps; load_state at tp 1 (one process), tp 2 and tp 4 and N more steps
  equal the uninterrupted one-process run of 2N steps within --tol; a one-process checkpoint loads at tp 2 too. The
  folder holds one process's layout (model.safetensors with the same names and shapes as a one-process save, one
  optimizer.bin), written by rank 0.
save_model: save_model of the tp model writes one process's files byte for byte (untrained: the same weights),
  and after training one process's names, shapes and order; get_state_dict (in one call) gives the tensors
  save_model wrote, bit for bit.
"""
import argparse
import json
import os
import re
import shutil
import struct
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_dist import check_close, env_base, launch_cmd, log, run  # noqa: E402

OPTIMIZERS = {"sgd": '{"type": "sgd", "lr": 0.1, "momentum": 0.9}',
              "adamw": '{"type": "adamw", "lr": 0.01, "weight_decay": 0.01}'}


def blocks_spec():
    """--model blocks: a JSON-spec language model over dist_train's token windows (vocabulary 11, 8 positions): an
    embedding, two transformer_encoder_layer blocks split by tp_plan "auto" (4 heads, feed-forward 16), a linear head.
    Under sequence parallelism the blocks run on each rank's positions (nn_model's sequence-parallel region)."""
    block = {"type": "transformer_encoder_layer", "d_model": 8, "nhead": 4, "dim_feedforward": 16, "dropout": 0.0,
             "activation": "gelu", "batch_first": True, "tp_plan": "auto"}
    return json.dumps({"type": "sequential", "layers": [{"type": "embedding", "num_embeddings": 11, "embedding_dim": 8},
                                                        block, block,
                                                        {"type": "linear", "in_features": 8, "out_features": 11}]},
                      separators=(",", ":"))


def base_env(a):
    e = env_base()
    e.update({"ACCEL_TEST_GPT": a.model, "ACCEL_TEST_GPT_HEADS": "4", "ACCEL_TEST_KV_HEADS": str(a.kv_heads),
              "ACCEL_TEST_SAME_SEED": "1",
              "ACCEL_TEST_OPTIMIZER": OPTIMIZERS[a.optimizer], "ACCEL_TEST_CLIP": "0.5"})
    if a.model == "blocks":
        e.update({"ACCEL_TEST_SPEC": blocks_spec(), "ACCEL_TEST_SPEC_TOKENS": "1"})
    return e


PLUGINS = {"full_shard": {"fsdp_plugin": {"sharding_strategy": "FULL_SHARD"}},
           "shard_grad_op": {"fsdp_plugin": {"sharding_strategy": "SHARD_GRAD_OP"}},
           # DeepSpeed clips inside its step (gradient_clipping; clip_grad_norm only measures, as in Accelerate):
           # base_env's ACCEL_TEST_CLIP.
           "zero1": {"deepspeed_plugin": {"zero_stage": 1, "gradient_clipping": 0.5}},
           "zero3": {"deepspeed_plugin": {"zero_stage": 3, "gradient_clipping": 0.5}}}


def config(tp, dp, plugin=None, sequence_parallel=False):
    """With `plugin` (TP inside the sharding engine) the data-parallel ranks are dp_shard_size, else dp_replicate
    (tp 1 on several processes: the plugin over all of them, or DDP)."""
    c = {"gradient_accumulation_steps": 2}
    if plugin == "hsdp_sharded":  # dp_replicate 2 x dp_shard dp/2 (x tp)
        c["parallelism_config"] = {"tp_size": tp, "dp_replicate_size": 2, "dp_shard_size": dp // 2}
    elif tp > 1:
        c["parallelism_config"] = {"tp_size": tp, ("dp_shard_size" if plugin else "dp_replicate_size"): dp}
        if sequence_parallel:
            c["parallelism_config"]["tp_handler"] = {"sequence_parallel": True}
    if tp * dp > 1:
        c.update(PLUGINS.get(plugin, {}))
    return json.dumps(c)


def train(a, tp, out, steps, extra=None):
    """dist_train on `tp` processes (one process when 1), every rank batch a.batch, ending with save_model(out.model
    unless `extra` names another folder); returns its output."""
    prog = os.path.join(a.bin, "tests", "distributed", "dist_train")
    e = base_env(a)
    e["ACCEL_TEST_SAVE_MODEL"] = out + ".model"
    e.update(extra or {})
    # --dp: the runs at tp --save-tp (and --tp) have dp_replicate --dp (tp x dp processes); the global batch is
    # --batch x --dp in every run, each data-parallel rank its share.
    dp = a.dp if tp > 1 and tp in (a.save_tp, a.tp) else 1
    args = [prog, out, str(a.batch * a.dp // dp), str(steps), config(tp, dp, a.plugin, a.sequence_parallel)]
    return run(launch_cmd(a, tp * dp) + args if tp > 1 else args, env=e, timeout=a.timeout).stdout


def train_mesh(a, tp, dp, plugin, out, steps, extra=None):
    """dist_train on tp x dp processes (`plugin` shards over dp, else DDP), the global batch a.batch x a.dp split over
    the dp ranks, every micro-batch's loss printed; returns (weights, norms, losses: the dp ranks' mean per
    micro-batch)."""
    prog = os.path.join(a.bin, "tests", "distributed", "dist_train")
    e = base_env(a)
    e.update({"ACCEL_TEST_SAVE_MODEL": out + ".model", "ACCEL_TEST_PRINT_LOSS": "1"})
    e.update(extra or {})
    args = [prog, out, str(a.batch * a.dp // dp), str(steps), config(tp, dp, plugin)]
    p = run(launch_cmd(a, tp * dp) + args if tp * dp > 1 else args, env=e, timeout=a.timeout)
    stdout = p.stdout
    per_rank = {}
    for m in re.finditer(r"dist_train loss (\d+) (\S+)", stdout):
        per_rank.setdefault(int(m.group(1)), []).append(float(m.group(2)))
    if sorted(per_rank) != list(range(tp * dp)) or len({len(v) for v in per_rank.values()}) != 1:
        sys.exit("losses: expected every one of %d ranks' losses, got %s" % (tp * dp, {r: len(v) for r, v in per_rank.items()}))
    # Ranks of one tp group hold the same loss; the dp ranks' means over equal shares average to the global one.
    losses = [sum(v) / len(v) for v in zip(*per_rank.values())]
    return split_result(out, steps) + (losses,)


def safetensors_header(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    head.pop("__metadata__", None)
    return head, raw[8 + n:]


def tensors_of(path):
    head, data = safetensors_header(path)
    out = {}
    for k, h in head.items():
        if h["dtype"] != "F32":
            sys.exit("%s: %s is %s, expected F32" % (path, k, h["dtype"]))
        b, e = h["data_offsets"]
        out[k] = (h["shape"], struct.unpack("<%df" % ((e - b) // 4), data[b:e]))
    return out


def split_result(out, num_norms):
    """(the saved weights in the file's order, the last `num_norms` gradient norms of dist_train's file)."""
    weights = [x for _, v in tensors_of(os.path.join(out + ".model", "model.safetensors")).items() for x in v[1]]
    data = open(out, "rb").read()
    return weights, struct.unpack("<%dd" % num_norms, data[len(data) - 8 * num_norms:])


def scenario_equivalence(a, tmp):
    ref, got = os.path.join(tmp, "ref.bin"), os.path.join(tmp, "got.bin")
    train(a, 1, ref, a.steps)
    train(a, a.tp, got, a.steps)
    (rp, rn), (gp, gn) = split_result(ref, a.steps), split_result(got, a.steps)
    check_close(rp, gp, a.param_tol or a.tol, "parameters at tp %d" % a.tp)
    check_close(rn, gn, a.tol, "clip_grad_norm totals per step at tp %d" % a.tp)


def scenario_resume(a, tmp):
    full = os.path.join(tmp, "full.bin")
    train(a, 1, full, 2 * a.steps)
    fp, fn_ = split_result(full, 2 * a.steps)
    ckpts = {}
    for tp in sorted({1, a.save_tp}):
        ckpts[tp] = os.path.join(tmp, "ckpt_tp%d" % tp)
        train(a, tp, os.path.join(tmp, "first_tp%d.bin" % tp), 2 * a.steps,
              {"ACCEL_TEST_SAVE_AT": str(a.steps), "ACCEL_TEST_SAVE_DIR": ckpts[tp]})
    saved, one = ckpts[a.save_tp], ckpts[1]
    files = sorted(os.listdir(saved))
    log("checkpoint files at tp %d: %s" % (a.save_tp, files))
    for f in ("model.safetensors", "optimizer.bin"):
        if f not in files:
            sys.exit("%s is missing: the tp checkpoint must hold one process's layout" % f)
    mine, theirs = tensors_of(os.path.join(saved, "model.safetensors")), tensors_of(os.path.join(one, "model.safetensors"))
    if [(k, v[0]) for k, v in sorted(mine.items())] != [(k, v[0]) for k, v in sorted(theirs.items())]:
        sys.exit("model.safetensors at tp %d holds %s, one process's holds %s" %
                 (a.save_tp, sorted((k, v[0]) for k, v in mine.items()), sorted((k, v[0]) for k, v in theirs.items())))
    check_close([x for k in sorted(theirs) for x in theirs[k][1]], [x for k in sorted(mine) for x in mine[k][1]],
                a.tol, "saved weights at tp %d against one process's" % a.save_tp)
    for tp in a.resume_tps:
        out = os.path.join(tmp, "resumed_tp%d.bin" % tp)
        train(a, tp, out, a.steps, {"ACCEL_TEST_LOAD": saved})
        rp, rn = split_result(out, a.steps)
        if tp == a.save_tp:  # the same arithmetic as the uninterrupted run at that tp: bit for bit
            uninterrupted = os.path.join(tmp, "full_tp%d.bin" % tp)
            train(a, tp, uninterrupted, 2 * a.steps)
            up, un = split_result(uninterrupted, 2 * a.steps)
            if up != rp or list(un[a.steps:]) != list(rn):
                check_close(up, rp, 0.0, "parameters: saved and resumed at tp %d against the uninterrupted tp %d run" % (tp, tp))
                sys.exit("gradient norms after resume at tp %d differ from the uninterrupted run's" % tp)
            log("saved and resumed at tp %d: the uninterrupted tp %d run bit for bit" % (tp, tp))
            if a.same_tp_only:
                continue
        check_close(fp, rp, a.tol, "parameters: saved at tp %d, resumed at tp %d" % (a.save_tp, tp))
        check_close(fn_[a.steps:], rn, a.tol, "gradient norms after resume at tp %d" % tp)
    if a.same_tp_only:
        return
    out = os.path.join(tmp, "resumed_from_one.bin")
    train(a, a.save_tp, out, a.steps, {"ACCEL_TEST_LOAD": one})
    rp, rn = split_result(out, a.steps)
    check_close(fp, rp, a.tol, "parameters: saved by one process, resumed at tp %d" % a.save_tp)
    check_close(fn_[a.steps:], rn, a.tol, "gradient norms: saved by one process, resumed at tp %d" % a.save_tp)


PLUGINS["zero2"] = {"deepspeed_plugin": {"zero_stage": 2, "gradient_clipping": 0.5}}
MESHES = {"one": (1, 1, None), "ddp2": (1, 2, None), "fsdp4": (1, 4, "full_shard"),
          "tp2_fsdp2": (2, 2, "full_shard"), "tp2_zero3": (2, 2, "zero3"), "tp2_zero2": (2, 2, "zero2")}


def deepspeed_names(tp, dp, stage):
    """The files DeepSpeed's engine names for tp x dp ranks (engine.py _get_ckpt_name / _get_zero_ckpt_name):
    mp_rank_{tp:02d}_model_states.pt (ZeRO-3: zero_pp_rank_{dp}_mp_rank_{tp:02d}_model_states.pt per dp rank) and
    zero_pp_rank_{dp}_mp_rank_{tp:02d}_optim_states.pt."""
    names = set()
    for t in range(tp):
        for d in range(dp):
            names.add("zero_pp_rank_%d_mp_rank_%02d_optim_states.pt" % (d, t))
            names.add(("zero_pp_rank_%d_" % d if stage == 3 else "") + "mp_rank_%02d_model_states.pt" % t)
    return names


def check_saved_layout(ckpt, mesh):
    tp, dp, plugin = MESHES[mesh]
    if plugin in ("zero2", "zero3"):
        got = {f for f in os.listdir(os.path.join(ckpt, "pytorch_model")) if f.endswith(".pt")}
        want = deepspeed_names(tp, dp, int(plugin[-1]))
        if got != want:
            sys.exit("%s/pytorch_model: files %s, expected DeepSpeed's names %s" % (ckpt, sorted(got), sorted(want)))
        return
    if plugin and plugin.endswith("_sharded"):
        check_sharded_layout(ckpt, tp, dp // 2 if plugin == "hsdp_sharded" else dp)  # the first replica writes
        return
    for f in ("model.safetensors", "optimizer.bin"):
        if f not in os.listdir(ckpt):
            sys.exit("%s: %s is missing (one process's layout expected)" % (ckpt, f))


def check_sharded_layout(ckpt, tp, dp):
    """SHARDED_STATE_DICT: every one of the tp x dp_shard ranks wrote its pieces (rank{r}.safetensors); under tp the
    metadata (version 2) lists the whole shapes of the split tensors, each with its "tp" split and
    [rank, tp_rank, offset, numel] pieces covering every tp rank's slice, and the vocabulary's padding row nowhere
    in the shapes (dist_train's 11 tokens over tp 2)."""
    for folder in ("pytorch_model_fsdp_0", "optimizer_0"):
        path = os.path.join(ckpt, folder)
        ranks = sorted(f for f in os.listdir(path) if f.startswith("rank"))
        want = sorted("rank%d.safetensors" % r for r in range(tp * dp))
        if ranks != want:
            sys.exit("%s: rank files %s, expected %s" % (path, ranks, want))
        meta = json.load(open(os.path.join(path, "metadata.json")))
        split = [t for t in meta["tensors"] if "tp" in t]
        if meta["world_size"] != tp * dp or meta["version"] != (2 if tp > 1 else 1) or bool(split) != (tp > 1):
            sys.exit("%s/metadata.json: world_size %s, version %s, %d split tensors (tp %d x dp %d saved)" % (
                path, meta["world_size"], meta["version"], len(split), tp, dp))
        for t in split:
            if {p[1] for p in t["pieces"]} != set(range(tp)) or any(len(p) != 4 for p in t["pieces"]):
                sys.exit("%s/metadata.json: %s's pieces %s do not hold every tp rank's slice" % (path, t["name"], t["pieces"]))
        if folder == "pytorch_model_fsdp_0":
            wte = [t["shape"] for t in meta["tensors"] if t["name"].endswith(("wte.weight", "embed_tokens.weight"))]
            if not wte or wte[0][0] != 11:
                sys.exit("%s/metadata.json: the token embedding's shape is %s, expected the 11 tokens unpadded" % (path, wte))


PLUGINS["full_shard_sharded"] = {"fsdp_plugin": {"sharding_strategy": "FULL_SHARD", "state_dict_type": "SHARDED_STATE_DICT"}}
MESHES["tp2_fsdp2_sharded"] = (2, 2, "full_shard_sharded")
MESHES["fsdp4_sharded"] = (1, 4, "full_shard_sharded")
PLUGINS["hsdp_sharded"] = {"fsdp_plugin": {"sharding_strategy": "FULL_SHARD", "state_dict_type": "SHARDED_STATE_DICT"}}
MESHES["tp2_ddp2"] = (2, 2, None)  # tp 2 x dp_replicate 2 (DDP)
MESHES["tp2_hsdp4_sharded"] = (2, 4, "hsdp_sharded")  # dp_replicate 2 x dp_shard 2 x tp 2: 8 processes


def check_merged(a, ckpt, model_dir, tmp):
    """accel merge-weights of a DeepSpeed or SHARDED_STATE_DICT folder saved under tp joins each tp rank's slices:
    the whole weights the saving run's save_model wrote right after the save (same names, shapes and values bit for
    bit)."""
    merged = os.path.join(tmp, os.path.basename(ckpt) + "_merged")
    run([os.path.join(a.bin, "bin", "accel"), "merge-weights", ckpt, merged])
    got = tensors_of(os.path.join(merged, "model.safetensors"))
    want = tensors_of(os.path.join(model_dir, "model.safetensors"))
    for k, v in want.items():
        if got.get(k) != v:
            sys.exit("merge-weights of %s: %s is %s, save_model wrote %s" % (
                ckpt, k, got[k][0] if k in got else "missing", v[0]))
    log("merge-weights of %s: save_model's %d tensors bit for bit" % (ckpt, len(want)))


def scenario_resume_meshes(a, tmp):
    """Checkpoints across meshes (FULL_STATE_DICT: one process's layout whatever the mesh): each --saves mesh saves
    after N steps; each of its resume meshes (--resumes, "SAVED:RESUMED,...") loads it and trains N more steps, whose
    weights, clip_grad_norm totals and losses equal the uninterrupted one-process run's last N within --tol."""
    full = os.path.join(tmp, "full.bin")
    fp, fn_, fl = train_mesh(a, 1, 1, None, full, 2 * a.steps)
    for pair in a.resumes.split(","):
        saved, resumed = pair.split(":")
        ckpt = os.path.join(tmp, "ckpt_" + saved)
        if not os.path.isdir(ckpt):
            _, _, sl = train_mesh(a, *MESHES[saved], os.path.join(tmp, "first_%s.bin" % saved), 2 * a.steps,
                                  {"ACCEL_TEST_SAVE_AT": str(a.steps), "ACCEL_TEST_SAVE_DIR": ckpt})
            check_close(fl[:len(sl)], sl, a.tol, "losses before the save on %s" % saved)
            check_saved_layout(ckpt, saved)
            if MESHES[saved][2] in ("zero2", "zero3", "full_shard_sharded"):
                check_merged(a, ckpt, os.path.join(tmp, "first_%s.bin.model" % saved), tmp)
        rp, rn, rl = train_mesh(a, *MESHES[resumed], os.path.join(tmp, "%s_from_%s.bin" % (resumed, saved)), a.steps,
                                {"ACCEL_TEST_LOAD": ckpt})
        what = "saved on %s, resumed on %s" % (saved, resumed)
        check_close(fl[len(fl) - len(rl):], rl, a.tol, "losses: " + what)
        check_close(fn_[a.steps:], rn, a.tol, "gradient norms: " + what)
        check_close(fp, rp, a.tol, "parameters: " + what)
        log("%s: the uninterrupted one-process run's losses, norms and weights within %g" % (what, a.tol))


def scenario_save_model(a, tmp):
    for steps in (0, a.steps):
        dirs = {}
        for tp in (1, a.tp):
            dirs[tp] = os.path.join(tmp, "model_tp%d_steps%d" % (tp, steps))
            train(a, tp, os.path.join(tmp, "run_tp%d_steps%d.bin" % (tp, steps)), steps,
                  {"ACCEL_TEST_SAVE_MODEL": dirs[tp], "ACCEL_TEST_GET_STATE_DICT": dirs[tp] + ".state_dict.safetensors"})
            got = tensors_of(dirs[tp] + ".state_dict.safetensors")
            if got != tensors_of(os.path.join(dirs[tp], "model.safetensors")):
                sys.exit("get_state_dict at tp %d: not the tensors save_model wrote (%s)" % (tp, sorted(got)))
        if sorted(os.listdir(dirs[a.tp])) != sorted(os.listdir(dirs[1])):
            sys.exit("save_model at tp %d wrote %s, one process %s" % (a.tp, os.listdir(dirs[a.tp]), os.listdir(dirs[1])))
        if steps == 0:
            for f in sorted(os.listdir(dirs[1])):
                if open(os.path.join(dirs[1], f), "rb").read() != open(os.path.join(dirs[a.tp], f), "rb").read():
                    sys.exit("save_model at tp %d: %s differs from one process's" % (a.tp, f))
            log("save_model at tp %d, untrained: %s byte for byte one process's" % (a.tp, sorted(os.listdir(dirs[1]))))
            continue
        mine, one = tensors_of(os.path.join(dirs[a.tp], "model.safetensors")), tensors_of(os.path.join(dirs[1], "model.safetensors"))
        if [(k, v[0]) for k, v in mine.items()] != [(k, v[0]) for k, v in one.items()]:
            sys.exit("save_model at tp %d: names, shapes or order differ from one process's" % a.tp)
        check_close([x for v in one.values() for x in v[1]], [x for v in mine.values() for x in v[1]], a.tol,
                    "save_model at tp %d after %d steps against one process's" % (a.tp, steps))


def scenario_dropout(a, tmp):
    """Dropout under tp (rng_tracker.hpp). Replicated regions (embeddings, residual stream) draw one mask on every
    rank from the default generator, in one process's sequence: with those dropouts only, tp trains as one process.
    Attention dropout (split by heads) draws each rank's own masks: twice from the same seed, the same run bit for
    bit, also with activation checkpointing (its rerun restores the tp generator), which changes nothing."""
    ref, got = os.path.join(tmp, "ref.bin"), os.path.join(tmp, "got.bin")
    replicated = {"ACCEL_TEST_GPT_DROPOUT": "0.2,0.3,0"}
    train(a, 1, ref, a.steps, replicated)
    train(a, a.tp, got, a.steps, replicated)
    (rp, rn), (gp, gn) = split_result(ref, a.steps), split_result(got, a.steps)
    check_close(rp, gp, a.tol, "parameters with replicated-region dropout at tp %d" % a.tp)
    check_close(rn, gn, a.tol, "gradient norms with replicated-region dropout at tp %d" % a.tp)
    runs = []
    for i, gpt in enumerate(("plain", "plain", "checkpointing")):
        out = os.path.join(tmp, "attn%d.bin" % i)
        train(a, a.tp, out, a.steps, {"ACCEL_TEST_GPT_DROPOUT": "0.1,0.1,0.3", "ACCEL_TEST_GPT": gpt})
        runs.append(split_result(out, a.steps))
    if runs[0] != runs[1]:
        sys.exit("attention dropout at tp %d: two runs from the same seed differ" % a.tp)
    check_close(runs[0][0], runs[2][0], 1e-6, "attention dropout at tp %d with activation checkpointing" % a.tp)
    if runs[0] == split_result(ref, a.steps):
        sys.exit("attention dropout changed nothing")
    # save_state keeps the tp generators (rng_checkpoint.hpp): saved halfway and resumed, the same run bit for bit.
    half, ckpt = a.steps // 2, os.path.join(tmp, "dropout_ckpt")
    attn = {"ACCEL_TEST_GPT_DROPOUT": "0.1,0.1,0.3"}
    train(a, a.tp, os.path.join(tmp, "first_half.bin"), a.steps,
          dict(attn, ACCEL_TEST_SAVE_AT=str(half), ACCEL_TEST_SAVE_DIR=ckpt))
    out = os.path.join(tmp, "second_half.bin")
    train(a, a.tp, out, a.steps - half, dict(attn, ACCEL_TEST_LOAD=ckpt))
    rp, rn = split_result(out, a.steps - half)
    if rp != runs[0][0] or list(rn) != list(runs[0][1][half:]):
        check_close(runs[0][0], rp, 0.0, "attention dropout at tp %d: saved after %d steps and resumed" % (a.tp, half))
        sys.exit("attention dropout at tp %d: the resumed run's gradient norms differ from the uninterrupted run's" % a.tp)
    log("dropout at tp %d: replicated regions as one process, split regions reproducible, also across save_state / "
        "load_state" % a.tp)


def sequential_spec(p_split, p_replicated):
    """A JSON spec over dist_train's features (8 -> 4 classes): a colwise / rowwise pair with a dropout of p_split
    between them (a split region) and a dropout of p_replicated after it (the replicated stream)."""
    return json.dumps({"type": "sequential", "layers": [
        {"type": "linear", "in_features": 8, "out_features": 16, "tp_plan": "colwise"}, {"type": "tanh"},
        {"type": "dropout", "p": p_split},
        {"type": "linear", "in_features": 16, "out_features": 8, "tp_plan": "rowwise"},
        {"type": "dropout", "p": p_replicated},
        {"type": "linear", "in_features": 8, "out_features": 4}]})


def scenario_dropout_sequential(a, tmp):
    """Dropout in a JSON-spec model under tp (sequential_plan.hpp). The dropout after the rowwise layer acts on the
    replicated activation: every rank draws one process's mask from the default generator, so with it alone tp
    trains as one process (were the tp ranks' masks to differ, their replicated weights would drift apart and from
    one process's). The dropout between colwise and rowwise draws each rank's masks from its tp generator: twice
    from the same seed the same run bit for bit, and not the run without it."""
    def go(tp, name, p_split, p_replicated):
        out = os.path.join(tmp, name + ".bin")
        train(a, tp, out, a.steps, {"ACCEL_TEST_SPEC": sequential_spec(p_split, p_replicated)})
        return split_result(out, a.steps)
    ref, got = go(1, "ref", 0.0, 0.3), go(a.tp, "got", 0.0, 0.3)
    check_close(ref[0], got[0], a.tol, "JSON spec, replicated-region dropout: parameters at tp %d" % a.tp)
    check_close(ref[1], got[1], a.tol, "JSON spec, replicated-region dropout: gradient norms at tp %d" % a.tp)
    if ref == go(1, "none", 0.0, 0.0):
        sys.exit("JSON spec: the replicated-region dropout changed nothing")
    first, second = go(a.tp, "split1", 0.3, 0.3), go(a.tp, "split2", 0.3, 0.3)
    if first != second:
        sys.exit("JSON spec, split-region dropout at tp %d: two runs from the same seed differ" % a.tp)
    if first == got:
        sys.exit("JSON spec: the split-region dropout changed nothing")
    log("JSON spec dropout at tp %d: the replicated region as one process, the split region reproducible" % a.tp)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario", choices=["equivalence", "resume", "resume_meshes", "save_model", "dropout",
                                         "dropout_sequential"])
    ap.add_argument("--bin", required=True, help="the build directory")
    ap.add_argument("--model", choices=["plain", "llama", "blocks"], default="plain",
                    help="dist_train's gpt (n_head 4), its llama (4 query heads over --kv-heads key/value heads) or a "
                         "JSON-spec model of transformer_encoder_layer blocks (blocks_spec)")
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--save-tp", type=int, default=2)
    ap.add_argument("--resume-tps", default="1,2,4")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--dp", type=int, default=1,
                    help="dp_replicate_size of the runs at --save-tp and --tp (dp_shard_size with --plugin)")
    ap.add_argument("--plugin", choices=sorted(PLUGINS), default=None,
                    help="TP inside the sharding engine: --dp processes per tp rank shard the model with this plugin")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--sequence-parallel", action="store_true",
                    help="the runs at tp > 1 with parallelism_config.tp_handler.sequence_parallel")
    ap.add_argument("--tol", type=float, default=1e-6)
    ap.add_argument("--param-tol", type=float, default=0.0, help="equivalence: the parameters' tolerance (default --tol)")
    ap.add_argument("--optimizer", choices=sorted(OPTIMIZERS), default="sgd")
    ap.add_argument("--same-tp-only", action="store_true",
                    help="resume: compare only the resume at --save-tp (bit for bit), not other tp against one process")
    ap.add_argument("--resumes", default="tp2_fsdp2:one,tp2_fsdp2:fsdp4,tp2_fsdp2:tp2_zero3,ddp2:tp2_fsdp2",
                    help="resume_meshes: SAVED:RESUMED pairs of " + ",".join(sorted(MESHES)))
    ap.add_argument("--timeout", type=int, default=120)
    a = ap.parse_args()
    a.resume_tps = [int(x) for x in a.resume_tps.split(",")]
    tmp = tempfile.mkdtemp(prefix="accel_tp_")
    {"equivalence": scenario_equivalence, "resume": scenario_resume, "resume_meshes": scenario_resume_meshes,
     "save_model": scenario_save_model,
     "dropout": scenario_dropout, "dropout_sequential": scenario_dropout_sequential}[a.scenario](a, tmp)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
