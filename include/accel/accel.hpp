/* accel/accel.hpp - header-only C++17 wrapper over the C API (not included by accel.h).
 *
 * RAII, move-only handle classes (accel::Accelerator, Model, Optimizer, Scheduler, DataLoader, Batch,
 * Tensor) that free their handle in the destructor; datasets of the caller's as accel::MapDataset /
 * IterableDataset subclasses and collates as std::function (DataLoader::from_map_dataset, ...); failures throw accel::Error carrying the status and
 * the library's message; accel::span is a small std::span-like view for buffers and shapes. Only the C
 * API is used, so nothing of LibTorch enters the user's build. The C API's ownership and thread rules
 * apply unchanged (see accel.h and docs/guides/bindings/cpp.md).
 *
 *   accel::Accelerator acc(R"({"gradient_accumulation_steps": 2})");
 *   auto model = accel::Model::from_json(R"({"type": "mlp", "widths": [16, 64, 4]})");
 *   accel::Optimizer opt(model, R"({"type": "adamw", "lr": 3e-3})");
 *   acc.prepare(&model, &opt, &loader, nullptr);
 *   while (auto batch = loader.next_batch())   // train_step enters accumulate() itself
 *       double loss = acc.train_step(model, opt, nullptr, batch, "cross_entropy");
 *   while (auto batch = loader.next_batch()) { // or by hand
 *       auto scope = acc.accumulate(model);    // ends at the end of the block
 *       auto loss = accel::compute_loss("cross_entropy", model.forward(batch.inputs()), batch.labels());
 *       acc.backward(loss);
 *       opt.step();
 *       opt.zero_grad();
 *   }
 */
#ifndef ACCEL_ACCEL_HPP
#define ACCEL_ACCEL_HPP

#include <accel/accel.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace accel {

/** A failed call: the status (accel_status_t) and the message of accel_last_error_message(). */
class Error : public std::runtime_error {
public:
    Error(accel_status_t status, const std::string &message)
        : std::runtime_error(message), status_(status)
    {
    }
    /** The accel_status_t code. */
    accel_status_t status() const noexcept { return status_; }
    /** The status name, e.g. "ACCEL_ERR_INVALID_ARGUMENT". */
    const char *status_name() const noexcept { return accel_status_name(status_); }

private:
    accel_status_t status_;
};

/** Throws accel::Error for a non-zero status, copying the thread's last error message. */
inline void check(accel_status_t status)
{
    if (status != ACCEL_OK)
        throw Error(status, accel_last_error_message());
}

/** A non-owning view of contiguous elements (std::span-like, for C++17). */
template <class T>
class span {
public:
    constexpr span() noexcept = default;
    constexpr span(T *data, std::size_t size) noexcept : data_(data), size_(size) {}
    template <std::size_t N>
    constexpr span(T (&array)[N]) noexcept : data_(array), size_(N)
    {
    }
    template <class C, class = decltype(std::declval<C &>().data()), class = decltype(std::declval<C &>().size())>
    constexpr span(C &container) noexcept : data_(container.data()), size_(container.size())
    {
    }
    constexpr T *data() const noexcept { return data_; }
    constexpr std::size_t size() const noexcept { return size_; }
    constexpr std::size_t size_bytes() const noexcept { return size_ * sizeof(T); }
    constexpr bool empty() const noexcept { return size_ == 0; }
    constexpr T &operator[](std::size_t i) const noexcept { return data_[i]; }
    constexpr T *begin() const noexcept { return data_; }
    constexpr T *end() const noexcept { return data_ + size_; }

private:
    T *data_ = nullptr;
    std::size_t size_ = 0;
};

namespace detail {

/** A move-only owner of one C handle, freed with Free. */
template <class H, void (*Free)(H *)>
class Handle {
public:
    Handle() noexcept = default;
    explicit Handle(H *raw) noexcept : raw_(raw) {}
    Handle(const Handle &) = delete;
    Handle &operator=(const Handle &) = delete;
    Handle(Handle &&other) noexcept : raw_(std::exchange(other.raw_, nullptr)) {}
    Handle &operator=(Handle &&other) noexcept
    {
        if (this != &other) {
            Free(raw_);
            raw_ = std::exchange(other.raw_, nullptr);
        }
        return *this;
    }
    ~Handle() { Free(raw_); }

    /** The C handle (still owned by this object). */
    H *get() const noexcept { return raw_; }
    /** Gives up ownership; the caller frees the handle. */
    H *release() noexcept { return std::exchange(raw_, nullptr); }
    explicit operator bool() const noexcept { return raw_ != nullptr; }

private:
    H *raw_ = nullptr;
};

// The dtype as numpy and torch spell it, for messages.
inline const char *dtype_name(accel_dtype_t d)
{
    switch (d) {
    case ACCEL_DTYPE_FLOAT32: return "float32";
    case ACCEL_DTYPE_FLOAT64: return "float64";
    case ACCEL_DTYPE_FLOAT16: return "float16";
    case ACCEL_DTYPE_BFLOAT16: return "bfloat16";
    case ACCEL_DTYPE_INT8: return "int8";
    case ACCEL_DTYPE_UINT8: return "uint8";
    case ACCEL_DTYPE_INT16: return "int16";
    case ACCEL_DTYPE_INT32: return "int32";
    case ACCEL_DTYPE_INT64: return "int64";
    case ACCEL_DTYPE_BOOL: return "bool";
    default: return "an unknown dtype";
    }
}

template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
    static constexpr accel_dtype_t value = ACCEL_DTYPE_FLOAT32;
};
template <>
struct dtype_of<double> {
    static constexpr accel_dtype_t value = ACCEL_DTYPE_FLOAT64;
};
template <>
struct dtype_of<std::int32_t> {
    static constexpr accel_dtype_t value = ACCEL_DTYPE_INT32;
};
template <>
struct dtype_of<std::int64_t> {
    static constexpr accel_dtype_t value = ACCEL_DTYPE_INT64;
};
template <>
struct dtype_of<std::uint8_t> {
    static constexpr accel_dtype_t value = ACCEL_DTYPE_UINT8;
};

inline std::string owned_string(char *s)
{
    std::string out = s ? s : "";
    accel_string_free(s);
    return out;
}

} // namespace detail

/** Version of the loaded library, e.g. "0.1.0". */
inline const char *version_string() noexcept { return accel_version_string(); }

/** Throws accel::Error (FAILED_PRECONDITION) when the loaded library's ABI differs from these headers'. */
inline void check_abi()
{
    if (accel_abi_version() != ACCEL_ABI_VERSION)
        throw Error(ACCEL_ERR_FAILED_PRECONDITION,
                    "the loaded libaccel has ABI version " + std::to_string(accel_abi_version()) +
                        " but this program was built for ABI " + std::to_string(ACCEL_ABI_VERSION));
}

/** accelerate.utils.set_seed. */
inline void set_seed(std::uint64_t seed, bool device_specific = false, bool deterministic = false)
{
    check(accel_random_set_seed(seed, device_specific, deterministic));
}

/** accelerate.utils.merge_fsdp_weights: joins sharded weights into one file; returns the file written. */
inline std::string merge_weights(const std::string &checkpoint_dir, const std::string &output_path,
                                 const std::string &options_json = "{}")
{
    char *out = nullptr;
    check(accel_checkpoint_merge_weights(checkpoint_dir.c_str(), output_path.c_str(), options_json.c_str(), &out,
                                         nullptr));
    std::string s(out);
    accel_string_free(out);
    return s;
}

/** A CPU tensor owned by the library. */
class Tensor : public detail::Handle<accel_tensor_t, accel_tensor_free> {
public:
    using Handle::Handle;

    /** A tensor holding a copy of @p data with @p shape (row-major). */
    template <class T>
    static Tensor from(span<const T> data, const std::vector<std::int64_t> &shape)
    {
        accel_tensor_t *raw = nullptr;
        check(accel_tensor_create(data.data(), data.size_bytes(), detail::dtype_of<T>::value, shape.data(),
                                  shape.size(), &raw));
        return Tensor(raw);
    }
    template <class T>
    static Tensor from(const std::vector<T> &data, const std::vector<std::int64_t> &shape)
    {
        return from(span<const T>(data.data(), data.size()), shape);
    }

    /** Where the elements live: "cpu", "cuda:0", ... */
    std::string device() const
    {
        char *s = nullptr;
        check(accel_tensor_get_device(get(), &s));
        return detail::owned_string(s);
    }
    accel_dtype_t dtype() const
    {
        accel_dtype_t v = 0;
        check(accel_tensor_get_dtype(get(), &v));
        return v;
    }
    std::vector<std::int64_t> shape() const
    {
        std::size_t nd = 0;
        check(accel_tensor_get_ndim(get(), &nd));
        std::vector<std::int64_t> s(nd);
        check(accel_tensor_get_shape(get(), s.data(), nd));
        return s;
    }
    std::int64_t numel() const
    {
        std::int64_t v = 0;
        check(accel_tensor_get_numel(get(), &v));
        return v;
    }
    /** Copies the elements into @p out, whose size must equal numel(). T must be the tensor's own element type:
     *  this header does not convert (the Python, Java, C# and Rust bindings convert where exact); another T is
     *  ACCEL_ERR_INVALID_ARGUMENT naming both dtypes. */
    template <class T>
    void copy_to(span<T> out) const
    {
        const accel_dtype_t have = dtype(), want = detail::dtype_of<std::remove_const_t<T>>::value;
        if (have != want)
            throw Error(ACCEL_ERR_INVALID_ARGUMENT, std::string("copy_to: the tensor's dtype is ") +
                                                        detail::dtype_name(have) + ", the buffer's element type is " +
                                                        detail::dtype_name(want) + "; read it as " +
                                                        detail::dtype_name(have));
        check(accel_tensor_copy_to_buffer(get(), out.data(), out.size_bytes()));
    }
    /** The elements, copied into a vector. */
    template <class T>
    std::vector<T> to_vector() const
    {
        std::vector<T> v(static_cast<std::size_t>(numel()));
        copy_to(span<T>(v.data(), v.size()));
        return v;
    }
    /** The value of a one-element tensor. */
    double item() const
    {
        double v = 0.0;
        check(accel_tensor_get_item(get(), &v));
        return v;
    }
};

/** A mean-reduced loss by name ("cross_entropy", "mse", ...), keeping the graph for Accelerator::backward. */
inline Tensor compute_loss(const std::string &name, const Tensor &outputs, const Tensor &targets)
{
    accel_tensor_t *raw = nullptr;
    check(accel_loss_compute(name.c_str(), outputs.get(), targets.get(), &raw));
    return Tensor(raw);
}

/** A model from a JSON spec or TorchScript. */
class Model : public detail::Handle<accel_model_t, accel_model_free> {
public:
    using Handle::Handle;

    static Model from_json(const std::string &spec)
    {
        accel_model_t *raw = nullptr;
        check(accel_model_create_from_json(spec.c_str(), &raw));
        return Model(raw);
    }
    static Model from_torchscript(const std::string &path)
    {
        accel_model_t *raw = nullptr;
        check(accel_model_create_from_torchscript(path.c_str(), &raw));
        return Model(raw);
    }
    /** A model from a Hugging Face folder (config.json + safetensors / pytorch_model.bin), as transformers'
     *  from_pretrained; @p options e.g. {"strict": false, "torch_dtype": "bfloat16"} ("" for none). */
    static Model from_pretrained(const std::string &path, const std::string &options = "")
    {
        accel_model_t *raw = nullptr;
        check(accel_model_from_pretrained(path.c_str(), options.empty() ? nullptr : options.c_str(), &raw));
        return Model(raw);
    }
    /** from_pretrained(), also returning what did not match as JSON in @p report. */
    static Model from_pretrained_with_report(const std::string &path, const std::string &options, std::string &report)
    {
        accel_model_t *raw = nullptr;
        char *text = nullptr;
        check(accel_model_from_pretrained_with_report(path.c_str(), options.empty() ? nullptr : options.c_str(), &raw,
                                                      &text));
        Model m(raw);
        report = detail::owned_string(text);
        return m;
    }
    /** Writes a Hugging Face folder that transformers' from_pretrained loads (every process of a prepared model). */
    void save_pretrained(const std::string &path, const std::string &options = "")
    {
        check(accel_model_save_pretrained(get(), path.c_str(), options.empty() ? nullptr : options.c_str()));
    }
    /** Accelerate's dispatch_model (accel/dispatch.h): modules where @p device_map_json says; disk modules in
     *  options' "offload_dir", read layer by layer during forward_no_grad and generate. */
    void dispatch(const std::string &device_map_json, const std::string &options = "")
    {
        check(accel_model_dispatch(get(), device_map_json.c_str(), options.empty() ? nullptr : options.c_str()));
    }
    /** Accelerate's load_checkpoint_and_dispatch: loads @p checkpoint_path, then dispatches with options'
     *  "device_map" and "offload_folder". */
    void load_checkpoint_and_dispatch(const std::string &checkpoint_path, const std::string &options = "")
    {
        check(accel_model_load_checkpoint_and_dispatch(get(), checkpoint_path.c_str(),
                                                       options.empty() ? nullptr : options.c_str()));
    }
    /** Accelerate's infer_auto_device_map (accel/big_modeling.h): the device map as JSON, e.g. with options
     *  {"max_memory": {"0": "10GiB", "cpu": "30GiB"}, "no_split_module_classes": ["LlamaDecoderLayer"]}. */
    std::string infer_auto_device_map(const std::string &options = "") const
    {
        char *out = nullptr;
        check(accel_model_infer_auto_device_map(get(), options.empty() ? nullptr : options.c_str(), &out));
        return detail::owned_string(out);
    }
    /** Accelerate's compute_module_sizes and get_max_layer_size as JSON: {"sizes": {...}, "max_layer_size": n,
     *  "max_layer_names": [...]}. */
    std::string compute_module_sizes(const std::string &options = "") const
    {
        char *out = nullptr;
        check(accel_model_compute_module_sizes(get(), options.empty() ? nullptr : options.c_str(), &out));
        return detail::owned_string(out);
    }
    /** Accelerate's check_device_map: throws unless @p device_map_json gives every tensor a device. */
    void check_device_map(const std::string &device_map_json) const
    {
        check(accel_model_check_device_map(get(), device_map_json.c_str()));
    }
    Tensor forward(const Tensor &input)
    {
        accel_tensor_t *raw = nullptr;
        check(accel_model_forward(get(), input.get(), &raw));
        return Tensor(raw);
    }
    // Without the autograd graph (torch.no_grad()): evaluation and inference.
    Tensor forward_no_grad(const Tensor &input)
    {
        accel_tensor_t *raw = nullptr;
        check(accel_model_forward_no_grad(get(), input.get(), &raw));
        return Tensor(raw);
    }
    void train() { check(accel_model_train(get())); }
    void eval() { check(accel_model_eval(get())); }
    std::size_t num_parameters() const
    {
        std::size_t v = 0;
        check(accel_model_get_num_parameters(get(), &v));
        return v;
    }
    /** Name of parameter @p index; a copy (the library's string lives as long as the model). */
    std::string parameter_name(std::size_t index) const
    {
        const char *s = nullptr;
        check(accel_model_get_parameter_name(get(), index, &s));
        return s;
    }
    Tensor get_tensor(const std::string &name) const
    {
        accel_tensor_t *raw = nullptr;
        check(accel_model_get_tensor(get(), name.c_str(), &raw));
        return Tensor(raw);
    }
    /** The gradient of @p name; an empty Tensor (operator bool false) when it has none. */
    Tensor get_gradient(const std::string &name) const
    {
        accel_tensor_t *raw = nullptr;
        check(accel_model_get_gradient(get(), name.c_str(), &raw));
        return Tensor(raw);
    }
    /** Freezes (false) or unfreezes (true) the parameters whose names match @p name_glob; before the optimizer. */
    void set_requires_grad(const std::string &name_glob, bool requires_grad)
    {
        check(accel_model_set_requires_grad(get(), name_glob.c_str(), requires_grad));
    }
    /** Whether parameter @p name trains (false when frozen). */
    bool requires_grad(const std::string &name) const
    {
        bool v = false;
        check(accel_model_get_requires_grad(get(), name.c_str(), &v));
        return v;
    }
    /** Quantizes the linear layers in place (bitsandbytes' 8-bit / 4-bit; @p bnb_config_json: BnbQuantizationConfig's
     *  keys); before preparing the model. */
    void quantize(const std::string &bnb_config_json) { check(accel_model_quantize(get(), bnb_config_json.c_str())); }
};

class Optimizer : public detail::Handle<accel_optimizer_t, accel_optimizer_free> {
public:
    using Handle::Handle;
    Optimizer(Model &model, const std::string &config) : Handle(create(model, config)) {}
    void step() { check(accel_optimizer_step(get())); }
    void zero_grad() { check(accel_optimizer_zero_grad(get())); }
    double lr() const
    {
        double v = 0.0;
        check(accel_optimizer_get_lr(get(), &v));
        return v;
    }
    void set_lr(double lr) { check(accel_optimizer_set_lr(get(), lr)); }

private:
    static accel_optimizer_t *create(Model &model, const std::string &config)
    {
        accel_optimizer_t *raw = nullptr;
        check(accel_optimizer_create(model.get(), config.c_str(), &raw));
        return raw;
    }
};

class Scheduler : public detail::Handle<accel_scheduler_t, accel_scheduler_free> {
public:
    using Handle::Handle;
    Scheduler(Optimizer &optimizer, const std::string &config) : Handle(create(optimizer, config)) {}
    void step() { check(accel_scheduler_step(get())); }
    double last_lr() const
    {
        double v = 0.0;
        check(accel_scheduler_get_last_lr(get(), &v));
        return v;
    }
    std::int64_t step_count() const
    {
        std::int64_t v = 0;
        check(accel_scheduler_get_step_count(get(), &v));
        return v;
    }

private:
    static accel_scheduler_t *create(Optimizer &optimizer, const std::string &config)
    {
        accel_scheduler_t *raw = nullptr;
        check(accel_scheduler_create(optimizer.get(), config.c_str(), &raw));
        return raw;
    }
};

/** One batch; operator bool is false for the end-of-pass marker returned by DataLoader::next_batch(). */
class Batch : public detail::Handle<accel_batch_t, accel_batch_free> {
public:
    using Handle::Handle;
    Tensor inputs() const
    {
        accel_tensor_t *raw = nullptr;
        check(accel_batch_get_inputs(get(), &raw));
        return Tensor(raw);
    }
    /** The labels; an empty Tensor when the loader has none. */
    Tensor labels() const
    {
        accel_tensor_t *raw = nullptr;
        check(accel_batch_get_labels(get(), &raw));
        return Tensor(raw);
    }
    std::int64_t size() const
    {
        std::int64_t v = 0;
        check(accel_batch_get_size(get(), &v));
        return v;
    }
    /** The attention mask (1 = token, 0 = padding) of a "pad" or the caller's collate; empty when none. */
    Tensor attention_mask() const
    {
        accel_tensor_t *raw = nullptr;
        check(accel_batch_get_attention_mask(get(), &raw));
        return Tensor(raw);
    }
    /** The samples' int64 indices (positions in the pass for iterable datasets). */
    Tensor indices() const
    {
        accel_tensor_t *raw = nullptr;
        check(accel_batch_get_indices(get(), &raw));
        return Tensor(raw);
    }
};

/** One sample of a dataset of the caller's: its inputs and, optionally, its labels (all samples alike). */
struct Sample {
    Tensor inputs;
    Tensor labels;
};

/** What a collate returns: the batch's inputs, and optionally labels and an attention mask. */
struct Collated {
    Tensor inputs;
    Tensor labels;
    Tensor attention_mask;
};

/** A collate (PyTorch's collate_fn): the samples' inputs and labels (labels empty when the samples have none),
 *  borrowed for the call. With "num_workers" > 0 it runs on several worker threads at once. */
using CollateFn = std::function<Collated(const std::vector<Tensor> &inputs, const std::vector<Tensor> &labels)>;

/** A map-style dataset (PyTorch's Dataset). With "num_workers" > 0, get() runs on several worker threads at
 *  once: it must be safe to call concurrently. An exception fails DataLoader::next_batch with its message. */
class MapDataset {
public:
    virtual ~MapDataset() = default;
    /** len(dataset), asked once when the loader is created. */
    virtual std::int64_t length() = 0;
    virtual Sample get(std::int64_t index) = 0;
};

/** An iterable dataset (PyTorch's IterableDataset; torchdata's state_dict / load_state_dict when stateful()).
 *  Its methods run on one thread at a time (the loader's reading thread with "num_workers" > 0). */
class IterableDataset {
public:
    virtual ~IterableDataset() = default;
    /** Starts pass @p epoch (iter(dataset) after dataset.set_epoch(epoch)). */
    virtual void set_epoch(std::int64_t epoch) = 0;
    /** The next sample, or std::nullopt at the end of the pass. */
    virtual std::optional<Sample> next() = 0;
    /** Whether state() / load_state() work; without them a resume re-reads the pass and skips what was taken. */
    virtual bool stateful() const { return false; }
    virtual std::string state() { return {}; }
    virtual void load_state(const std::string &) {}
};

namespace detail {

/** Runs a callback body: an exception becomes its status (accel::Error's own, ACCEL_ERR_UNKNOWN otherwise)
 *  with accel_callback_set_error, so nothing is thrown into the library. */
template <class F>
accel_status_t callback_status(F &&body) noexcept
{
    try {
        body();
        return ACCEL_OK;
    } catch (const Error &e) {
        accel_callback_set_error(e.what());
        return e.status() == ACCEL_OK ? ACCEL_ERR_UNKNOWN : e.status();
    } catch (const std::exception &e) {
        accel_callback_set_error(e.what());
        return ACCEL_ERR_UNKNOWN;
    } catch (...) {
        accel_callback_set_error("an exception that is not a std::exception in a dataset callback");
        return ACCEL_ERR_UNKNOWN;
    }
}

inline void hand_over(Sample &&s, accel_tensor_t **inputs, accel_tensor_t **labels)
{
    if (!s.inputs) throw Error(ACCEL_ERR_INVALID_ARGUMENT, "the sample has no inputs tensor");
    *inputs = s.inputs.release();
    *labels = s.labels.release();
}

/** The borrowed tensors of a collate call, wrapped for the caller and given back (never freed) at the end. */
struct Borrowed {
    std::vector<Tensor> inputs, labels;
    Borrowed(const accel_tensor_t *const *in, const accel_tensor_t *const *lab, std::size_t n)
    {
        inputs.reserve(n);
        labels.reserve(lab ? n : 0);
        for (std::size_t i = 0; i < n; ++i) {
            inputs.emplace_back(const_cast<accel_tensor_t *>(in[i]));
            if (lab) labels.emplace_back(const_cast<accel_tensor_t *>(lab[i]));
        }
    }
    Borrowed(const Borrowed &) = delete;
    Borrowed &operator=(const Borrowed &) = delete;
    ~Borrowed()
    {
        for (auto &t : inputs) (void)t.release();
        for (auto &t : labels) (void)t.release();
    }
};

inline accel_status_t collate_call(void *user_data, const accel_tensor_t *const *inputs,
                                   const accel_tensor_t *const *labels, std::size_t count, accel_tensor_t **out_inputs,
                                   accel_tensor_t **out_labels, accel_tensor_t **out_mask) noexcept
{
    return callback_status([&] {
        Borrowed b(inputs, labels, count);
        Collated c = (*static_cast<CollateFn *>(user_data))(b.inputs, b.labels);
        if (!c.inputs) throw Error(ACCEL_ERR_INVALID_ARGUMENT, "collate returned no inputs tensor");
        *out_inputs = c.inputs.release();
        *out_labels = c.labels.release();
        *out_mask = c.attention_mask.release();
    });
}

/** What a callback loader's user_data owns: the dataset and the collate, freed by the loader's release (after
 *  its workers stopped), so neither dies while a worker may still call it. */
template <class D>
struct Kept {
    std::shared_ptr<D> dataset;
    CollateFn collate;
    std::string state; // iterable datasets: valid until the next callback
    static void release(void *p) noexcept { delete static_cast<Kept *>(p); }
};

} // namespace detail

class DataLoader : public detail::Handle<accel_dataloader_t, accel_dataloader_free> {
public:
    using Handle::Handle;
    /** A loader over (features[i], labels[i]); @p labels may be nullptr. Shares the tensors' memory. */
    DataLoader(const Tensor &features, const Tensor *labels, const std::string &config)
        : Handle(create(features, labels, config))
    {
    }
    /** The next batch of the current pass; an empty Batch at its end. */
    Batch next_batch()
    {
        accel_batch_t *raw = nullptr;
        check(accel_dataloader_next(get(), &raw));
        return Batch(raw);
    }
    std::int64_t length() const
    {
        std::int64_t v = 0;
        check(accel_dataloader_get_length(get(), &v));
        return v;
    }
    void set_epoch(std::int64_t epoch) { check(accel_dataloader_set_epoch(get(), epoch)); }

    /** Windows of block_size + 1 tokens of an in-memory stream (accel_dataloader_create_from_tokens). */
    static DataLoader from_tokens(const Tensor &tokens, const std::string &config)
    {
        accel_dataloader_t *raw = nullptr;
        check(accel_dataloader_create_from_tokens(tokens.get(), config.c_str(), &raw));
        return DataLoader(raw);
    }
    /** A dataset read from files without loading them (accel_dataloader_create_from_files): token corpora,
     *  e.g. {"format": "tokens", "files": ["train-*.bin"], "dtype": "uint16", "block_size": 1024,
     *  "batch_size": 8}, or .npy / safetensors sample tensors. */
    static DataLoader from_files(const std::string &config)
    {
        accel_dataloader_t *raw = nullptr;
        check(accel_dataloader_create_from_files(config.c_str(), &raw));
        return DataLoader(raw);
    }
    /** A loader over a map-style dataset of the caller's (accel_dataloader_create_from_map_dataset); the
     *  loader keeps @p dataset and @p collate (nullptr: the config's "collate") alive. */
    static DataLoader from_map_dataset(std::shared_ptr<MapDataset> dataset, const std::string &config = "{}",
                                       CollateFn collate = nullptr)
    {
        using K = detail::Kept<MapDataset>;
        if (!dataset) throw Error(ACCEL_ERR_INVALID_ARGUMENT, "from_map_dataset: dataset is null");
        auto kept = std::make_unique<K>(K{std::move(dataset), std::move(collate), {}});
        accel_map_dataset_t ds{};
        ds.length = [](void *ud, std::int64_t *out) noexcept {
            return detail::callback_status([&] { *out = static_cast<K *>(ud)->dataset->length(); });
        };
        ds.get = [](void *ud, std::int64_t index, accel_tensor_t **in, accel_tensor_t **lab) noexcept {
            return detail::callback_status([&] { detail::hand_over(static_cast<K *>(ud)->dataset->get(index), in, lab); });
        };
        ds.release = &K::release;
        ds.user_data = kept.get();
        accel_dataloader_t *raw = nullptr;
        check(accel_dataloader_create_from_map_dataset(&ds, kept->collate ? &detail::collate_call : nullptr,
                                                       &kept->collate, config.c_str(), &raw));
        (void)kept.release(); // the loader owns it now
        return DataLoader(raw);
    }
    /** A loader over an iterable dataset of the caller's (accel_dataloader_create_from_iterable_dataset),
     *  e.g. with {"packing": {"block_size": 1024, "eos_token_id": 50256}} over documents. */
    static DataLoader from_iterable_dataset(std::shared_ptr<IterableDataset> dataset, const std::string &config = "{}",
                                            CollateFn collate = nullptr)
    {
        using K = detail::Kept<IterableDataset>;
        if (!dataset) throw Error(ACCEL_ERR_INVALID_ARGUMENT, "from_iterable_dataset: dataset is null");
        auto kept = std::make_unique<K>(K{std::move(dataset), std::move(collate), {}});
        accel_iterable_dataset_t ds{};
        ds.set_epoch = [](void *ud, std::int64_t epoch) noexcept {
            return detail::callback_status([&] { static_cast<K *>(ud)->dataset->set_epoch(epoch); });
        };
        ds.next = [](void *ud, accel_tensor_t **in, accel_tensor_t **lab) noexcept {
            return detail::callback_status([&] {
                if (auto s = static_cast<K *>(ud)->dataset->next()) detail::hand_over(std::move(*s), in, lab);
            });
        };
        if (kept->dataset->stateful()) {
            ds.state = [](void *ud, const std::uint8_t **data, std::size_t *len) noexcept {
                return detail::callback_status([&] {
                    K *k = static_cast<K *>(ud);
                    k->state = k->dataset->state();
                    *data = reinterpret_cast<const std::uint8_t *>(k->state.data());
                    *len = k->state.size();
                });
            };
            ds.load_state = [](void *ud, const std::uint8_t *data, std::size_t len) noexcept {
                return detail::callback_status([&] {
                    static_cast<K *>(ud)->dataset->load_state(std::string(reinterpret_cast<const char *>(data), len));
                });
            };
        }
        ds.release = &K::release;
        ds.user_data = kept.get();
        accel_dataloader_t *raw = nullptr;
        check(accel_dataloader_create_from_iterable_dataset(&ds, kept->collate ? &detail::collate_call : nullptr,
                                                            &kept->collate, config.c_str(), &raw));
        (void)kept.release();
        return DataLoader(raw);
    }

private:
    static accel_dataloader_t *create(const Tensor &features, const Tensor *labels, const std::string &config)
    {
        accel_dataloader_t *raw = nullptr;
        check(accel_dataloader_create_from_tensors(features.get(), labels ? labels->get() : nullptr, config.c_str(),
                                                   &raw));
        return raw;
    }
};

namespace detail {
/** Copies every entry of an object collective's result and frees the list. */
inline std::vector<std::string> take_objects(accel_object_list_t *list)
{
    std::vector<std::string> out;
    std::size_t n = 0;
    accel_status_t st = accel_object_list_get_count(list, &n);
    for (std::size_t i = 0; st == ACCEL_OK && i < n; ++i) {
        const std::uint8_t *data = nullptr;
        std::size_t size = 0;
        st = accel_object_list_get_item(list, i, &data, &size);
        if (st == ACCEL_OK)
            out.emplace_back(reinterpret_cast<const char *>(data), size);
    }
    accel_object_list_free(list);
    check(st);
    return out;
}

/** A save_state / load_state pre-hook (accel_state_hook_fn_t): called with the folder and the process index. */
using StateHookFn = std::function<void(const std::string &folder, std::int32_t process_index)>;
/** The hook's trampoline: an exception becomes its status and message, nothing is thrown into the library. */
inline accel_status_t state_hook_trampoline(void *user_data, const char *folder, std::int32_t process_index) noexcept
{
    try {
        (*static_cast<StateHookFn *>(user_data))(folder ? folder : "", process_index);
        return ACCEL_OK;
    } catch (const Error &e) {
        accel_callback_set_error(e.what());
        return e.status() == ACCEL_OK ? ACCEL_ERR_UNKNOWN : e.status();
    } catch (const std::exception &e) {
        accel_callback_set_error(e.what());
        return ACCEL_ERR_UNKNOWN;
    } catch (...) {
        return ACCEL_ERR_UNKNOWN;
    }
}
inline void release_state_hook(void *user_data) noexcept { delete static_cast<StateHookFn *>(user_data); }
} // namespace detail

namespace detail {
/** find_executable_batch_size's step, and what it last threw (rethrown unchanged when it ends the search). */
struct BatchSizeCall {
    std::function<void(std::int64_t)> step;
    std::exception_ptr error;
};
/** The step's trampoline: accel::Error keeps its status, std::bad_alloc is RESOURCE_EXHAUSTED, anything else
 *  UNKNOWN with its text (which the library still reads for an allocation failure); nothing is thrown into it. */
inline accel_status_t batch_size_trampoline(void *user_data, std::int64_t batch_size) noexcept
{
    auto *call = static_cast<BatchSizeCall *>(user_data);
    call->error = nullptr;
    try {
        call->step(batch_size);
        return ACCEL_OK;
    } catch (const Error &e) {
        call->error = std::current_exception();
        accel_callback_set_error(e.what());
        return e.status() == ACCEL_OK ? ACCEL_ERR_UNKNOWN : e.status();
    } catch (const std::bad_alloc &e) {
        call->error = std::current_exception();
        accel_callback_set_error((std::string("out of memory: ") + e.what()).c_str());
        return ACCEL_ERR_RESOURCE_EXHAUSTED;
    } catch (const std::exception &e) {
        call->error = std::current_exception();
        accel_callback_set_error(e.what());
        return ACCEL_ERR_UNKNOWN;
    } catch (...) {
        call->error = std::current_exception();
        accel_callback_set_error("an exception that is not a std::exception");
        return ACCEL_ERR_UNKNOWN;
    }
}
} // namespace detail

/**
 * Accelerate's find_executable_batch_size (accel_find_executable_batch_size): runs @p step with
 * @p starting_batch_size and, while it runs out of memory (accel::Error with ACCEL_ERR_RESOURCE_EXHAUSTED,
 * std::bad_alloc, or an exception whose text reports a failed allocation), again with
 * floor(batch_size * reduce_batch_size_factor). Returns the batch size it succeeded with. Another exception of
 * @p step is rethrown unchanged; reaching zero throws accel::Error(ACCEL_ERR_RESOURCE_EXHAUSTED).
 * @p options_json: "reduce_batch_size_factor" (0.5; 0.9 as Accelerate 1.9+), "max_memory_bytes"; null = defaults.
 */
inline std::int64_t find_executable_batch_size(std::int64_t starting_batch_size,
                                               std::function<void(std::int64_t)> step,
                                               const char *options_json = nullptr)
{
    detail::BatchSizeCall call{std::move(step), nullptr};
    std::int64_t found = 0;
    const accel_status_t st = accel_find_executable_batch_size(starting_batch_size, options_json,
                                                               detail::batch_size_trampoline, &call, &found);
    // The step's own failure ends the search (RESOURCE_EXHAUSTED only comes from reaching zero).
    if (st != ACCEL_OK && st != ACCEL_ERR_RESOURCE_EXHAUSTED && call.error) std::rethrow_exception(call.error);
    check(st);
    return found;
}

class Accelerator : public detail::Handle<accel_accelerator_t, accel_accelerator_free> {
public:
    using Handle::Handle;

    /** Ends an accelerator context (accumulate, autocast) when destroyed. */
    class Scope {
    public:
        Scope(const Scope &) = delete;
        Scope &operator=(const Scope &) = delete;
        Scope(Scope &&other) noexcept : acc_(std::exchange(other.acc_, nullptr)), end_(other.end_) {}
        Scope &operator=(Scope &&) = delete;
        /** Ends the context now, throwing on failure (the destructor ignores failures). */
        void end()
        {
            if (acc_)
                check(end_(std::exchange(acc_, nullptr)));
        }
        ~Scope()
        {
            if (acc_)
                (void)end_(acc_);
        }

    private:
        friend class Accelerator;
        Scope(accel_accelerator_t *acc, accel_status_t (*end)(accel_accelerator_t *)) : acc_(acc), end_(end) {}
        accel_accelerator_t *acc_;
        accel_status_t (*end_)(accel_accelerator_t *);
    };

    /** An accelerator with Accelerate's defaults. */
    Accelerator() : Handle(create(nullptr)) {}
    /** An accelerator from Accelerate's Accelerator(...) arguments as JSON; invalid configs throw
     *  accel::Error with ACCEL_ERR_INVALID_ARGUMENT naming the JSON path. */
    explicit Accelerator(const std::string &config) : Handle(create(config.c_str())) {}

    std::string config_json() const
    {
        char *s = nullptr;
        check(accel_accelerator_get_config_json(get(), &s));
        return detail::owned_string(s);
    }
    /** accelerator.device: "cuda:N" where a GPU is used, else "cpu". */
    std::string device() const
    {
        char *s = nullptr;
        check(accel_accelerator_get_device(get(), &s));
        return detail::owned_string(s);
    }
    /** accelerator.prepare(...): each pointer may be nullptr. */
    void prepare(Model *model, Optimizer *optimizer, DataLoader *dataloader, Scheduler *scheduler)
    {
        check(accel_accelerator_prepare(get(), model ? model->get() : nullptr, optimizer ? optimizer->get() : nullptr,
                                        dataloader ? dataloader->get() : nullptr,
                                        scheduler ? scheduler->get() : nullptr));
    }
    /** free_memory() / clear(): forgets every prepared object (they can be prepared again); step = 0. */
    void free_memory() { check(accel_accelerator_free_memory(get())); }
    void clear() { check(accel_accelerator_clear(get())); }
    void backward(Tensor &loss) { check(accel_accelerator_backward(get(), loss.get())); }
    /** LOMO's fused backward: every prepared "lomo" / "adalomo" optimizer updates during backward. */
    void lomo_backward(Tensor &loss, double learning_rate)
    {
        check(accel_accelerator_lomo_backward(get(), loss.get(), learning_rate));
    }
    /** `with accelerator.accumulate(model):` - the context ends when the Scope is destroyed. */
    [[nodiscard]] Scope accumulate(Model &model)
    {
        check(accel_accelerator_accumulate_begin(get(), model.get()));
        return Scope(get(), accel_accelerator_accumulate_end);
    }
    /** Accelerate's register_save_state_pre_hook: `hook(folder, process_index)` runs on every process before
     *  save_state writes into `folder` (files it adds there are part of the checkpoint); an exception fails
     *  save_state with its text. Returns the handle for remove_state_hook. */
    std::int64_t register_save_state_pre_hook(detail::StateHookFn hook)
    {
        return register_state_hook(accel_accelerator_register_save_state_pre_hook, std::move(hook));
    }
    /** Accelerate's register_load_state_pre_hook: `hook(folder, process_index)` before load_state reads `folder`. */
    std::int64_t register_load_state_pre_hook(detail::StateHookFn hook)
    {
        return register_state_hook(accel_accelerator_register_load_state_pre_hook, std::move(hook));
    }
    /** Accelerator.save for named tensors: one safetensors file at `path`, written by the main process only. */
    void save(const std::vector<std::pair<std::string, const Tensor *>> &tensors, const std::string &path)
    {
        std::vector<const char *> keys;
        std::vector<const accel_tensor_t *> raw;
        for (const auto &kv : tensors) {
            keys.push_back(kv.first.c_str());
            raw.push_back(kv.second != nullptr ? kv.second->get() : nullptr);
        }
        check(accel_accelerator_save(get(), keys.data(), raw.data(), raw.size(), path.c_str()));
    }
    /** RemovableHandle.remove(): the hook is dropped now. */
    void remove_state_hook(std::int64_t handle) { check(accel_accelerator_remove_state_hook(get(), handle)); }
    /** Accelerate's get_state_dict(model): (key, tensor) pairs in the model's order (parameters, then buffers;
     *  copies). Collective for a model sharded by fsdp_plugin / deepspeed_plugin (every process calls it); under
     *  FSDP and ZeRO-3 only process 0 receives the entries, as in Accelerate. @p options_json: {"unwrap": true,
     *  "rank0_only": null | true | false}; null = the defaults. */
    std::vector<std::pair<std::string, Tensor>> get_state_dict(const Model &model, const char *options_json = nullptr)
    {
        accel_state_dict_t *raw = nullptr;
        check(accel_accelerator_get_state_dict(get(), model.get(), options_json, &raw));
        const std::unique_ptr<accel_state_dict_t, void (*)(accel_state_dict_t *)> sd(raw, accel_state_dict_free);
        std::size_t n = 0;
        check(accel_state_dict_get_count(sd.get(), &n));
        std::vector<std::pair<std::string, Tensor>> out;
        out.reserve(n);
        for (std::size_t i = 0; i < n; ++i) {
            const char *key = nullptr;
            accel_tensor_t *t = nullptr;
            check(accel_state_dict_get_key(sd.get(), i, &key));
            check(accel_state_dict_get_tensor(sd.get(), i, &t));
            out.emplace_back(key, Tensor(t));
        }
        return out;
    }
    /** `with accelerator.join_uneven_inputs(joinables, even_batches):` - DDP tolerates processes running out of
     *  batches; no joinables: every prepared model; even_batches nullopt keeps the data loaders' setting. */
    [[nodiscard]] Scope join_uneven_inputs(const std::vector<Model *> &joinables = {},
                                           std::optional<bool> even_batches = std::nullopt)
    {
        std::vector<accel_model_t *> raw;
        for (Model *m : joinables) raw.push_back(m != nullptr ? m->get() : nullptr);
        check(accel_accelerator_join_uneven_inputs_begin(get(), raw.data(), raw.size(),
                                                         even_batches ? (*even_batches ? 1 : 0) : -1));
        return Scope(get(), accel_accelerator_join_uneven_inputs_end);
    }
    /** This process's place on the device mesh (data, shard, tensor, context, pipeline parallel ranks), as JSON. */
    std::string parallel_ranks_json() const
    {
        char *s = nullptr;
        check(accel_accelerator_get_parallel_ranks_json(get(), &s));
        return detail::owned_string(s);
    }
    /** Per-rank bytes of parameters, gradients, optimizer state and gathered buffers, and peak RSS, as JSON. */
    std::string memory_stats_json() const
    {
        char *s = nullptr;
        check(accel_accelerator_get_memory_stats_json(get(), &s));
        return detail::owned_string(s);
    }
    /** gather_object: every process's bytes in rank order (collective). */
    std::vector<std::string> gather_object(const std::string &bytes)
    {
        accel_object_list_t *l = nullptr;
        check(accel_accelerator_gather_object(get(), reinterpret_cast<const std::uint8_t *>(bytes.data()), bytes.size(),
                                              &l));
        return detail::take_objects(l);
    }
    /** broadcast_object_list: process @p from_process's list on every process (the others' list is ignored). */
    std::vector<std::string> broadcast_object_list(const std::vector<std::string> &items, std::int32_t from_process = 0)
    {
        std::vector<const std::uint8_t *> data;
        std::vector<std::size_t> sizes;
        for (const std::string &item : items) {
            data.push_back(reinterpret_cast<const std::uint8_t *>(item.data()));
            sizes.push_back(item.size());
        }
        accel_object_list_t *l = nullptr;
        check(accel_accelerator_broadcast_object_list(get(), data.data(), sizes.data(), data.size(), from_process, &l));
        return detail::take_objects(l);
    }
    /** broadcast_object: process @p from_process's bytes on every process (the others' bytes are ignored). */
    std::string broadcast_object(const std::string &bytes, std::int32_t from_process = 0)
    {
        accel_object_list_t *l = nullptr;
        check(accel_accelerator_broadcast_object(get(), reinterpret_cast<const std::uint8_t *>(bytes.data()),
                                                 bytes.size(), from_process, &l));
        return detail::take_objects(l).at(0);
    }
    /** gather_object over JSON: each process's JSON array, concatenated in rank order. */
    std::string gather_object_json(const std::string &json)
    {
        char *s = nullptr;
        check(accel_accelerator_gather_object_json(get(), json.c_str(), &s));
        return detail::owned_string(s);
    }
    /** broadcast_object over JSON: process @p from_process's JSON value on every process. */
    std::string broadcast_object_json(const std::string &json, std::int32_t from_process = 0)
    {
        char *s = nullptr;
        check(accel_accelerator_broadcast_object_json(get(), json.c_str(), from_process, &s));
        return detail::owned_string(s);
    }
    /** Sharded models: gather every parameter (collective); _end writes them back to the shards. */
    void summon_full_params_begin(Model &model) { check(accel_accelerator_summon_full_params_begin(get(), model.get())); }
    void summon_full_params_end(Model &model) { check(accel_accelerator_summon_full_params_end(get(), model.get())); }
    /** `with accelerator.autocast():` */
    [[nodiscard]] Scope autocast()
    {
        check(accel_accelerator_autocast_begin(get()));
        return Scope(get(), accel_accelerator_autocast_end);
    }
    /** `with accelerator.profile():` the Chrome trace goes to output_trace_dir/profile_{process_index}.json. */
    [[nodiscard]] Scope profile()
    {
        check(accel_accelerator_profile_begin(get()));
        return Scope(get(), accel_accelerator_profile_end);
    }
    double train_step(Model &model, Optimizer &optimizer, Scheduler *scheduler, const Batch &batch,
                      const std::string &loss_name)
    {
        double v = 0.0;
        check(accel_accelerator_train_step(get(), model.get(), optimizer.get(), scheduler ? scheduler->get() : nullptr,
                                           batch.get(), loss_name.c_str(), &v));
        return v;
    }
    bool sync_gradients() const
    {
        bool v = false;
        check(accel_accelerator_get_sync_gradients(get(), &v));
        return v;
    }
    std::int64_t step() const
    {
        std::int64_t v = 0;
        check(accel_accelerator_get_step(get(), &v));
        return v;
    }
    std::int64_t gradient_accumulation_steps() const
    {
        std::int64_t v = 0;
        check(accel_accelerator_get_gradient_accumulation_steps(get(), &v));
        return v;
    }
    double clip_grad_norm(Model &model, double max_norm, double norm_type = 2.0)
    {
        double v = 0.0;
        check(accel_accelerator_clip_grad_norm(get(), model.get(), max_norm, norm_type, &v));
        return v;
    }
    void print(const std::string &text) const { check(accel_accelerator_print(get(), text.c_str())); }
    void save_state(const std::string &dir) { check(accel_accelerator_save_state(get(), dir.c_str())); }
    void load_state(const std::string &dir) { check(accel_accelerator_load_state(get(), dir.c_str())); }
    // Automatic resume: loads the newest complete automatic checkpoint; false (nothing loaded) on a fresh start.
    bool load_latest_state()
    {
        bool found = false;
        check(accel_accelerator_load_latest_state(get(), &found));
        return found;
    }
    // save_state with options ({"async": true}, {"safe_serialization": false}); returns the folder written.
    std::string save_state(const std::string &dir, const std::string &options_json)
    {
        char *out = nullptr;
        check(accel_accelerator_save_state_with_options(get(), dir.c_str(), options_json.c_str(), &out));
        std::string s(out);
        accel_string_free(out);
        return s;
    }
    // Waits for an asynchronous save_state in progress; throws its failure.
    void wait_for_checkpoint() { check(accel_accelerator_wait_for_checkpoint(get())); }
    bool is_main_process() const
    {
        bool v = false;
        check(accel_accelerator_is_main_process(get(), &v));
        return v;
    }
    std::int32_t num_processes() const
    {
        std::int32_t v = 0;
        check(accel_accelerator_get_num_processes(get(), &v));
        return v;
    }
private:
    using RegisterStateHook = accel_status_t (*)(accel_accelerator_t *, accel_state_hook_fn_t,
                                                 accel_state_hook_release_fn_t, void *, std::int64_t *);
    std::int64_t register_state_hook(RegisterStateHook reg, detail::StateHookFn hook)
    {
        if (!hook) throw Error(ACCEL_ERR_INVALID_ARGUMENT, "hook: must not be empty");
        auto *owned = new detail::StateHookFn(std::move(hook)); // released by the library (release_state_hook)
        std::int64_t handle = 0;
        const accel_status_t st = reg(get(), detail::state_hook_trampoline, detail::release_state_hook, owned, &handle);
        if (st != ACCEL_OK) delete owned; // a failed registration keeps nothing
        check(st);
        return handle;
    }
    static accel_accelerator_t *create(const char *config)
    {
        check_abi();
        accel_accelerator_t *raw = nullptr;
        check(accel_accelerator_create(config, &raw));
        return raw;
    }
};

/** Accelerate's logging module over accel_log_*: the threshold, the sink, and MultiProcessAdapter.log. */
namespace logging {

/** A sink: the level, the logger's name, the writing process's index and the message (accel_log_fn_t). */
using Callback = std::function<void(accel_log_level_t level, const std::string &name, std::int32_t process_index,
                                    const std::string &message)>;

/** Sets the threshold (0-50), overriding ACCELERATE_LOG_LEVEL. */
inline void set_level(accel_log_level_t level) { check(accel_log_set_level(level)); }

/** The threshold; throws when ACCELERATE_LOG_LEVEL holds something else than a level (messages then use WARNING). */
inline accel_log_level_t level()
{
    accel_log_level_t v = 0;
    check(accel_log_get_level(&v));
    return v;
}

namespace detail {
inline void log_trampoline(void *user_data, accel_log_level_t level, const char *name, std::int32_t process_index,
                           const char *message) noexcept
{
    try {
        (*static_cast<const Callback *>(user_data))(level, name ? name : "", process_index, message ? message : "");
    } catch (...) {
        // A sink that throws loses this message; nothing may be thrown into the library.
    }
}
} // namespace detail

/**
 * Routes every message (the library's and write's) to @p fn; an empty function restores standard error. A
 * replaced sink is kept alive until the process ends: the C API allows a message being written on another thread
 * to reach the previous sink after the change.
 */
inline void set_callback(Callback fn)
{
    static std::vector<std::unique_ptr<const Callback>> kept;
    static std::mutex kept_mutex;
    if (!fn) {
        accel_log_set_callback(nullptr, nullptr);
        return;
    }
    std::lock_guard<std::mutex> lock(kept_mutex);
    kept.push_back(std::make_unique<const Callback>(std::move(fn)));
    accel_log_set_callback(detail::log_trampoline, const_cast<Callback *>(kept.back().get()));
}

/**
 * Logs @p message as accel_log_write does (Accelerate's logger.log(level, msg, main_process_only, in_order)).
 * @p accelerator may be null unless @p in_order is asked in a job of several processes.
 */
inline void write(const std::string &message, accel_log_level_t level = ACCEL_LOG_INFO, const std::string &name = "",
                  bool main_process_only = true, bool in_order = false, Accelerator *accelerator = nullptr)
{
    check(accel_log_write(accelerator ? accelerator->get() : nullptr, name.c_str(), level, message.c_str(),
                          main_process_only, in_order));
}

} // namespace logging

} // namespace accel

#endif /* ACCEL_ACCEL_HPP */
