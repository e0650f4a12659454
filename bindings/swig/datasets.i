/* datasets.i - accel/dataloader.h's datasets from the caller's code: MapDataset, IterableDataset and Collate
 * are SWIG directors (subclass them in Python, Java or C#), wrapped into the C callbacks by trampolines
 * here. A sample's tensors are handed over with Sample.set_inputs / set_labels (copied into the library).
 * A callback's exception (Python's, or SWIG's DirectorException around a Java / C# one) becomes the
 * callback's error status with its text: accel_dataloader_next fails with it, nothing crashes.
 * Threads: with "num_workers" > 0 the map dataset's get and the collate run on the loader's worker threads,
 * several at once (Python takes the GIL for each call; the JVM attaches the thread for the call). Included by
 * accel.i after the classes. */

#if defined(SWIGCSHARP)
/* C#: an exception thrown by a director method must not unwind through native frames. Each director call
 * (their only use of csdirectorout) runs inside a catch that records the exception's text as this thread's
 * pending failure; the trampoline below turns it into the callback's error status. */
%typemap(csdirectorout) void "Library.DirectorGuard(() => { $cscall; })"
%typemap(csdirectorout) bool "Library.DirectorGuard(() => $cscall, false)"
%typemap(csdirectorout) long, long long "Library.DirectorGuard(() => $cscall, 0L)"
%typemap(csdirectorout) std::string "Library.DirectorGuard(() => $cscall, \"\")"
%rename(Apply) Collate::collate; /* C# members may not share their class's name */
%exception director_raised "$action"
%csmethodmodifiers director_raised "internal";
%inline %{
/* Records a C# director method's exception as this thread's pending failure (no %exception reset). */
void director_raised(const char *message) { accel_swig::fail(ACCEL_ERR_UNKNOWN, message ? message : "a C# exception"); }
%}
%pragma(csharp) modulecode=%{
  internal static void DirectorGuard(global::System.Action call) {
    try { call(); } catch (global::System.Exception e) { DirectorRaised(e.GetType().Name + ": " + e.Message); }
  }
  internal static T DirectorGuard<T>(global::System.Func<T> call, T fallback) {
    try { return call(); } catch (global::System.Exception e) { DirectorRaised(e.GetType().Name + ": " + e.Message); return fallback; }
  }
%}
#endif

%feature("director") MapDataset;
%feature("director") IterableDataset;
%feature("director") Collate;
%nodefaultctor SampleList;
%nodefaultctor Sample;
%newobject SampleList::inputs;
%newobject SampleList::labels;

%{
namespace accel_swig {
/* A new handle holding a copy of @p t (host memory). */
inline accel_tensor_t *copy_tensor(const accel_tensor_t *t)
{
    int32_t dtype = 0;
    size_t ndim = 0, nbytes = 0;
    int64_t shape[16];
    if (!check(accel_tensor_get_dtype(t, &dtype)) || !check(accel_tensor_get_ndim(t, &ndim)) ||
        !check(accel_tensor_get_nbytes(t, &nbytes)))
        return NULL;
    if (ndim > 16) {
        fail(ACCEL_ERR_INVALID_ARGUMENT, "tensor: more than 16 dimensions");
        return NULL;
    }
    if (!check(accel_tensor_get_shape(t, shape, ndim)))
        return NULL;
    std::vector<uint8_t> bytes(nbytes);
    if (nbytes > 0 && !check(accel_tensor_copy_to_buffer(t, bytes.data(), nbytes)))
        return NULL;
    accel_tensor_t *out = NULL;
    check(accel_tensor_create(bytes.data(), nbytes, dtype, shape, ndim, &out));
    return out;
}
} // namespace accel_swig
%}

%inline %{
/** The tensors of one sample (or of a collated batch) that a dataset or collate written in this language
 *  hands to the library: set them on the Sample it is given. The tensors are copied. */
class Sample {
public:
    Sample() : inputs_(NULL), labels_(NULL), mask_(NULL) {}
    ~Sample() { clear(); }
    /** The sample's inputs (required). */
    void set_inputs(const Tensor *inputs) { set(inputs_, inputs, "inputs"); }
    /** The sample's labels (optional; all samples alike). */
    void set_labels(const Tensor *labels) { set(labels_, labels, "labels"); }
    /** A collated batch's attention mask (Collate only; optional). */
    void set_attention_mask(const Tensor *mask) { set(mask_, mask, "attention_mask"); }
#ifndef SWIG
    accel_tensor_t *inputs_, *labels_, *mask_; /* owned until a trampoline passes them on */
    void clear()
    {
        accel_tensor_free(inputs_);
        accel_tensor_free(labels_);
        accel_tensor_free(mask_);
        inputs_ = labels_ = mask_ = NULL;
    }

private:
    Sample(const Sample &);
    Sample &operator=(const Sample &);
    static void set(accel_tensor_t *&slot, const Tensor *t, const char *what)
    {
        const accel_tensor_t *h = ACCEL_H(t, what);
        if (h == NULL)
            return;
        accel_tensor_t *copy = accel_swig::copy_tensor(h);
        if (copy == NULL)
            return;
        accel_tensor_free(slot);
        slot = copy;
    }
#endif
};

/** The samples a Collate is given (borrowed for the call). */
class SampleList {
public:
    /** Number of samples. */
    int64_t size() const { return (int64_t)count_; }
    /** Sample @p i's inputs (a copy). */
    Tensor *inputs(int64_t i) const { return at(inputs_, i); }
    /** Sample @p i's labels (a copy), or null/None when the samples have none. */
    Tensor *labels(int64_t i) const { return labels_ ? at(labels_, i) : NULL; }
#ifndef SWIG
    SampleList(const accel_tensor_t *const *inputs, const accel_tensor_t *const *labels, size_t count)
        : inputs_(inputs), labels_(labels), count_(count) {}

private:
    Tensor *at(const accel_tensor_t *const *list, int64_t i) const
    {
        if (i < 0 || (size_t)i >= count_) {
            accel_swig::fail(ACCEL_ERR_OUT_OF_RANGE, "SampleList: index out of range");
            return NULL;
        }
        return accel_swig::wrap<Tensor>(accel_swig::copy_tensor(list[i]));
    }
    const accel_tensor_t *const *inputs_;
    const accel_tensor_t *const *labels_;
    size_t count_;
#endif
};

/** A map-style dataset written in this language (PyTorch's Dataset): override length and get. get is
 *  called from the loader's worker threads when "num_workers" > 0, several at once. */
class MapDataset {
public:
    virtual ~MapDataset() {}
    /** The number of samples. */
    virtual int64_t length() = 0;
    /** Sample @p index: set its tensors on @p sample. */
    virtual void get(int64_t index, Sample &sample) = 0;
};

/** An iterable dataset written in this language (PyTorch's IterableDataset): set_epoch starts pass
 *  @p epoch, next fills @p sample and returns true, or returns false at the end of the pass. With
 *  stateful() true, state() / load_state() save and restore the position (text, e.g. JSON) for
 *  save_state / load_state. Called from one thread at a time. */
class IterableDataset {
public:
    virtual ~IterableDataset() {}
    virtual void set_epoch(int64_t epoch) = 0;
    virtual bool next(Sample &sample) = 0;
    virtual bool stateful() { return false; }
    virtual std::string state() { return std::string(); }
    virtual void load_state(const std::string &state) { (void)state; }
};

/** The caller's collate (PyTorch's collate_fn): set the batch's tensors (the samples along dimension 0) on
 *  @p batch. */
class Collate {
public:
    virtual ~Collate() {}
    virtual void collate(const SampleList &samples, Sample &batch) = 0;
};
%}

%{
namespace accel_swig {
/* A callback's end: a pending failure (a closed tensor, ...) or an exception becomes its status and message. */
inline accel_status_t callback_status()
{
    if (!failed())
        return ACCEL_OK;
    Pending p = pending();
    reset();
    accel_callback_set_error(p.message.c_str());
    return p.status;
}
inline accel_status_t callback_raised(const char *what)
{
    reset();
    accel_callback_set_error(what);
    return ACCEL_ERR_UNKNOWN;
}
#define ACCEL_SWIG_CALLBACK(body)                                                                            \
    try {                                                                                                    \
        reset();                                                                                             \
        body;                                                                                                \
        return callback_status();                                                                            \
    } catch (const std::exception &e) {                                                                      \
        return callback_raised(e.what());                                                                    \
    } catch (...) {                                                                                          \
        return callback_raised("an exception in a dataset callback");                                        \
    }

/* Moves a filled Sample's tensors out (the library takes them). */
inline void hand_over(Sample &s, accel_tensor_t **inputs, accel_tensor_t **labels, accel_tensor_t **mask)
{
    *inputs = s.inputs_;
    s.inputs_ = NULL;
    if (labels) {
        *labels = s.labels_;
        s.labels_ = NULL;
    }
    if (mask) {
        *mask = s.mask_;
        s.mask_ = NULL;
    }
}

inline accel_status_t map_length(void *ud, int64_t *out)
{
    ACCEL_SWIG_CALLBACK(*out = static_cast<MapDataset *>(ud)->length())
}
inline accel_status_t map_get(void *ud, int64_t index, accel_tensor_t **inputs, accel_tensor_t **labels)
{
    ACCEL_SWIG_CALLBACK(Sample s; static_cast<MapDataset *>(ud)->get(index, s); hand_over(s, inputs, labels, NULL))
}
inline accel_status_t iter_set_epoch(void *ud, int64_t epoch)
{
    ACCEL_SWIG_CALLBACK(static_cast<IterableDataset *>(ud)->set_epoch(epoch))
}
inline accel_status_t iter_next(void *ud, accel_tensor_t **inputs, accel_tensor_t **labels)
{
    ACCEL_SWIG_CALLBACK(Sample s; if (static_cast<IterableDataset *>(ud)->next(s)) hand_over(s, inputs, labels, NULL))
}
/* The state text stays alive until the next callback (accel_dataset_state_fn_t's rule). */
struct IterableBox {
    IterableDataset *dataset;
    std::string state;
};
inline accel_status_t iter_state(void *ud, const uint8_t **data, size_t *len)
{
    IterableBox *b = static_cast<IterableBox *>(ud);
    ACCEL_SWIG_CALLBACK(b->state = b->dataset->state(); *data = (const uint8_t *)b->state.data(); *len = b->state.size())
}
inline accel_status_t iter_load_state(void *ud, const uint8_t *data, size_t len)
{
    IterableBox *b = static_cast<IterableBox *>(ud);
    ACCEL_SWIG_CALLBACK(b->dataset->load_state(std::string((const char *)data, len)))
}
inline accel_status_t boxed_set_epoch(void *ud, int64_t epoch) { return iter_set_epoch(static_cast<IterableBox *>(ud)->dataset, epoch); }
inline accel_status_t boxed_next(void *ud, accel_tensor_t **inputs, accel_tensor_t **labels)
{
    return iter_next(static_cast<IterableBox *>(ud)->dataset, inputs, labels);
}
inline void release_box(void *ud) { delete static_cast<IterableBox *>(ud); }
inline accel_status_t collate_trampoline(void *ud, const accel_tensor_t *const *inputs, const accel_tensor_t *const *labels,
                                         size_t count, accel_tensor_t **out_inputs, accel_tensor_t **out_labels,
                                         accel_tensor_t **out_mask)
{
    ACCEL_SWIG_CALLBACK(Sample s; SampleList list(inputs, labels, count); static_cast<Collate *>(ud)->collate(list, s);
                        hand_over(s, out_inputs, out_labels, out_mask))
}
} // namespace accel_swig
%}

#if !defined(SWIGPYTHON)
/* One method with every argument (Java and C# overloads without collate are written by hand), so the
 * keep-alive code below sees both objects. */
%feature("compactdefaultargs") DataLoader::from_map_dataset;
%feature("compactdefaultargs") DataLoader::from_iterable_dataset;
#endif
%newobject DataLoader::from_map_dataset;
%newobject DataLoader::from_iterable_dataset;
%newobject Batch::attention_mask;
%extend DataLoader {
    /** A loader over a map-style dataset written in this language (same keys as the tensor loader, plus
     *  "num_workers", "prefetch_factor", "collate": "stack" | "pad", "pad_token_id", "label_pad_token_id",
     *  "causal_lm"); @p collate replaces the config's. The loader keeps the dataset and the collate. */
    static DataLoader *from_map_dataset(MapDataset *dataset, const char *config_json = NULL, Collate *collate = NULL)
    {
        if (dataset == NULL) {
            accel_swig::fail(ACCEL_ERR_INVALID_ARGUMENT, "dataset: must not be None/null");
            return NULL;
        }
        accel_map_dataset_t d;
        d.length = accel_swig::map_length;
        d.get = accel_swig::map_get;
        d.release = NULL; /* the language's loader object keeps the dataset */
        d.user_data = dataset;
        accel_dataloader_t *dl = NULL;
        ACCEL_CHECK(accel_dataloader_create_from_map_dataset(&d, collate ? accel_swig::collate_trampoline : NULL, collate,
                                                             config_json, &dl));
        return accel_swig::wrap<DataLoader>(dl);
    }
    /** A loader over an iterable dataset written in this language (batches of consecutive samples; sharded
     *  or dispatched across processes once prepared; resumed with its state()). The loader keeps them. */
    static DataLoader *from_iterable_dataset(IterableDataset *dataset, const char *config_json = NULL,
                                             Collate *collate = NULL)
    {
        if (dataset == NULL) {
            accel_swig::fail(ACCEL_ERR_INVALID_ARGUMENT, "dataset: must not be None/null");
            return NULL;
        }
        bool stateful = false;
        if (accel_swig::iter_stateful(dataset, &stateful) != ACCEL_OK) {
            accel_swig::fail(ACCEL_ERR_UNKNOWN, accel_last_error_message());
            return NULL;
        }
        accel_iterable_dataset_t d;
        accel_swig::IterableBox *box = new accel_swig::IterableBox();
        box->dataset = dataset;
        d.set_epoch = accel_swig::boxed_set_epoch;
        d.next = accel_swig::boxed_next;
        d.state = stateful ? accel_swig::iter_state : NULL;
        d.load_state = stateful ? accel_swig::iter_load_state : NULL;
        d.release = accel_swig::release_box;
        d.user_data = box;
        accel_dataloader_t *dl = NULL;
        if (!ACCEL_CHECK(accel_dataloader_create_from_iterable_dataset(&d, collate ? accel_swig::collate_trampoline : NULL,
                                                                       collate, config_json, &dl)))
            delete box; /* on failure the caller keeps user_data */
        return accel_swig::wrap<DataLoader>(dl);
    }
}
%extend Batch {
    /** The attention mask (1 = token, 0 = padding) of a "pad" collate, or null/None. */
    Tensor *attention_mask() const
    {
        accel_tensor_t *t = NULL;
        ACCEL_CHECK(accel_batch_get_attention_mask(ACCEL_H($self, "Batch"), &t));
        return accel_swig::wrap<Tensor>(t);
    }
}
%{
namespace accel_swig {
inline accel_status_t iter_stateful(IterableDataset *d, bool *out) { ACCEL_SWIG_CALLBACK(*out = d->stateful()) }
}
%}

/* The loader object keeps the dataset and collate objects alive (the library only borrows them). */
#if defined(SWIGPYTHON)
%pythonappend DataLoader::from_map_dataset %{
    if val is not None:
        val._accel_datasets = [dataset, collate]
%}
%pythonappend DataLoader::from_iterable_dataset %{
    if val is not None:
        val._accel_datasets = [dataset, collate]
%}
#elif defined(SWIGJAVA)
%typemap(javaout) DataLoader *DataLoader::from_map_dataset, DataLoader *DataLoader::from_iterable_dataset {
    long cPtr = $jnicall;
    DataLoader loader = cPtr == 0 ? null : new DataLoader(cPtr, $owner);
    if (loader != null) loader.keepDatasets(dataset, collate);
    return loader;
  }
#elif defined(SWIGCSHARP)
%typemap(csout, excode=SWIGEXCODE) DataLoader *DataLoader::from_map_dataset, DataLoader *DataLoader::from_iterable_dataset {
    global::System.IntPtr cPtr = $imcall;
    DataLoader loader = (cPtr == global::System.IntPtr.Zero) ? null : new DataLoader(cPtr, $owner);$excode
    if (loader != null) loader.KeepDatasets(dataset, collate);
    return loader;
  }
#endif
