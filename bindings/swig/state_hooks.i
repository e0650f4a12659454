/* state_hooks.i - accel/checkpoint.h's save_state / load_state pre-hooks (Accelerator.register_save_state_pre_hook,
 * register_load_state_pre_hook, RemovableHandle.remove): a StateHook written in this language (a SWIG director;
 * Python also takes any callable) is called with the checkpoint folder and the process index. An exception in
 * it fails save_state / load_state with its text, the message naming the hook by its handle. The language's
 * accelerator object keeps the hook objects alive. Included by accel.i after datasets.i (ACCEL_SWIG_CALLBACK). */

%feature("director") StateHook;
%inline %{
/** A save_state / load_state pre-hook: override call(folder, process_index). A save hook runs before
 *  save_state writes its files into @p folder (files it adds there are part of the checkpoint); a load hook
 *  before load_state reads @p folder. Runs on every process, on the thread calling save_state / load_state. */
class StateHook {
public:
    virtual ~StateHook() {}
    virtual void call(const std::string &folder, int32_t process_index) = 0;
};
%}
%{
namespace accel_swig {
accel_status_t state_hook_trampoline(void *ud, const char *folder, int32_t process_index)
{
    ACCEL_SWIG_CALLBACK(static_cast<StateHook *>(ud)->call(folder ? folder : "", process_index))
}
int64_t register_state_hook(accel_accelerator_t *acc, StateHook *hook, bool save)
{
    int64_t handle = 0;
    if (hook == NULL) {
        fail(ACCEL_ERR_INVALID_ARGUMENT, "hook: must not be None/null");
        return 0;
    }
    /* No release function: the language's accelerator object keeps the hook. */
    if (save)
        check(accel_accelerator_register_save_state_pre_hook(acc, state_hook_trampoline, NULL, hook, &handle));
    else
        check(accel_accelerator_register_load_state_pre_hook(acc, state_hook_trampoline, NULL, hook, &handle));
    return handle;
}
} // namespace accel_swig
%}

#if defined(SWIGPYTHON)
/* Python: the callable forms below wrap these. */
%rename(_register_save_state_pre_hook) Accelerator::register_save_state_pre_hook;
%rename(_register_load_state_pre_hook) Accelerator::register_load_state_pre_hook;
%pythonappend Accelerator::register_save_state_pre_hook %{
    self.__dict__.setdefault("_accel_state_hooks", {})[val] = hook
%}
%pythonappend Accelerator::register_load_state_pre_hook %{
    self.__dict__.setdefault("_accel_state_hooks", {})[val] = hook
%}
%pythonappend Accelerator::remove_state_hook %{
    self.__dict__.get("_accel_state_hooks", {}).pop(handle, None)
%}
#endif

%extend Accelerator {
    /** Register a save_state pre-hook; returns its handle (for remove_state_hook). */
    int64_t register_save_state_pre_hook(StateHook *hook)
    {
        return accel_swig::register_state_hook(ACCEL_H($self, "Accelerator"), hook, true);
    }
    /** Register a load_state pre-hook; returns its handle. */
    int64_t register_load_state_pre_hook(StateHook *hook)
    {
        return accel_swig::register_state_hook(ACCEL_H($self, "Accelerator"), hook, false);
    }
    /** Remove a pre-hook by its handle (NOT_FOUND when it is not registered). */
    void remove_state_hook(int64_t handle)
    {
        ACCEL_CHECK(accel_accelerator_remove_state_hook(ACCEL_H($self, "Accelerator"), handle));
    }
#if defined(SWIGPYTHON)
%pythoncode %{
    def register_save_state_pre_hook(self, hook):
        """Accelerate's register_save_state_pre_hook: ``hook(folder, process_index)`` runs on every process
        before save_state writes into ``folder`` (it may add files). A StateHook or any callable; returns a
        handle whose ``remove()`` unregisters it."""
        return _StateHookHandle(self, self._register_save_state_pre_hook(_as_state_hook(hook)))

    def register_load_state_pre_hook(self, hook):
        """Accelerate's register_load_state_pre_hook: ``hook(folder, process_index)`` before load_state reads."""
        return _StateHookHandle(self, self._register_load_state_pre_hook(_as_state_hook(hook)))
%}
#endif
}

#if defined(SWIGPYTHON)
%pythoncode %{
class _CallableStateHook(StateHook):
    def __init__(self, fn):
        StateHook.__init__(self)
        self._fn = fn

    def call(self, folder, process_index):
        self._fn(folder, process_index)


def _as_state_hook(hook):
    if isinstance(hook, StateHook):
        return hook
    if not callable(hook):
        raise TypeError("hook: expected a StateHook or a callable (folder, process_index), got %r" % (hook,))
    return _CallableStateHook(hook)


class _StateHookHandle(object):
    """torch.utils.hooks.RemovableHandle's role: ``remove()`` unregisters the hook (again: nothing)."""

    def __init__(self, accelerator, handle):
        self._accelerator = accelerator
        self.id = handle

    def remove(self):
        if self._accelerator is not None:
            self._accelerator.remove_state_hook(self.id)
            self._accelerator = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()
%}
#endif
