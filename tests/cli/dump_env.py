"""A launched worker that writes its environment to OUT_DIR/rank<RANK>.json (RANK 0 when unset, as under Accelerate's
simple launcher, which starts one process): dump_env.py OUT_DIR"""
import json
import os
import sys

with open(os.path.join(sys.argv[1], "rank%s.json" % os.environ.get("RANK", "0")), "w") as f:
    json.dump(dict(os.environ), f, indent=1, sort_keys=True)
