#include "config/batch_size_options.hpp"

#include "common/error.hpp"
#include "config/checkpoint_options.hpp" // parse_size_text
#include "config/json.hpp"

namespace accel::config {

BatchSizeOptions parse_batch_size_options(const char *json, const char *what)
{
    BatchSizeOptions o;
    JsonDocument doc(json == nullptr ? "{}" : json, what);
    JsonObject root(doc.root(), what);
    // Exclusive at both ends: 1 would never shrink the batch (an endless search), 0 would jump to zero at once.
    o.reduce_batch_size_factor = root.get_double("reduce_batch_size_factor", 0.5, 0.0, 1.0, true, true);
    if (root.is_string("max_memory_bytes"))
        o.max_memory_bytes = parse_size_text(*root.get_optional_string("max_memory_bytes"),
                                             root.path_of("max_memory_bytes"));
    else if (auto bytes = root.get_optional_int("max_memory_bytes", 1, INT64_MAX))
        o.max_memory_bytes = static_cast<uint64_t>(*bytes);
    root.finish();
    return o;
}

} // namespace accel::config
