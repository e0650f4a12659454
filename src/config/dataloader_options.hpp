// Typed form of a data loader's JSON config.
#pragma once

#include <cstdint>
#include <optional>

namespace accel::config {

struct DataLoaderOptions {
    int64_t batch_size = 1;
    bool shuffle = false;
    std::optional<uint64_t> seed;
    bool drop_last = false;
};

DataLoaderOptions parse_dataloader_options(const char *json);

} // namespace accel::config
