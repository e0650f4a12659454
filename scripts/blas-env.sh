# Sourced (`. scripts/blas-env.sh BUILD_DIR`): exports OPENBLAS_CORETYPE as `accel launch` sets it for its
# processes when OpenBLAS does not know this CPU (src/common/blas_kernels.hpp), so that processes started otherwise
# (mpirun, a test's single-process reference) run the same BLAS kernels: the same speed and the same bits.
# A value already in the environment is kept. Needs the built accel program.
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  _accel_core=$("${1:-build}/bin/accel" env 2>/dev/null | sed -n 's/.*OPENBLAS_CORETYPE=\([A-Za-z0-9]*\) set before.*/\1/p')
  if [ -n "$_accel_core" ]; then
    export OPENBLAS_CORETYPE=$_accel_core
    echo "OPENBLAS_CORETYPE=$_accel_core (OpenBLAS does not know this CPU; accel launch sets the same)" >&2
  fi
  unset _accel_core
fi
