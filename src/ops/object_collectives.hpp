// Accelerate's object collectives (gather_object, broadcast_object_list) over a Communicator, for byte
// strings: Python pickles objects, accel moves bytes the caller serialised (JSON text included). Sizes travel
// before the bytes, so every process may hold objects of its own length.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace accel::distributed {
class Communicator;
}

namespace accel::ops {

// A process's contribution: its bytes, or why its input was unusable. An invalid input is still exchanged
// (as a marker) so that every process fails with INVALID_ARGUMENT naming the process, instead of its peers
// waiting for bytes that never come.
struct ObjectInput {
    std::string_view bytes;
    std::string invalid; // empty when the input is usable
};

// Every process's bytes in rank order (all_gather_object).
std::vector<std::string> gather_object(distributed::Communicator &comm, const ObjectInput &mine, const char *op);

// Process `from_process`'s list on every process (broadcast_object_list); `items` is read on that process only.
std::vector<std::string> broadcast_object_list(distributed::Communicator &comm, const std::vector<std::string_view> &items,
                                               const std::string &invalid, int32_t from_process, const char *op);

} // namespace accel::ops
