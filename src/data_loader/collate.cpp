#include "data_loader/collate.hpp"

#include "common/error.hpp"

#include <algorithm>

namespace accel {

namespace {

std::string where(const std::vector<int64_t> &ids, size_t i) { return "sample " + std::to_string(ids[i]); }

// torch.stack, with the sample that differs named (default_collate's "stack expects each tensor to be equal
// size" gives no index).
at::Tensor stack_field(const std::vector<Sample> &samples, const std::vector<int64_t> &ids, bool labels)
{
    const char *field = labels ? "labels" : "inputs";
    std::vector<at::Tensor> parts;
    parts.reserve(samples.size());
    for (size_t i = 0; i < samples.size(); ++i) {
        const at::Tensor &t = labels ? samples[i].labels : samples[i].inputs;
        if (labels && !t.defined())
            fail(ACCEL_ERR_INVALID_ARGUMENT, "collate: " + where(ids, i) + " has no labels but " + where(ids, 0) + " has");
        if (!parts.empty() && (t.sizes() != parts[0].sizes() || t.scalar_type() != parts[0].scalar_type()))
            fail(ACCEL_ERR_INVALID_ARGUMENT, "collate \"stack\": " + where(ids, i) + "'s " + field + " have shape " +
                                                 c10::str(t.sizes()) + " (" + c10::toString(t.scalar_type()) + ") but " +
                                                 where(ids, 0) + "'s have " + c10::str(parts[0].sizes()) + " (" +
                                                 c10::toString(parts[0].scalar_type()) + "); stacking needs equal shapes "
                                                 "(use \"collate\": \"pad\" for variable-length sequences)");
        parts.push_back(t);
    }
    return at::stack(parts);
}

at::Tensor token_sequence(const at::Tensor &t, const std::vector<int64_t> &ids, size_t i, const char *field)
{
    if (t.dim() != 1 || !at::isIntegralType(t.scalar_type(), false))
        fail(ACCEL_ERR_INVALID_ARGUMENT, "collate \"pad\": " + where(ids, i) + "'s " + field +
                                             " must be a 1-d integer token sequence, got shape " + c10::str(t.sizes()) +
                                             " (" + c10::toString(t.scalar_type()) + ")");
    return t.to(at::kLong);
}

Batch pad(const std::vector<Sample> &samples, const std::vector<int64_t> &ids, const CollateOptions &o)
{
    const bool has_labels = samples[0].labels.defined();
    std::vector<at::Tensor> inputs, labels;
    for (size_t i = 0; i < samples.size(); ++i) {
        at::Tensor x = token_sequence(samples[i].inputs, ids, i, "inputs");
        if (samples[i].labels.defined() != has_labels)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "collate: " + where(ids, i) + (has_labels ? " has no labels but " : " has labels but ") +
                                                 where(ids, 0) + (has_labels ? " has" : " has none"));
        at::Tensor y = has_labels ? token_sequence(samples[i].labels, ids, i, "labels") : x;
        if (y.size(0) != x.size(0))
            fail(ACCEL_ERR_INVALID_ARGUMENT, "collate \"pad\": " + where(ids, i) + "'s labels have " +
                                                 std::to_string(y.size(0)) + " tokens and its inputs " +
                                                 std::to_string(x.size(0)) + "; they must match");
        if (o.causal_lm) {
            if (x.size(0) < 2)
                fail(ACCEL_ERR_INVALID_ARGUMENT, "collate \"pad\" with causal_lm: " + where(ids, i) + " has " +
                                                     std::to_string(x.size(0)) + " token(s); a shifted pair needs at least 2");
            // Position p predicts token p + 1 (the "causal_lm" loss takes the labels already shifted).
            x = x.narrow(0, 0, x.size(0) - 1);
            y = y.narrow(0, 1, y.size(0) - 1);
        }
        inputs.push_back(x);
        labels.push_back(y);
    }
    int64_t longest = 0;
    for (const auto &x : inputs) longest = std::max(longest, x.size(0));
    const auto n = static_cast<int64_t>(samples.size());
    Batch b;
    b.inputs = at::full({n, longest}, o.pad_token_id, at::kLong);
    b.labels = at::full({n, longest}, o.label_pad_token_id, at::kLong);
    b.attention_mask = at::zeros({n, longest}, at::kLong);
    for (int64_t i = 0; i < n; ++i) {
        const int64_t len = inputs[static_cast<size_t>(i)].size(0);
        b.inputs[i].narrow(0, 0, len).copy_(inputs[static_cast<size_t>(i)]);
        b.labels[i].narrow(0, 0, len).copy_(labels[static_cast<size_t>(i)]);
        b.attention_mask[i].narrow(0, 0, len).fill_(1);
    }
    return b;
}

} // namespace

Batch collate_samples(const std::vector<Sample> &samples, const std::vector<int64_t> &ids, const CollateOptions &options)
{
    if (samples.empty()) fail(ACCEL_ERR_INTERNAL, "collate: no samples");
    if (options.kind == CollateOptions::Kind::Pad) return pad(samples, ids, options);
    Batch b;
    b.inputs = stack_field(samples, ids, false);
    if (samples[0].labels.defined()) b.labels = stack_field(samples, ids, true);
    else
        for (size_t i = 1; i < samples.size(); ++i)
            if (samples[i].labels.defined())
                fail(ACCEL_ERR_INVALID_ARGUMENT, "collate: " + where(ids, i) + " has labels but " + where(ids, 0) + " has none");
    return b;
}

} // namespace accel
