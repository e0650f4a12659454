/* memory.i - accel/memory.h's find_executable_batch_size. The step is a BatchSizeStep (a SWIG director) that the
 * language's own wrapper subclasses around the caller's function (Python: the accel.find_executable_batch_size
 * decorator; Java: Accel.findExecutableBatchSize with a BatchSizeFunction; C#: Library.FindExecutableBatchSize
 * with an Action<long>). That subclass catches whatever the function throws, keeps it, and hands its status to
 * the library with batch_size_step_failed: an AccelError's own status (RESOURCE_EXHAUSTED when an accel call ran
 * out of memory), RESOURCE_EXHAUSTED for the language's out-of-memory error (MemoryError, OutOfMemoryError,
 * OutOfMemoryException), else UNKNOWN with the exception's text (which the library still reads for an
 * allocation failure: PyTorch's "CUDA out of memory."). When the search ends with the function's own failure
 * the wrapper rethrows the kept exception itself, unchanged, as Accelerate does. Included by accel.i after
 * datasets.i (ACCEL_SWIG_CALLBACK). */

%feature("director") BatchSizeStep;
%inline %{
/** find_executable_batch_size's step as the library calls it: override call(batch_size). Use the language's
 *  wrapper (see memory.i) rather than this class directly: it maps the step's exceptions to statuses. */
class BatchSizeStep {
public:
    virtual ~BatchSizeStep() {}
    virtual void call(int64_t batch_size) = 0;
};
%}

%{
namespace accel_swig {
accel_status_t batch_size_step_trampoline(void *ud, int64_t batch_size)
{
    ACCEL_SWIG_CALLBACK(static_cast<BatchSizeStep *>(ud)->call(batch_size))
}
} // namespace accel_swig
%}

/* Called from inside a step: records the step's failure for the trampoline instead of raising (no %exception). */
%exception batch_size_step_failed "$action"
%inline %{
/** Records a step's failure (status and message) for find_executable_batch_size; call it only from a
 *  BatchSizeStep's call(). */
void batch_size_step_failed(int32_t status, const char *message)
{
    accel_swig::fail(status > 0 ? status : ACCEL_ERR_UNKNOWN, message ? message : "");
}

/** accel_find_executable_batch_size with a BatchSizeStep; returns the batch size the step succeeded with. */
int64_t find_executable_batch_size_with_step(int64_t starting_batch_size, const char *options_json,
                                             BatchSizeStep *step)
{
    int64_t found = 0;
    if (step == NULL) {
        accel_swig::fail(ACCEL_ERR_INVALID_ARGUMENT, "step: must not be None/null");
        return 0;
    }
    ACCEL_CHECK(accel_find_executable_batch_size(starting_batch_size, options_json,
                                                 accel_swig::batch_size_step_trampoline, step, &found));
    return found;
}
%}

#if defined(SWIGPYTHON)
%pythoncode %{
from .errors import AccelError as _AccelError


class _BatchSizeCall(BatchSizeStep):
    """Runs ``function(batch_size, *args, **kwargs)`` for the library; keeps its result or its exception."""

    def __init__(self, function, args, kwargs):
        BatchSizeStep.__init__(self)
        self._call = (function, args, kwargs)
        self.result = None
        self.error = None

    def call(self, batch_size):
        function, args, kwargs = self._call
        self.error = None
        try:
            self.result = function(batch_size, *args, **kwargs)
        except BaseException as e:  # every exception: none may unwind through the library's frames
            self.error = e
            status = getattr(e, "status", None) if isinstance(e, _AccelError) else None
            if status is None:
                status = ACCEL_ERR_RESOURCE_EXHAUSTED if isinstance(e, MemoryError) else ACCEL_ERR_UNKNOWN
            batch_size_step_failed(status, e.message if isinstance(e, _AccelError) else "%s: %s" % (type(e).__name__, e))


def find_executable_batch_size(function=None, starting_batch_size=128, reduce_batch_size_factor=None,
                               max_memory_bytes=None):
    """Accelerate's decorator: ``function(batch_size, *args, **kwargs)`` runs with ``starting_batch_size``; while
    it runs out of memory (an accel ``ResourceExhaustedError``, Python's ``MemoryError``, or an exception whose
    text reports a failed allocation such as PyTorch's "CUDA out of memory."), it runs again with
    ``int(batch_size * reduce_batch_size_factor)`` (0.5 by default, as Accelerate up to 1.8; 0.9 as 1.9+).
    ``max_memory_bytes`` (bytes, or a text such as "2GB") budgets LibTorch's CPU allocations while it runs.
    Returns ``function``'s result; another exception of ``function`` propagates unchanged; reaching zero raises
    ``ResourceExhaustedError`` ("no executable batch size found, reached zero"). As in Accelerate, a later call
    of the decorated function starts from the batch size found by the previous one::

        @accel.find_executable_batch_size(starting_batch_size=128)
        def train(batch_size, model):
            ...
        train(model)
    """
    import functools
    import json

    if function is None:
        return functools.partial(find_executable_batch_size, starting_batch_size=starting_batch_size,
                                 reduce_batch_size_factor=reduce_batch_size_factor,
                                 max_memory_bytes=max_memory_bytes)
    options = {}
    if reduce_batch_size_factor is not None:
        options["reduce_batch_size_factor"] = reduce_batch_size_factor
    if max_memory_bytes is not None:
        options["max_memory_bytes"] = max_memory_bytes
    options_json = json.dumps(options) if options else None
    state = {"batch_size": starting_batch_size}

    @functools.wraps(function)
    def decorator(*args, **kwargs):
        step = _BatchSizeCall(function, args, kwargs)
        try:
            state["batch_size"] = find_executable_batch_size_with_step(state["batch_size"], options_json, step)
        except _AccelError as e:
            # The function's own failure ends the search (RESOURCE_EXHAUSTED only comes from reaching zero).
            if step.error is not None and e.status != ACCEL_ERR_RESOURCE_EXHAUSTED:
                raise step.error
            raise
        return step.result

    decorator.batch_size = lambda: state["batch_size"]
    return decorator
%}
#endif

#if defined(SWIGJAVA)
%pragma(java) modulecode=%{
  /** The step of {@link #findExecutableBatchSize}: runs with a batch size; an exception it throws ends the try. */
  public interface BatchSizeFunction {
    void apply(long batchSize);
  }

  private static final class BatchSizeCall extends BatchSizeStep {
    private final BatchSizeFunction function;
    Throwable error;

    BatchSizeCall(BatchSizeFunction function) {
      this.function = function;
    }

    @Override
    public void call(long batchSize) {
      error = null;
      try {
        function.apply(batchSize);
      } catch (AccelError e) {
        error = e;
        batchSizeStepFailed(e.getStatus(), e.getMessage());
      } catch (OutOfMemoryError e) {
        error = e;
        batchSizeStepFailed(ACCEL_ERR_RESOURCE_EXHAUSTED, "OutOfMemoryError: " + e.getMessage());
      } catch (Throwable e) { // none may unwind through the library's frames
        error = e;
        batchSizeStepFailed(ACCEL_ERR_UNKNOWN, e.toString());
      }
    }
  }

  /**
   * Accelerate's find_executable_batch_size: runs {@code step} with {@code startingBatchSize}; while it runs out
   * of memory (an accel {@link ResourceExhaustedError}, the JVM's OutOfMemoryError, or an exception whose text
   * reports a failed allocation) it runs again with floor(batchSize * reduce_batch_size_factor). Returns the
   * batch size it succeeded with. Another exception of {@code step} is rethrown unchanged; reaching zero
   * throws ResourceExhaustedError. {@code optionsJson}: "reduce_batch_size_factor" (0.5; 0.9 as Accelerate
   * 1.9+), "max_memory_bytes" (a budget for LibTorch's CPU allocations while the step runs); null = defaults.
   */
  public static long findExecutableBatchSize(long startingBatchSize, String optionsJson, BatchSizeFunction step) {
    if (step == null) throw new InvalidArgumentError("step: must not be null", ACCEL_ERR_INVALID_ARGUMENT);
    BatchSizeCall call = new BatchSizeCall(step);
    try {
      return findExecutableBatchSizeWithStep(startingBatchSize, optionsJson, call);
    } catch (AccelError e) {
      // The step's own failure ends the search (RESOURCE_EXHAUSTED only comes from reaching zero).
      if (call.error != null && e.getStatus() != ACCEL_ERR_RESOURCE_EXHAUSTED) {
        if (call.error instanceof RuntimeException) throw (RuntimeException) call.error;
        if (call.error instanceof Error) throw (Error) call.error;
        throw new UnknownError(call.error.toString(), ACCEL_ERR_UNKNOWN);
      }
      throw e;
    }
  }
%}
#endif

#if defined(SWIGCSHARP)
%csmethodmodifiers batch_size_step_failed "internal";
%pragma(csharp) modulecode=%{
  sealed class BatchSizeCall : BatchSizeStep {
    readonly global::System.Action<long> function;
    internal global::System.Exception Error;

    internal BatchSizeCall(global::System.Action<long> function) { this.function = function; }

    public override void Call(long batchSize) {
      Error = null;
      try {
        function(batchSize);
      } catch (AccelError e) {
        Error = e;
        BatchSizeStepFailed(e.Status, e.Message);
      } catch (global::System.OutOfMemoryException e) {
        Error = e;
        BatchSizeStepFailed(ACCEL_ERR_RESOURCE_EXHAUSTED, "OutOfMemoryException: " + e.Message);
      } catch (global::System.Exception e) { // none may unwind through the library's frames
        Error = e;
        BatchSizeStepFailed(ACCEL_ERR_UNKNOWN, e.GetType().Name + ": " + e.Message);
      }
    }
  }

  /// <summary>Accelerate's find_executable_batch_size: runs <paramref name="step"/> with
  /// <paramref name="startingBatchSize"/>; while it runs out of memory (an accel ResourceExhaustedError,
  /// .NET's OutOfMemoryException, or an exception whose text reports a failed allocation) it runs again with
  /// floor(batchSize * reduce_batch_size_factor). Returns the batch size it succeeded with. Another exception
  /// of the step is rethrown unchanged; reaching zero throws ResourceExhaustedError. <paramref name="optionsJson"/>:
  /// "reduce_batch_size_factor" (0.5; 0.9 as Accelerate 1.9+), "max_memory_bytes"; null = defaults.</summary>
  public static long FindExecutableBatchSize(long startingBatchSize, string optionsJson, global::System.Action<long> step) {
    if (step == null) throw new InvalidArgumentError("step: must not be null", ACCEL_ERR_INVALID_ARGUMENT);
    var call = new BatchSizeCall(step);
    try {
      return FindExecutableBatchSizeWithStep(startingBatchSize, optionsJson, call);
    } catch (AccelError e) {
      // The step's own failure ends the search (RESOURCE_EXHAUSTED only comes from reaching zero).
      if (call.Error != null && e.Status != ACCEL_ERR_RESOURCE_EXHAUSTED)
        global::System.Runtime.ExceptionServices.ExceptionDispatchInfo.Capture(call.Error).Throw();
      throw;
    }
  }
%}
#endif
