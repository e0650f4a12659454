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

/* Object collectives (distributed.i): the box of an accel_object_list_t, the entries a process broadcasts, and
 * the copies out of a list. */
%{
struct ObjectList { accel_object_list_t *h; };
struct ObjectItems { std::vector<std::string> items; };

namespace accel_swig {
inline const uint8_t *object_item(const ObjectList *list, int64_t index, size_t *size)
{
    const uint8_t *data = NULL;
    *size = 0;
    const accel_object_list_t *l = handle(list, "ObjectList");
    if (l == NULL)
        return NULL;
    if (index < 0) {
        fail(ACCEL_ERR_OUT_OF_RANGE, ("index: expected a non-negative index, got " + std::to_string(index)).c_str());
        return NULL;
    }
    ACCEL_CHECK(accel_object_list_get_item(l, (size_t)index, &data, size));
    return data;
}
/* Copies entry @p index into @p out, whose size must be the entry's. */
inline void copy_object_item(const ObjectList *list, int64_t index, void *out, size_t out_len)
{
    size_t len = 0;
    const uint8_t *data = object_item(list, index, &len);
    if (data == NULL)
        return;
    if (len != out_len) {
        fail(ACCEL_ERR_INVALID_ARGUMENT, ("out: expected a buffer of " + std::to_string(len) + " bytes, got " +
                                          std::to_string(out_len)).c_str());
        return;
    }
    if (len != 0)
        memcpy(out, data, len);
}
inline ObjectList *gather_object(accel_accelerator_t *a, const void *data, size_t len)
{
    accel_object_list_t *l = NULL;
    ACCEL_CHECK(accel_accelerator_gather_object(a, (const uint8_t *)data, len, &l));
    return wrap<ObjectList>(l);
}
inline ObjectList *broadcast_object(accel_accelerator_t *a, const void *data, size_t len, int32_t from_process)
{
    accel_object_list_t *l = NULL;
    ACCEL_CHECK(accel_accelerator_broadcast_object(a, (const uint8_t *)data, len, from_process, &l));
    return wrap<ObjectList>(l);
}
inline ObjectList *broadcast_object_list(accel_accelerator_t *a, const ObjectItems *items, int32_t from_process)
{
    std::vector<const uint8_t *> data;
    std::vector<size_t> sizes;
    if (items != NULL) {
        for (const std::string &s : items->items) {
            data.push_back((const uint8_t *)s.data());
            sizes.push_back(s.size());
        }
    }
    accel_object_list_t *l = NULL;
    ACCEL_CHECK(accel_accelerator_broadcast_object_list(a, data.data(), sizes.data(), data.size(), from_process, &l));
    return wrap<ObjectList>(l);
}
} // namespace accel_swig
%}
