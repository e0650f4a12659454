// The data loader config JSON (accel_dataloader_create_from_tensors) over 10 fixed samples, and the same text
// for loaders over callback datasets (map-style and iterable: token sequences of 1 to 3 tokens, so "pad"
// collates them and "stack" refuses them by index); accepted loaders are iterated for up to two passes.
#include "fuzz_common.hpp"

#include <accel/dataloader.h>
#include <accel/tensor.h>

namespace {

accel_status_t seq(int64_t i, accel_tensor_t **inputs)
{
    const int64_t tokens[3] = {i, i + 1, i + 2}, n = i % 3 + 1;
    return accel_tensor_create(tokens, static_cast<size_t>(n) * sizeof(int64_t), ACCEL_DTYPE_INT64, &n, 1, inputs);
}

accel_status_t map_length(void *, int64_t *out)
{
    *out = 10;
    return ACCEL_OK;
}

accel_status_t map_get(void *, int64_t index, accel_tensor_t **inputs, accel_tensor_t **) { return seq(index, inputs); }

int64_t stream_pos = 0;
accel_status_t stream_epoch(void *, int64_t)
{
    stream_pos = 0;
    return ACCEL_OK;
}
accel_status_t stream_next(void *, accel_tensor_t **inputs, accel_tensor_t **)
{
    return stream_pos < 10 ? seq(stream_pos++, inputs) : ACCEL_OK;
}

void iterate(accel_dataloader_t *dl)
{
    int passes = 0;
    for (int i = 0; i < 64 && passes < 2; ++i) {
        accel_batch_t *b = nullptr;
        if (!accel::fuzz::status_ok(accel_dataloader_next(dl, &b))) break;
        if (b == nullptr) {
            ++passes;
            continue;
        }
        int64_t n = 0;
        accel::fuzz::status_ok(accel_batch_get_size(b, &n));
        accel_batch_free(b);
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    using namespace accel;
    static accel_tensor_t *features = nullptr, *labels = nullptr;
    static bool ready = [] {
        float x[20];
        int64_t y[10];
        for (int i = 0; i < 20; ++i) x[i] = static_cast<float>(i);
        for (int i = 0; i < 10; ++i) y[i] = i % 3;
        const int64_t xs[2] = {10, 2}, ys[1] = {10};
        if (accel_tensor_create(x, sizeof x, ACCEL_DTYPE_FLOAT32, xs, 2, &features) != ACCEL_OK ||
            accel_tensor_create(y, sizeof y, ACCEL_DTYPE_INT64, ys, 1, &labels) != ACCEL_OK)
            fuzz::finding("cannot create the fixed tensors");
        return true;
    }();
    (void)ready;
    const std::string text = fuzz::text_of(data, size);
    accel_dataloader_t *dl = nullptr;
    if (fuzz::status_ok(accel_dataloader_create_from_tensors(features, labels, text.c_str(), &dl))) {
        int64_t len = 0;
        fuzz::status_ok(accel_dataloader_get_length(dl, &len));
        int passes = 0;
        for (int i = 0; i < 64 && passes < 2; ++i) {
            accel_batch_t *b = nullptr;
            if (!fuzz::status_ok(accel_dataloader_next(dl, &b))) break;
            if (b == nullptr) {
                ++passes;
                continue;
            }
            int64_t n = 0;
            fuzz::status_ok(accel_batch_get_size(b, &n));
            accel_batch_free(b);
        }
    }
    accel_dataloader_free(dl);
    dl = nullptr;
    const accel_map_dataset_t map = {map_length, map_get, nullptr, nullptr};
    if (fuzz::status_ok(accel_dataloader_create_from_map_dataset(&map, nullptr, nullptr, text.c_str(), &dl))) iterate(dl);
    accel_dataloader_free(dl);
    dl = nullptr;
    const accel_iterable_dataset_t stream = {stream_epoch, stream_next, nullptr, nullptr, nullptr, nullptr};
    if (fuzz::status_ok(accel_dataloader_create_from_iterable_dataset(&stream, nullptr, nullptr, text.c_str(), &dl)))
        iterate(dl);
    accel_dataloader_free(dl);
    return 0;
}
