// The object collectives of accel/accelerator.h (gather_object, broadcast_object_list, broadcast_object, their
// JSON forms) and the accel_object_list_t that carries their results.
#include <accel/accelerator.h>

#include "c_api/accelerator_access.hpp"
#include "config/json_value.hpp"
#include "distributed/communicator.hpp"
#include "ops/object_collectives.hpp"

#include <string>
#include <vector>

struct accel_object_list {
    std::vector<std::string> items;
};

using accel::fail;
using namespace accel::capi;

namespace {
accel::distributed::Communicator &comm_of(accel_accelerator_t *accelerator)
{
    return *acc_of(accelerator).state()->comm;
}

// A local check whose failure must still reach the peers (ops::ObjectInput): its message, or "" when it passed.
template <class Check>
std::string reason_if_invalid(Check &&check)
{
    try {
        check();
        return {};
    } catch (const accel::Error &e) {
        if (e.code() != ACCEL_ERR_INVALID_ARGUMENT) throw;
        return e.what();
    }
}

std::string_view bytes_arg(const uint8_t *data, size_t size, const std::string &name)
{
    if (data == nullptr && size != 0)
        fail(ACCEL_ERR_INVALID_ARGUMENT, name + ": must not be NULL when its size is " + std::to_string(size));
    return size == 0 ? std::string_view() : std::string_view(reinterpret_cast<const char *>(data), size);
}

void emit_list(accel_object_list_t **out, std::vector<std::string> items)
{
    *out = new accel_object_list_t{std::move(items)};
}

// broadcast_object_list, broadcast_object and its JSON form: the root reads its items (`read_items` checks them; a failure
// reaches the peers, so that no process waits for an exchange that will not come).
template <class ReadItems>
std::vector<std::string> broadcast_items(accel_accelerator_t *accelerator, int32_t from_process, const char *op,
                                         ReadItems &&read_items)
{
    auto &comm = comm_of(accelerator);
    std::vector<std::string_view> list;
    std::string invalid;
    if (comm.rank() == from_process) invalid = reason_if_invalid([&] { read_items(list); });
    return accel::ops::broadcast_object_list(comm, list, invalid, from_process, op);
}
} // namespace

extern "C" {

ACCEL_API accel_status_t accel_accelerator_gather_object(accel_accelerator_t *accelerator, const uint8_t *data,
                                                         size_t size, accel_object_list_t **out) noexcept
{
    return guarded([&] {
        out_param(out);
        auto &comm = comm_of(accelerator);
        accel::ops::ObjectInput mine;
        mine.invalid = reason_if_invalid([&] { mine.bytes = bytes_arg(data, size, "data"); });
        emit_list(out, accel::ops::gather_object(comm, mine, "gather_object"));
    });
}

ACCEL_API accel_status_t accel_accelerator_broadcast_object_list(accel_accelerator_t *accelerator,
                                                                 const uint8_t *const *items, const size_t *sizes,
                                                                 size_t count, int32_t from_process,
                                                                 accel_object_list_t **out) noexcept
{
    return guarded([&] {
        out_param(out);
        emit_list(out, broadcast_items(accelerator, from_process, "broadcast_object_list", [&](std::vector<std::string_view> &list) {
            if (count != 0 && (items == nullptr || sizes == nullptr))
                fail(ACCEL_ERR_INVALID_ARGUMENT, std::string(items == nullptr ? "items" : "sizes") +
                                                     ": must not be NULL when count is " + std::to_string(count));
            for (size_t i = 0; i < count; ++i) list.push_back(bytes_arg(items[i], sizes[i], "items[" + std::to_string(i) + "]"));
        }));
    });
}

ACCEL_API accel_status_t accel_accelerator_broadcast_object(accel_accelerator_t *accelerator, const uint8_t *data,
                                                            size_t size, int32_t from_process,
                                                            accel_object_list_t **out) noexcept
{
    return guarded([&] {
        out_param(out);
        emit_list(out, broadcast_items(accelerator, from_process, "broadcast_object",
                                       [&](std::vector<std::string_view> &list) { list.push_back(bytes_arg(data, size, "data")); }));
    });
}

ACCEL_API accel_status_t accel_accelerator_gather_object_json(accel_accelerator_t *accelerator, const char *json,
                                                              char **out) noexcept
{
    return guarded([&] {
        out_param(out);
        auto &comm = comm_of(accelerator);
        std::string elements;
        accel::ops::ObjectInput mine;
        mine.invalid = reason_if_invalid([&] { elements = accel::config::json_array_elements(json, "json"); });
        mine.bytes = elements;
        // Each process sends its elements without brackets; joined with commas they are Accelerate's flattened list.
        std::string joined = "[";
        for (const std::string &part : accel::ops::gather_object(comm, mine, "gather_object")) {
            if (part.empty()) continue;
            if (joined.size() > 1) joined += ", ";
            joined += part;
        }
        *out = owned_string(joined + "]");
    });
}

ACCEL_API accel_status_t accel_accelerator_broadcast_object_json(accel_accelerator_t *accelerator, const char *json,
                                                                 int32_t from_process, char **out) noexcept
{
    return guarded([&] {
        out_param(out);
        auto received = broadcast_items(accelerator, from_process, "broadcast_object", [&](std::vector<std::string_view> &list) {
            accel::config::check_json_value(json, "json");
            list.emplace_back(json);
        });
        *out = owned_string(received.at(0));
    });
}

ACCEL_API accel_status_t accel_object_list_get_count(const accel_object_list_t *list, size_t *out) noexcept
{
    return guarded([&] {
        out_param(out);
        *out = checked(list, "list").items.size();
    });
}

ACCEL_API accel_status_t accel_object_list_get_item(const accel_object_list_t *list, size_t index,
                                                    const uint8_t **out_data, size_t *out_size) noexcept
{
    return guarded([&] {
        out_param(out_data, "out_data");
        out_param(out_size, "out_size");
        const auto &items = checked(list, "list").items;
        if (index >= items.size())
            fail(ACCEL_ERR_OUT_OF_RANGE, "index: expected 0.." + std::to_string(items.size()) + " (exclusive), got " +
                                             std::to_string(index));
        *out_data = reinterpret_cast<const uint8_t *>(items[index].data());
        *out_size = items[index].size();
    });
}

ACCEL_API void accel_object_list_free(accel_object_list_t *list) noexcept { delete list; }

} // extern "C"
