// Token windows that stop at document boundaries ("eos_token_id" of a token-file loader): the stream is split
// into documents, each ending with (and including) an EOS token, and each document is cut into windows of its
// own, as create_from_tokens cuts a stream, the last one padded. No window mixes two documents, so no sample
// attends across a document end (Megatron's and nanoGPT's fixed windows do; this is the option for corpora
// where that matters, e.g. short documents). The boundaries are found by one sequential read of the stream
// when the loader is created (the price of having no index file); afterwards a batch reads only its windows.
#pragma once

#include "data_loader/file_datasets.hpp"

#include <cstdint>
#include <vector>

namespace accel {

struct DocumentWindowOptions {
    int64_t block_size = 0;
    int64_t stride = 0;
    int64_t eos_token_id = 0;
    int64_t pad_token_id = 0;          // inputs past a document's end
    int64_t label_pad_token_id = -100; // labels past a document's end (ignored by the losses)
};

// The windows of one document of `length` tokens: one at each multiple of `stride` that still has a label
// (start < length - 1), up to and including the first that reaches the document's end (start + block_size
// + 1 >= length); later ones would only repeat its tokens. A document of one token has none.
int64_t num_document_windows(int64_t length, int64_t block_size, int64_t stride);

// Sample i is window j of document d (documents in stream order, windows in order inside each): inputs its
// first block_size tokens, labels the next token of each; a window cut short by the document's end has its
// inputs padded with pad_token_id and its labels with label_pad_token_id.
class DocumentWindowDataset : public Dataset {
public:
    DocumentWindowDataset(TokenStream stream, const DocumentWindowOptions &options);
    int64_t size() const override { return first_window_.back(); }
    Batch get_batch(const at::Tensor &indices) const override;
    int64_t num_documents() const { return static_cast<int64_t>(doc_start_.size()); }

private:
    TokenStream stream_;
    DocumentWindowOptions o_;
    // Documents that have windows: where each starts and ends in the stream, and the index of its first
    // window (first_window_[d + 1] - first_window_[d] windows; one extra entry holds the total).
    std::vector<uint64_t> doc_start_, doc_end_;
    std::vector<int64_t> first_window_;
    void add_document(uint64_t start, uint64_t end);
};

} // namespace accel
