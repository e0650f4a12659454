// The small C-style layer between accel and NCCL / the CUDA runtime: the only header of accel that
// includes nccl.h and cuda_runtime_api.h (included by nccl_api.cpp, nccl_communicator.cpp and the
// link check in tests/distributed; every other file stays free of CUDA headers).
//
// The functions are not linked: nccl_api() opens libcudart and libnccl.so.2 with dlopen at first use
// and resolves each name below. Why (measured on the 2-core build machine, runs interleaved): linking
// libnccl.so.2 (218 MB) and libcudart.so.13 adds 1-3 ms to a process start (an empty C program: ~1 ms
// -> ~2-4 ms), lost in the noise of a program using libaccel (~410-430 ms either way, LibTorch's
// start-up). Start-up is not the reason. The reason: a libaccel.so with those NEEDED entries does not
// load at all on a machine without the CUDA libraries, so one build could not serve CPU-only and GPU
// machines. Loading at first use costs nothing to processes that never pick
// "nccl", and a machine without the libraries gets a status naming the library that was not found.
// The types come from the headers (decltype below), so a signature mismatch is a compile error, and
// tests/distributed/nccl_link_check.cpp links every listed name against the real libraries.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>
#include <type_traits>

#if !defined(NCCL_VERSION_CODE) || NCCL_VERSION_CODE < 21400
#error "accel's nccl backend needs nccl.h from NCCL 2.14 or newer (ncclConfig_t, nonblocking communicators)"
#endif

// X(name) for every CUDA runtime function accel calls; S(name, type) for those C++ overloads in
// cuda_runtime_api.h (templates taking typed pointers), where the function type `type` selects the C one.
#define ACCEL_CUDART_FUNCTIONS(X, S)                                                                            \
    X(cudaGetDeviceCount) X(cudaGetErrorName) X(cudaGetErrorString) X(cudaSetDevice) X(cudaStreamCreate)     \
    X(cudaStreamDestroy) X(cudaEventCreateWithFlags) X(cudaEventRecord) X(cudaEventQuery) X(cudaEventDestroy) \
    X(cudaFreeAsync) X(cudaFreeHost) X(cudaMemcpyAsync)                                                       \
    S(cudaMallocAsync, cudaError_t(void **, size_t, cudaStream_t))                                        \
    S(cudaMallocHost, cudaError_t(void **, size_t))

// X(name) for every NCCL function accel calls.
#define ACCEL_NCCL_FUNCTIONS(X)                                                                                 \
    X(ncclGetVersion) X(ncclGetUniqueId) X(ncclCommInitRankConfig) X(ncclCommDestroy) X(ncclCommAbort)        \
    X(ncclCommGetAsyncError) X(ncclGetErrorString) X(ncclGetLastError) X(ncclAllReduce) X(ncclBroadcast)     \
    X(ncclReduceScatter) X(ncclAllGather) X(ncclSend) X(ncclRecv)

namespace accel::distributed {

struct NcclApi {
#define ACCEL_NCCL_API_MEMBER(f) decltype(&::f) f = nullptr;
#define ACCEL_NCCL_API_TYPED_MEMBER(f, type) std::add_pointer_t<type> f = nullptr;
    ACCEL_CUDART_FUNCTIONS(ACCEL_NCCL_API_MEMBER, ACCEL_NCCL_API_TYPED_MEMBER)
    ACCEL_NCCL_FUNCTIONS(ACCEL_NCCL_API_MEMBER)
#undef ACCEL_NCCL_API_MEMBER
#undef ACCEL_NCCL_API_TYPED_MEMBER
    std::string cudart_source; // where the functions were found, for messages
    std::string nccl_source;
};

// Both libraries, loaded once (thread-safe) and never unloaded. Throws accel::Error
// ACCEL_ERR_UNIMPLEMENTED naming the library that could not be loaded or the function it lacks;
// every later call repeats that failure.
const NcclApi &nccl_api();

} // namespace accel::distributed
