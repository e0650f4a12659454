// Sequence packing (transformers' run_clm group_texts, TRL's packing=True): an iterable dataset of documents
// (1-d token sequences of any length) becomes a stream of equal windows. The documents, each followed by the
// EOS token when one is given, are concatenated and cut into windows of block_size + 1 tokens, block_size
// apart: inputs the first block_size tokens, labels the next token of each, as create_from_tokens' windows.
// The tokens past the last full window form a last, shorter window (inputs padded with pad_token_id, labels
// with label_pad_token_id, which the losses ignore) unless drop_last.
//
// Resume stays exact: the state is the documents' dataset state, always taken at a document boundary (whole
// documents are read), plus the tokens read but not yet fully consumed by windows.
#pragma once

#include "config/dataloader_options.hpp"
#include "data_loader/iterable_loader.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace accel {

struct PackingSpec {
    config::PackingOptions packing;
    int64_t pad_token_id = 0;
    int64_t label_pad_token_id = -100;
    bool drop_last = false;
};

// The packed stream's position: the tokens carried into the next window, the documents read in the pass
// (errors name a document by it) and the documents' own state.
struct PackingState {
    std::vector<int64_t> carry;
    int64_t documents = 0;
    std::string documents_state;
};
std::string encode_packing_state(const PackingState &s);
// Fails with ACCEL_ERR_DATA_LOSS on bytes encode_packing_state did not write.
PackingState decode_packing_state(const std::string &bytes);

class PackedSource : public IterableSource {
public:
    PackedSource(std::shared_ptr<IterableSource> documents, PackingSpec spec);
    void set_epoch(int64_t epoch) override;
    std::optional<Sample> next() override;
    bool stateful() const override { return documents_->stateful(); }
    std::string state() override;
    void load_state(const std::string &state) override;

private:
    bool read_document(); // appends the next document (and EOS) to the carry; false at the end
    Sample window(int64_t tokens);

    std::shared_ptr<IterableSource> documents_;
    PackingSpec spec_;
    std::vector<int64_t> carry_; // tokens from carry_[start_] on are not yet consumed
    size_t start_ = 0;
    int64_t documents_read_ = 0;
    bool ended_ = false; // the documents' pass ended: not asked again
};

} // namespace accel
