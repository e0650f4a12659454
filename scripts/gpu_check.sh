#!/usr/bin/env bash
# Builds accel against the CUDA LibTorch of the python3 on PATH (a pip torch: its cmake files, headers, and
# the nvidia-* wheels' NCCL) and runs what needs a GPU: capi_test_cuda (device placement, GPU vs CPU training,
# fp16/bf16, checkpoints between GPU and CPU), the NCCL backend's tests in a world of one process,
# the MLP example trained over NCCL against the same run without a backend (same losses expected), and two
# processes on one GPU (NCCL refuses a GPU shared by two ranks: the launch must fail with that reason, not
# hang). Run once on an H200 (docs/get-started/install.md, "Using the library"). Debian's cJSON,
# yaml-cpp, protobuf and GoogleTest come from .debs unpacked under /tmp (ACCEL_DEVDEBS, default .devdeps/debs:
# `apt-get download` them there first), since nothing can be installed on that machine.
# Writes its logs to $OUT (default /tmp/accel_gpu). Usage: bash scripts/gpu_check.sh [--headers | --build-only]
# (--headers: also LibTorch's include folder as torch_include.tar.xz; GPU_CHECK_SUITE=1: then the unit, capi and
# example entries of ctest too; GPU_CHECK_TARGETS: what to build; GPU_CHECK_BUILD_TIMEOUT: seconds per ninja run).
# GPU_CHECK_BENCH=1: bench_overhead on the GPU and the CPU. GPU_CHECK_REAL=1: first accel against the machine's
# transformers and PEFT (tests/python/transformers_real_check.py; the cases come back as real_cases.tar.gz).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/accel_gpu}
mkdir -p "$out"
root=/tmp/accel_devroot
mkdir -p $root
for f in ${ACCEL_DEVDEBS:-.devdeps/debs}/*.deb; do
    # zlib and OpenSSL only where the machine lacks their headers: their libraries are everyone's there too.
    case "$(basename "$f")" in
        zlib1g*) [ -f /usr/include/zlib.h ] && continue ;;
        libssl*) [ -f /usr/include/openssl/ssl.h ] && continue ;;
    esac
    dpkg -x "$f" $root
done
multi=$root/usr/lib/x86_64-linux-gnu
# Some of Debian's CMake package files name absolute paths: point them into the unpacked tree.
sed -i "s#\"/usr/lib/x86_64-linux-gnu#\"$multi#g; s#\"/usr/include#\"$root/usr/include#g" $multi/cmake/*/*.cmake
tp=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')
sp=$(dirname "$tp")
nccl_h=$(find "$sp"/nvidia -name nccl.h | head -1)
nccl_lib=$(dirname "$(find "$sp"/nvidia -name 'libnccl.so*' | head -1)")
cudart_lib=$(dirname "$(find "$sp"/nvidia -name 'libcudart.so*' | head -1)")
export LD_LIBRARY_PATH=$multi:$nccl_lib:$cudart_lib:$tp/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "cxx11abi", torch.compiled_with_cxx11_abi())'
    echo "nccl.h $nccl_h; libnccl in $nccl_lib; libcudart in $cudart_lib"
    gcc --version | head -1; cmake --version | head -1; ldd --version | head -1
} > "$out/env.txt" 2>&1
cat "$out/env.txt"
if [ "${1:-}" = --headers ]; then
    # (headers for checking sources against this LibTorch elsewhere: g++ -fsyntax-only -isystem include ...)
    tar -C "$tp" -cf - include share/cmake | xz -T0 -4 > "$out/torch_include.tar.xz"
fi
b=/tmp/accel_gpu_build
cmake -G Ninja -S . -B $b -DCMAKE_BUILD_TYPE=Release -DACCEL_WERROR=OFF -DACCEL_BUILD_BINDINGS=OFF \
    -DACCEL_BUILD_BENCH=$([ "${GPU_CHECK_BENCH:-0}" = 1 ] && echo ON || echo OFF) -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON -DACCEL_NCCL=ON \
    -DNCCL_ROOT="$(dirname "$(dirname "$nccl_h")")" -DPython3_EXECUTABLE="$(command -v python3)" \
    -DCMAKE_PREFIX_PATH="$tp/share/cmake;$root/usr;$multi/cmake" \
    -DProtobuf_PROTOC_EXECUTABLE=$root/usr/bin/protoc -DProtobuf_INCLUDE_DIR=$root/usr/include \
    -DProtobuf_LIBRARY=$multi/libprotobuf.so -DProtobuf_LITE_LIBRARY=$multi/libprotobuf-lite.so \
    > "$out/configure.log" 2>&1 || { tail -40 "$out/configure.log"; exit 1; }
grep -E "accel:|Torch|CUDA" "$out/configure.log" | head
if [ "${GPU_CHECK_REAL:-0}" = 1 ]; then
    # accel against the real transformers / PEFT of this machine's python3 (tests/python/transformers_real_check.py):
    # the cases are written while libaccel builds, then checked through it, then accel's folders read back there.
    real=/tmp/accel_real_cases
    rm -rf $real
    python3 tests/python/transformers_real_check.py make $real > "$out/real_make.log" 2>&1 &
    maker=$!
    timeout "${GPU_CHECK_BUILD_TIMEOUT:-900}" ninja -C $b -j"$(nproc)" accel > "$out/build_accel.log" 2>&1
    echo "libaccel build: exit $?"; grep -m 20 'error:' "$out/build_accel.log"
    wait $maker; echo "real cases written: exit $?"; tail -3 "$out/real_make.log"
    python3 tests/python/transformers_real_check.py check $b/libaccel.so $real 2>&1 | tee "$out/real_check.log"
    python3 tests/python/transformers_real_check.py reverse $real 2>&1 | tee "$out/real_reverse.log"
    tar -C /tmp -czf "${GPU_CHECK_REAL_TAR:-$out/real_cases.tar.gz}" accel_real_cases
fi
targets=${GPU_CHECK_TARGETS:-accel accel_cli train_mlp capi_test_distributed capi_test_cuda accel_unit_tests nccl_link_check}
[ "${GPU_CHECK_SUITE:-0}" = 1 ] && targets=all
[ "${GPU_CHECK_BENCH:-0}" = 1 ] && targets="$targets bench_overhead"
timeout "${GPU_CHECK_BUILD_TIMEOUT:-900}" ninja -C $b -k 0 -j"$(nproc)" $targets > "$out/build.log" 2>&1
echo "build: exit $?; $(grep -c 'error:' "$out/build.log") error lines"
grep -m 30 'error:' "$out/build.log"
[ -f $b/libaccel.so ] || exit 1
[ "${1:-}" = --build-only ] && exit 0
nvidia-smi --query-gpu=name --format=csv,noheader >/dev/null 2>&1 || echo "no GPU here: the NCCL checks below report why"
# Device placement, training on cuda:0 against the CPU, bf16/fp16, checkpoints between GPU and CPU, DLPack.
(cd $b/tests/capi && ./capi_test_cuda; echo "capi_test_cuda: exit $?") 2>&1 | tee "$out/cuda.log"
$b/tests/unit/accel_unit_tests --gtest_filter='NcclCommunicator.*' 2>&1 | tee "$out/unit_nccl.log"
(cd $b && ctest -R 'nccl' --output-on-failure --timeout 120) 2>&1 | tee "$out/ctest_nccl.log"
# The MLP example over NCCL (world of one: each gradient goes through a device buffer and back) must print
# what it prints with no distributed backend.
nccl_cfg='{"kwargs_handlers": {"init_process_group": {"backend": "nccl"}}}'
(cd $b/examples && ./train_mlp > "$out/mlp_single.txt" 2>&1; echo "single: exit $?";
 ./train_mlp "$nccl_cfg" > "$out/mlp_nccl.txt" 2>&1; echo "nccl: exit $?")
# (the per-epoch times in brackets differ)
if diff <(sed 's/ *([0-9.]* s)//' "$out/mlp_single.txt") <(sed 's/ *([0-9.]* s)//' "$out/mlp_nccl.txt") \
    > "$out/mlp_diff.txt"; then echo "MLP over NCCL: same output"
else echo "MLP over NCCL: outputs differ"; head -20 "$out/mlp_diff.txt"; fi
# Two ranks on one GPU: NCCL cannot; accel launch must end (not hang) with each rank saying why.
timeout 120 $b/bin/accel launch --num_processes 2 --main_process_port 29533 $b/examples/train_mlp "$nccl_cfg" \
    > "$out/two_ranks.txt" 2>&1
echo "two ranks on one GPU: exit $?"; tail -15 "$out/two_ranks.txt"
# CPU affinity near the GPU (issue 41.4, tested here only on fake sysfs trees): the CPUs a process started by
# accel launch --enable_cpu_affinity may use should lie within GPU 0's local_cpulist (printed side by side).
gpu_bus=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader 2>/dev/null | head -1 | cut -c5- | tr 'A-F' 'a-f')
echo "GPU 0 ($gpu_bus) local_cpulist: $(cat "/sys/bus/pci/devices/$gpu_bus/local_cpulist" 2>&1)"
timeout 60 $b/bin/accel launch --enable_cpu_affinity --num_processes 1 /bin/sh -c 'grep Cpus_allowed_list /proc/self/status' \
    > "$out/affinity.txt" 2>&1
echo "under accel launch --enable_cpu_affinity: $(grep -h Cpus_allowed_list "$out/affinity.txt" || tail -3 "$out/affinity.txt")"
if [ "${GPU_CHECK_SUITE:-0}" = 1 ]; then
    # The rest of the single-process suite against this LibTorch (gloo-based entries fail where it has no Gloo).
    # Models and batches go to the GPU by default; the entries that fail there run again on the CPU
    # (ACCELERATE_USE_CPU=1), which tells failures of GPU placement from failures of this build.
    (cd $b && timeout 180 ctest -L 'unit|capi|example' -j"$(nproc)" --timeout 120 --output-on-failure) \
        > "$out/ctest_suite.log" 2>&1
    grep -E "tests passed|tests failed|\*\*\*|Failed|Timeout" "$out/ctest_suite.log" | tail -25
    echo "== the failed ones again, on the CPU"
    (cd $b && ACCELERATE_USE_CPU=1 timeout 100 ctest --rerun-failed -j"$(nproc)" --timeout 120 --output-on-failure) \
        > "$out/ctest_suite_cpu.log" 2>&1
    grep -E "tests passed|tests failed|\*\*\*|Failed|Timeout" "$out/ctest_suite_cpu.log" | tail -25
fi
if [ "${GPU_CHECK_BENCH:-0}" = 1 ]; then
    # accel's per-step overhead against a hand-written LibTorch loop on the GPU, then the same on the CPU.
    for batch in 64 4096; do
        timeout 120 $b/bench/bench_overhead 7 50 1024,1024,1024,10 $batch 2>&1 | grep -v autocast_mode.h | tee -a "$out/bench_overhead.txt"
    done
    ACCELERATE_USE_CPU=1 timeout 120 $b/bench/bench_overhead 5 10 1024,1024,1024,10 64 2>&1 | tee -a "$out/bench_overhead.txt"
fi
