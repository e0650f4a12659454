#include "data_loader/packing.hpp"

#include "common/error.hpp"

#include <cstring>

namespace accel {

namespace {
// "accel packed stream", version 1; then the token count, the document count, the tokens, the documents' state.
constexpr char kMagic[8] = {'A', 'C', 'P', 'A', 'C', 'K', '0', '1'};
constexpr size_t kHeader = sizeof kMagic + 2 * sizeof(int64_t);

void put(std::string &out, int64_t v) { out.append(reinterpret_cast<const char *>(&v), sizeof v); }
int64_t get(const std::string &in, size_t at)
{
    int64_t v = 0;
    std::memcpy(&v, in.data() + at, sizeof v);
    return v;
}
} // namespace

std::string encode_packing_state(const PackingState &s)
{
    std::string out(kMagic, sizeof kMagic);
    put(out, static_cast<int64_t>(s.carry.size()));
    put(out, s.documents);
    out.append(reinterpret_cast<const char *>(s.carry.data()), s.carry.size() * sizeof(int64_t));
    out += s.documents_state;
    return out;
}

PackingState decode_packing_state(const std::string &bytes)
{
    const std::string what = "dataset_state of a packed loader";
    if (bytes.size() < kHeader || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
        fail(ACCEL_ERR_DATA_LOSS, what + ": not written by a packed loader (was the checkpoint saved without \"packing\"?)");
    const int64_t n = get(bytes, sizeof kMagic);
    PackingState s;
    s.documents = get(bytes, sizeof kMagic + sizeof(int64_t));
    const size_t room = (bytes.size() - kHeader) / sizeof(int64_t);
    if (n < 0 || static_cast<uint64_t>(n) > room || s.documents < 0)
        fail(ACCEL_ERR_DATA_LOSS, what + ": " + std::to_string(n) + " carried tokens and " + std::to_string(s.documents) +
                                      " documents do not fit its " + std::to_string(bytes.size()) + " bytes");
    s.carry.resize(static_cast<size_t>(n));
    // memcpy's pointers must not be null even for 0 bytes (an empty vector's data() may be).
    if (!s.carry.empty()) std::memcpy(s.carry.data(), bytes.data() + kHeader, s.carry.size() * sizeof(int64_t));
    s.documents_state = bytes.substr(kHeader + s.carry.size() * sizeof(int64_t));
    return s;
}

PackedSource::PackedSource(std::shared_ptr<IterableSource> documents, PackingSpec spec)
    : documents_(std::move(documents)), spec_(spec)
{
}

void PackedSource::set_epoch(int64_t epoch)
{
    documents_->set_epoch(epoch);
    carry_.clear();
    start_ = 0;
    documents_read_ = 0;
    ended_ = false;
}

bool PackedSource::read_document()
{
    if (ended_) return false;
    std::optional<Sample> doc = documents_->next();
    if (!doc) {
        ended_ = true;
        return false;
    }
    const std::string what = "packing: document " + std::to_string(documents_read_);
    ++documents_read_;
    if (doc->labels.defined())
        fail(ACCEL_ERR_INVALID_ARGUMENT, what + " has labels: packing makes the labels (the next token), so a "
                                                "document is its tokens alone");
    const at::Tensor &t = doc->inputs;
    if (t.dim() != 1 || !at::isIntegralType(t.scalar_type(), /*includeBool=*/false))
        fail(ACCEL_ERR_INVALID_ARGUMENT, what + " is not a 1-d integer token sequence (" + std::string(c10::toString(t.scalar_type())) +
                                            ", " + std::to_string(t.dim()) + "-d)");
    // Consumed tokens are dropped once they are half the carry: amortised O(1) per token.
    if (start_ > 0 && start_ * 2 >= carry_.size()) {
        carry_.erase(carry_.begin(), carry_.begin() + static_cast<std::ptrdiff_t>(start_));
        start_ = 0;
    }
    const at::Tensor tokens = t.to(at::kLong).contiguous();
    const int64_t *p = tokens.data_ptr<int64_t>();
    carry_.insert(carry_.end(), p, p + tokens.numel());
    if (spec_.packing.eos_token_id) carry_.push_back(*spec_.packing.eos_token_id);
    return true;
}

// A window of `tokens` (2 .. block_size + 1) tokens from the carry's start; the carry then starts at its
// last token, the first of the next window (stride block_size).
Sample PackedSource::window(int64_t tokens)
{
    const int64_t n = spec_.packing.block_size;
    Sample s;
    s.inputs = at::full({n}, spec_.pad_token_id, at::kLong);
    s.labels = at::full({n}, spec_.label_pad_token_id, at::kLong);
    const int64_t *w = carry_.data() + start_;
    std::memcpy(s.inputs.data_ptr<int64_t>(), w, static_cast<size_t>(tokens - 1) * sizeof(int64_t));
    std::memcpy(s.labels.data_ptr<int64_t>(), w + 1, static_cast<size_t>(tokens - 1) * sizeof(int64_t));
    start_ += static_cast<size_t>(tokens - 1);
    return s;
}

std::optional<Sample> PackedSource::next()
{
    const auto full = static_cast<size_t>(spec_.packing.block_size + 1);
    while (carry_.size() - start_ < full)
        if (!read_document()) break;
    const size_t have = carry_.size() - start_;
    if (have >= full) return window(static_cast<int64_t>(full));
    // The end of the stream: a last, short window, when it holds a token with a label.
    if (spec_.drop_last || have < 2) {
        start_ = carry_.size();
        return std::nullopt;
    }
    Sample s = window(static_cast<int64_t>(have));
    start_ = carry_.size(); // its last token has no label: nothing follows
    return s;
}

std::string PackedSource::state()
{
    PackingState s;
    s.carry.assign(carry_.begin() + static_cast<std::ptrdiff_t>(start_), carry_.end());
    s.documents = documents_read_;
    s.documents_state = documents_->state();
    return encode_packing_state(s);
}

void PackedSource::load_state(const std::string &state)
{
    PackingState s = decode_packing_state(state);
    documents_->load_state(s.documents_state);
    carry_ = std::move(s.carry);
    start_ = 0;
    documents_read_ = s.documents;
    ended_ = false;
}

} // namespace accel
