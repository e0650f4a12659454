#include <accel/tensor.h>

#include "c_api/guard.hpp"
#include "c_api/handles.hpp"

#include <ATen/DLConvertor.h>

#include <cstring>

using accel::fail;
using namespace accel::capi;

namespace accel::capi {

accel_tensor_t *new_tensor(at::Tensor t) { return new accel_tensor{std::move(t)}; }

namespace {

at::ScalarType to_scalar_type(accel_dtype_t dtype, const char *arg)
{
    switch (dtype) {
    case ACCEL_DTYPE_FLOAT32: return at::kFloat;
    case ACCEL_DTYPE_FLOAT64: return at::kDouble;
    case ACCEL_DTYPE_FLOAT16: return at::kHalf;
    case ACCEL_DTYPE_BFLOAT16: return at::kBFloat16;
    case ACCEL_DTYPE_INT8: return at::kChar;
    case ACCEL_DTYPE_UINT8: return at::kByte;
    case ACCEL_DTYPE_INT16: return at::kShort;
    case ACCEL_DTYPE_INT32: return at::kInt;
    case ACCEL_DTYPE_INT64: return at::kLong;
    case ACCEL_DTYPE_BOOL: return at::kBool;
    default: fail(ACCEL_ERR_INVALID_ARGUMENT, std::string(arg) + ": unknown dtype " + std::to_string(dtype));
    }
}

accel_dtype_t from_scalar_type(at::ScalarType t)
{
    switch (t) {
    case at::kFloat: return ACCEL_DTYPE_FLOAT32;
    case at::kDouble: return ACCEL_DTYPE_FLOAT64;
    case at::kHalf: return ACCEL_DTYPE_FLOAT16;
    case at::kBFloat16: return ACCEL_DTYPE_BFLOAT16;
    case at::kChar: return ACCEL_DTYPE_INT8;
    case at::kByte: return ACCEL_DTYPE_UINT8;
    case at::kShort: return ACCEL_DTYPE_INT16;
    case at::kInt: return ACCEL_DTYPE_INT32;
    case at::kLong: return ACCEL_DTYPE_INT64;
    case at::kBool: return ACCEL_DTYPE_BOOL;
    default:
        fail(ACCEL_ERR_UNIMPLEMENTED, std::string("tensor: dtype ") + c10::toString(t) + " has no accel_dtype_t value");
    }
}

// Tensors handed out are always contiguous CPU tensors; copy otherwise.
at::Tensor readable(const at::Tensor &t) { return t.is_contiguous() && t.device().is_cpu() ? t : t.contiguous().cpu(); }

} // namespace
} // namespace accel::capi

extern "C" {

ACCEL_API accel_status_t accel_tensor_create(const void *data, size_t nbytes, accel_dtype_t dtype,
                                             const int64_t *shape, size_t ndim, accel_tensor_t **out) noexcept
{
    return guarded([&] {
        out_param(out);
        at::ScalarType st = to_scalar_type(dtype, "dtype");
        if (ndim > 16) fail(ACCEL_ERR_INVALID_ARGUMENT, "ndim: at most 16 dimensions, got " + std::to_string(ndim));
        if (ndim > 0 && shape == nullptr) fail(ACCEL_ERR_INVALID_ARGUMENT, "shape: must not be NULL when ndim > 0");
        std::vector<int64_t> sizes(shape, shape + ndim);
        size_t numel = 1;
        for (size_t i = 0; i < ndim; ++i) {
            if (sizes[i] < 0)
                fail(ACCEL_ERR_INVALID_ARGUMENT, "shape[" + std::to_string(i) + "]: expected >= 0, got " +
                                                     std::to_string(sizes[i]));
            if (sizes[i] != 0 && numel > SIZE_MAX / static_cast<size_t>(sizes[i]))
                fail(ACCEL_ERR_INVALID_ARGUMENT, "shape: the element count overflows");
            numel *= static_cast<size_t>(sizes[i]);
        }
        const size_t elem = c10::elementSize(st);
        if (numel > SIZE_MAX / elem || numel * elem != nbytes)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "nbytes: the shape and dtype need " + std::to_string(numel) + " x " +
                                                 std::to_string(elem) + " bytes, got " + std::to_string(nbytes));
        if (nbytes > 0 && data == nullptr) fail(ACCEL_ERR_INVALID_ARGUMENT, "data: must not be NULL when nbytes > 0");
        at::Tensor t = at::empty(sizes, at::TensorOptions().dtype(st));
        if (nbytes > 0) std::memcpy(t.data_ptr(), data, nbytes);
        *out = new_tensor(std::move(t));
    });
}

ACCEL_API void accel_tensor_free(accel_tensor_t *tensor) noexcept { delete tensor; }

ACCEL_API accel_status_t accel_tensor_get_dtype(const accel_tensor_t *tensor, accel_dtype_t *out) noexcept
{
    return guarded([&] {
        auto &t = checked(tensor, "tensor");
        out_param(out);
        *out = from_scalar_type(t.tensor.scalar_type());
    });
}

ACCEL_API accel_status_t accel_tensor_get_ndim(const accel_tensor_t *tensor, size_t *out) noexcept
{
    return guarded([&] {
        auto &t = checked(tensor, "tensor");
        out_param(out);
        *out = static_cast<size_t>(t.tensor.dim());
    });
}

ACCEL_API accel_status_t accel_tensor_get_shape(const accel_tensor_t *tensor, int64_t *out, size_t out_len) noexcept
{
    return guarded([&] {
        auto &t = checked(tensor, "tensor");
        const size_t ndim = static_cast<size_t>(t.tensor.dim());
        if (out == nullptr && ndim > 0) fail(ACCEL_ERR_INVALID_ARGUMENT, "out: must not be NULL");
        if (out_len < ndim)
            fail(ACCEL_ERR_OUT_OF_RANGE, "out_len: the tensor has " + std::to_string(ndim) + " dimensions, got room for " +
                                             std::to_string(out_len));
        for (size_t i = 0; i < ndim; ++i) out[i] = t.tensor.size(static_cast<int64_t>(i));
    });
}

ACCEL_API accel_status_t accel_tensor_get_numel(const accel_tensor_t *tensor, int64_t *out) noexcept
{
    return guarded([&] {
        auto &t = checked(tensor, "tensor");
        out_param(out);
        *out = t.tensor.numel();
    });
}

ACCEL_API accel_status_t accel_tensor_get_nbytes(const accel_tensor_t *tensor, size_t *out) noexcept
{
    return guarded([&] {
        auto &t = checked(tensor, "tensor");
        out_param(out);
        *out = static_cast<size_t>(t.tensor.numel()) * t.tensor.element_size();
    });
}

ACCEL_API accel_status_t accel_tensor_get_device(const accel_tensor_t *tensor, char **out) noexcept
{
    return guarded([&] {
        auto &t = checked(tensor, "tensor");
        out_param(out);
        *out = owned_string(t.tensor.device().str());
    });
}

ACCEL_API accel_status_t accel_tensor_copy_to_buffer(const accel_tensor_t *tensor, void *out, size_t nbytes) noexcept
{
    return guarded([&] {
        auto &t = checked(tensor, "tensor");
        const size_t need = static_cast<size_t>(t.tensor.numel()) * t.tensor.element_size();
        if (nbytes != need)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "nbytes: the tensor holds " + std::to_string(need) + " bytes, got " +
                                                 std::to_string(nbytes));
        if (out == nullptr && need > 0) fail(ACCEL_ERR_INVALID_ARGUMENT, "out: must not be NULL");
        if (need == 0) return;
        at::Tensor src = readable(t.tensor.detach());
        std::memcpy(out, src.data_ptr(), need);
    });
}

ACCEL_API accel_status_t accel_tensor_get_item(const accel_tensor_t *tensor, double *out) noexcept
{
    return guarded([&] {
        auto &t = checked(tensor, "tensor");
        out_param(out);
        if (t.tensor.numel() != 1)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "tensor: expected one element, got " + std::to_string(t.tensor.numel()));
        *out = t.tensor.item<double>();
    });
}

ACCEL_API accel_status_t accel_tensor_to_dlpack(const accel_tensor_t *tensor, void **out) noexcept
{
    return guarded([&] {
        out_param(out);
        auto &t = checked(tensor, "tensor");
        // DLPack cannot describe autograd; the export shares memory with a detached view.
        *out = at::toDLPack(t.tensor.detach());
    });
}

ACCEL_API accel_status_t accel_tensor_create_from_dlpack(void *managed_tensor, accel_tensor_t **out) noexcept
{
    return guarded([&] {
        out_param(out);
        if (managed_tensor == nullptr) fail(ACCEL_ERR_INVALID_ARGUMENT, "managed_tensor: must not be NULL");
        auto *m = static_cast<DLManagedTensor *>(managed_tensor);
        if (m->dl_tensor.ndim < 0 || (m->dl_tensor.ndim > 0 && m->dl_tensor.shape == nullptr))
            fail(ACCEL_ERR_INVALID_ARGUMENT, "managed_tensor: invalid ndim/shape");
        int64_t numel = 1;
        for (int i = 0; i < m->dl_tensor.ndim; ++i) {
            if (m->dl_tensor.shape[i] < 0) fail(ACCEL_ERR_INVALID_ARGUMENT, "managed_tensor: negative size");
            numel *= m->dl_tensor.shape[i];
        }
        if (numel > 0 && m->dl_tensor.data == nullptr)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "managed_tensor: data is NULL");
        const auto where = m->dl_tensor.device.device_type;
        if (where == kDLCUDA && !at::hasCUDA())
            fail(ACCEL_ERR_UNIMPLEMENTED, "managed_tensor: GPU memory (kDLCUDA), and this LibTorch has no CUDA");
        if (where != kDLCPU && where != kDLCUDA)
            fail(ACCEL_ERR_UNIMPLEMENTED, "managed_tensor: device type " + std::to_string(static_cast<int>(where)) +
                                              " (only host memory and CUDA memory can be imported)");
        // fromDLPack validates the dtype and takes ownership only when it succeeds.
        at::Tensor t;
        try {
            t = at::fromDLPack(m);
        } catch (const c10::Error &e) {
            // A dtype LibTorch cannot represent is the caller's input, not an internal error.
            const DLDataType &dt = m->dl_tensor.dtype;
            fail(ACCEL_ERR_INVALID_ARGUMENT, "managed_tensor: unsupported dtype (code " + std::to_string(dt.code) +
                                                 ", bits " + std::to_string(dt.bits) + ", lanes " +
                                                 std::to_string(dt.lanes) + "): " + e.what_without_backtrace());
        }
        *out = new_tensor(std::move(t));
    });
}

ACCEL_API accel_status_t accel_dtype_get_size(accel_dtype_t dtype, size_t *out) noexcept
{
    return guarded([&] {
        at::ScalarType st = to_scalar_type(dtype, "dtype");
        out_param(out);
        *out = c10::elementSize(st);
    });
}

} // extern "C"
