/* typemaps/blobs.i - helpers for the byte blobs registered for checkpointing (checkpoint.i). They sit here,
 * with the other support code, because SWIG emits every %extend body of a class where the class is first
 * declared, before any %{ %} block that appears later. */

%{
#include <string.h>

namespace accel_swig {
/* Size of the blob registered at @p index (0 with the status pending on failure). */
inline size_t checkpointing_bytes_size(const accel_accelerator_t *a, int32_t index)
{
    const uint8_t *data = NULL;
    size_t len = 0;
    if (!ACCEL_CHECK(accel_accelerator_get_checkpointing_bytes(a, index, &data, &len)))
        return 0;
    return len;
}
/* Copies the blob at @p index into @p out, whose size must be the blob's. */
inline void copy_checkpointing_bytes(const accel_accelerator_t *a, int32_t index, void *out, size_t out_len)
{
    const uint8_t *data = NULL;
    size_t len = 0;
    if (!ACCEL_CHECK(accel_accelerator_get_checkpointing_bytes(a, index, &data, &len)))
        return;
    if (len != out_len) {
        fail(ACCEL_ERR_INVALID_ARGUMENT, ("out: expected a buffer of " + std::to_string(len) + " bytes, got " +
                                          std::to_string(out_len)).c_str());
        return;
    }
    if (len != 0)
        memcpy(out, data, len);
}
inline int32_t register_bytes(accel_accelerator_t *a, const void *data, size_t len)
{
    int32_t index = -1;
    ACCEL_CHECK(accel_accelerator_register_bytes_for_checkpointing(a, (const uint8_t *)data, len, &index));
    return index;
}
} // namespace accel_swig
%}
