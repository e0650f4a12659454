#include "parallel/context_parallel/plan.hpp"

#include "common/error.hpp"
#include "data_loader/dataset.hpp"
#include "distributed/device_mesh.hpp"
#include "model/gpt_model.hpp"
#include "model/llama_model.hpp"
#include "parallel/context_parallel/attention.hpp"
#include "parallel/context_parallel/sequence_split.hpp"

#include <memory>
#include <string>
#include <vector>
#include <typeinfo>

namespace accel::parallel::cp {

void prepare_context_parallel(Model &model, const distributed::DeviceMesh &mesh, const std::string &strategy)
{
    using distributed::MeshDim;
    auto cp = std::make_shared<ContextParallel>();
    cp->group = mesh.group(MeshDim::Cp);
    cp->strategy = parse_strategy(strategy);
    // Ulysses gives each rank whole heads: checked here by name (per tensor-parallel rank, attention checks it).
    auto heads = [&](const char *key, int64_t value) {
        if (cp->strategy == Strategy::Ulysses && value % cp->size() != 0)
            fail(ACCEL_ERR_INVALID_ARGUMENT, std::string(key) + " (" + std::to_string(value) +
                                                 ") does not divide by parallelism_config.sp_size (" +
                                                 std::to_string(cp->size()) + "): Ulysses gives each rank whole heads");
    };
    if (auto *gpt = dynamic_cast<GptModel *>(&model)) {
        heads("n_head", gpt->config().n_head);
        if (!gpt->context_parallel()) gpt->apply_context_parallel(std::move(cp));
        return;
    }
    if (auto *llama = dynamic_cast<LlamaModel *>(&model)) {
        heads("num_attention_heads", llama->config().num_attention_heads);
        heads("num_key_value_heads", llama->config().num_key_value_heads);
        if (!llama->context_parallel()) llama->apply_context_parallel(std::move(cp));
        return;
    }
    const char *key = cp->strategy == Strategy::Ulysses ? "sp_size" : "cp_size";
    fail(ACCEL_ERR_UNIMPLEMENTED, std::string("parallelism_config.") + key + ": context parallelism has plans for the "
                                      "gpt and llama models only; other model types are not built yet");
}

namespace {

// `t` [B, T, ...] extended along T to `length` with `value` (the padding sits after the sequence's end).
at::Tensor padded(const at::Tensor &t, int64_t length, double value)
{
    std::vector<int64_t> shape = t.sizes().vec();
    shape[1] = length - t.size(1);
    return at::cat({t, at::full(shape, value, t.options())}, 1);
}

} // namespace

void split_batch(Batch &batch, const distributed::DeviceMesh &mesh, int64_t fixed_length)
{
    using distributed::MeshDim;
    const int32_t n = mesh.size(MeshDim::Cp), r = mesh.rank_in(MeshDim::Cp);
    if (n == 1) return;
    auto check = [&](const at::Tensor &t, const char *what) {
        if (t.defined() && t.dim() < 2)
            fail(ACCEL_ERR_INVALID_ARGUMENT, std::string("batch: ") + what + " of shape " + c10::str(t.sizes()) +
                                                 " has no sequence dimension to split over parallelism_config.cp_size (" +
                                                 std::to_string(n) + "); context parallelism takes [batch, seq, ...]");
    };
    check(batch.inputs, "inputs");
    check(batch.labels, "labels");
    check(batch.attention_mask, "attention_mask");
    // A length that is not a multiple of 2 x cp_size is padded at the end: the models' attention is causal, so no
    // real position sees a padded key, and padded labels are -100 (ignored), so the loss is the unpadded one's.
    const at::Tensor &first = batch.inputs.defined() ? batch.inputs : batch.labels.defined() ? batch.labels : batch.attention_mask;
    const int64_t length = first.defined() ? first.size(1) : 0, multiple = 2 * static_cast<int64_t>(n);
    if (fixed_length != 0 && length != fixed_length)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "batch: sequence length " + std::to_string(length) +
                                             " differs from parallelism_config.sp_handler.sp_seq_length (" +
                                             std::to_string(fixed_length) + "), which sp_seq_length_is_variable false "
                                             "fixes; set it true for batches of varying length");
    const int64_t target = (length + multiple - 1) / multiple * multiple;
    auto split = [&](at::Tensor &t, double pad_value) {
        if (!t.defined()) return;
        if (t.size(1) != length)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "batch: inputs, labels and attention_mask differ in sequence length (" +
                                             std::to_string(length) + " and " + c10::str(t.sizes()) +
                                             "); context parallelism splits them alike");
        if (target != length) t = padded(t, target, pad_value);
        t = shard_sequence(t, 1, r, n).contiguous();
    };
    split(batch.inputs, 0);
    split(batch.labels, -100);
    split(batch.attention_mask, 0);
}

} // namespace accel::parallel::cp
