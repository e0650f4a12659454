/* dtypes.i - the typed tensor accessors' one rule, shared by Python, Java and C#.
 *
 * Reading a tensor into an array of another element type converts when every value of the tensor's dtype
 * is exact in the array's type, and refuses otherwise (ACCEL_ERR_INVALID_ARGUMENT naming both dtypes and
 * the accessors that would work). That is numpy's "safe" casting (np.can_cast(src, dst, "safe")), less
 * int64 -> float64, which numpy allows although it rounds above 2**53. float16, bfloat16 and bool are
 * read only as themselves. The rule depends on the dtypes, never on the values, so a program that works
 * on one batch works on every batch. Rust's Tensor::to_vec applies the same table
 * (bindings/rust/accel/src/lib.rs, `converts_exactly`). */

%{
#include <cstring>
#include <string>
#include <vector>

/* Messages name the method the user called: Java's toFloatArray, C#'s ToFloatArray (SWIG defines the
 * language macro at the top of each generated wrapper). */
#if defined(SWIGJAVA)
#define ACCEL_READER_NAME(java, csharp) java
#else
#define ACCEL_READER_NAME(java, csharp) csharp
#endif

namespace accel_swig {

/* The dtype as numpy and torch spell it, for messages. */
inline std::string dtype_text(int32_t dtype)
{
    switch (dtype) {
    case ACCEL_DTYPE_FLOAT32: return "float32";
    case ACCEL_DTYPE_FLOAT64: return "float64";
    case ACCEL_DTYPE_FLOAT16: return "float16";
    case ACCEL_DTYPE_BFLOAT16: return "bfloat16";
    case ACCEL_DTYPE_INT8: return "int8";
    case ACCEL_DTYPE_UINT8: return "uint8";
    case ACCEL_DTYPE_INT16: return "int16";
    case ACCEL_DTYPE_INT32: return "int32";
    case ACCEL_DTYPE_INT64: return "int64";
    case ACCEL_DTYPE_BOOL: return "bool";
    default: return "dtype " + std::to_string(dtype);
    }
}

/* Whether every value of @p from is exactly representable in @p to (the table in the comment above). */
inline bool converts_exactly(int32_t from, int32_t to)
{
    if (from == to)
        return true;
    const bool small_int = from == ACCEL_DTYPE_BOOL || from == ACCEL_DTYPE_UINT8 || from == ACCEL_DTYPE_INT8;
    switch (to) {
    case ACCEL_DTYPE_FLOAT64:
        return small_int || from == ACCEL_DTYPE_INT16 || from == ACCEL_DTYPE_INT32 || from == ACCEL_DTYPE_FLOAT16 ||
               from == ACCEL_DTYPE_BFLOAT16 || from == ACCEL_DTYPE_FLOAT32;
    case ACCEL_DTYPE_FLOAT32: /* 24-bit significand: every int16, no int32 */
        return small_int || from == ACCEL_DTYPE_INT16 || from == ACCEL_DTYPE_FLOAT16 || from == ACCEL_DTYPE_BFLOAT16;
    case ACCEL_DTYPE_INT64:
        return small_int || from == ACCEL_DTYPE_INT16 || from == ACCEL_DTYPE_INT32;
    case ACCEL_DTYPE_INT32:
        return small_int || from == ACCEL_DTYPE_INT16;
    case ACCEL_DTYPE_INT16:
        return small_int;
    case ACCEL_DTYPE_INT8:
    case ACCEL_DTYPE_UINT8:
        return from == ACCEL_DTYPE_BOOL;
    default:
        return false;
    }
}

/* The targets that take @p from exactly, for the refusal message ("float64, int32, int64"). */
inline std::string exact_targets(int32_t from)
{
    static const int32_t order[] = {ACCEL_DTYPE_FLOAT32, ACCEL_DTYPE_FLOAT64, ACCEL_DTYPE_INT32,
                                    ACCEL_DTYPE_INT64, ACCEL_DTYPE_UINT8};
    std::string s;
    for (int32_t to : order)
        if (converts_exactly(from, to))
            s += (s.empty() ? "" : ", ") + dtype_text(to);
    return s.empty() ? "none (read the raw bytes)" : s;
}

/* IEEE half -> float (subnormals, infinities and NaN included). */
inline float half_to_float(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    float v;
    if (exp == 0) {
        v = (float)mant * (1.0f / 16777216.0f); /* mant * 2^-24 */
        return sign ? -v : v;
    }
    const uint32_t bits = sign | (exp == 31 ? 0x7f800000u | (mant << 13) : ((exp + 112u) << 23) | (mant << 13));
    std::memcpy(&v, &bits, sizeof v);
    return v;
}

/* Element @p i of a buffer of @p dtype as a double (exact for every source converts_exactly accepts). */
inline double load_element(int32_t dtype, const uint8_t *base, size_t i)
{
    switch (dtype) {
    case ACCEL_DTYPE_FLOAT32: { float v; std::memcpy(&v, base + 4 * i, 4); return v; }
    case ACCEL_DTYPE_FLOAT16: { uint16_t v; std::memcpy(&v, base + 2 * i, 2); return half_to_float(v); }
    case ACCEL_DTYPE_BFLOAT16: {
        uint16_t h; std::memcpy(&h, base + 2 * i, 2);
        uint32_t bits = (uint32_t)h << 16; float v; std::memcpy(&v, &bits, 4); return v;
    }
    case ACCEL_DTYPE_INT8: return (int8_t)base[i];
    case ACCEL_DTYPE_UINT8: return base[i];
    case ACCEL_DTYPE_BOOL: return base[i] != 0;
    case ACCEL_DTYPE_INT16: { int16_t v; std::memcpy(&v, base + 2 * i, 2); return v; }
    case ACCEL_DTYPE_INT32: { int32_t v; std::memcpy(&v, base + 4 * i, 4); return v; }
    default: return 0.0; /* float64 and int64 never convert (same-dtype reads copy the bytes) */
    }
}

template <class T>
void store_all(int32_t from, const std::vector<uint8_t> &raw, size_t n, void *out)
{
    T *dst = static_cast<T *>(out);
    for (size_t i = 0; i < n; ++i)
        dst[i] = static_cast<T>(load_element(from, raw.data(), i));
}

/* Copies @p tensor's elements into @p out (@p out_count elements of @p to), converting by the rule above.
 * @p what names the accessor in messages. Returns false with the failure pending. */
inline bool copy_as(const accel_tensor_t *tensor, int32_t to, void *out, size_t out_count, const char *what)
{
    accel_dtype_t from = 0;
    int64_t numel = 0;
    size_t from_size = 0;
    if (!tensor || !check(accel_tensor_get_dtype(tensor, &from)) || !check(accel_tensor_get_numel(tensor, &numel)))
        return false;
    if (!converts_exactly(from, to)) {
        fail(ACCEL_ERR_INVALID_ARGUMENT,
             (std::string(what) + ": the tensor's dtype is " + dtype_text(from) + ", and " + dtype_text(to) +
              " cannot hold every " + dtype_text(from) + " value exactly; read it as " + exact_targets(from))
                 .c_str());
        return false;
    }
    if ((size_t)numel != out_count) {
        fail(ACCEL_ERR_INVALID_ARGUMENT, (std::string(what) + ": the tensor holds " + std::to_string(numel) + " " +
                                          dtype_text(from) + " elements, the " + dtype_text(to) + " array has " +
                                          std::to_string(out_count))
                                             .c_str());
        return false;
    }
    if (from == to) {
        size_t size = 0;
        return check(accel_dtype_get_size(to, &size)) && check(accel_tensor_copy_to_buffer(tensor, out, out_count * size));
    }
    if (!check(accel_dtype_get_size(from, &from_size)))
        return false;
    std::vector<uint8_t> raw(out_count * from_size);
    if (!check(accel_tensor_copy_to_buffer(tensor, raw.data(), raw.size())))
        return false;
    switch (to) {
    case ACCEL_DTYPE_FLOAT32: store_all<float>(from, raw, out_count, out); break;
    case ACCEL_DTYPE_FLOAT64: store_all<double>(from, raw, out_count, out); break;
    case ACCEL_DTYPE_INT64: store_all<int64_t>(from, raw, out_count, out); break;
    case ACCEL_DTYPE_INT32: store_all<int32_t>(from, raw, out_count, out); break;
    case ACCEL_DTYPE_INT16: store_all<int16_t>(from, raw, out_count, out); break;
    case ACCEL_DTYPE_INT8: store_all<int8_t>(from, raw, out_count, out); break;
    case ACCEL_DTYPE_UINT8: store_all<uint8_t>(from, raw, out_count, out); break;
    }
    return true;
}

} // namespace accel_swig
%}
