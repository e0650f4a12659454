#!/usr/bin/env bash
# Installs what accel needs from Debian 12's packages; does nothing when everything is there.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config
  libtorch-dev libgloo-dev libopenblas0   # LibTorch 1.13 (CPU); OpenBLAS instead of the reference BLAS (~25x)
  libcjson-dev libgtest-dev libgmock-dev
  libopenmpi-dev openmpi-bin              # the mpi backend and mpirun (distributed tests)
  python3
  python3-torch                          # checkpoint interop test: Python's torch.load reads accel's files
  swig python3-dev python3-pytest python3-numpy openjdk-17-jdk-headless junit5 mono-devel nunit-console
  libyaml-cpp-dev python3-yaml            # Accelerate's config files (src/config/config_file.cpp); round-trip test
  libprotobuf-dev protobuf-compiler python3-protobuf   # TensorBoard event files (src/tracking); Python read-back test
  libssl-dev                              # HMAC-SHA256 of the rendezvous token (src/distributed/rdzv_wire.cpp)
  bindgen                                 # bindings (bindings/): SWIG, Python, Java, C# (Mono), Rust's accel-sys check
  clang-14 libclang-rt-14-dev llvm-14 lld-14  # scripts/test-sanitizers.sh: clang build, ASan/UBSan, libFuzzer
  mkdocs mkdocs-material doxygen python3-matplotlib  # scripts/docs.sh: the docs site, the C API reference, plots
  python3-build lintian maven libmaven-install-plugin-java libmaven-compiler-plugin-java libmaven-jar-plugin-java
  libmaven-resources-plugin-java nuget    # scripts/package.sh: the wheel, lintian on the .debs, the Maven artifact, the .nupkg
)
# Rust: a rustup toolchain when there is one, else Debian's cargo.
command -v cargo >/dev/null 2>&1 || [ -x "$HOME/.cargo/bin/cargo" ] || packages+=(cargo)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "accel: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# LibTorch loads libblas.so.3; make sure that is OpenBLAS, not the reference BLAS.
blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || true)
case "$blas" in
  *openblas*) ;;
  *) echo "accel: warning: libblas.so.3 is $blas, not OpenBLAS; training will be slow" >&2 ;;
esac
