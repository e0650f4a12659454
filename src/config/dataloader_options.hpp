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

// A loader over one token stream: samples are windows of block_size + 1 tokens, `stride` apart.
struct TokenDataLoaderOptions {
    DataLoaderOptions loader;
    int64_t block_size = 0; // required
    int64_t stride = 0;     // default: block_size (windows share only their boundary token)
};

TokenDataLoaderOptions parse_token_dataloader_options(const char *json);

} // namespace accel::config
