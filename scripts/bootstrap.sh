#!/usr/bin/env bash
# The main job: install what is missing, build accel, and train the example MLP.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
"${ACCEL_BUILD_DIR:-build}"/train_mlp
