#!/usr/bin/env bash
# Builds the documentation site into build/docs-site/ (ACCEL_BUILD_DIR picks another build folder): docs/ staged
# with its generated parts (each `accel` command's --help from the built binary, the status table from
# include/accel/status.h, the environment-variable index, CHANGELOG.md, BENCHMARKS.md, the Doxygen C API reference
# under api/), then `mkdocs build --strict`, then a check that every link and anchor of the site resolves.
# Any warning (mkdocs, Doxygen, a page missing from the nav, a broken link) fails it. Needs a built tree
# (`bash scripts/build.sh`) for build/bin/accel, and Debian's mkdocs, mkdocs-material and doxygen.
set -euo pipefail
cd "$(dirname "$0")/.."
exec /usr/bin/python3 scripts/docs_site.py "${ACCEL_BUILD_DIR:-build}" "$@"
