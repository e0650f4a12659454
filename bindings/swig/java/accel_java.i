/* java/accel_java.i - Java specifics: exception classes, AutoCloseable, names, loader, friendly methods.
 *
 * Package org.accel (set with -package). Handle classes implement AutoCloseable: close() frees the
 * handle (try-with-resources); a proxy never closed is freed by a java.lang.ref.Cleaner once unreachable.
 * Exceptions are unchecked: AccelError (a RuntimeException) and one subclass per status (org/accel/*Error.java), each carrying the status and the
 * library's message.
 */

%include <enumsimple.swg>

/* With -DSWIGWORDSIZE64 (64-bit Linux) int64_t and size_t are C `long` / `unsigned long`, which SWIG would
 * map to a 32-bit int here: map them like `long long` (64-bit) instead. */
%apply long long { long };
%apply unsigned long long { unsigned long };
%apply const long long & { const long & };
%apply const unsigned long long & { const unsigned long & };
%javaconst(1);

%{
/* Throws org.accel.<Class>(message, status) for the pending status. */
static void accel_swig_throw_java(JNIEnv *jenv)
{
    accel_swig::Pending &p = accel_swig::pending();
    std::string cls = std::string("org/accel/") + accel_swig::error_class_name(p.status);
    jclass c = jenv->FindClass(cls.c_str());
    if (!c) {
        jenv->ExceptionClear();
        c = jenv->FindClass("java/lang/RuntimeException");
        if (c)
            jenv->ThrowNew(c, p.message.c_str());
        accel_swig::reset();
        return;
    }
    jmethodID ctor = jenv->GetMethodID(c, "<init>", "(Ljava/lang/String;I)V");
    jstring msg = jenv->NewStringUTF(p.message.c_str());
    jthrowable exc = (ctor && msg) ? (jthrowable)jenv->NewObject(c, ctor, msg, (jint)p.status) : NULL;
    if (exc)
        jenv->Throw(exc);
    accel_swig::reset();
}
%}

%exception {
    accel_swig::reset();
    $action
    if (accel_swig::failed()) {
        accel_swig_throw_java(jenv);
        return $null;
    }
}

/* Names: lowerCamelCase methods; the seed is a long (SWIG would make uint64_t a BigInteger). */
%rename("%(lowercamelcase)s", %$isfunction) "";
%apply int64_t { uint64_t seed };

/* Load the JNI library (reporting every path tried) and check the ABI before any native call. */
%pragma(java) jniclasscode=%{
  static {
    NativeLoader.load();
    int loaded = AccelJNI.abiVersion();
    if (loaded != AccelConstants.BUILT_ABI_VERSION)
      throw new UnsatisfiedLinkError("accel: the loaded libaccel has ABI version " + loaded
          + " but these bindings were built for ABI " + AccelConstants.BUILT_ABI_VERSION
          + " (libaccel.so." + AccelConstants.BUILT_ABI_VERSION + ")");
  }
%}
%pragma(java) moduleclassmodifiers="public final class"

/* Every proxy frees its native object through java.lang.ref.Cleaner (NativeCleaner.java), not SWIG's
 * deprecated finalize(): delete() (= close()) cleans now, the Cleaner cleans an unreachable proxy, and
 * Cleanable.clean() runs at most once, so close() then GC never frees twice. The action holds the pointer,
 * never the proxy. swigCMemOwn stays for SWIG's director code; swigSetOwn keeps the action in step. */
%typemap(javabody) SWIGTYPE %{
  private transient long swigCPtr;
  protected transient boolean swigCMemOwn;
  /** Package-private for the tests (SmokeTest checks that close() then GC frees once). */
  final transient NativeCleaner.Owner swigOwner;
  private final transient java.lang.ref.Cleaner.Cleanable swigCleanable;

  protected $javaclassname(long cPtr, boolean cMemoryOwn) {
    swigCMemOwn = cMemoryOwn;
    swigCPtr = cPtr;
    swigOwner = new NativeCleaner.Owner(cPtr, cMemoryOwn, $imclassname::delete_$javaclassname);
    swigCleanable = NativeCleaner.register(this, swigOwner);
  }

  protected static long getCPtr($javaclassname obj) {
    return (obj == null) ? 0 : obj.swigCPtr;
  }

  private void swigSetOwn(boolean own) {
    swigCMemOwn = own;
    swigOwner.setOwned(own);
  }

  protected static long swigRelease($javaclassname obj) {
    long ptr = 0;
    if (obj != null) {
      if (!obj.swigCMemOwn)
        throw new RuntimeException("Cannot release ownership as memory is not owned");
      ptr = obj.swigCPtr;
      obj.swigSetOwn(false);
      obj.delete();
    }
    return ptr;
  }
%}
%typemap(javafinalize) SWIGTYPE ""
%typemap(javadestruct, methodname="delete", methodmodifiers="public synchronized", parameters="") SWIGTYPE {
    if (swigCPtr != 0) {
      swigOwner.setOwned(swigCMemOwn);
      swigCMemOwn = false;
      swigCleanable.clean();
      swigCPtr = 0;
    }
  }
%typemap(directordisconnect, methodname="swigDirectorDisconnect") SWIGTYPE %{
  protected void $methodname() {
    swigSetOwn(false);
    $jnicall;
  }
%}
%typemap(directorowner_release, methodname="swigReleaseOwnership") SWIGTYPE %{
  public void $methodname() {
    swigSetOwn(false);
    $jnicall;
  }
%}
%typemap(directorowner_take, methodname="swigTakeOwnership") SWIGTYPE %{
  public void $methodname() {
    swigSetOwn(true);
    $jnicall;
  }
%}

/* Handles: AutoCloseable; close() == delete() (idempotent; later calls raise FailedPreconditionError). */
%define ACCEL_JAVA_CLOSABLE(CLS)
%typemap(javainterfaces) CLS "AutoCloseable"
%ignore CLS::close;
%typemap(javacode) CLS %{
  /** Frees the native handle now; the object is unusable afterwards. Calling it twice is fine. */
  @Override
  public void close() {
    delete();
  }
%}
%enddef
ACCEL_JAVA_CLOSABLE(Accelerator)
ACCEL_JAVA_CLOSABLE(Model)
ACCEL_JAVA_CLOSABLE(Optimizer)
ACCEL_JAVA_CLOSABLE(Scheduler)
ACCEL_JAVA_CLOSABLE(Batch)
ACCEL_JAVA_CLOSABLE(Tensor)
ACCEL_JAVA_CLOSABLE(ObjectList)
%typemap(javainterfaces) ObjectItems "AutoCloseable"
%typemap(javacode) ObjectItems %{
  @Override
  public void close() {
    delete();
  }
%}
%typemap(javainterfaces) StateDictEntries "AutoCloseable"
%typemap(javacode) StateDictEntries %{
  @Override
  public void close() {
    delete();
  }
%}

%typemap(javainterfaces) DataLoader "AutoCloseable, Iterable<Batch>"
%ignore DataLoader::close;
%typemap(javacode) DataLoader %{
  @Override
  public void close() {
    delete();
  }

  /** The datasets and collate of fromMapDataset / fromIterableDataset, alive as long as the loader. */
  private final java.util.List<Object> datasets = new java.util.ArrayList<>();

  void keepDatasets(Object dataset, Object collate) {
    datasets.add(dataset);
    if (collate != null)
      datasets.add(collate);
  }

  /** fromMapDataset with the config's collate. */
  public static DataLoader fromMapDataset(MapDataset dataset, String configJson) {
    return fromMapDataset(dataset, configJson, null);
  }

  /** fromIterableDataset with the config's collate. */
  public static DataLoader fromIterableDataset(IterableDataset dataset, String configJson) {
    return fromIterableDataset(dataset, configJson, null);
  }

  /** One pass over the loader; close each Batch (try-with-resources) or let the GC free it. */
  @Override
  public java.util.Iterator<Batch> iterator() {
    return new java.util.Iterator<Batch>() {
      private Batch pending;
      private boolean done;

      @Override
      public boolean hasNext() {
        if (pending == null && !done) {
          pending = nextBatch();
          done = pending == null;
        }
        return pending != null;
      }

      @Override
      public Batch next() {
        if (!hasNext())
          throw new java.util.NoSuchElementException("end of the pass");
        Batch b = pending;
        pending = null;
        return b;
      }
    };
  }
%}

/* The accelerator keeps the Java tracker objects alive (the library only borrows them). */
%typemap(javain, pre="    trackerCallbacks.add($javainput);") TrackerCallback *callback "TrackerCallback.getCPtr($javainput)"
/* ... and the save_state / load_state pre-hooks (state_hooks.i) while it lives. */
%typemap(javain, pre="    stateHooks.add($javainput);") StateHook *hook "StateHook.getCPtr($javainput)"
%typemap(javacode) Accelerator %{
  private final java.util.List<TrackerCallback> trackerCallbacks = new java.util.ArrayList<>();
  private final java.util.List<StateHook> stateHooks = new java.util.ArrayList<>();

  /** Accelerator.save: {@code tensors} to {@code path} as one safetensors file, on the main process only. */
  public void save(java.util.Map<String, Tensor> tensors, String path) {
    try (StateDictEntries e = new StateDictEntries()) {
      for (java.util.Map.Entry<String, Tensor> kv : tensors.entrySet())
        e.add(kv.getKey(), kv.getValue());
      saveEntries(e, path);
    }
  }

  /** Accelerate's on_main_process / on_local_main_process / on_last_process / on_process: runs
   *  {@code action} on the chosen process only. */
  public void onMainProcess(Runnable action) { if (isMainProcess()) action.run(); }
  public void onLocalMainProcess(Runnable action) { if (isLocalMainProcess()) action.run(); }
  public void onLastProcess(Runnable action) { if (isLastProcess()) action.run(); }
  public void onProcess(int index, Runnable action) { if (processIndex() == index) action.run(); }

  @Override
  public void close() {
    delete();
  }

  /** A scope that ends an accelerator context when closed; close() throws no checked exception. */
  public interface Scope extends AutoCloseable {
    @Override
    void close();
  }

  /** {@code try (var s = accelerator.accumulate(model)) { ... }}: accumulate_begin / accumulate_end. */
  public Scope accumulate(Model model) {
    accumulateBegin(model);
    return this::accumulateEnd;
  }

  /** {@code try (var s = accelerator.autocast()) { ... }}: autocast_begin / autocast_end. */
  public Scope autocast() {
    autocastBegin();
    return this::autocastEnd;
  }

  /** {@code try (var s = accelerator.profile()) { ... }}: profile_begin / profile_end (the trace is written at the end). */
  public Scope profile() {
    profileBegin();
    return this::profileEnd;
  }

  /** {@code try (var s = accelerator.mainProcessFirst()) { ... }}: the main process runs the block first. */
  public Scope mainProcessFirst() {
    mainProcessFirstBegin();
    return this::mainProcessFirstEnd;
  }

  /** {@code try (var s = accelerator.joinUnevenInputs(model, null)) { ... }}: join_uneven_inputs; {@code model}
   *  null joins every prepared model, {@code evenBatches} null keeps the data loaders' setting. */
  public Scope joinUnevenInputs(Model model, Boolean evenBatches) {
    joinUnevenInputsBegin(model, evenBatches == null ? -1 : (evenBatches ? 1 : 0));
    return this::joinUnevenInputsEnd;
  }

  /** {@code try (var s = accelerator.localMainProcessFirst()) { ... }}: each machine's local main first. */
  public Scope localMainProcessFirst() {
    localMainProcessFirstBegin();
    return this::localMainProcessFirstEnd;
  }

  /** The current bytes of the blob registered with {@link #registerBytesForCheckpointing(byte[])}. */
  public byte[] getCheckpointingBytes(int index) {
    byte[] out = new byte[Math.toIntExact(checkpointingBytesSize(index))];
    copyCheckpointingBytes(index, out);
    return out;
  }

  /** Every entry of an object collective's result, the list closed afterwards. */
  private static java.util.List<byte[]> objectBytes(ObjectList list) {
    try (ObjectList l = list) {
      java.util.List<byte[]> out = new java.util.ArrayList<>();
      for (long i = 0; i < l.count(); ++i) {
        byte[] b = new byte[Math.toIntExact(l.itemSize(i))];
        l.copyItem(i, b);
        out.add(b);
      }
      return out;
    }
  }

  /** Accelerate's {@code gather_object}: every process's bytes, in rank order. */
  public java.util.List<byte[]> gatherObject(byte[] data) {
    return objectBytes(gatherObjectList(data));
  }

  /** {@code broadcast_object}: process {@code fromProcess}'s bytes on every process (the others' are ignored). */
  public byte[] broadcastObject(byte[] data, int fromProcess) {
    return objectBytes(broadcastObjectEntry(data == null ? new byte[0] : data, fromProcess)).get(0);
  }

  /** {@code broadcast_object_list}: process {@code fromProcess}'s list on every process (the others' are ignored;
   *  pass null). */
  public java.util.List<byte[]> broadcastObjectList(java.util.List<byte[]> items, int fromProcess) {
    try (ObjectItems e = new ObjectItems()) {
      if (items != null && processIndex() == fromProcess)
        for (byte[] item : items) e.add(item);
      return objectBytes(broadcastObjectEntries(e, fromProcess));
    }
  }
%}

%typemap(javacode) Tensor %{
  @Override
  public void close() {
    delete();
  }

  /** A float32 tensor holding a copy of {@code data} with the given shape. */
  public static Tensor of(float[] data, long... shape) { return fromFloat32(data, shape); }
  /** A float64 tensor. */
  public static Tensor of(double[] data, long... shape) { return fromFloat64(data, shape); }
  /** An int32 tensor. */
  public static Tensor of(int[] data, long... shape) { return fromInt32(data, shape); }
  /** An int64 tensor. */
  public static Tensor of(long[] data, long... shape) { return fromInt64(data, shape); }
  /** A uint8 tensor. */
  public static Tensor of(byte[] data, long... shape) { return fromUint8(data, shape); }
  /** A tensor of {@code dtype} (AccelConstants.ACCEL_DTYPE_*) from a direct buffer's remaining bytes. */
  public static Tensor of(java.nio.ByteBuffer data, int dtype, long... shape) { return fromBytes(data, dtype, shape); }

  /** The sizes of the dimensions. */
  public long[] shape() {
    long[] s = new long[(int) ndim()];
    for (int i = 0; i < s.length; ++i)
      s[i] = size(i);
    return s;
  }

  private int elements() { return Math.toIntExact(numel()); }

  // The typed accessors convert where every value of the tensor's dtype is exact in the array's type and
  // throw InvalidArgumentError naming both dtypes otherwise (bindings/swig/dtypes.i).
  /** The elements as float32: from float32, float16, bfloat16, int16, int8, uint8, bool. */
  public float[] toFloatArray() { float[] a = new float[elements()]; copyToFloat32(a); return a; }
  /** The elements as float64: every dtype but int64. */
  public double[] toDoubleArray() { double[] a = new double[elements()]; copyToFloat64(a); return a; }
  /** The elements as int32: from int32, int16, int8, uint8, bool. */
  public int[] toIntArray() { int[] a = new int[elements()]; copyToInt32(a); return a; }
  /** The elements as int64: from int64, int32, int16, int8, uint8, bool. */
  public long[] toLongArray() { long[] a = new long[elements()]; copyToInt64(a); return a; }
  /** The elements as uint8 (Java's signed bytes hold the same bits): from uint8 and bool. */
  public byte[] toByteArray() { byte[] a = new byte[elements()]; copyToUint8(a); return a; }
  /** The raw elements of any dtype in a new direct buffer (native byte order), no conversion. */
  public java.nio.ByteBuffer toByteBuffer() {
    java.nio.ByteBuffer b = java.nio.ByteBuffer.allocateDirect(Math.toIntExact(nbytes()))
        .order(java.nio.ByteOrder.nativeOrder());
    copyToBytes(b);
    return b;
  }
%}

%typemap(javacode) Model %{
  @Override
  public void close() {
    delete();
  }

  /** Copies of every state-dict entry, in state-dict order. */
  public java.util.LinkedHashMap<String, Tensor> stateDict() {
    java.util.LinkedHashMap<String, Tensor> m = new java.util.LinkedHashMap<>();
    for (long i = 0, n = stateDictSize(); i < n; ++i) {
      String k = stateDictKey(i);
      m.put(k, getTensor(k));
    }
    return m;
  }

  /** Load tensors into the state dict (values copied); strict: every key given and no unknown key. */
  public void loadStateDict(java.util.Map<String, Tensor> entries, boolean strict) {
    try (StateDictEntries e = new StateDictEntries()) {
      for (java.util.Map.Entry<String, Tensor> kv : entries.entrySet())
        e.add(kv.getKey(), kv.getValue());
      loadStateDictEntries(e, strict);
    }
  }
%}
