/* python/accel_python.i - Python specifics: exceptions, GIL, DLPack, context managers, iteration.
 *
 * The module is built with threads="1": every wrapped call releases the GIL around the C call (the
 * argument conversions and the exception below run with it held). The only Python code accel calls is a
 * TrackerCallback's on_event (init_trackers / log / end_training), whose director takes the GIL back. */

%{
/* Raises accel.errors.<Class>(message, status) for the pending status (RuntimeError if accel.errors
 * cannot be imported, e.g. when _core is loaded on its own). */
static void accel_swig_raise_python()
{
    accel_swig::Pending &p = accel_swig::pending();
    PyObject *msg = PyUnicode_DecodeUTF8(p.message.data(), (Py_ssize_t)p.message.size(), "replace");
    PyObject *mod = PyImport_ImportModule("accel.errors");
    PyObject *cls = mod ? PyObject_GetAttrString(mod, accel_swig::error_class_name(p.status)) : NULL;
    if (!cls) {
        PyErr_Clear();
        cls = PyExc_RuntimeError;
        Py_INCREF(cls);
    }
    PyObject *exc = msg ? PyObject_CallFunction(cls, "Oi", msg, (int)p.status) : NULL;
    if (exc) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    Py_XDECREF(cls);
    Py_XDECREF(mod);
    Py_XDECREF(msg);
    accel_swig::reset();
}
%}

%exception {
    accel_swig::reset();
    $action
    if (accel_swig::failed()) {
        accel_swig_raise_python();
        SWIG_fail;
    }
}

/* ---- DLPack (numpy.from_dlpack(tensor), accel.Tensor.from_dlpack(obj)) ------------------------------ */
%{
static void accel_swig_dlpack_capsule_destructor(PyObject *capsule)
{
    /* Only an unconsumed capsule still owns the DLManagedTensor (consumers rename it "used_dltensor"). */
    if (PyCapsule_IsValid(capsule, "dltensor")) {
        void *p = PyCapsule_GetPointer(capsule, "dltensor");
        /* DLManagedTensor is {DLTensor dl_tensor; void *manager_ctx; void (*deleter)(DLManagedTensor *)};
         * DLTensor (DLPack 0.x) is 48 bytes on 64-bit: data, device{int32,int32}, ndim+dtype, shape,
         * strides, byte_offset. */
        struct DLTensor48 { void *data; int32_t dev_type, dev_id; int32_t ndim; uint8_t code, bits; uint16_t lanes;
                            int64_t *shape, *strides; uint64_t byte_offset; };
        struct DLManaged { DLTensor48 t; void *manager_ctx; void (*deleter)(DLManaged *); };
        static_assert(sizeof(DLTensor48) == 48, "DLTensor layout");
        DLManaged *m = (DLManaged *)p;
        if (m && m->deleter)
            m->deleter(m);
    } else {
        PyErr_Clear();
    }
}
%}
%extend Tensor {
    /** A DLPack capsule ("dltensor") sharing this tensor's memory; numpy.from_dlpack() consumes it. */
    PyObject *_to_dlpack_capsule() const
    {
        void *m = NULL;
        if (!ACCEL_CHECK(accel_tensor_to_dlpack(ACCEL_H($self, "Tensor"), &m)))
            return NULL;
        PyObject *cap = NULL;
        {
            SWIG_PYTHON_THREAD_BEGIN_BLOCK;
            cap = PyCapsule_New(m, "dltensor", accel_swig_dlpack_capsule_destructor);
            SWIG_PYTHON_THREAD_END_BLOCK;
        }
        return cap;
    }
}
%extend Tensor {
    /** Import a DLPack capsule without copying (the capsule is marked used). */
    static Tensor *_from_dlpack_capsule(PyObject *capsule)
    {
        void *m = NULL;
        {
            SWIG_PYTHON_THREAD_BEGIN_BLOCK;
            if (PyCapsule_IsValid(capsule, "dltensor"))
                m = PyCapsule_GetPointer(capsule, "dltensor");
            SWIG_PYTHON_THREAD_END_BLOCK;
        }
        if (!m) {
            accel_swig::fail(ACCEL_ERR_INVALID_ARGUMENT, "capsule: expected an unused \"dltensor\" PyCapsule");
            return NULL;
        }
        accel_tensor_t *t = NULL;
        if (!ACCEL_CHECK(accel_tensor_create_from_dlpack(m, &t)))
            return NULL;
        {
            SWIG_PYTHON_THREAD_BEGIN_BLOCK;
            PyCapsule_SetName(capsule, "used_dltensor");
            SWIG_PYTHON_THREAD_END_BLOCK;
        }
        return accel_swig::wrap<Tensor>(t);
    }
}
%newobject Tensor::_from_dlpack_capsule;

%warnfilter(314) Accelerator::print;

/* ---- Pythonic additions ---------------------------------------------------------------------------- */
%define ACCEL_PY_CLOSABLE(CLS)
%extend CLS {
%pythoncode %{
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
%}
}
%enddef
ACCEL_PY_CLOSABLE(Accelerator)
ACCEL_PY_CLOSABLE(Model)
ACCEL_PY_CLOSABLE(Optimizer)
ACCEL_PY_CLOSABLE(Scheduler)
ACCEL_PY_CLOSABLE(DataLoader)
ACCEL_PY_CLOSABLE(Batch)
ACCEL_PY_CLOSABLE(Tensor)

%extend Accelerator {
%pythoncode %{
    @_contextlib.contextmanager
    def accumulate(self, model):
        """``with accelerator.accumulate(model):`` - accumulate_begin / accumulate_end."""
        self.accumulate_begin(model)
        try:
            yield
        finally:
            self.accumulate_end()

    @_contextlib.contextmanager
    def autocast(self):
        """``with accelerator.autocast():`` - autocast_begin / autocast_end."""
        self.autocast_begin()
        try:
            yield
        finally:
            self.autocast_end()

    @_contextlib.contextmanager
    def profile(self):
        """``with accelerator.profile():`` - profile_begin / profile_end: LibTorch's profiler over the block, its
        Chrome trace written to kwargs_handlers.profile.output_trace_dir/profile_{process_index}.json."""
        self.profile_begin()
        try:
            yield
        finally:
            self.profile_end()

    @_contextlib.contextmanager
    def join_uneven_inputs(self, joinables=None, even_batches=None):
        """``with accelerator.join_uneven_inputs([model], even_batches=None):`` - DDP tolerates processes running
        out of batches. One joinable joins alone; none or several: every prepared model joins."""
        models = list(joinables or [])
        self.join_uneven_inputs_begin(models[0] if len(models) == 1 else None,
                                      -1 if even_batches is None else int(bool(even_batches)))
        try:
            yield
        finally:
            self.join_uneven_inputs_end()

    @_contextlib.contextmanager
    def main_process_first(self):
        """``with accelerator.main_process_first():`` - the main process runs the block first."""
        self.main_process_first_begin()
        try:
            yield
        finally:
            self.main_process_first_end()

    @_contextlib.contextmanager
    def local_main_process_first(self):
        """``with accelerator.local_main_process_first():`` - each machine's local main process first."""
        self.local_main_process_first_begin()
        try:
            yield
        finally:
            self.local_main_process_first_end()

    def get_checkpointing_bytes(self, index):
        """The current bytes of the blob registered with register_bytes_for_checkpointing()."""
        out = bytearray(self.checkpointing_bytes_size(index))
        self.copy_checkpointing_bytes(index, out)
        return bytes(out)

    def print(self, *values, sep=" "):
        """Print on the main process only (accelerator.print); SWIG names the C wrapper _print."""
        self._print(sep.join(str(v) for v in values))
%}
}

%extend DataLoader {
%pythoncode %{
    def __iter__(self):
        """One pass: yields Batch objects until the pass ends (each batch is freed when dropped)."""
        while True:
            batch = self.next_batch()
            if batch is None:
                return
            yield batch

    def __len__(self):
        return self.length()
%}
}

%extend Optimizer {
%pythoncode %{
    lr = property(lambda self: self.get_lr(), lambda self, value: self.set_lr(value),
                  doc="Learning rate of the first parameter group.")
%}
}

%pythonbegin %{
import contextlib as _contextlib
%}

/* The accelerator keeps the Python tracker objects alive (the library only borrows them). */
%pythonappend Accelerator::add_tracker %{
    self.__dict__.setdefault("_accel_tracker_callbacks", []).append(callback)
%}

/* Every director (TrackerCallback, the datasets of datasets.i): a Python exception in a method becomes a
 * std::runtime_error with its text, which the trampoline turns into the callback's error (the Python error
 * is cleared; the accel call raises AccelError instead). */
%feature("director:except") {
    if ($error != NULL) {
        PyObject *type = NULL, *value = NULL, *tb = NULL;
        PyErr_Fetch(&type, &value, &tb);
        PyObject *text = value ? PyObject_Str(value) : NULL;
        const char *utf8 = text ? PyUnicode_AsUTF8(text) : NULL;
        std::string message = utf8 ? utf8 : "a Python exception";
        PyErr_Clear();
        Py_XDECREF(text);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        throw std::runtime_error(message);
    }
}
