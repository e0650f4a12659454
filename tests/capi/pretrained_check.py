"""from_pretrained on folders tests/python/llama_reference.py writes (as LlamaForCausalLM.save_pretrained does:
sharded with model.safetensors.index.json, config.json with transformers' extra keys), then 20 training steps,
against the reference's own loop; save_pretrained's folder read back by the reference.

  pretrained_check.py DRIVER WORKDIR      DRIVER: capi_test_pretrained (its "llama DIR" mode is the accel side)

Per case: the reference writes DIR/folder, 20 batches (ids.bin, labels.bin: int64 [20, B, T]) and params.txt
("B T steps lr optimizer"); accel loads DIR/folder with from_pretrained (strict), trains with the causal_lm loss and
the same optimizer, writes its losses and save_pretrained(DIR/accel_out). Losses and trained weights must equal the
reference's bit for bit (one thread, the same LibTorch), the saved folder must hold exactly the reference's names,
and its config.json the config's values.
"""
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import torch  # noqa: E402

import llama_reference as R  # noqa: E402
from llama_case_io import check_saved, exit_on, read_losses, run_driver, write_inputs  # noqa: E402

BASE = {"vocab_size": 53, "hidden_size": 32, "intermediate_size": 40, "num_hidden_layers": 2,
        "num_attention_heads": 4, "max_position_embeddings": 64}
CASES = [
    ("llama_gqa_sgd", dict(BASE, num_key_value_heads=2), "sgd", 0.05),
    ("qwen2_tied_adamw", dict(BASE, model_type="qwen2", num_key_value_heads=2, tie_word_embeddings=True), "adamw", 0.01),
]
B, T, STEPS = 2, 9, 20


def check(name, config, optimizer, lr, driver, work):
    d = os.path.join(work, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    weights = R.random_weights(config, seed=len(name))
    R.write_folder(os.path.join(d, "folder"), config, weights, max_shard_size=20000)
    assert os.path.exists(os.path.join(d, "folder", "model.safetensors.index.json")), "the folder is not sharded"
    g = torch.Generator().manual_seed(11)
    ids = torch.randint(0, config["vocab_size"], (STEPS, B, T), generator=g)
    labels = torch.randint(0, config["vocab_size"], (STEPS, B, T), generator=g)
    write_inputs(d, f"{B} {T} {STEPS} {lr!r} {optimizer}", ids, labels)
    exit_on(run_driver(name, driver, "llama", d))

    failures = []
    losses, trained = R.train(config, weights, list(zip(ids, labels)), lr, optimizer=optimizer)
    got = read_losses(d, STEPS)
    loss_err = max(abs(a - b) for a, b in zip(got, losses))
    if got != losses:
        failures.append(f"losses differ by up to {loss_err:.3g}: {got} vs {losses}")
    saved_failures, w_err, unequal, hf, _ = check_saved(
        R, config, d, trained, ("model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                                "num_attention_heads", "num_key_value_heads", "tie_word_embeddings", "rms_norm_eps",
                                "rope_theta"))
    failures += saved_failures
    if unequal:
        failures.append(f"trained weights differ (max {w_err:.3g}): {unequal}")
    if hf.get("torch_dtype") != "float32":
        failures.append(f"config.json torch_dtype: {hf.get('torch_dtype')!r}")
    print(f"{name}: {STEPS} {optimizer} steps from a {len(os.listdir(os.path.join(d, 'folder'))) - 2}-shard folder: "
          f"losses {loss_err:.3g}, weights {w_err:.3g} from the reference's (bit for bit: {not failures})")
    return failures


def main():
    driver, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    torch.set_num_threads(1)
    bad = []
    for name, config, optimizer, lr in CASES:
        bad += [f"{name}: {f}" for f in check(name, config, optimizer, lr, driver, work)]
    if bad:
        sys.exit("\n".join(bad))
    print(f"pretrained_check: {len(CASES)} folders load and train as the reference")


if __name__ == "__main__":
    main()
