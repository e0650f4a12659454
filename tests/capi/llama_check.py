"""accel's "llama" model against tests/python/llama_reference.py, for small random configs covering grouped-query
attention, tied and untied heads, q/k/v(/o) and MLP biases, each rope_scaling, head_dim != hidden_size / heads,
Mistral's sliding window, Qwen2, and sharded folders with an index.

  llama_check.py DRIVER WORKDIR      DRIVER: capi_test_llama (its "reference DIR" mode is the accel side)

Per config: the reference writes an HF folder; accel loads it (strict) and its logits must equal the reference's
within 1e-5 (fp32), greedy generation must give the same tokens (with and without the KV cache), and a few SGD
steps on the causal_lm loss must give the reference loop's losses and weights (1e-5); save_model's config.json
must be what the reference's config says. A bfloat16 folder computes in bfloat16 as the reference does.
"""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import torch  # noqa: E402

import llama_reference as R  # noqa: E402
from llama_case_io import check_saved, exit_on, read_losses, run_driver, write_inputs  # noqa: E402

BASE = {"vocab_size": 53, "hidden_size": 32, "intermediate_size": 40, "num_hidden_layers": 2,
        "num_attention_heads": 4, "max_position_embeddings": 64}
CONFIGS = [
    ("gqa_untied", dict(BASE, num_key_value_heads=2)),
    ("mha_tied_biases", dict(BASE, tie_word_embeddings=True, attention_bias=True, mlp_bias=True)),
    ("mqa_head_dim", dict(BASE, num_key_value_heads=1, head_dim=12, rms_norm_eps=1e-5)),
    ("linear", dict(BASE, num_key_value_heads=2, rope_scaling={"type": "linear", "factor": 2.0}, rope_theta=500.0)),
    # max_position_embeddings below the sequence: the dynamic rule changes the base (and differs with the cache)
    ("dynamic", dict(BASE, max_position_embeddings=6, rope_scaling={"rope_type": "dynamic", "factor": 3.0})),
    ("llama3", dict(BASE, num_key_value_heads=2, rope_theta=500000.0,
                    rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                  "high_freq_factor": 4.0, "original_max_position_embeddings": 8})),
    ("mistral_window", dict(BASE, model_type="mistral", num_key_value_heads=2, sliding_window=3)),
    ("qwen2_window", dict(BASE, model_type="qwen2", num_key_value_heads=2, tie_word_embeddings=True,
                          use_sliding_window=True, sliding_window=4, max_window_layers=1)),
    ("gelu_pad", dict(BASE, hidden_act="gelu_pytorch_tanh", pad_token_id=0, num_hidden_layers=3)),
]
B, T, NEW, STEPS, LR = 2, 9, 7, 3, 0.05


def check(name, config, driver, work):
    d = os.path.join(work, name)
    shutil.rmtree(d, ignore_errors=True)
    weights = R.random_weights(config, seed=len(name))
    # Every other folder sharded (small shards: several files and the index).
    R.write_folder(d, config, weights, max_shard_size=20000 if len(name) % 2 else None)
    with open(os.path.join(d, "spec.json"), "w") as f:
        json.dump(dict(config, type="llama"), f)
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, config["vocab_size"], (B, T), generator=g)
    ids[0, 2] = 0  # the padding id of gelu_pad: its row must keep no gradient
    labels = torch.randint(0, config["vocab_size"], (B, T), generator=g)
    write_inputs(d, f"{B} {T} {NEW} {STEPS} {LR!r}", ids, labels)
    exit_on(run_driver(name, driver, "reference", d))

    def load(fname, dtype, shape):
        with open(os.path.join(d, fname), "rb") as f:
            return torch.frombuffer(bytearray(f.read()), dtype=dtype).reshape(shape)

    failures = []
    model = R.Model(config, weights)  # one object, as accel's: the dynamic rope state carries over
    want = R.logits(config, weights, ids, model)
    got = load("accel_logits.bin", torch.float32, want.shape)
    err = (got - want).abs().max().item()
    if not err <= 1e-5:
        failures.append(f"logits differ by {err:.3g}")
    for cached, fname in ((True, "accel_gen_cache.bin"), (False, "accel_gen_nocache.bin")):
        want_gen = R.generate(config, weights, ids, NEW, use_cache=cached, model=model)
        got_gen = load(fname, torch.int64, want_gen.shape)
        if not torch.equal(got_gen, want_gen):
            failures.append(f"greedy tokens (use_cache {cached}) differ: {got_gen.tolist()} vs {want_gen.tolist()}")
    losses, trained = R.train(config, weights, [(ids, labels)] * STEPS, LR, model=model)
    got_losses = read_losses(d, STEPS)
    loss_err = max(abs(a - b) for a, b in zip(got_losses, losses))
    if not loss_err <= 1e-5:
        failures.append(f"losses {got_losses} vs {losses}")
    saved_failures, w_err, _, hf, norm = check_saved(
        R, config, d, trained, ("model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                                "num_attention_heads", "num_key_value_heads", "head_dim", "hidden_act",
                                "rms_norm_eps", "rope_theta", "tie_word_embeddings", "max_position_embeddings"))
    failures += saved_failures
    if not w_err <= 1e-5:
        failures.append(f"trained weights differ by {w_err:.3g}")
    rs = norm["rope_scaling"]
    if (rs is None) != (hf.get("rope_scaling") is None) or (rs and float(hf["rope_scaling"]["factor"]) != rs["factor"]):
        failures.append(f"config.json rope_scaling: {hf.get('rope_scaling')}, want {rs}")
    bitwise = torch.equal(got, want)
    print(f"{name}: max |logit - reference| {err:.3g} (bit for bit: {bitwise}), losses {loss_err:.3g}, "
          f"weights {w_err:.3g}, generation equal" + ("" if not failures else "  FAILED"))
    return failures


def check_bf16(driver, work):
    """A bfloat16 folder loads with its dtype kept (from_pretrained) and computes in bfloat16 as the reference does
    on the same bfloat16 weights: logits within 1e-2 relative to their scale, the same greedy tokens."""
    name, config = "bf16_gqa", dict(BASE, num_key_value_heads=2, tie_word_embeddings=True)
    d = os.path.join(work, name)
    shutil.rmtree(d, ignore_errors=True)
    weights = R.random_weights(config, seed=3)
    R.write_folder(d, config, weights, dtype=torch.bfloat16)
    ids = torch.randint(0, config["vocab_size"], (B, T), generator=torch.Generator().manual_seed(5))
    write_inputs(d, f"{B} {T} {NEW} {STEPS} {LR!r}", ids)
    failure = run_driver(name, driver, "bf16", d)
    if failure:
        return [failure]
    wb = {k: v.to(torch.bfloat16) for k, v in weights.items()}
    want = R.logits(config, wb, ids)
    with open(os.path.join(d, "accel_logits_bf16.bin"), "rb") as f:
        got = torch.frombuffer(bytearray(f.read()), dtype=torch.int16).view(torch.bfloat16).reshape(want.shape)
    err = ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()
    want_gen = R.generate(config, wb, ids, NEW)
    with open(os.path.join(d, "accel_gen_bf16.bin"), "rb") as f:
        got_gen = torch.frombuffer(bytearray(f.read()), dtype=torch.int64).reshape(want_gen.shape)
    print(f"{name}: bfloat16 logits, max difference {err:.3g} of their scale (bit for bit: {torch.equal(got, want)}),"
          f" generation {'equal' if torch.equal(got_gen, want_gen) else 'DIFFERENT'}")
    failures = [] if err <= 1e-2 else [f"{name}: bfloat16 logits differ by {err:.3g}"]
    if not torch.equal(got_gen, want_gen):
        failures.append(f"{name}: bfloat16 greedy tokens {got_gen.tolist()} vs {want_gen.tolist()}")
    return failures


def main():
    driver, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    torch.set_num_threads(1)
    bad = []
    for name, config in CONFIGS:
        bad += [f"{name}: {f}" for f in check(name, config, driver, work)]
    bad += check_bf16(driver, work)
    if bad:
        sys.exit("\n".join(bad))
    print(f"llama_check: {len(CONFIGS)} configs equal the reference")


if __name__ == "__main__":
    main()
