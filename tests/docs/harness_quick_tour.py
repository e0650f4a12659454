"""Harness of the quick tour's Python block (tests/docs/run_snippets.py puts the block in place of the snippet
line below): it gives the block a learnable data set and checks that both of its loops trained."""
import math
import random

import accel

random.seed(42)
N, F, C = 2048, 16, 4
x_array, y_array = [], []
for _ in range(N):
    row = [random.random() - 0.5 for _ in range(F)]
    x_array += row
    y_array.append(max(range(C), key=lambda c: row[c]))

@SNIPPET@

final = loss.item() if hasattr(loss, "item") else float(loss)
print("last loss %.4f" % final)
assert math.isfinite(final) and final < math.log(C), final
