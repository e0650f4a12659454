/** @file
 * tensors crossing the ABI: copies in and out of caller buffers, and DLPack. */
#ifndef ACCEL_TENSOR_H
#define ACCEL_TENSOR_H

#include <accel/common.h>
#include <accel/status.h>
#include <accel/types.h>

ACCEL_BEGIN_DECLS

/**
 * Create a CPU tensor by copying @p nbytes bytes from @p data.
 *
 * @param data   Row-major (C-contiguous) elements; may be NULL only when nbytes == 0.
 * @param nbytes Must equal product(shape) * size of @p dtype.
 * @param dtype  One of accel_dtype_enum.
 * @param shape  @p ndim non-negative sizes; may be NULL when ndim == 0 (a scalar).
 * @param ndim   Number of dimensions, at most 16.
 * @param out    Receives the new tensor; NULL on failure.
 * Ownership: the data is copied before the call returns; free *out with accel_tensor_free().
 * Threads: any thread.
 *
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_tensor_create(const void *data, size_t nbytes,
                                                             accel_dtype_t dtype, const int64_t *shape,
                                                             size_t ndim, accel_tensor_t **out) ACCEL_NOEXCEPT;

/**
 * Frees a tensor. NULL is fine.
 *
 * @param tensor  The handle to free, or NULL (then nothing happens).
 * Ownership: takes @p tensor: it must not be used after the call.
 * Threads: a tensor may move between threads but must not be used from two threads at once.
 */
ACCEL_API void accel_tensor_free(accel_tensor_t *tensor) ACCEL_NOEXCEPT;

/**
 * Element type of @p tensor.
 *
 * @param tensor  The tensor (borrowed for the call). Must not be NULL.
 * @param out  Receives the element type. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: a tensor may move between threads but must not be used from two threads at once.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_tensor_get_dtype(const accel_tensor_t *tensor,
                                                                accel_dtype_t *out) ACCEL_NOEXCEPT;
/**
 * Number of dimensions of @p tensor.
 *
 * @param tensor  The tensor (borrowed for the call). Must not be NULL.
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: a tensor may move between threads but must not be used from two threads at once.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_tensor_get_ndim(const accel_tensor_t *tensor,
                                                               size_t *out) ACCEL_NOEXCEPT;
/**
 * Sizes of @p tensor: writes ndim values into @p out (capacity @p out_len).
 * @return ACCEL_ERR_OUT_OF_RANGE if out_len < ndim.
 *
 * @param tensor  The tensor (borrowed for the call). Must not be NULL.
 * @param out  Array of @p out_len elements receiving the sizes. Must not be NULL.
 * @param out_len  Capacity of @p out, >= the tensor's number of dimensions.
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: a tensor may move between threads but must not be used from two threads at once.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_tensor_get_shape(const accel_tensor_t *tensor, int64_t *out,
                                                                size_t out_len) ACCEL_NOEXCEPT;
/**
 * Number of elements of @p tensor.
 *
 * @param tensor  The tensor (borrowed for the call). Must not be NULL.
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: a tensor may move between threads but must not be used from two threads at once.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_tensor_get_numel(const accel_tensor_t *tensor,
                                                                int64_t *out) ACCEL_NOEXCEPT;
/**
 * Size in bytes of the tensor's elements (numel * element size).
 *
 * @param tensor  The tensor (borrowed for the call). Must not be NULL.
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: a tensor may move between threads but must not be used from two threads at once.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_tensor_get_nbytes(const accel_tensor_t *tensor,
                                                                 size_t *out) ACCEL_NOEXCEPT;

/**
 * Where the elements live, as str(torch.device) prints it: "cpu", "cuda:0", ... Free *out with
 * accel_string_free(). Reading elements (copy_to_buffer, get_item) works wherever they are.
 *
 * @param tensor  The tensor (borrowed for the call). Must not be NULL.
 * @param out  Receives a NUL-terminated string owned by the caller, who frees it with accel_string_free(); NULL on
 *             failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its handle arguments for the call; the caller owns what *out receives.
 * Threads: a tensor may move between threads but must not be used from two threads at once.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_tensor_get_device(const accel_tensor_t *tensor,
                                                                 char **out) ACCEL_NOEXCEPT;

/**
 * Copy the elements, row-major, into the caller's buffer (from a GPU: through host memory).
 * @param nbytes Must equal accel_tensor_get_nbytes(); else ACCEL_ERR_INVALID_ARGUMENT.
 *
 * @param tensor  The tensor (borrowed for the call). Must not be NULL.
 * @param out  The caller's buffer of @p nbytes bytes. Must not be NULL unless @p nbytes is 0.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: a tensor may move between threads but must not be used from two threads at once.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_tensor_copy_to_buffer(const accel_tensor_t *tensor, void *out,
                                                                     size_t nbytes) ACCEL_NOEXCEPT;

/**
 * The value of a one-element tensor as a double (e.g. a loss).
 * @return ACCEL_ERR_INVALID_ARGUMENT if the tensor has more or fewer than one element.
 *
 * @param tensor  The tensor (borrowed for the call). Must not be NULL.
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: a tensor may move between threads but must not be used from two threads at once.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_tensor_get_item(const accel_tensor_t *tensor,
                                                               double *out) ACCEL_NOEXCEPT;

/**
 * Export as a DLPack `DLManagedTensor *` (DLPack 0.x ABI, as in dlpack.h) sharing the tensor's memory
 * (on a GPU: device kDLCUDA, no copy).
 * Ownership: the consumer owns *out and must call its `deleter` exactly once; the memory stays valid
 * until then, even after accel_tensor_free(tensor).
 *
 * @param tensor  The tensor (borrowed for the call). Must not be NULL.
 * @param out  Receives the `DLManagedTensor *`; NULL on failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Threads: a tensor may move between threads but must not be used from two threads at once.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_tensor_to_dlpack(const accel_tensor_t *tensor,
                                                                void **out) ACCEL_NOEXCEPT;

/**
 * Import a DLPack `DLManagedTensor *` without copying: host memory (kDLCPU), or GPU memory (kDLCUDA) where this
 * LibTorch has CUDA (else ACCEL_ERR_UNIMPLEMENTED).
 * Ownership: on ACCEL_OK the library owns @p managed_tensor and calls its deleter when the last tensor
 * using the memory is freed; on failure ownership stays with the caller.
 *
 * @param managed_tensor  A `DLManagedTensor *` (see Ownership). Must not be NULL.
 * @param out  Receives a new tensor handle, owned by the caller, who frees it with accel_tensor_free(); NULL on
 *             failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Threads: a tensor may move between threads but must not be used from two threads at once.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_tensor_create_from_dlpack(void *managed_tensor,
                                                                         accel_tensor_t **out) ACCEL_NOEXCEPT;

/**
 * Size in bytes of one element of @p dtype (e.g. 4 for ACCEL_DTYPE_FLOAT32).
 *
 * @param dtype  One of accel_dtype_enum.
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: safe from any thread.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_dtype_get_size(accel_dtype_t dtype, size_t *out) ACCEL_NOEXCEPT;

ACCEL_END_DECLS

#endif /* ACCEL_TENSOR_H */
