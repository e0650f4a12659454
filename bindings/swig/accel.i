/* accel.i - the one SWIG interface for Python, Java and C#.
 *
 * Language-neutral: module, what is exposed, names and ownership. Nothing from the headers is wrapped by
 * default (every accel_* function and type is ignored below; only the enum and version constants come
 * through); the classes are written here with %extend over one-pointer boxes (typemaps/handles.i), and
 * their bodies call the C API:
 *   - a non-zero status becomes an exception (typemaps/status.i + the language's %exception);
 *   - `accel_x_t **out` out-parameters become return values, `bool *` / `double *` / `int64_t *` outputs
 *     become return values;
 *   - accel_*_free runs from the destructor and close() (Python), close() (Java), Dispose() (C#);
 *   - *_begin / *_end pairs are exposed as methods and wrapped into with / try-with-resources / using by
 *     the language files.
 * Method names are snake_case here (Python); java/accel_java.i renames them lowerCamelCase and
 * csharp/accel_csharp.i PascalCase.
 */

#if defined(SWIGPYTHON)
%module(package="accel", directors="1") core
#elif defined(SWIGJAVA)
%module(directors="1") Accel
#elif defined(SWIGCSHARP)
%module(directors="1") Library
#else
#error "accel.i targets Python, Java and C#"
#endif

%{
#include <accel/accel.h>
#include <vector>
/* tracking.i: a tracker written in the target language, and the C callback that calls it (declared here:
 * the Accelerator's methods are emitted before tracking.i's code). */
class TrackerCallback;
namespace accel_swig {
accel_status_t tracker_trampoline(void *user_data, accel_tracker_event_t event, const char *json, int64_t step);
}
/* state_hooks.i's, for the same reason. */
class StateHook;
namespace accel_swig {
int64_t register_state_hook(accel_accelerator_t *acc, StateHook *hook, bool save);
}
%}

%include <stdint.i>
%include "typemaps/status.i"
%include "typemaps/handles.i"
%include "typemaps/strings.i"
%include "typemaps/buffers.i"
%include "typemaps/blobs.i"
%include "dtypes.i"

/* Language files come first so their %exception, renames and typemaps apply to what follows. */
#if defined(SWIGPYTHON)
%include "python/accel_python.i"
#elif defined(SWIGJAVA)
%include "java/accel_java.i"
#elif defined(SWIGCSHARP)
%include "csharp/accel_csharp.i"
#endif

/* ---- constants from the headers: status codes, dtypes, mixed-precision modes, version ------------- */
%rename("$ignore", regextarget=1, %$not %$isenum) "^accel_";
%include <accel/common.h>
%include <accel/status.h>
%include <accel/version.h>
%include <accel/types.h>

/** ACCEL_ABI_VERSION of the headers these bindings were compiled against; compared with abi_version()
 *  (the loaded library) when the binding loads. */
%constant int32_t BUILT_ABI_VERSION = ACCEL_ABI_VERSION;

/* ---- module functions --------------------------------------------------------------------------- */
%inline %{
/** Version of the loaded library, e.g. "0.1.0". */
const char *version_string() { return accel_version_string(); }
/** ACCEL_VERSION_NUMBER of the loaded library (major*1000000 + minor*1000 + patch). */
int32_t version_number() { return accel_version_number(); }
/** ABI version (SOVERSION) of the loaded library. */
int32_t abi_version() { return accel_abi_version(); }
/** Build facts (accel and LibTorch versions, CUDA, backends) as a JSON object. */
std::string build_info_json()
{
    char *s = NULL;
    ACCEL_CHECK(accel_build_info_json(&s));
    return accel_swig::owned_string(s);
}
/** Static name of a status code, e.g. "ACCEL_ERR_INVALID_ARGUMENT". */
const char *status_name(int32_t status) { return accel_status_name(status); }
/** Seed LibTorch's default generator and the library's, as accelerate.utils.set_seed. */
void set_seed(uint64_t seed, bool device_specific = false, bool deterministic = false)
{
    ACCEL_CHECK(accel_random_set_seed(seed, device_specific, deterministic));
}
/** Rank of this process as the launcher's environment says (0 when not launched). */
int32_t process_index()
{
    int32_t v = 0;
    ACCEL_CHECK(accel_process_get_index(&v));
    return v;
}
/** Number of processes as the launcher's environment says (1 when not launched). */
int32_t process_count()
{
    int32_t v = 0;
    ACCEL_CHECK(accel_process_get_count(&v));
    return v;
}
/** Whether this process is rank 0. */
bool process_is_main()
{
    bool v = false;
    ACCEL_CHECK(accel_process_is_main(&v));
    return v;
}
/** Size in bytes of one element of @p dtype. */
int64_t dtype_size(int32_t dtype)
{
    size_t v = 0;
    ACCEL_CHECK(accel_dtype_get_size(dtype, &v));
    return (int64_t)v;
}
%}

/* ---- Tensor ------------------------------------------------------------------------------------- */
ACCEL_HANDLE_CLASS(Tensor)
%newobject Tensor::from_bytes;
%newobject Tensor::from_float32;
%newobject Tensor::from_float64;
%newobject Tensor::from_int32;
%newobject Tensor::from_int64;
%newobject Tensor::from_uint8;
%newobject compute_loss;
%extend Tensor {
    ~Tensor() { accel_tensor_free($self->h); delete $self; }
    /** Free the tensor now; later calls raise FailedPreconditionError. */
    void close() { accel_tensor_free($self->h); $self->h = NULL; }
    /** A tensor holding a copy of @p IN_BYTES (row-major elements of @p dtype) with the given shape. */
    static Tensor *from_bytes(const void *IN_BYTES, size_t IN_NBYTES, int32_t dtype, const int64_t *IN_SHAPE,
                              size_t IN_NDIM)
    {
        accel_tensor_t *t = NULL;
        ACCEL_CHECK(accel_tensor_create(IN_BYTES, IN_NBYTES, dtype, IN_SHAPE, IN_NDIM, &t));
        return accel_swig::wrap<Tensor>(t);
    }
#if !defined(SWIGPYTHON)
    static Tensor *from_float32(const float *IN_ARRAY, size_t IN_COUNT, const int64_t *IN_SHAPE, size_t IN_NDIM)
    {
        accel_tensor_t *t = NULL;
        ACCEL_CHECK(accel_tensor_create(IN_ARRAY, IN_COUNT * sizeof(float), ACCEL_DTYPE_FLOAT32, IN_SHAPE, IN_NDIM, &t));
        return accel_swig::wrap<Tensor>(t);
    }
    static Tensor *from_float64(const double *IN_ARRAY, size_t IN_COUNT, const int64_t *IN_SHAPE, size_t IN_NDIM)
    {
        accel_tensor_t *t = NULL;
        ACCEL_CHECK(accel_tensor_create(IN_ARRAY, IN_COUNT * sizeof(double), ACCEL_DTYPE_FLOAT64, IN_SHAPE, IN_NDIM, &t));
        return accel_swig::wrap<Tensor>(t);
    }
    static Tensor *from_int32(const int32_t *IN_ARRAY, size_t IN_COUNT, const int64_t *IN_SHAPE, size_t IN_NDIM)
    {
        accel_tensor_t *t = NULL;
        ACCEL_CHECK(accel_tensor_create(IN_ARRAY, IN_COUNT * sizeof(int32_t), ACCEL_DTYPE_INT32, IN_SHAPE, IN_NDIM, &t));
        return accel_swig::wrap<Tensor>(t);
    }
    static Tensor *from_int64(const int64_t *IN_ARRAY, size_t IN_COUNT, const int64_t *IN_SHAPE, size_t IN_NDIM)
    {
        accel_tensor_t *t = NULL;
        ACCEL_CHECK(accel_tensor_create(IN_ARRAY, IN_COUNT * sizeof(int64_t), ACCEL_DTYPE_INT64, IN_SHAPE, IN_NDIM, &t));
        return accel_swig::wrap<Tensor>(t);
    }
    static Tensor *from_uint8(const uint8_t *IN_ARRAY, size_t IN_COUNT, const int64_t *IN_SHAPE, size_t IN_NDIM)
    {
        accel_tensor_t *t = NULL;
        ACCEL_CHECK(accel_tensor_create(IN_ARRAY, IN_COUNT, ACCEL_DTYPE_UINT8, IN_SHAPE, IN_NDIM, &t));
        return accel_swig::wrap<Tensor>(t);
    }
    /** Copy the elements into @p OUT_ARRAY (length numel()) as float32, converting where exact (dtypes.i):
     *  from float16, bfloat16, int16, int8, uint8, bool; other dtypes raise InvalidArgumentError naming both. */
    void copy_to_float32(float *OUT_ARRAY, size_t OUT_COUNT)
    {
        accel_swig::copy_as(ACCEL_H($self, "Tensor"), ACCEL_DTYPE_FLOAT32, OUT_ARRAY, OUT_COUNT, ACCEL_READER_NAME("toFloatArray", "ToFloatArray"));
    }
    /** As float64: also from float32 and int32; int64 is refused (it rounds above 2**53). */
    void copy_to_float64(double *OUT_ARRAY, size_t OUT_COUNT)
    {
        accel_swig::copy_as(ACCEL_H($self, "Tensor"), ACCEL_DTYPE_FLOAT64, OUT_ARRAY, OUT_COUNT, ACCEL_READER_NAME("toDoubleArray", "ToDoubleArray"));
    }
    /** As int32: from int16, int8, uint8, bool; floating-point and int64 tensors are refused. */
    void copy_to_int32(int32_t *OUT_ARRAY, size_t OUT_COUNT)
    {
        accel_swig::copy_as(ACCEL_H($self, "Tensor"), ACCEL_DTYPE_INT32, OUT_ARRAY, OUT_COUNT, ACCEL_READER_NAME("toIntArray", "ToIntArray"));
    }
    /** As int64: from int32, int16, int8, uint8, bool; floating-point tensors are refused. */
    void copy_to_int64(int64_t *OUT_ARRAY, size_t OUT_COUNT)
    {
        accel_swig::copy_as(ACCEL_H($self, "Tensor"), ACCEL_DTYPE_INT64, OUT_ARRAY, OUT_COUNT, ACCEL_READER_NAME("toLongArray", "ToLongArray"));
    }
    /** As uint8: from bool; every other dtype is refused. */
    void copy_to_uint8(uint8_t *OUT_ARRAY, size_t OUT_COUNT)
    {
        accel_swig::copy_as(ACCEL_H($self, "Tensor"), ACCEL_DTYPE_UINT8, OUT_ARRAY, OUT_COUNT, ACCEL_READER_NAME("toByteArray", "ToByteArray"));
    }
#endif
    /** Copy the elements into @p OUT_BYTES as @p dtype (its size must be numel() * dtype_size(dtype)),
     *  converting by the typed accessors' rule (dtypes.i); @p what names the caller in messages. */
    void copy_as_dtype(int32_t dtype, void *OUT_BYTES, size_t OUT_NBYTES, const char *what)
    {
        size_t size = 0;
        if (!ACCEL_CHECK(accel_dtype_get_size(dtype, &size)))
            return;
        if (OUT_NBYTES % size != 0) {
            accel_swig::fail(ACCEL_ERR_INVALID_ARGUMENT,
                             (std::string(what) + ": the buffer's " + std::to_string(OUT_NBYTES) + " bytes are not a whole number of " +
                              accel_swig::dtype_text(dtype) + " elements").c_str());
            return;
        }
        accel_swig::copy_as(ACCEL_H($self, "Tensor"), dtype, OUT_BYTES, OUT_NBYTES / size, what);
    }
    /** Copy the row-major elements into @p OUT_BYTES, whose size must equal nbytes(). */
    void copy_to_bytes(void *OUT_BYTES, size_t OUT_NBYTES)
    {
        ACCEL_CHECK(accel_tensor_copy_to_buffer(ACCEL_H($self, "Tensor"), OUT_BYTES, OUT_NBYTES));
    }
    /** Where the elements live: "cpu", "cuda:0", ... */
    std::string device() const
    {
        char *s = NULL;
        ACCEL_CHECK(accel_tensor_get_device(ACCEL_H($self, "Tensor"), &s));
        return accel_swig::owned_string(s);
    }
    /** Element type (one of the ACCEL_DTYPE_* constants). */
    int32_t dtype() const
    {
        accel_dtype_t v = 0;
        ACCEL_CHECK(accel_tensor_get_dtype(ACCEL_H($self, "Tensor"), &v));
        return v;
    }
    /** Number of dimensions. */
    int64_t ndim() const
    {
        size_t v = 0;
        ACCEL_CHECK(accel_tensor_get_ndim(ACCEL_H($self, "Tensor"), &v));
        return (int64_t)v;
    }
    /** Size of dimension @p dim (0 <= dim < ndim()). */
    int64_t size(int64_t dim) const
    {
        int64_t shape[16] = {0};
        if (!ACCEL_CHECK(accel_tensor_get_shape(ACCEL_H($self, "Tensor"), shape, 16)))
            return 0;
        size_t nd = 0;
        accel_status_t st = accel_tensor_get_ndim($self->h, &nd);
        (void)st;
        if (dim < 0 || (size_t)dim >= nd) {
            accel_swig::fail(ACCEL_ERR_OUT_OF_RANGE,
                             ("dim: expected 0 <= dim < " + std::to_string(nd) + ", got " + std::to_string(dim)).c_str());
            return 0;
        }
        return shape[dim];
    }
    /** Number of elements. */
    int64_t numel() const
    {
        int64_t v = 0;
        ACCEL_CHECK(accel_tensor_get_numel(ACCEL_H($self, "Tensor"), &v));
        return v;
    }
    /** Size of the elements in bytes. */
    int64_t nbytes() const
    {
        size_t v = 0;
        ACCEL_CHECK(accel_tensor_get_nbytes(ACCEL_H($self, "Tensor"), &v));
        return (int64_t)v;
    }
    /** The value of a one-element tensor (e.g. a loss). */
    double item() const
    {
        double v = 0.0;
        ACCEL_CHECK(accel_tensor_get_item(ACCEL_H($self, "Tensor"), &v));
        return v;
    }
}

%inline %{
/** A mean-reduced loss by name ("cross_entropy", "nll", "mse", "l1", "smooth_l1", "bce_with_logits",
 *  "causal_lm") or JSON {"type": ..., "ignore_index": -100}, keeping the autograd graph for
 *  Accelerator.backward(). */
Tensor *compute_loss(const char *name, const Tensor *outputs, const Tensor *targets)
{
    accel_tensor_t *t = NULL;
    ACCEL_CHECK(accel_loss_compute(name, ACCEL_H(outputs, "Tensor"), ACCEL_H(targets, "Tensor"), &t));
    return accel_swig::wrap<Tensor>(t);
}
%}

/* ---- Model -------------------------------------------------------------------------------------- */
ACCEL_HANDLE_CLASS(Model)
%newobject Model::from_json;
%newobject Model::from_torchscript;
%newobject Model::forward;
%newobject Model::get_tensor;
%newobject Model::get_gradient;
%newobject Model::generate;

/* Keys and tensors for Model.load_state_dict(); the tensors must stay alive until the call. */
%nodefaultctor StateDictEntries;
struct StateDictEntries {};
%extend StateDictEntries {
    StateDictEntries() { return new StateDictEntries(); }
    ~StateDictEntries() { delete $self; }
    /** Add one entry; @p tensor must stay alive until load_state_dict() returns. */
    void add(const char *key, const Tensor *tensor)
    {
        const accel_tensor_t *t = ACCEL_H(tensor, "Tensor");
        if (t) {
            $self->keys.push_back(key ? key : "");
            $self->tensors.push_back(t);
        }
    }
    int64_t size() const { return (int64_t)$self->keys.size(); }
}

%extend Model {
    ~Model() { accel_model_free($self->h); delete $self; }
    /** Free the model now; later calls raise FailedPreconditionError. */
    void close() { accel_model_free($self->h); $self->h = NULL; }
    /** Build a model from a JSON spec, e.g. {"type": "mlp", "widths": [16, 64, 4]}. */
    static Model *from_json(const char *spec_json)
    {
        accel_model_t *m = NULL;
        ACCEL_CHECK(accel_model_create_from_json(spec_json, &m));
        return accel_swig::wrap<Model>(m);
    }
    /** Load a TorchScript module saved with torch.jit.save. */
    static Model *from_torchscript(const char *path)
    {
        accel_model_t *m = NULL;
        ACCEL_CHECK(accel_model_create_from_torchscript(path, &m));
        return accel_swig::wrap<Model>(m);
    }
    /** Run the model on @p input. */
    Tensor *forward(const Tensor *input)
    {
        accel_tensor_t *t = NULL;
        ACCEL_CHECK(accel_model_forward(ACCEL_H($self, "Model"), ACCEL_H(input, "Tensor"), &t));
        return accel_swig::wrap<Tensor>(t);
    }
    /** forward() without the autograd graph, as under torch.no_grad(): evaluation and inference (eval mode
     *  alone keeps the graph, as in PyTorch). */
    Tensor *forward_no_grad(const Tensor *input)
    {
        accel_tensor_t *t = NULL;
        ACCEL_CHECK(accel_model_forward_no_grad(ACCEL_H($self, "Model"), ACCEL_H(input, "Tensor"), &t));
        return accel_swig::wrap<Tensor>(t);
    }
    /** Generate tokens with a "gpt" or "llama" model after the prompt @p input_ids (int64 [B, T] or [T]). Options:
     *  {"max_new_tokens": 20, "do_sample": false, "temperature": 1.0, "top_k": 50, "seed": 42,
     *  "eos_token_id": null, "use_cache": true}; null/None for the defaults (greedy). */
    Tensor *generate(const Tensor *input_ids, const char *options_json = NULL)
    {
        accel_tensor_t *t = NULL;
        ACCEL_CHECK(accel_model_generate(ACCEL_H($self, "Model"), ACCEL_H(input_ids, "Tensor"), options_json, &t));
        return accel_swig::wrap<Tensor>(t);
    }
    /** Training mode, as model.train(). */
    void train() { ACCEL_CHECK(accel_model_train(ACCEL_H($self, "Model"))); }
    /** Evaluation mode, as model.eval(). */
    void eval() { ACCEL_CHECK(accel_model_eval(ACCEL_H($self, "Model"))); }
    bool is_training() const
    {
        bool v = false;
        ACCEL_CHECK(accel_model_is_training(ACCEL_H($self, "Model"), &v));
        return v;
    }
    /** Number of named parameters. */
    int64_t num_parameters() const
    {
        size_t v = 0;
        ACCEL_CHECK(accel_model_get_num_parameters(ACCEL_H($self, "Model"), &v));
        return (int64_t)v;
    }
    /** Total number of parameter elements. */
    int64_t parameter_numel() const
    {
        int64_t v = 0;
        ACCEL_CHECK(accel_model_get_parameter_numel(ACCEL_H($self, "Model"), &v));
        return v;
    }
    /** Name of parameter @p index in named_parameters() order. */
    std::string parameter_name(int64_t index) const
    {
        const char *s = NULL;
        if (index < 0) {
            accel_swig::fail(ACCEL_ERR_OUT_OF_RANGE, "index: expected >= 0");
            return "";
        }
        ACCEL_CHECK(accel_model_get_parameter_name(ACCEL_H($self, "Model"), (size_t)index, &s));
        return accel_swig::borrowed_string(s);
    }
    /** A copy of the parameter or buffer @p name (a state-dict key). */
    Tensor *get_tensor(const char *name) const
    {
        accel_tensor_t *t = NULL;
        ACCEL_CHECK(accel_model_get_tensor(ACCEL_H($self, "Model"), name, &t));
        return accel_swig::wrap<Tensor>(t);
    }
    /** A copy of the gradient of parameter @p name, or null/None when it has none. */
    Tensor *get_gradient(const char *name) const
    {
        accel_tensor_t *t = NULL;
        ACCEL_CHECK(accel_model_get_gradient(ACCEL_H($self, "Model"), name, &t));
        return accel_swig::wrap<Tensor>(t);
    }
    /** Freeze (false) or unfreeze (true) every parameter whose name matches the glob @p name_glob (`*` matches
     *  any characters): frozen parameters get no gradient and no optimizer state. Before the optimizer is created. */
    void set_requires_grad(const char *name_glob, bool requires_grad)
    {
        ACCEL_CHECK(accel_model_set_requires_grad(ACCEL_H($self, "Model"), name_glob, requires_grad));
    }
    /** Whether parameter @p name trains (false when frozen). */
    bool requires_grad(const char *name) const
    {
        bool v = false;
        ACCEL_CHECK(accel_model_get_requires_grad(ACCEL_H($self, "Model"), name, &v));
        return v;
    }
    /** Quantizes the linear layers in place with bitsandbytes' 8-bit or 4-bit formats (Accelerate's
     *  load_and_quantize_model); @p bnb_config_json holds BnbQuantizationConfig's keys. Before preparing the model. */
    void quantize(const char *bnb_config_json)
    {
        ACCEL_CHECK(accel_model_quantize(ACCEL_H($self, "Model"), bnb_config_json));
    }
    /** Number of state-dict entries (parameters, then buffers). */
    int64_t state_dict_size() const
    {
        size_t v = 0;
        ACCEL_CHECK(accel_model_get_state_dict_size(ACCEL_H($self, "Model"), &v));
        return (int64_t)v;
    }
    /** State-dict key @p index. */
    std::string state_dict_key(int64_t index) const
    {
        const char *s = NULL;
        if (index < 0) {
            accel_swig::fail(ACCEL_ERR_OUT_OF_RANGE, "index: expected >= 0");
            return "";
        }
        ACCEL_CHECK(accel_model_get_state_dict_key(ACCEL_H($self, "Model"), (size_t)index, &s));
        return accel_swig::borrowed_string(s);
    }
    /** Load tensors into the state dict (values copied); strict: every key given, no unknown key. */
    void load_state_dict_entries(const StateDictEntries *entries, bool strict = true)
    {
        std::vector<const char *> keys;
        for (const std::string &k : entries->keys)
            keys.push_back(k.c_str());
        ACCEL_CHECK(accel_model_load_state_dict(ACCEL_H($self, "Model"), keys.data(), entries->tensors.data(),
                                                keys.size(), strict));
    }
}

/* ---- Optimizer ---------------------------------------------------------------------------------- */
ACCEL_HANDLE_CLASS(Optimizer)
%extend Optimizer {
    /** An optimizer over every parameter of @p model, e.g. {"type": "adamw", "lr": 3e-4}. */
    Optimizer(Model *model, const char *config_json)
    {
        accel_optimizer_t *o = NULL;
        ACCEL_CHECK(accel_optimizer_create(ACCEL_H(model, "Model"), config_json, &o));
        return accel_swig::wrap<Optimizer>(o);
    }
    ~Optimizer() { accel_optimizer_free($self->h); delete $self; }
    /** Free the optimizer now; later calls raise FailedPreconditionError. */
    void close() { accel_optimizer_free($self->h); $self->h = NULL; }
    /** One optimizer step (nothing while gradients accumulate, once prepared). */
    void step() { ACCEL_CHECK(accel_optimizer_step(ACCEL_H($self, "Optimizer"))); }
    /** Clear gradients (set to none). */
    void zero_grad() { ACCEL_CHECK(accel_optimizer_zero_grad(ACCEL_H($self, "Optimizer"))); }
    /** Learning rate of the first parameter group. */
    double get_lr() const
    {
        double v = 0.0;
        ACCEL_CHECK(accel_optimizer_get_lr(ACCEL_H($self, "Optimizer"), &v));
        return v;
    }
    /** Set the learning rate of every parameter group. */
    void set_lr(double lr) { ACCEL_CHECK(accel_optimizer_set_lr(ACCEL_H($self, "Optimizer"), lr)); }
    /** Whether the last step was skipped by the gradient scaler. */
    bool step_was_skipped() const
    {
        bool v = false;
        ACCEL_CHECK(accel_optimizer_get_step_was_skipped(ACCEL_H($self, "Optimizer"), &v));
        return v;
    }
}

/* ---- Scheduler ---------------------------------------------------------------------------------- */
ACCEL_HANDLE_CLASS(Scheduler)
%extend Scheduler {
    /** A learning-rate scheduler for @p optimizer, e.g. {"type": "cosine", "num_warmup_steps": 10, ...}. */
    Scheduler(Optimizer *optimizer, const char *config_json)
    {
        accel_scheduler_t *s = NULL;
        ACCEL_CHECK(accel_scheduler_create(ACCEL_H(optimizer, "Optimizer"), config_json, &s));
        return accel_swig::wrap<Scheduler>(s);
    }
    ~Scheduler() { accel_scheduler_free($self->h); delete $self; }
    /** Free the scheduler now; later calls raise FailedPreconditionError. */
    void close() { accel_scheduler_free($self->h); $self->h = NULL; }
    /** Advance the schedule (Accelerate's stepping rules once prepared). */
    void step() { ACCEL_CHECK(accel_scheduler_step(ACCEL_H($self, "Scheduler"))); }
    /** The learning rate last set by the scheduler, as get_last_lr()[0]. */
    double get_last_lr() const
    {
        double v = 0.0;
        ACCEL_CHECK(accel_scheduler_get_last_lr(ACCEL_H($self, "Scheduler"), &v));
        return v;
    }
    /** Number of schedule steps taken so far. */
    int64_t get_step_count() const
    {
        int64_t v = 0;
        ACCEL_CHECK(accel_scheduler_get_step_count(ACCEL_H($self, "Scheduler"), &v));
        return v;
    }
}

/* ---- Batch and DataLoader ----------------------------------------------------------------------- */
ACCEL_HANDLE_CLASS(Batch)
%newobject Batch::inputs;
%newobject Batch::labels;
%extend Batch {
    ~Batch() { accel_batch_free($self->h); delete $self; }
    /** Free the batch now; later calls raise FailedPreconditionError. */
    void close() { accel_batch_free($self->h); $self->h = NULL; }
    /** The batch's inputs. */
    Tensor *inputs() const
    {
        accel_tensor_t *t = NULL;
        ACCEL_CHECK(accel_batch_get_inputs(ACCEL_H($self, "Batch"), &t));
        return accel_swig::wrap<Tensor>(t);
    }
    /** The batch's labels, or null/None when the loader has none. */
    Tensor *labels() const
    {
        accel_tensor_t *t = NULL;
        ACCEL_CHECK(accel_batch_get_labels(ACCEL_H($self, "Batch"), &t));
        return accel_swig::wrap<Tensor>(t);
    }
    /** Number of samples. */
    int64_t size() const
    {
        int64_t v = 0;
        ACCEL_CHECK(accel_batch_get_size(ACCEL_H($self, "Batch"), &v));
        return v;
    }
}

/* Datasets from the caller's code (before DataLoader: its factories use them). */
%include "datasets.i"

ACCEL_HANDLE_CLASS(DataLoader)
%newobject DataLoader::next_batch;
%newobject DataLoader::skip_first_batches;
%newobject DataLoader::from_tokens;
%newobject DataLoader::from_files;
%extend DataLoader {
    /** A loader over (features[i], labels[i]); labels may be null/None. Config: {"batch_size": 64,
     *  "shuffle": true, "seed": 42, "drop_last": false}. The loader shares the tensors' memory. */
    DataLoader(const Tensor *features, const Tensor *labels, const char *config_json)
    {
        accel_dataloader_t *d = NULL;
        ACCEL_CHECK(accel_dataloader_create_from_tensors(ACCEL_H(features, "Tensor"), ACCEL_OPT_H(labels, "Tensor"),
                                                         config_json, &d));
        return accel_swig::wrap<DataLoader>(d);
    }
    /** A loader over one token stream (1-d integer tensor) for language models: windows of block_size + 1
     *  tokens, inputs the first block_size and labels the next token of each. Config: {"block_size": 128
     *  (required), "stride": block_size, "batch_size": 16, "shuffle": true, "seed": 42, "drop_last": false}. */
    static DataLoader *from_tokens(const Tensor *tokens, const char *config_json)
    {
        accel_dataloader_t *d = NULL;
        ACCEL_CHECK(accel_dataloader_create_from_tokens(ACCEL_H(tokens, "Tensor"), config_json, &d));
        return accel_swig::wrap<DataLoader>(d);
    }
    /** A loader over datasets in files, read without loading them (memory-mapped, each batch read with
     *  pread): a token stream {"format": "tokens", "files": ["train-*.bin"], "dtype": "uint16",
     *  "block_size": 1024} (also "npy" 1-d arrays, or "safetensors" with "tensor"), or samples
     *  {"format": "npy", "features": "x.npy", "labels": "y.npy"} / {"format": "safetensors", "file": "d.safetensors",
     *  "features": "x", "labels": "y"}; plus the loader keys (batch_size, shuffle, seed, drop_last). */
    static DataLoader *from_files(const char *config_json)
    {
        accel_dataloader_t *d = NULL;
        ACCEL_CHECK(accel_dataloader_create_from_files(config_json, &d));
        return accel_swig::wrap<DataLoader>(d);
    }
    ~DataLoader() { accel_dataloader_free($self->h); delete $self; }
    /** Free the loader now; later calls raise FailedPreconditionError. */
    void close() { accel_dataloader_free($self->h); $self->h = NULL; }
    /** The next batch of the current pass, or null/None at the end of the pass (the next call starts the
     *  next pass). */
    Batch *next_batch()
    {
        accel_batch_t *b = NULL;
        ACCEL_CHECK(accel_dataloader_next(ACCEL_H($self, "DataLoader"), &b));
        return accel_swig::wrap<Batch>(b);
    }
    /** Number of batches in one pass. */
    int64_t length() const
    {
        int64_t v = 0;
        ACCEL_CHECK(accel_dataloader_get_length(ACCEL_H($self, "DataLoader"), &v));
        return v;
    }
    /** Set the epoch used to seed the next pass's shuffle. */
    void set_epoch(int64_t epoch) { ACCEL_CHECK(accel_dataloader_set_epoch(ACCEL_H($self, "DataLoader"), epoch)); }
    int64_t get_epoch() const
    {
        int64_t v = 0;
        ACCEL_CHECK(accel_dataloader_get_epoch(ACCEL_H($self, "DataLoader"), &v));
        return v;
    }
    /** A new loader skipping the first @p num_batches batches of the current pass. */
    DataLoader *skip_first_batches(int64_t num_batches) const
    {
        accel_dataloader_t *d = NULL;
        ACCEL_CHECK(accel_dataloader_skip_first_batches(ACCEL_H($self, "DataLoader"), num_batches, &d));
        return accel_swig::wrap<DataLoader>(d);
    }
}

/* ---- Accelerator -------------------------------------------------------------------------------- */
ACCEL_HANDLE_CLASS(Accelerator)
%newobject Accelerator::unwrap_model;
%extend Accelerator {
    /** An accelerator from Accelerate's Accelerator(...) arguments as JSON; null/None or "{}" for the
     *  defaults. Invalid configs raise InvalidArgumentError naming the JSON path. */
    Accelerator(const char *config_json = NULL)
    {
        accel_accelerator_t *a = NULL;
        ACCEL_CHECK(accel_accelerator_create(config_json, &a));
        return accel_swig::wrap<Accelerator>(a);
    }
    ~Accelerator() { accel_accelerator_free($self->h); delete $self; }
    /** Free the accelerator now (objects it prepared stay usable); later calls raise FailedPreconditionError. */
    void close() { accel_accelerator_free($self->h); $self->h = NULL; }
    /** The effective configuration as JSON. */
    std::string config_json() const
    {
        char *s = NULL;
        ACCEL_CHECK(accel_accelerator_get_config_json(ACCEL_H($self, "Accelerator"), &s));
        return accel_swig::owned_string(s);
    }
    /** accelerator.device: "cuda:N" where a GPU is used, else "cpu". */
    std::string device() const
    {
        char *s = NULL;
        ACCEL_CHECK(accel_accelerator_get_device(ACCEL_H($self, "Accelerator"), &s));
        return accel_swig::owned_string(s);
    }
    /** Prepare any of the four objects (each may be null/None), as accelerator.prepare(...). */
    void prepare(Model *model, Optimizer *optimizer = NULL, DataLoader *dataloader = NULL, Scheduler *scheduler = NULL)
    {
        ACCEL_CHECK(accel_accelerator_prepare(ACCEL_H($self, "Accelerator"), ACCEL_OPT_H(model, "Model"),
                                              ACCEL_OPT_H(optimizer, "Optimizer"), ACCEL_OPT_H(dataloader, "DataLoader"),
                                              ACCEL_OPT_H(scheduler, "Scheduler")));
    }
    void prepare_model(Model *model)
    {
        ACCEL_CHECK(accel_accelerator_prepare_model(ACCEL_H($self, "Accelerator"), ACCEL_H(model, "Model")));
    }
    void prepare_optimizer(Optimizer *optimizer)
    {
        ACCEL_CHECK(accel_accelerator_prepare_optimizer(ACCEL_H($self, "Accelerator"), ACCEL_H(optimizer, "Optimizer")));
    }
    void prepare_dataloader(DataLoader *dataloader)
    {
        ACCEL_CHECK(accel_accelerator_prepare_dataloader(ACCEL_H($self, "Accelerator"), ACCEL_H(dataloader, "DataLoader")));
    }
    void prepare_scheduler(Scheduler *scheduler)
    {
        ACCEL_CHECK(accel_accelerator_prepare_scheduler(ACCEL_H($self, "Accelerator"), ACCEL_H(scheduler, "Scheduler")));
    }
    /** Accelerate's free_memory(): forgets every prepared object (they can be prepared again); step = 0. */
    void free_memory() { ACCEL_CHECK(accel_accelerator_free_memory(ACCEL_H($self, "Accelerator"))); }
    /** The same as free_memory() (Accelerate's alias). */
    void clear() { ACCEL_CHECK(accel_accelerator_clear(ACCEL_H($self, "Accelerator"))); }
    /** The model without the accelerator's wrappers (same parameters). */
    Model *unwrap_model(const Model *model)
    {
        accel_model_t *m = NULL;
        ACCEL_CHECK(accel_accelerator_unwrap_model(ACCEL_H($self, "Accelerator"), ACCEL_H(model, "Model"), &m));
        return accel_swig::wrap<Model>(m);
    }
    /** Backpropagate @p loss, divided by gradient_accumulation_steps, as accelerator.backward(loss). */
    void backward(Tensor *loss)
    {
        ACCEL_CHECK(accel_accelerator_backward(ACCEL_H($self, "Accelerator"), ACCEL_H(loss, "Tensor")));
    }
    /** LOMO's fused backward, as accelerator.lomo_backward(loss, learning_rate): every prepared "lomo" /
     * "adalomo" optimizer updates each parameter during backward; no gradient is kept. */
    void lomo_backward(Tensor *loss, double learning_rate)
    {
        ACCEL_CHECK(accel_accelerator_lomo_backward(ACCEL_H($self, "Accelerator"), ACCEL_H(loss, "Tensor"), learning_rate));
    }
    /** Enter accumulate(model); prefer the language's scoped form (with / try-with-resources / using). */
    void accumulate_begin(Model *model)
    {
        ACCEL_CHECK(accel_accelerator_accumulate_begin(ACCEL_H($self, "Accelerator"), ACCEL_H(model, "Model")));
    }
    /** Leave accumulate(). */
    void accumulate_end() { ACCEL_CHECK(accel_accelerator_accumulate_end(ACCEL_H($self, "Accelerator"))); }
    /** Enter autocast(); prefer the language's scoped form. */
    void autocast_begin() { ACCEL_CHECK(accel_accelerator_autocast_begin(ACCEL_H($self, "Accelerator"))); }
    /** Leave the innermost autocast scope. */
    void autocast_end() { ACCEL_CHECK(accel_accelerator_autocast_end(ACCEL_H($self, "Accelerator"))); }
    /** Enter profile() (kwargs_handlers.profile); prefer the language's scoped form. */
    void profile_begin() { ACCEL_CHECK(accel_accelerator_profile_begin(ACCEL_H($self, "Accelerator"))); }
    /** Leave profile(): writes output_trace_dir/profile_{process_index}.json, then waits for every process. */
    void profile_end() { ACCEL_CHECK(accel_accelerator_profile_end(ACCEL_H($self, "Accelerator"))); }
    /** Whether gradients are synchronised (optimizers step) at this micro-step. */
    bool sync_gradients() const
    {
        bool v = false;
        ACCEL_CHECK(accel_accelerator_get_sync_gradients(ACCEL_H($self, "Accelerator"), &v));
        return v;
    }
    /** The micro-step counter of accumulate(). */
    int64_t step() const
    {
        int64_t v = 0;
        ACCEL_CHECK(accel_accelerator_get_step(ACCEL_H($self, "Accelerator"), &v));
        return v;
    }
    int64_t gradient_accumulation_steps() const
    {
        int64_t v = 0;
        ACCEL_CHECK(accel_accelerator_get_gradient_accumulation_steps(ACCEL_H($self, "Accelerator"), &v));
        return v;
    }
    bool end_of_dataloader() const
    {
        bool v = false;
        ACCEL_CHECK(accel_accelerator_get_end_of_dataloader(ACCEL_H($self, "Accelerator"), &v));
        return v;
    }
    /** The mixed-precision mode (ACCEL_MIXED_PRECISION_* constant). */
    int32_t mixed_precision() const
    {
        accel_mixed_precision_t v = 0;
        ACCEL_CHECK(accel_accelerator_get_mixed_precision(ACCEL_H($self, "Accelerator"), &v));
        return v;
    }
    bool optimizer_step_was_skipped() const
    {
        bool v = false;
        ACCEL_CHECK(accel_accelerator_optimizer_step_was_skipped(ACCEL_H($self, "Accelerator"), &v));
        return v;
    }
    bool has_grad_scaler() const
    {
        bool v = false;
        ACCEL_CHECK(accel_accelerator_has_grad_scaler(ACCEL_H($self, "Accelerator"), &v));
        return v;
    }
    double grad_scale() const
    {
        double v = 1.0;
        ACCEL_CHECK(accel_accelerator_get_grad_scale(ACCEL_H($self, "Accelerator"), &v));
        return v;
    }
    /** Unscale the gradients of @p optimizer (null/None: every prepared optimizer). */
    void unscale_gradients(Optimizer *optimizer = NULL)
    {
        ACCEL_CHECK(accel_accelerator_unscale_gradients(ACCEL_H($self, "Accelerator"), ACCEL_OPT_H(optimizer, "Optimizer")));
    }
    /** Clip gradients to a total norm; returns the norm before clipping. */
    double clip_grad_norm(Model *model, double max_norm, double norm_type = 2.0)
    {
        double v = 0.0;
        ACCEL_CHECK(accel_accelerator_clip_grad_norm(ACCEL_H($self, "Accelerator"), ACCEL_H(model, "Model"), max_norm,
                                                     norm_type, &v));
        return v;
    }
    /** Clamp every gradient into [-clip_value, clip_value]. */
    void clip_grad_value(Model *model, double clip_value)
    {
        ACCEL_CHECK(accel_accelerator_clip_grad_value(ACCEL_H($self, "Accelerator"), ACCEL_H(model, "Model"), clip_value));
    }
    /** One micro-step: enters accumulate(model) itself (do not call it inside accumulate), then forward,
     *  loss, backward, optimizer/scheduler step and zero_grad on sync steps. Returns the undivided loss.
     *  @p scheduler may be null/None. */
    double train_step(Model *model, Optimizer *optimizer, Scheduler *scheduler, const Batch *batch,
                      const char *loss_name)
    {
        double v = 0.0;
        ACCEL_CHECK(accel_accelerator_train_step(ACCEL_H($self, "Accelerator"), ACCEL_H(model, "Model"),
                                                 ACCEL_H(optimizer, "Optimizer"), ACCEL_OPT_H(scheduler, "Scheduler"),
                                                 ACCEL_H(batch, "Batch"), loss_name, &v));
        return v;
    }
    /** Print @p text and a newline on the main process only. */
    void print(const char *text) const { ACCEL_CHECK(accel_accelerator_print(ACCEL_H($self, "Accelerator"), text)); }
    int32_t process_index() const
    {
        int32_t v = 0;
        ACCEL_CHECK(accel_accelerator_get_process_index(ACCEL_H($self, "Accelerator"), &v));
        return v;
    }
    int32_t local_process_index() const
    {
        int32_t v = 0;
        ACCEL_CHECK(accel_accelerator_get_local_process_index(ACCEL_H($self, "Accelerator"), &v));
        return v;
    }
    int32_t num_processes() const
    {
        int32_t v = 0;
        ACCEL_CHECK(accel_accelerator_get_num_processes(ACCEL_H($self, "Accelerator"), &v));
        return v;
    }
    bool is_main_process() const
    {
        bool v = false;
        ACCEL_CHECK(accel_accelerator_is_main_process(ACCEL_H($self, "Accelerator"), &v));
        return v;
    }
    bool is_local_main_process() const
    {
        bool v = false;
        ACCEL_CHECK(accel_accelerator_is_local_main_process(ACCEL_H($self, "Accelerator"), &v));
        return v;
    }
}

/* ---- collectives and checkpoints (accel/accelerator.h's distributed part, accel/checkpoint.h) ------ */
%include "distributed.i"
%include "checkpoint.i"
%include "tracking.i"
%include "log.i"
%include "state_hooks.i"
%include "save.i"
%include "state_dict.i"
%include "memory.i"
%include "dispatch.i"
%include "big_modeling.i"
