// Datasets read from files without loading them (accel_dataloader_create_from_files): token corpora as one
// logical stream cut into windows, and sample tensors whose first dimension is the sample. The files are
// memory-mapped for random access (no read-ahead of the whole file), and a batch reads only its own windows
// or rows, with pread: a file that became shorter since it was opened is then an error naming it, never a
// SIGBUS (a read through the map would fault). A 2 KB window's pread costs about 0.5 us more than a memcpy out
// of the map, and the loader still matches the in-memory one (bench/loader_files.c).
#pragma once

#include "common/files.hpp"
#include "config/dataloader_options.hpp"
#include "data_loader/dataset.hpp"
#include "data_loader/file_formats.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace accel {

// A run of elements inside one file: `count` elements of `type` from byte `offset` on.
struct FileSpan {
    std::shared_ptr<MappedFile> file;
    uint64_t offset = 0;
    uint64_t count = 0;
    ElemType type = ElemType::U8;
};

// Several spans (shards) read as one stream of integer tokens, widened to int64.
class TokenStream {
public:
    explicit TokenStream(std::vector<FileSpan> spans);
    uint64_t size() const { return total_; }
    // Tokens [start, start + count) into `dst` (a stretch may cross from one file into the next).
    void read(uint64_t start, uint64_t count, int64_t *dst) const;

private:
    std::vector<FileSpan> spans_;
    std::vector<uint64_t> starts_; // token index where each span begins
    uint64_t total_ = 0;
};

// Sample i is the window of block_size + 1 tokens starting at i * stride; inputs are its first block_size
// tokens, labels the last block_size (create_from_tokens' samples, from a stream in files).
class TokenWindowDataset : public Dataset {
public:
    TokenWindowDataset(TokenStream stream, int64_t block_size, int64_t stride);
    int64_t size() const override { return windows_; }
    Batch get_batch(const at::Tensor &indices) const override;

private:
    TokenStream stream_;
    int64_t block_size_, stride_, windows_;
};

// A tensor in a file whose dimension 0 is the sample (a .npy array or a safetensors tensor).
struct FileTensor {
    FileSpan span;                 // the whole tensor; span.count = numel
    std::vector<int64_t> shape;    // shape[0] samples
    std::string what;              // names it in errors ("x.npy", "d.safetensors: tensor \"x\"")
};

// Sample i is (features row i, labels row i), rows read with pread into the batch.
class FileTensorDataset : public Dataset {
public:
    FileTensorDataset(FileTensor features, std::optional<FileTensor> labels);
    int64_t size() const override { return features_.shape.empty() ? 0 : features_.shape[0]; }
    Batch get_batch(const at::Tensor &indices) const override;

private:
    FileTensor features_;
    std::optional<FileTensor> labels_;
};

// The dataset `options` describe (files opened and their headers checked now; no data read). Errors name
// the key or the file: NOT_FOUND for a missing file or a pattern matching none, DATA_LOSS for a header that
// lies, INVALID_ARGUMENT for a dtype that does not match or windows larger than the stream.
std::shared_ptr<const Dataset> open_file_dataset(const config::FileDataLoaderOptions &options);

} // namespace accel
