// Datasets written by the caller (accel_map_dataset_t / accel_iterable_dataset_t) and the caller's collate,
// adapted to the data loaders' seams: a map dataset is a Dataset (its get_batch reads each sample with the
// get callback, on whichever prefetch worker asks), an iterable one an IterableSource.
#include <accel/dataloader.h>

#include "c_api/guard.hpp"
#include "c_api/handles.hpp"
#include "config/dataloader_options.hpp"
#include "data_loader/collate.hpp"
#include "data_loader/iterable_loader.hpp"
#include "data_loader/packing.hpp"

#include <cstring>

using accel::fail;
using namespace accel::capi;

namespace {

// A callback's failure: its status, and the message it gave with accel_callback_set_error() on this thread.
void check_callback(accel_status_t status, const std::string &what)
{
    if (status == ACCEL_OK) return;
    const std::string message = accel_last_error_message();
    fail(status > 0 ? status : ACCEL_ERR_UNKNOWN,
         what + " failed (" + accel_status_name(status) + ")" + (message.empty() ? std::string() : ": " + message));
}

// Takes a tensor handle a callback returned (datasets stay on the host, as the tensor loaders' do).
at::Tensor take(accel_tensor_t *&handle)
{
    if (handle == nullptr) return {};
    at::Tensor t = handle->tensor.detach();
    delete handle;
    handle = nullptr;
    return t.device().is_cpu() ? t : t.cpu();
}

// Runs user_data's release when the last loader sharing the dataset is gone.
struct UserData {
    UserData(void *d, accel_dataset_release_fn_t r) : data(d), release(r) {}
    UserData(const UserData &) = delete; // released once
    UserData &operator=(const UserData &) = delete;
    void *data;
    accel_dataset_release_fn_t release;
    ~UserData()
    {
        if (release != nullptr) release(data);
    }
};

// The collate of the config, or the caller's.
accel::CollateFn make_collate(accel_collate_fn_t fn, void *user_data, const accel::config::CollateOptions &options)
{
    if (fn == nullptr)
        return [options](const std::vector<accel::Sample> &s, const std::vector<int64_t> &ids) {
            return accel::collate_samples(s, ids, options);
        };
    return [fn, user_data](const std::vector<accel::Sample> &samples, const std::vector<int64_t> &ids) {
        // Borrowed handles over the samples for the call.
        std::vector<accel_tensor_t> inputs(samples.size()), labels(samples.size());
        std::vector<const accel_tensor_t *> in_ptrs, label_ptrs;
        const bool has_labels = samples[0].labels.defined();
        for (size_t i = 0; i < samples.size(); ++i) {
            inputs[i].tensor = samples[i].inputs;
            labels[i].tensor = samples[i].labels;
            in_ptrs.push_back(&inputs[i]);
            label_ptrs.push_back(samples[i].labels.defined() ? &labels[i] : nullptr);
        }
        accel_tensor_t *out_inputs = nullptr, *out_labels = nullptr, *out_mask = nullptr;
        const std::string what = "collate callback (samples " + std::to_string(ids.front()) + ".." + std::to_string(ids.back()) + ")";
        accel::capi::set_last_error("");
        const accel_status_t st = fn(user_data, in_ptrs.data(), has_labels ? label_ptrs.data() : nullptr, samples.size(),
                                     &out_inputs, &out_labels, &out_mask);
        accel::Batch b;
        b.inputs = take(out_inputs);
        b.labels = take(out_labels);
        b.attention_mask = take(out_mask);
        check_callback(st, what);
        if (!b.inputs.defined()) fail(ACCEL_ERR_INVALID_ARGUMENT, what + " returned no inputs tensor");
        const int64_t n = static_cast<int64_t>(samples.size());
        for (const at::Tensor *t : {&b.inputs, &b.labels, &b.attention_mask})
            if (t->defined() && (t->dim() < 1 || t->size(0) != n))
                fail(ACCEL_ERR_INVALID_ARGUMENT, what + " returned a tensor of shape " + c10::str(t->sizes()) +
                                                     "; expected the " + std::to_string(n) + " samples along dimension 0");
        return b;
    };
}

class CallbackMapDataset : public accel::Dataset {
public:
    CallbackMapDataset(const accel_map_dataset_t &cb, int64_t length, accel::CollateFn collate)
        : get_(cb.get), user_data_(std::make_shared<UserData>(cb.user_data, cb.release)), length_(length),
          collate_(std::move(collate))
    {
    }
    int64_t size() const override { return length_; }
    accel::Batch get_batch(const at::Tensor &indices) const override
    {
        const int64_t *idx = indices.data_ptr<int64_t>();
        std::vector<int64_t> ids(idx, idx + indices.numel());
        std::vector<accel::Sample> samples;
        samples.reserve(ids.size());
        for (int64_t i : ids) {
            accel_tensor_t *inputs = nullptr, *labels = nullptr;
            const std::string what = "dataset get(" + std::to_string(i) + ")";
            accel::capi::set_last_error("");
            const accel_status_t st = get_(user_data_->data, i, &inputs, &labels);
            accel::Sample s;
            s.inputs = take(inputs); // taken before the status check: a failing callback may have set them
            s.labels = take(labels);
            check_callback(st, what);
            if (!s.inputs.defined()) fail(ACCEL_ERR_INVALID_ARGUMENT, what + " returned no inputs tensor");
            samples.push_back(std::move(s));
        }
        return collate_(samples, ids);
    }

private:
    accel_dataset_get_fn_t get_;
    std::shared_ptr<UserData> user_data_;
    int64_t length_;
    accel::CollateFn collate_;
};

class CallbackIterableSource : public accel::IterableSource {
public:
    explicit CallbackIterableSource(const accel_iterable_dataset_t &cb)
        : cb_(cb), user_data_(std::make_shared<UserData>(cb.user_data, cb.release))
    {
    }
    void set_epoch(int64_t epoch) override
    {
        accel::capi::set_last_error("");
        check_callback(cb_.set_epoch(cb_.user_data, epoch), "dataset set_epoch(" + std::to_string(epoch) + ")");
    }
    std::optional<accel::Sample> next() override
    {
        accel_tensor_t *inputs = nullptr, *labels = nullptr;
        accel::capi::set_last_error("");
        const accel_status_t st = cb_.next(cb_.user_data, &inputs, &labels);
        accel::Sample s;
        s.inputs = take(inputs);
        s.labels = take(labels);
        check_callback(st, "dataset next()");
        if (!s.inputs.defined()) {
            if (s.labels.defined()) fail(ACCEL_ERR_INVALID_ARGUMENT, "dataset next() returned labels without inputs");
            return std::nullopt;
        }
        return s;
    }
    bool stateful() const override { return cb_.state != nullptr; }
    std::string state() override
    {
        const uint8_t *data = nullptr;
        size_t len = 0;
        accel::capi::set_last_error("");
        check_callback(cb_.state(cb_.user_data, &data, &len), "dataset state()");
        if (data == nullptr && len > 0) fail(ACCEL_ERR_INVALID_ARGUMENT, "dataset state() returned NULL data of non-zero length");
        return len == 0 ? std::string() : std::string(reinterpret_cast<const char *>(data), len);
    }
    void load_state(const std::string &state) override
    {
        accel::capi::set_last_error("");
        check_callback(cb_.load_state(cb_.user_data, reinterpret_cast<const uint8_t *>(state.data()), state.size()),
                       "dataset load_state()");
    }

private:
    accel_iterable_dataset_t cb_;
    std::shared_ptr<UserData> user_data_;
};

} // namespace

extern "C" {

ACCEL_API void accel_callback_set_error(const char *message) noexcept
{
    accel::capi::set_last_error(message == nullptr ? "" : message);
}

ACCEL_API accel_status_t accel_dataloader_create_from_map_dataset(const accel_map_dataset_t *dataset,
                                                                  accel_collate_fn_t collate, void *collate_user_data,
                                                                  const char *config_json, accel_dataloader_t **out) noexcept
{
    return guarded([&] {
        out_param(out);
        const auto &cb = checked(dataset, "dataset");
        if (cb.length == nullptr) fail(ACCEL_ERR_INVALID_ARGUMENT, "dataset->length: must not be NULL");
        if (cb.get == nullptr) fail(ACCEL_ERR_INVALID_ARGUMENT, "dataset->get: must not be NULL");
        const auto options = accel::config::parse_callback_dataloader_options(config_json, false);
        int64_t length = 0;
        set_last_error("");
        check_callback(cb.length(cb.user_data, &length), "dataset length()");
        if (length < 0) fail(ACCEL_ERR_INVALID_ARGUMENT, "dataset length() returned " + std::to_string(length) + "; expected >= 0");
        auto data = std::make_shared<CallbackMapDataset>(cb, length, make_collate(collate, collate_user_data, options.collate));
        emit(out, std::make_shared<accel::DataLoaderShard>(std::move(data), options.loader));
    });
}

ACCEL_API accel_status_t accel_dataloader_create_from_iterable_dataset(const accel_iterable_dataset_t *dataset,
                                                                       accel_collate_fn_t collate, void *collate_user_data,
                                                                       const char *config_json,
                                                                       accel_dataloader_t **out) noexcept
{
    return guarded([&] {
        out_param(out);
        const auto &cb = checked(dataset, "dataset");
        if (cb.set_epoch == nullptr) fail(ACCEL_ERR_INVALID_ARGUMENT, "dataset->set_epoch: must not be NULL");
        if (cb.next == nullptr) fail(ACCEL_ERR_INVALID_ARGUMENT, "dataset->next: must not be NULL");
        if ((cb.state == nullptr) != (cb.load_state == nullptr))
            fail(ACCEL_ERR_INVALID_ARGUMENT, "dataset->state and dataset->load_state: give both or neither");
        const auto options = accel::config::parse_callback_dataloader_options(config_json, true);
        std::shared_ptr<accel::IterableSource> source = std::make_shared<CallbackIterableSource>(cb);
        if (options.packing.block_size > 0) {
            accel::PackingSpec spec{options.packing, options.collate.pad_token_id, options.collate.label_pad_token_id,
                                    options.loader.drop_last};
            source = std::make_shared<accel::PackedSource>(std::move(source), spec);
        }
        auto loader = std::make_shared<accel::IterableLoader>(std::move(source),
                                                              make_collate(collate, collate_user_data, options.collate),
                                                              options.loader);
        emit(out, std::make_shared<accel::DataLoaderShard>(std::move(loader), options.loader));
    });
}

ACCEL_API accel_status_t accel_batch_get_attention_mask(const accel_batch_t *batch, accel_tensor_t **out) noexcept
{
    return guarded([&] {
        out_param(out);
        auto &b = checked(batch, "batch");
        if (b.batch.attention_mask.defined()) *out = new_tensor(b.batch.attention_mask);
    });
}

} // extern "C"
