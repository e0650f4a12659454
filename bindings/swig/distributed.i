/* distributed.i - the collectives and process facts of accel/accelerator.h (Accelerate's gather, reduce,
 * broadcast, pad_across_processes, split_between_processes, wait_for_everyone, main_process_first).
 * Included by accel.i after the Accelerator class; same conventions (ACCEL_CHECK, boxes, %newobject).
 * Collectives must be called in the same order on every process. */

%newobject Accelerator::gather;
%newobject Accelerator::gather_for_metrics;
%newobject Accelerator::reduce;
%newobject Accelerator::pad_across_processes;
%newobject Accelerator::split_between_processes;
%extend Accelerator {
    /** @p tensor from every process, concatenated along the first dimension (accelerator.gather). */
    Tensor *gather(const Tensor *tensor)
    {
        accel_tensor_t *t = NULL;
        ACCEL_CHECK(accel_accelerator_gather(ACCEL_H($self, "Accelerator"), ACCEL_H(tensor, "Tensor"), &t));
        return accel_swig::wrap<Tensor>(t);
    }
    /** gather(), dropping the samples repeated to even out the last batch of a prepared loader. */
    Tensor *gather_for_metrics(const Tensor *tensor)
    {
        accel_tensor_t *t = NULL;
        ACCEL_CHECK(accel_accelerator_gather_for_metrics(ACCEL_H($self, "Accelerator"), ACCEL_H(tensor, "Tensor"), &t));
        return accel_swig::wrap<Tensor>(t);
    }
    /** @p tensor reduced over every process: "sum", "mean", "max", "min" or "none" (sums). */
    Tensor *reduce(const Tensor *tensor, const char *reduction = "sum")
    {
        accel_tensor_t *t = NULL;
        ACCEL_CHECK(accel_accelerator_reduce(ACCEL_H($self, "Accelerator"), ACCEL_H(tensor, "Tensor"), reduction, &t));
        return accel_swig::wrap<Tensor>(t);
    }
    /** Overwrite @p tensor in place with process @p from_process's copy. */
    void broadcast(Tensor *tensor, int32_t from_process = 0)
    {
        ACCEL_CHECK(accel_accelerator_broadcast(ACCEL_H($self, "Accelerator"), ACCEL_H(tensor, "Tensor"), from_process));
    }
    /** @p tensor padded along @p dim to the largest size any process has, with @p pad_index. */
    Tensor *pad_across_processes(const Tensor *tensor, int64_t dim = 0, double pad_index = 0.0, bool pad_first = false)
    {
        accel_tensor_t *t = NULL;
        ACCEL_CHECK(accel_accelerator_pad_across_processes(ACCEL_H($self, "Accelerator"), ACCEL_H(tensor, "Tensor"), dim,
                                                           pad_index, pad_first, &t));
        return accel_swig::wrap<Tensor>(t);
    }
    /** This process's share of @p tensor's rows (split_between_processes). */
    Tensor *split_between_processes(const Tensor *tensor, bool apply_padding = false)
    {
        accel_tensor_t *t = NULL;
        ACCEL_CHECK(accel_accelerator_split_between_processes(ACCEL_H($self, "Accelerator"), ACCEL_H(tensor, "Tensor"),
                                                              apply_padding, &t));
        return accel_swig::wrap<Tensor>(t);
    }
    /** Raise this process's trigger (set_trigger). */
    void set_trigger() { ACCEL_CHECK(accel_accelerator_set_trigger(ACCEL_H($self, "Accelerator"))); }
    /** True on every process when any process raised its trigger since the last true (one collective). */
    bool check_trigger()
    {
        bool out = false;
        ACCEL_CHECK(accel_accelerator_check_trigger(ACCEL_H($self, "Accelerator"), &out));
        return out;
    }
    /** Block until every process reaches this call (a barrier). */
    void wait_for_everyone() { ACCEL_CHECK(accel_accelerator_wait_for_everyone(ACCEL_H($self, "Accelerator"))); }
    /** Enter main_process_first(); prefer the language's scoped form. */
    void main_process_first_begin()
    {
        ACCEL_CHECK(accel_accelerator_main_process_first_begin(ACCEL_H($self, "Accelerator")));
    }
    /** Leave main_process_first(). */
    void main_process_first_end()
    {
        ACCEL_CHECK(accel_accelerator_main_process_first_end(ACCEL_H($self, "Accelerator")));
    }
    /** Enter local_main_process_first(); prefer the language's scoped form. */
    void local_main_process_first_begin()
    {
        ACCEL_CHECK(accel_accelerator_local_main_process_first_begin(ACCEL_H($self, "Accelerator")));
    }
    /** Leave local_main_process_first(). */
    void local_main_process_first_end()
    {
        ACCEL_CHECK(accel_accelerator_local_main_process_first_end(ACCEL_H($self, "Accelerator")));
    }
    /** Enter join_uneven_inputs: `model` joins (null: every prepared model); even_batches -1 keeps the data
        loaders' setting, 0 / 1 overrides it. Prefer the language's scoped form. */
    void join_uneven_inputs_begin(Model *model, int32_t even_batches)
    {
        accel_model_t *m = ACCEL_OPT_H(model, "Model");
        ACCEL_CHECK(accel_accelerator_join_uneven_inputs_begin(ACCEL_H($self, "Accelerator"), m ? &m : NULL, m ? 1 : 0,
                                                               even_batches));
    }
    /** Leave join_uneven_inputs (collective when join is on: shadows the others' steps until all are done). */
    void join_uneven_inputs_end()
    {
        ACCEL_CHECK(accel_accelerator_join_uneven_inputs_end(ACCEL_H($self, "Accelerator")));
    }
    /** Number of processes on this machine. */
    int32_t num_local_processes() const
    {
        int32_t v = 0;
        ACCEL_CHECK(accel_accelerator_get_num_local_processes(ACCEL_H($self, "Accelerator"), &v));
        return v;
    }
    /** Whether this is the last process (rank num_processes - 1). */
    bool is_last_process() const
    {
        bool v = false;
        ACCEL_CHECK(accel_accelerator_is_last_process(ACCEL_H($self, "Accelerator"), &v));
        return v;
    }
    /** The communication backend: "single", "gloo", "mpi" or "nccl". */
    std::string distributed_backend() const
    {
        const char *s = NULL;
        ACCEL_CHECK(accel_accelerator_get_distributed_backend(ACCEL_H($self, "Accelerator"), &s));
        return accel_swig::borrowed_string(s);
    }
    /** Statistics of the data-parallel gradient synchronisation, as JSON. */
    std::string ddp_stats_json() const
    {
        char *s = NULL;
        ACCEL_CHECK(accel_accelerator_get_ddp_stats_json(ACCEL_H($self, "Accelerator"), &s));
        return accel_swig::owned_string(s);
    }
    /** This process's place on the device mesh (data, shard, tensor, context, pipeline parallel ranks and sizes), as JSON. */
    std::string parallel_ranks_json() const
    {
        char *s = NULL;
        ACCEL_CHECK(accel_accelerator_get_parallel_ranks_json(ACCEL_H($self, "Accelerator"), &s));
        return accel_swig::owned_string(s);
    }
    /** Per-rank bytes of parameters, gradients, optimizer state and gathered buffers, and peak RSS, as JSON. */
    std::string memory_stats_json() const
    {
        char *s = NULL;
        ACCEL_CHECK(accel_accelerator_get_memory_stats_json(ACCEL_H($self, "Accelerator"), &s));
        return accel_swig::owned_string(s);
    }
    /** Sharded models: gather every parameter (collective); _end writes them back to the shards. */
    void summon_full_params_begin(Model *model)
    {
        ACCEL_CHECK(accel_accelerator_summon_full_params_begin(ACCEL_H($self, "Accelerator"), ACCEL_H(model, "Model")));
    }
    void summon_full_params_end(Model *model)
    {
        ACCEL_CHECK(accel_accelerator_summon_full_params_end(ACCEL_H($self, "Accelerator"), ACCEL_H(model, "Model")));
    }
    /** Clean optimizer steps since the gradient scaler last changed its scale (0 without a scaler). */
    int64_t grad_scaler_growth_tracker() const
    {
        int64_t v = 0;
        ACCEL_CHECK(accel_accelerator_get_grad_scaler_growth_tracker(ACCEL_H($self, "Accelerator"), &v));
        return v;
    }
}

%newobject Batch::indices;
%extend Batch {
    /** The data set indices of the batch's samples (1-d int64, batch order). */
    Tensor *indices() const
    {
        accel_tensor_t *t = NULL;
        ACCEL_CHECK(accel_batch_get_indices(ACCEL_H($self, "Batch"), &t));
        return accel_swig::wrap<Tensor>(t);
    }
}

%inline %{
/** Rank of this process on its machine as the launcher's environment says (0 when not launched). */
int32_t process_local_index()
{
    int32_t v = 0;
    ACCEL_CHECK(accel_process_get_local_index(&v));
    return v;
}
/** Number of processes on this machine as the launcher's environment says (1 when not launched). */
int32_t process_local_count()
{
    int32_t v = 0;
    ACCEL_CHECK(accel_process_get_local_count(&v));
    return v;
}
/** Whether this process is local rank 0. */
bool process_is_local_main()
{
    bool v = false;
    ACCEL_CHECK(accel_process_is_local_main(&v));
    return v;
}
%}

/* ---- Object collectives (gather_object, broadcast_object_list, broadcast_object; helpers in typemaps/blobs.i).
 * The SWIG layer moves bytes and JSON text; each language's own layer (python/, java/, csharp/ .i files) turns
 * them into its native types: Python pickles (as Accelerate does), Java and C# use byte arrays. */

/* Byte strings received by an object collective; read with count(), item_size() and copy_item(). */
ACCEL_HANDLE_CLASS(ObjectList)
%extend ObjectList {
    ~ObjectList() { accel_object_list_free($self->h); delete $self; }
    /** Free the list now; later calls raise FailedPreconditionError. */
    void close() { accel_object_list_free($self->h); $self->h = NULL; }
    /** Number of entries. */
    int64_t count() const
    {
        size_t n = 0;
        const accel_object_list_t *l = ACCEL_H($self, "ObjectList");
        if (l)
            ACCEL_CHECK(accel_object_list_get_count(l, &n));
        return (int64_t)n;
    }
    /** Size in bytes of entry @p index. */
    int64_t item_size(int64_t index) const
    {
        size_t n = 0;
        accel_swig::object_item($self, index, &n);
        return (int64_t)n;
    }
#if defined(SWIGPYTHON)
    /** Copy entry @p index into a writable buffer of item_size(index) bytes. */
    void copy_item(int64_t index, void *OUT_BYTES, size_t OUT_NBYTES) const
    {
        accel_swig::copy_object_item($self, index, OUT_BYTES, OUT_NBYTES);
    }
#else
    /** Copy entry @p index into an array of item_size(index) bytes. */
    void copy_item(int64_t index, uint8_t *OUT_ARRAY, size_t OUT_COUNT) const
    {
        accel_swig::copy_object_item($self, index, OUT_ARRAY, OUT_COUNT);
    }
#endif
}

/* The entries a process passes to broadcast_object_list (ignored on the receiving processes). */
%nodefaultctor ObjectItems;
struct ObjectItems {};
%extend ObjectItems {
    ObjectItems() { return new ObjectItems(); }
    ~ObjectItems() { delete $self; }
#if defined(SWIGPYTHON)
    void add(const void *IN_BYTES, size_t IN_NBYTES)
    {
        $self->items.emplace_back((const char *)IN_BYTES, IN_NBYTES);
    }
#else
    void add(const uint8_t *IN_ARRAY, size_t IN_COUNT)
    {
        $self->items.emplace_back((const char *)IN_ARRAY, IN_COUNT);
    }
#endif
}

%newobject Accelerator::gather_object_list;
%newobject Accelerator::broadcast_object_entries;
%newobject Accelerator::broadcast_object_entry;
%extend Accelerator {
#if defined(SWIGPYTHON)
    /** Every process's bytes in rank order (accel_accelerator_gather_object); prefer gather_object_bytes(). */
    ObjectList *gather_object_list(const void *IN_BYTES, size_t IN_NBYTES)
    {
        return accel_swig::gather_object(ACCEL_H($self, "Accelerator"), IN_BYTES, IN_NBYTES);
    }
    /** Process @p from_process's bytes (accel_accelerator_broadcast_object); prefer broadcast_object_bytes(). */
    ObjectList *broadcast_object_entry(const void *IN_BYTES, size_t IN_NBYTES, int32_t from_process)
    {
        return accel_swig::broadcast_object(ACCEL_H($self, "Accelerator"), IN_BYTES, IN_NBYTES, from_process);
    }
#else
    ObjectList *gather_object_list(const uint8_t *IN_ARRAY, size_t IN_COUNT)
    {
        return accel_swig::gather_object(ACCEL_H($self, "Accelerator"), IN_ARRAY, IN_COUNT);
    }
    ObjectList *broadcast_object_entry(const uint8_t *IN_ARRAY, size_t IN_COUNT, int32_t from_process)
    {
        return accel_swig::broadcast_object(ACCEL_H($self, "Accelerator"), IN_ARRAY, IN_COUNT, from_process);
    }
#endif
    /** Process @p from_process's entries on every process (accel_accelerator_broadcast_object_list). */
    ObjectList *broadcast_object_entries(const ObjectItems *items, int32_t from_process)
    {
        return accel_swig::broadcast_object_list(ACCEL_H($self, "Accelerator"), items, from_process);
    }
    /** Each process's JSON array, concatenated in rank order into one JSON array (gather_object over JSON). */
    std::string gather_object_json(const char *json)
    {
        char *s = NULL;
        ACCEL_CHECK(accel_accelerator_gather_object_json(ACCEL_H($self, "Accelerator"), json, &s));
        return accel_swig::owned_string(s);
    }
    /** Process @p from_process's JSON value on every process; the others may pass null/None. */
    std::string broadcast_object_json(const char *json, int32_t from_process = 0)
    {
        char *s = NULL;
        ACCEL_CHECK(accel_accelerator_broadcast_object_json(ACCEL_H($self, "Accelerator"), json, from_process, &s));
        return accel_swig::owned_string(s);
    }
}

#if defined(SWIGPYTHON)
%extend ObjectList {
%pythoncode %{
    def to_list(self):
        """Every entry as bytes."""
        out = []
        for i in range(self.count()):
            b = bytearray(self.item_size(i))
            self.copy_item(i, b)
            out.append(bytes(b))
        return out
%}
}

%extend Accelerator {
%pythoncode %{
    def gather_object_bytes(self, data):
        """Every process's bytes-like ``data``, as a list of bytes in rank order."""
        return self.gather_object_list(data).to_list()

    def broadcast_object_bytes(self, data, from_process=0):
        """Process ``from_process``'s bytes on every process (the others' ``data`` is ignored: pass b"")."""
        return self.broadcast_object_entry(data, from_process).to_list()[0]

    def broadcast_object_bytes_list(self, items, from_process=0):
        """Process ``from_process``'s list of bytes-like items on every process (the others' are ignored)."""
        entries = ObjectItems()
        if self.process_index() == from_process:
            for item in items:
                entries.add(item)
        return self.broadcast_object_entries(entries, from_process).to_list()

    def gather_object(self, obj):
        """``accelerator.gather_object``: ``obj`` is a list (any picklable items); returns every process's
        items, rank 0's first. Objects travel pickled, as in Accelerate."""
        import pickle
        return [x for part in self.gather_object_bytes(pickle.dumps(obj)) for x in pickle.loads(part)]

    def broadcast_object_list(self, object_list, from_process=0):
        """``broadcast_object_list``: ``object_list`` is replaced in place (and returned) by process
        ``from_process``'s list, pickled as in Accelerate."""
        import pickle
        mine = pickle.dumps(list(object_list)) if self.process_index() == from_process else b""
        object_list[:] = pickle.loads(self.broadcast_object_bytes(mine, from_process))
        return object_list
%}
}
#endif
