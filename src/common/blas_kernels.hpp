// Which kernels OpenBLAS chose for this CPU. OpenBLAS picks them by CPU model when it is loaded; a CPU newer
// than the library (Debian 12's 0.3.21 on Sapphire Rapids) gets its generic pre-AVX kernels ("Prescott"),
// and float32 matrix products run 2-3x slower (BENCHMARKS.md, "BLAS kernels"). OPENBLAS_CORETYPE, read
// when the library is loaded, names the kernels instead, so it must be set before a process starts:
// accel launch sets it for its processes, accel env reports it, the first accelerator of a process
// started otherwise warns. Compiled into libaccel and into the accel program.
#pragma once

#include <optional>
#include <string>

namespace accel {

struct BlasKernels {
    std::string chosen;    // openblas_get_corename() in this process
    std::string suggested; // OPENBLAS_CORETYPE for this CPU's vector units; empty when `chosen` already uses them
};

// nullopt when LibTorch does not run on OpenBLAS (the name is looked up in the loaded libraries).
std::optional<BlasKernels> openblas_kernels();
// OpenBLAS's choice when it is the generic one and OPENBLAS_CORETYPE is unset (or empty), so that a process
// started from this one would get the generic kernels too: what launch sets, and the warning names.
std::optional<BlasKernels> generic_openblas_kernels();

} // namespace accel
