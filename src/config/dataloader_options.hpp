// Typed form of a data loader's JSON config.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

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

// Sequence packing of an iterable dataset of documents (1-d token sequences): the documents, each followed
// by eos_token_id when given, form one stream cut into windows of block_size + 1 tokens, block_size apart
// (transformers' run_clm group_texts, TRL's packing), as accel_dataloader_create_from_tokens cuts its stream.
struct PackingOptions {
    int64_t block_size = 0; // 0: no packing
    std::optional<int64_t> eos_token_id;
};

// A loader over the caller's map-style or iterable dataset.
struct CallbackDataLoaderOptions {
    DataLoaderOptions loader;
    CollateOptions collate;
    PackingOptions packing; // iterable datasets only
};

// `iterable`: "shuffle" and "seed" are refused (a stream is shuffled by its dataset).
CallbackDataLoaderOptions parse_callback_dataloader_options(const char *json, bool iterable);

// A loader over datasets in files (accel_dataloader_create_from_files): a token stream from "files"
// (format "tokens": raw little-endian token files of "dtype"; "npy": 1-d arrays; "safetensors": the
// tensor "tensor" of each file) cut into windows, or, with "features", sample tensors (.npy paths, or tensor
// names of the safetensors "file").
struct FileDataLoaderOptions {
    enum class Format { Tokens, Npy, Safetensors };
    DataLoaderOptions loader;
    Format format = Format::Tokens;
    std::vector<std::string> files; // paths or glob patterns, in stream order
    std::string dtype;              // raw token files: required; others: checked against the file when given
    std::string tensor;             // safetensors token streams: the tensor's name
    std::string file;               // safetensors samples: the file
    std::string features, labels;   // samples: .npy paths or safetensors tensor names (labels optional)
    int64_t block_size = 0;         // token streams: required
    int64_t stride = 0;
    // Token streams: windows stop at document boundaries (each document ends with this token), the short
    // last window of a document padded with pad_token_id (inputs) and label_pad_token_id (labels).
    std::optional<int64_t> eos_token_id;
    int64_t pad_token_id = 0;
    int64_t label_pad_token_id = -100;
    bool samples() const { return !features.empty(); }
};

FileDataLoaderOptions parse_file_dataloader_options(const char *json);

} // namespace accel::config
