#!/usr/bin/env python3
"""Writes the token files `train_gpt --tokens DIR` trains from, as nanoGPT's prepare.py writes train.bin:

    python3 prepare_tokens.py [TEXT_DIR] OUT_DIR      (TEXT_DIR: /usr/share/common-licenses)

The text is what train_gpt reads itself (every regular file of TEXT_DIR, symbolic links skipped, names in
byte order, concatenated); each character (byte) becomes its index among the text's distinct bytes. OUT_DIR
gets train.bin (the first 90 %) and val.bin (the rest), one uint8 token per character, and vocab.bin, the
distinct bytes in index order (for turning generated tokens back into text). From these files train_gpt
trains exactly as from the text (same windows, same losses)."""
import os
import sys

text_dir, out_dir = (sys.argv[1], sys.argv[2]) if len(sys.argv) == 3 else ("/usr/share/common-licenses", sys.argv[1])
names = sorted(n for n in os.listdir(text_dir)
               if not n.startswith(".") and os.path.isfile(os.path.join(text_dir, n))
               and not os.path.islink(os.path.join(text_dir, n)))
text = b"".join(open(os.path.join(text_dir, n), "rb").read() for n in names)
chars = sorted(set(text))
index = bytes.maketrans(bytes(chars), bytes(range(len(chars))))
tokens = text.translate(index)
n_train = len(tokens) - len(tokens) // 10
os.makedirs(out_dir, exist_ok=True)
for name, data in (("train.bin", tokens[:n_train]), ("val.bin", tokens[n_train:]), ("vocab.bin", bytes(chars))):
    with open(os.path.join(out_dir, name), "wb") as f:
        f.write(data)
print("%d characters (vocabulary %d) -> %s" % (len(tokens), len(chars), out_dir))
