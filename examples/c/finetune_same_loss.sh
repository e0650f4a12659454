#!/bin/sh
# The LoRA fine-tuning examples on a small Llama folder made by tests/python/llama_reference.py (no download):
#   finetune_same_loss.sh PYTHON LLAMA_REFERENCE C_EXAMPLE [OTHER_EXAMPLE_COMMAND...]
# runs the C example (which exits non-zero unless its loss halves) and checks PEFT's two adapter files; with another
# language's example command, runs it too and requires the same "step N: loss X" lines (same data, seed, adapters).
set -eu
py=$1 ref=$2 c_example=$3
shift 3
config='{"vocab_size": 32, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}'
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$py" "$ref" write "$work/tiny-llama" "$config" 0 40000
"$c_example" "$work/tiny-llama" "$work/adapter_c" | tee "$work/c.out"
test -s "$work/adapter_c/adapter_model.safetensors" && test -s "$work/adapter_c/adapter_config.json"
if [ $# -gt 0 ]; then
  "$@" "$work/tiny-llama" "$work/adapter_other" | tee "$work/other.out"
  test -s "$work/adapter_other/adapter_model.safetensors" && test -s "$work/adapter_other/adapter_config.json"
  grep '^step ' "$work/c.out" > "$work/c.loss"
  grep '^step ' "$work/other.out" > "$work/other.loss"
  if ! cmp -s "$work/c.loss" "$work/other.loss" || [ ! -s "$work/c.loss" ]; then
    echo "finetune_same_loss.sh: the losses differ from the C example's:" >&2
    diff "$work/c.loss" "$work/other.loss" >&2 || true
    exit 1
  fi
  echo "finetune_same_loss.sh: the same $(wc -l < "$work/c.loss") loss lines as the C example"
fi
