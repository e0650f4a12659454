#include <accel/dataloader.h>

#include "c_api/guard.hpp"
#include "c_api/handles.hpp"
#include "config/dataloader_options.hpp"
#include "data_loader/file_datasets.hpp"

using accel::fail;
using namespace accel::capi;

extern "C" {

ACCEL_API accel_status_t accel_dataloader_create_from_tensors(const accel_tensor_t *features,
                                                              const accel_tensor_t *labels, const char *config_json,
                                                              accel_dataloader_t **out) noexcept
{
    return guarded([&] {
        out_param(out);
        auto &f = checked(features, "features");
        if (f.tensor.dim() < 1) fail(ACCEL_ERR_INVALID_ARGUMENT, "features: expected at least 1 dimension (samples), got a scalar");
        auto data = std::make_shared<accel::TensorDataset>();
        data->features = f.tensor.detach().cpu(); // datasets stay on the host (batches move when a loader is prepared)
        if (labels != nullptr) {
            if (labels->tensor.dim() < 1 || labels->tensor.size(0) != f.tensor.size(0))
                fail(ACCEL_ERR_INVALID_ARGUMENT, "labels: expected " + std::to_string(f.tensor.size(0)) +
                                                     " samples along dimension 0 (as features), got shape " +
                                                     c10::str(labels->tensor.sizes()));
            data->labels = labels->tensor.detach().cpu();
        }
        auto options = accel::config::parse_dataloader_options(config_json);
        emit(out, std::make_shared<accel::DataLoaderShard>(std::move(data), options));
    });
}

ACCEL_API accel_status_t accel_dataloader_create_from_tokens(const accel_tensor_t *tokens, const char *config_json,
                                                             accel_dataloader_t **out) noexcept
{
    return guarded([&] {
        out_param(out);
        const at::Tensor &t = checked(tokens, "tokens").tensor;
        if (t.dim() != 1) fail(ACCEL_ERR_INVALID_ARGUMENT, "tokens: expected a 1-d token stream, got shape " + c10::str(t.sizes()));
        if (!at::isIntegralType(t.scalar_type(), false))
            fail(ACCEL_ERR_INVALID_ARGUMENT, std::string("tokens: expected an integer dtype, got ") +
                                                 c10::toString(t.scalar_type()));
        auto options = accel::config::parse_token_dataloader_options(config_json);
        const int64_t window = options.block_size + 1;
        if (t.numel() < window)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "tokens: " + std::to_string(t.numel()) +
                                                 " tokens do not make one sequence of block_size + 1 = " +
                                                 std::to_string(window));
        // Windows of block_size + 1 tokens, `stride` apart: inputs are their first block_size tokens,
        // labels the next token of each (views of one int64 stream, no copy per window).
        at::Tensor stream = t.detach().to(at::kCPU, at::kLong);
        at::Tensor windows = stream.unfold(0, window, options.stride);
        auto data = std::make_shared<accel::TensorDataset>();
        data->features = windows.narrow(1, 0, options.block_size);
        data->labels = windows.narrow(1, 1, options.block_size);
        emit(out, std::make_shared<accel::DataLoaderShard>(std::move(data), options.loader));
    });
}

ACCEL_API accel_status_t accel_dataloader_create_from_files(const char *config_json, accel_dataloader_t **out) noexcept
{
    return guarded([&] {
        out_param(out);
        if (config_json == nullptr)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "config_json: required (at least \"format\" and the files)");
        auto options = accel::config::parse_file_dataloader_options(config_json);
        emit(out, std::make_shared<accel::DataLoaderShard>(accel::open_file_dataset(options), options.loader));
    });
}

ACCEL_API void accel_dataloader_free(accel_dataloader_t *dataloader) noexcept { delete dataloader; }

ACCEL_API accel_status_t accel_dataloader_next(accel_dataloader_t *dataloader, accel_batch_t **out) noexcept
{
    return guarded([&] {
        out_param(out);
        auto &d = checked(dataloader, "dataloader");
        auto b = d.impl->next();
        if (b) emit(out, std::move(*b));
    });
}

ACCEL_API accel_status_t accel_dataloader_get_length(const accel_dataloader_t *dataloader, int64_t *out) noexcept
{
    return guarded([&] {
        auto &d = checked(dataloader, "dataloader");
        out_param(out);
        *out = d.impl->length();
    });
}

ACCEL_API accel_status_t accel_dataloader_set_epoch(accel_dataloader_t *dataloader, int64_t epoch) noexcept
{
    return guarded([&] { checked(dataloader, "dataloader").impl->set_epoch(epoch); });
}

ACCEL_API accel_status_t accel_dataloader_get_epoch(const accel_dataloader_t *dataloader, int64_t *out) noexcept
{
    return guarded([&] {
        auto &d = checked(dataloader, "dataloader");
        out_param(out);
        *out = d.impl->epoch();
    });
}

ACCEL_API accel_status_t accel_dataloader_skip_first_batches(const accel_dataloader_t *dataloader, int64_t num_batches,
                                                             accel_dataloader_t **out) noexcept
{
    return guarded([&] {
        out_param(out);
        auto &d = checked(dataloader, "dataloader");
        emit(out, d.impl->skip_first_batches(num_batches));
    });
}

ACCEL_API void accel_batch_free(accel_batch_t *batch) noexcept { delete batch; }

ACCEL_API accel_status_t accel_batch_get_inputs(const accel_batch_t *batch, accel_tensor_t **out) noexcept
{
    return guarded([&] {
        out_param(out);
        auto &b = checked(batch, "batch");
        *out = new_tensor(b.batch.inputs);
    });
}

ACCEL_API accel_status_t accel_batch_get_labels(const accel_batch_t *batch, accel_tensor_t **out) noexcept
{
    return guarded([&] {
        out_param(out);
        auto &b = checked(batch, "batch");
        if (b.batch.labels.defined()) *out = new_tensor(b.batch.labels);
    });
}

ACCEL_API accel_status_t accel_batch_get_indices(const accel_batch_t *batch, accel_tensor_t **out) noexcept
{
    return guarded([&] {
        out_param(out);
        auto &b = checked(batch, "batch");
        if (!b.batch.indices.defined())
            fail(ACCEL_ERR_FAILED_PRECONDITION, "batch: it does not come from a data loader, so it has no sample indices");
        *out = new_tensor(b.batch.indices);
    });
}

ACCEL_API accel_status_t accel_batch_get_size(const accel_batch_t *batch, int64_t *out) noexcept
{
    return guarded([&] {
        auto &b = checked(batch, "batch");
        out_param(out);
        *out = b.batch.size();
    });
}

} // extern "C"
