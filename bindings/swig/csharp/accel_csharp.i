/* csharp/accel_csharp.i - C# specifics: exception classes, IDisposable, names, friendly methods.
 *
 * Namespace Accel (set with -namespace), native library libaccel_csharp.so (-dllimport accel_csharp).
 * Handle classes are IDisposable: Dispose() frees the handle (`using`); a proxy never disposed is freed by
 * its SafeHandle (AccelHandle) once unreachable. Exceptions: AccelError and one subclass per status (bindings/csharp/src/Errors.cs),
 * each carrying the status and the library's message.
 */

%include <enumsimple.swg>

/* With -DSWIGWORDSIZE64 (64-bit Linux) int64_t and size_t are C `long` / `unsigned long`, which SWIG would
 * map to a 32-bit int here: map them like `long long` (64-bit) instead. */
%apply long long { long };
%apply unsigned long long { unsigned long };
%apply const long long & { const long & };
%apply const unsigned long long & { const unsigned long & };
%csconst(1);

%insert(runtime) %{
typedef void (SWIGSTDCALL *AccelCSharpErrorCallback)(const char *message, int status);
static AccelCSharpErrorCallback accel_csharp_error_callback = NULL;
extern "C" SWIGEXPORT void SWIGSTDCALL AccelCSharpRegisterErrorCallback(AccelCSharpErrorCallback cb)
{
    accel_csharp_error_callback = cb;
}
%}

%{
/* Hands the pending status to C#, which stores AccelError.Create(message, status) as the pending
 * exception; SWIG's generated code throws it when the P/Invoke call returns. */
static void accel_swig_throw_csharp()
{
    accel_swig::Pending &p = accel_swig::pending();
    if (accel_csharp_error_callback)
        accel_csharp_error_callback(p.message.c_str(), (int)p.status);
    else
        SWIG_CSharpSetPendingException(SWIG_CSharpApplicationException, p.message.c_str());
    accel_swig::reset();
}
%}

%exception {
    accel_swig::reset();
    $action
    if (accel_swig::failed()) {
        accel_swig_throw_csharp();
        return $null;
    }
}

%pragma(csharp) imclasscode=%{
  class AccelErrorHelper {
    public delegate void ErrorDelegate(string message, int status);
    static ErrorDelegate errorDelegate = new ErrorDelegate(SetPending);

    [global::System.Runtime.InteropServices.DllImport("$dllimport", EntryPoint="AccelCSharpRegisterErrorCallback")]
    public static extern void AccelCSharpRegisterErrorCallback(ErrorDelegate cb);

    static void SetPending(string message, int status) {
      SWIGPendingException.Set(AccelError.Create(message, status));
    }

    static AccelErrorHelper() {
      AccelCSharpRegisterErrorCallback(errorDelegate);
    }
  }
  static AccelErrorHelper accelErrorHelper = new AccelErrorHelper();

  // Checked once, before the first call into the library.
  static readonly int accelLoadedAbi = AccelCheckAbi();
  static int AccelCheckAbi() {
    int loaded = AbiVersion();
    if (loaded != Library.BUILT_ABI_VERSION)
      throw new global::System.DllNotFoundException("accel: the loaded libaccel has ABI version " + loaded +
          " but these bindings were built for ABI " + Library.BUILT_ABI_VERSION +
          " (libaccel.so." + Library.BUILT_ABI_VERSION + ")");
    return loaded;
  }
%}

/* Every proxy keeps its native object in an AccelHandle (a SafeHandle, csharp/src/AccelHandle.cs) instead of
 * SWIG's finalizer: Dispose() disposes the handle now, the runtime's critical finalizer releases the handle
 * of a proxy never disposed, and SafeHandle releases at most once. Calls still pass the HandleRef, which
 * keeps the proxy (and so its handle) alive for the duration of the call. */
%typemap(csbody) SWIGTYPE %{
  private global::System.Runtime.InteropServices.HandleRef swigCPtr;
  protected bool swigCMemOwn;
  internal readonly AccelHandle swigHandle;

  internal $csclassname(global::System.IntPtr cPtr, bool cMemoryOwn) {
    swigCMemOwn = cMemoryOwn;
    swigCPtr = new global::System.Runtime.InteropServices.HandleRef(this, cPtr);
    swigHandle = new AccelHandle(cPtr, cMemoryOwn,
        p => $imclassname.delete_$csclassname(new global::System.Runtime.InteropServices.HandleRef(null, p)));
  }

  internal static global::System.Runtime.InteropServices.HandleRef getCPtr($csclassname obj) {
    return (obj == null) ? new global::System.Runtime.InteropServices.HandleRef(null, global::System.IntPtr.Zero) : obj.swigCPtr;
  }

  internal static global::System.Runtime.InteropServices.HandleRef swigRelease($csclassname obj) {
    if (obj != null) {
      if (!obj.swigCMemOwn)
        throw new global::System.ApplicationException("Cannot release ownership as memory is not owned");
      global::System.Runtime.InteropServices.HandleRef ptr = obj.swigCPtr;
      obj.swigCMemOwn = false;
      obj.Dispose();
      return ptr;
    } else {
      return new global::System.Runtime.InteropServices.HandleRef(null, global::System.IntPtr.Zero);
    }
  }
%}
%typemap(csdispose) SWIGTYPE %{
  public void Dispose() {
    Dispose(true);
    global::System.GC.SuppressFinalize(this);
  }
%}
/* A proxy that no longer owns its object (swigRelease, a director disconnected) marks the handle invalid
 * so that disposing it frees nothing. */
%typemap(csdisposing, methodname="Dispose", methodmodifiers="protected", parameters="bool disposing") SWIGTYPE {
    lock(this) {
      if (swigCPtr.Handle != global::System.IntPtr.Zero) {
        if (!swigCMemOwn)
          swigHandle.SetHandleAsInvalid();
        swigCMemOwn = false;
        swigHandle.Dispose();
        swigCPtr = new global::System.Runtime.InteropServices.HandleRef(null, global::System.IntPtr.Zero);
      }
    }
  }

%rename("%(camelcase)s", %$isfunction) "";

/* Raw array entry points take explicit counts (SWIG's C# has no multi-argument typemaps); the public
 * Tensor.Of / To*Array methods below pass array.Length. */
%csmethodmodifiers Tensor::from_float32 "internal";
%csmethodmodifiers Tensor::from_float64 "internal";
%csmethodmodifiers Tensor::from_int32 "internal";
%csmethodmodifiers Tensor::from_int64 "internal";
%csmethodmodifiers Tensor::from_uint8 "internal";
%csmethodmodifiers Tensor::from_bytes "internal";
%csmethodmodifiers Tensor::copy_to_float32 "internal";
%csmethodmodifiers Tensor::copy_to_float64 "internal";
%csmethodmodifiers Tensor::copy_to_int32 "internal";
%csmethodmodifiers Tensor::copy_to_int64 "internal";
%csmethodmodifiers Tensor::copy_to_uint8 "internal";
%csmethodmodifiers Tensor::copy_to_bytes "internal";
%csmethodmodifiers Tensor::copy_as_dtype "internal";
%csmethodmodifiers Accelerator::register_bytes_for_checkpointing "internal";
%csmethodmodifiers Accelerator::copy_checkpointing_bytes "internal";
%csmethodmodifiers Accelerator::gather_object_list "internal";
%csmethodmodifiers Accelerator::broadcast_object_entry "internal";
%csmethodmodifiers Accelerator::broadcast_object_entries "internal";
%csmethodmodifiers ObjectList::copy_item "internal";
%csmethodmodifiers ObjectItems::add "internal";

%ignore Accelerator::close;
%ignore Model::close;
%ignore Optimizer::close;
%ignore Scheduler::close;
%ignore DataLoader::close;
%ignore Batch::close;
%ignore Tensor::close;
%ignore ObjectList::close;

%typemap(cscode) Tensor %{
  /// <summary>A float32 tensor holding a copy of <paramref name="data"/> with the given shape.</summary>
  public static Tensor Of(float[] data, params long[] shape) { return FromFloat32(data, (ulong)data.Length, shape, (ulong)shape.Length); }
  public static Tensor Of(double[] data, params long[] shape) { return FromFloat64(data, (ulong)data.Length, shape, (ulong)shape.Length); }
  public static Tensor Of(int[] data, params long[] shape) { return FromInt32(data, (ulong)data.Length, shape, (ulong)shape.Length); }
  public static Tensor Of(long[] data, params long[] shape) { return FromInt64(data, (ulong)data.Length, shape, (ulong)shape.Length); }
  public static Tensor Of(byte[] data, params long[] shape) { return FromUint8(data, (ulong)data.Length, shape, (ulong)shape.Length); }
  /// <summary>A tensor of <paramref name="dtype"/> (Library.ACCEL_DTYPE_*) from raw row-major bytes.</summary>
  public static Tensor FromRaw(byte[] data, int dtype, params long[] shape) { return FromBytes(data, (ulong)data.Length, dtype, shape, (ulong)shape.Length); }

  /// <summary>The sizes of the dimensions.</summary>
  public long[] Shape {
    get {
      long[] s = new long[Ndim()];
      for (int i = 0; i < s.Length; ++i)
        s[i] = Size(i);
      return s;
    }
  }

  // The typed accessors convert where every value of the tensor's dtype is exact in the array's type and
  // throw InvalidArgumentError naming both dtypes otherwise (bindings/swig/dtypes.i).
  /// <summary>The elements as float32: from float32, float16, bfloat16, int16, int8, uint8, bool.</summary>
  public float[] ToFloatArray() { var a = new float[Numel()]; CopyToFloat32(a, (ulong)a.Length); return a; }
  /// <summary>The elements as float64: every dtype but int64.</summary>
  public double[] ToDoubleArray() { var a = new double[Numel()]; CopyToFloat64(a, (ulong)a.Length); return a; }
  /// <summary>The elements as int32: from int32, int16, int8, uint8, bool.</summary>
  public int[] ToIntArray() { var a = new int[Numel()]; CopyToInt32(a, (ulong)a.Length); return a; }
  /// <summary>The elements as int64: from int64, int32, int16, int8, uint8, bool.</summary>
  public long[] ToLongArray() { var a = new long[Numel()]; CopyToInt64(a, (ulong)a.Length); return a; }
  /// <summary>The elements as uint8: from uint8 and bool.</summary>
  public byte[] ToByteArray() { var a = new byte[Numel()]; CopyToUint8(a, (ulong)a.Length); return a; }
  /// <summary>The raw row-major bytes of any dtype (native byte order), no conversion.</summary>
  public byte[] ToBytes() { var a = new byte[Nbytes()]; CopyToBytes(a, (ulong)a.Length); return a; }
%}

/* The accelerator keeps the C# tracker objects alive (the library only borrows them). */
%typemap(csin, pre="    trackerCallbacks.Add($csinput);") TrackerCallback *callback "TrackerCallback.getCPtr($csinput)"
%typemap(csin, pre="    stateHooks.Add($csinput);") StateHook *hook "StateHook.getCPtr($csinput)"
%typemap(cscode) Accelerator %{
  private readonly global::System.Collections.Generic.List<TrackerCallback> trackerCallbacks =
      new global::System.Collections.Generic.List<TrackerCallback>();
  private readonly global::System.Collections.Generic.List<StateHook> stateHooks =
      new global::System.Collections.Generic.List<StateHook>();

  /// <summary>Accelerator.save: the tensors to <paramref name="path"/> as one safetensors file, on the main
  /// process only.</summary>
  public void Save(global::System.Collections.Generic.IEnumerable<global::System.Collections.Generic.KeyValuePair<string, Tensor>> tensors, string path) {
    using (var e = new StateDictEntries()) {
      foreach (var kv in tensors)
        e.Add(kv.Key, kv.Value);
      SaveEntries(e, path);
    }
  }

  /// <summary>Accelerate's on_main_process / on_local_main_process / on_last_process / on_process: runs
  /// <paramref name="action"/> on the chosen process only.</summary>
  public void OnMainProcess(global::System.Action action) { if (IsMainProcess()) action(); }
  public void OnLocalMainProcess(global::System.Action action) { if (IsLocalMainProcess()) action(); }
  public void OnLastProcess(global::System.Action action) { if (IsLastProcess()) action(); }
  public void OnProcess(int index, global::System.Action action) { if (ProcessIndex() == index) action(); }

  sealed class Scope : global::System.IDisposable {
    global::System.Action end;
    internal Scope(global::System.Action end) { this.end = end; }
    public void Dispose() {
      var e = end;
      end = null;
      if (e != null) e();
    }
  }

  /// <summary><c>using (accelerator.Accumulate(model)) { ... }</c>: accumulate_begin / accumulate_end.</summary>
  public global::System.IDisposable Accumulate(Model model) {
    AccumulateBegin(model);
    return new Scope(AccumulateEnd);
  }

  /// <summary><c>using (accelerator.Autocast()) { ... }</c>: autocast_begin / autocast_end.</summary>
  public global::System.IDisposable Autocast() {
    AutocastBegin();
    return new Scope(AutocastEnd);
  }

  /// <summary><c>using (accelerator.Profile()) { ... }</c>: profile_begin / profile_end (the trace is written at the end).</summary>
  public global::System.IDisposable Profile() {
    ProfileBegin();
    return new Scope(ProfileEnd);
  }

  /// <summary><c>using (accelerator.MainProcessFirst()) { ... }</c>: the main process runs the block first.</summary>
  public global::System.IDisposable MainProcessFirst() {
    MainProcessFirstBegin();
    return new Scope(MainProcessFirstEnd);
  }

  /// <summary><c>using (accelerator.JoinUnevenInputs(model)) { ... }</c>: join_uneven_inputs; a null model joins
  /// every prepared model, a null evenBatches keeps the data loaders' setting.</summary>
  public global::System.IDisposable JoinUnevenInputs(Model model = null, bool? evenBatches = null) {
    JoinUnevenInputsBegin(model, evenBatches.HasValue ? (evenBatches.Value ? 1 : 0) : -1);
    return new Scope(JoinUnevenInputsEnd);
  }

  /// <summary><c>using (accelerator.LocalMainProcessFirst()) { ... }</c>: each machine's local main first.</summary>
  public global::System.IDisposable LocalMainProcessFirst() {
    LocalMainProcessFirstBegin();
    return new Scope(LocalMainProcessFirstEnd);
  }

  /// <summary>Register a byte blob saved by SaveState and replaced by LoadState; returns its index.</summary>
  public int RegisterBytesForCheckpointing(byte[] data) {
    return RegisterBytesForCheckpointing(data, (ulong)data.Length);
  }

  /// <summary>The current bytes of the blob registered with RegisterBytesForCheckpointing.</summary>
  public byte[] GetCheckpointingBytes(int index) {
    var a = new byte[CheckpointingBytesSize(index)];
    CopyCheckpointingBytes(index, a, (ulong)a.Length);
    return a;
  }

  /// <summary>Every entry of an object collective's result; the list is disposed afterwards.</summary>
  private static byte[][] ObjectBytes(ObjectList list) {
    using (list) {
      var out_ = new byte[list.Count()][];
      for (long i = 0; i < out_.Length; ++i) {
        out_[i] = new byte[list.ItemSize(i)];
        list.CopyItem(i, out_[i], (ulong)out_[i].Length);
      }
      return out_;
    }
  }

  /// <summary>Accelerate's gather_object: every process's bytes, in rank order.</summary>
  public byte[][] GatherObject(byte[] data) {
    return ObjectBytes(GatherObjectList(data, (ulong)data.Length));
  }

  /// <summary>broadcast_object: process fromProcess's bytes on every process (the others' are ignored).</summary>
  public byte[] BroadcastObject(byte[] data, int fromProcess) {
    data = data ?? new byte[0];
    return ObjectBytes(BroadcastObjectEntry(data, (ulong)data.Length, fromProcess))[0];
  }

  /// <summary>broadcast_object_list: process fromProcess's list on every process (the others' are ignored;
  /// pass null).</summary>
  public byte[][] BroadcastObjectList(global::System.Collections.Generic.IList<byte[]> items, int fromProcess) {
    using (var e = new ObjectItems()) {
      if (items != null && ProcessIndex() == fromProcess)
        foreach (var item in items) e.Add(item, (ulong)item.Length);
      return ObjectBytes(BroadcastObjectEntries(e, fromProcess));
    }
  }
%}

%typemap(csinterfaces) DataLoader "global::System.IDisposable, global::System.Collections.Generic.IEnumerable<Batch>"
%typemap(cscode) DataLoader %{
  /// <summary>The datasets and collate of FromMapDataset / FromIterableDataset, alive as long as the loader.</summary>
  private readonly global::System.Collections.Generic.List<object> datasets = new global::System.Collections.Generic.List<object>();

  internal void KeepDatasets(object dataset, object collate) {
    datasets.Add(dataset);
    if (collate != null)
      datasets.Add(collate);
  }

  /// <summary>FromMapDataset with the config's collate.</summary>
  public static DataLoader FromMapDataset(MapDataset dataset, string configJson) {
    return FromMapDataset(dataset, configJson, null);
  }

  /// <summary>FromIterableDataset with the config's collate.</summary>
  public static DataLoader FromIterableDataset(IterableDataset dataset, string configJson) {
    return FromIterableDataset(dataset, configJson, null);
  }

  /// <summary>One pass over the loader; dispose each Batch (using) or let the GC free it.</summary>
  public global::System.Collections.Generic.IEnumerator<Batch> GetEnumerator() {
    for (Batch b = NextBatch(); b != null; b = NextBatch())
      yield return b;
  }

  global::System.Collections.IEnumerator global::System.Collections.IEnumerable.GetEnumerator() {
    return GetEnumerator();
  }
%}

%typemap(cscode) Model %{
  /// <summary>Copies of every state-dict entry, in state-dict order.</summary>
  public global::System.Collections.Generic.List<global::System.Collections.Generic.KeyValuePair<string, Tensor>> StateDict() {
    var list = new global::System.Collections.Generic.List<global::System.Collections.Generic.KeyValuePair<string, Tensor>>();
    for (long i = 0, n = StateDictSize(); i < n; ++i) {
      string k = StateDictKey(i);
      list.Add(new global::System.Collections.Generic.KeyValuePair<string, Tensor>(k, GetTensor(k)));
    }
    return list;
  }

  /// <summary>Load tensors into the state dict (values copied); strict: every key given and no unknown key.</summary>
  public void LoadStateDict(global::System.Collections.Generic.IEnumerable<global::System.Collections.Generic.KeyValuePair<string, Tensor>> entries, bool strict = true) {
    using (var e = new StateDictEntries()) {
      foreach (var kv in entries)
        e.Add(kv.Key, kv.Value);
      LoadStateDictEntries(e, strict);
    }
  }
%}
