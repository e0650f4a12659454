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
    int64_t num_workers = 0;     // threads reading batches ahead (0: on the thread asking for the batch)
    int64_t prefetch_factor = 2; // batches read ahead per worker
};

DataLoaderOptions parse_dataloader_options(const char *json);

// A loader over one token stream: samples are windows of block_size + 1 tokens, `stride` apart.
struct TokenDataLoaderOptions {
    DataLoaderOptions loader;
    int64_t block_size = 0; // required
    int64_t stride = 0;     // default: block_size (windows share only their boundary token)
};

TokenDataLoaderOptions parse_token_dataloader_options(const char *json);

// How samples of the caller's datasets become a batch ("collate").
struct CollateOptions {
    enum class Kind { Stack, Pad };
    Kind kind = Kind::Stack;
    int64_t pad_token_id = 0;
    int64_t label_pad_token_id = -100; // the index the losses ignore
    bool causal_lm = false;            // pad: tokens t -> inputs t[:-1], labels t[1:]
};

// A loader over the caller's map-style or iterable dataset.
struct CallbackDataLoaderOptions {
    DataLoaderOptions loader;
    CollateOptions collate;
};

// `iterable`: "shuffle" and "seed" are refused (a stream is shuffled by its dataset).
CallbackDataLoaderOptions parse_callback_dataloader_options(const char *json, bool iterable);

} // namespace accel::config
