#include "data_loader/document_windows.hpp"

#include "common/error.hpp"

#include <algorithm>

namespace accel {

int64_t num_document_windows(int64_t length, int64_t block_size, int64_t stride)
{
    const int64_t window = block_size + 1;
    if (length < 2) return 0;
    if (length <= window) return 1;
    const int64_t full = (length - window) / stride + 1; // windows that fit whole
    const int64_t last = (full - 1) * stride;            // the last whole one's start
    if (last + window == length) return full;            // it ends exactly at the document's end
    return full * stride < length - 1 ? full + 1 : full; // a short one for the tail, if it has a label
}

DocumentWindowDataset::DocumentWindowDataset(TokenStream stream, const DocumentWindowOptions &options)
    : stream_(std::move(stream)), o_(options)
{
    first_window_.push_back(0);
    // One pass over the stream in chunks of 1 Mi tokens (8 MiB widened), reading with pread as batches do.
    constexpr uint64_t kChunk = uint64_t{1} << 20;
    std::vector<int64_t> buf(static_cast<size_t>(std::min<uint64_t>(kChunk, std::max<uint64_t>(stream_.size(), 1))));
    uint64_t doc = 0;
    for (uint64_t at = 0; at < stream_.size(); at += buf.size()) {
        const uint64_t n = std::min<uint64_t>(buf.size(), stream_.size() - at);
        stream_.read(at, n, buf.data());
        for (uint64_t i = 0; i < n; ++i)
            if (buf[i] == o_.eos_token_id) {
                add_document(doc, at + i + 1); // the EOS ends its document: the model learns to predict it
                doc = at + i + 1;
            }
    }
    add_document(doc, stream_.size()); // the tokens after the last EOS (none when the stream ends with one)
    if (size() == 0)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "files: no document of at least 2 tokens between the EOS tokens (" +
                                             std::to_string(o_.eos_token_id) + ") of " + std::to_string(stream_.size()) +
                                             " tokens: no window has a label (is eos_token_id right?)");
}

void DocumentWindowDataset::add_document(uint64_t start, uint64_t end)
{
    const int64_t n = num_document_windows(static_cast<int64_t>(end - start), o_.block_size, o_.stride);
    if (n == 0) return;
    doc_start_.push_back(start);
    doc_end_.push_back(end);
    first_window_.push_back(first_window_.back() + n);
}

Batch DocumentWindowDataset::get_batch(const at::Tensor &indices) const
{
    const at::Tensor idx = indices.to(at::kLong).contiguous();
    const int64_t n = idx.numel(), b = o_.block_size;
    Batch out;
    out.inputs = at::empty({n, b}, at::kLong);
    out.labels = at::empty({n, b}, at::kLong);
    int64_t *in = out.inputs.data_ptr<int64_t>(), *lab = out.labels.data_ptr<int64_t>();
    std::vector<int64_t> window(static_cast<size_t>(b + 1));
    for (int64_t i = 0; i < n; ++i) {
        const int64_t k = idx.data_ptr<int64_t>()[i];
        if (k < 0 || k >= size())
            fail(ACCEL_ERR_OUT_OF_RANGE, "dataset: sample index " + std::to_string(k) + " outside [0, " +
                                             std::to_string(size()) + ")");
        // The document holding window k: the last one whose first window is at or before k.
        const size_t d = static_cast<size_t>(std::upper_bound(first_window_.begin(), first_window_.end(), k) -
                                              first_window_.begin()) - 1;
        const uint64_t start = doc_start_[d] + static_cast<uint64_t>((k - first_window_[d]) * o_.stride);
        const int64_t len = static_cast<int64_t>(std::min<uint64_t>(static_cast<uint64_t>(b + 1), doc_end_[d] - start));
        stream_.read(start, static_cast<uint64_t>(len), window.data());
        int64_t *row_in = in + i * b, *row_lab = lab + i * b;
        std::copy(window.begin(), window.begin() + (len - 1), row_in);
        std::copy(window.begin() + 1, window.begin() + len, row_lab);
        std::fill(row_in + (len - 1), row_in + b, o_.pad_token_id);
        std::fill(row_lab + (len - 1), row_lab + b, o_.label_pad_token_id);
    }
    return out;
}

} // namespace accel
