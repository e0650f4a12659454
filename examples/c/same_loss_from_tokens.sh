#!/bin/sh
# example.train_gpt_token_file: train_gpt trained from the token files prepare_tokens.py writes (--tokens,
# accel_dataloader_create_from_files) prints the losses of the same run from the text (same windows).
#   same_loss_from_tokens.sh TRAIN_GPT PREPARE_TOKENS_PY
set -eu
train_gpt=$1
prepare=$2
python3 "$prepare" gpt_tokens
"$train_gpt" --steps 20 --eval-every 10 --max-val-loss 4.5 > from_text.out
"$train_gpt" --tokens gpt_tokens --steps 20 --eval-every 10 --max-val-loss 4.5 > from_tokens.out
cat from_tokens.out
# The loss lines (not the CPU seconds they end with) must be identical.
losses() { grep -E '^(step|final loss)' "$1" | sed 's/  (.*//'; }
if [ "$(losses from_text.out)" != "$(losses from_tokens.out)" ]; then
    echo "losses differ:"; losses from_text.out; losses from_tokens.out; exit 1
fi
[ -n "$(losses from_tokens.out)" ] || { echo "no loss lines"; exit 1; }
echo "same losses from the token files as from the text"
