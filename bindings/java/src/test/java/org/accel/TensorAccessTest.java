package org.accel;

import static org.accel.AccelConstants.*;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.ref.WeakReference;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Map;
import java.util.Set;
import java.util.function.Function;
import org.junit.jupiter.api.Test;

/**
 * The typed accessors' rule (bindings/swig/dtypes.i, docs/guides/bindings/index.md): a tensor reads into an array of
 * another type when every value of its dtype is exact there, and is refused otherwise with both dtypes
 * named; and the Cleaner-based freeing of proxies.
 */
class TensorAccessTest {
  static final int F32 = ACCEL_DTYPE_FLOAT32, F64 = ACCEL_DTYPE_FLOAT64, F16 = ACCEL_DTYPE_FLOAT16,
      BF16 = ACCEL_DTYPE_BFLOAT16, I8 = ACCEL_DTYPE_INT8, U8 = ACCEL_DTYPE_UINT8, I16 = ACCEL_DTYPE_INT16,
      I32 = ACCEL_DTYPE_INT32, I64 = ACCEL_DTYPE_INT64, BOOL = ACCEL_DTYPE_BOOL;

  static final Map<Integer, String> NAMES = Map.of(F32, "float32", F64, "float64", F16, "float16", BF16, "bfloat16",
      I8, "int8", U8, "uint8", I16, "int16", I32, "int32", I64, "int64", BOOL, "bool");

  /** Written out independently of dtypes.i: source dtype -> the array types that take it exactly. */
  static final Map<Integer, Set<Integer>> EXACT = Map.of(
      F32, Set.of(F32, F64), F64, Set.of(F64), F16, Set.of(F32, F64), BF16, Set.of(F32, F64),
      I8, Set.of(F32, F64, I32, I64), U8, Set.of(F32, F64, I32, I64, U8), I16, Set.of(F32, F64, I32, I64),
      I32, Set.of(F64, I32, I64), I64, Set.of(I64), BOOL, Set.of(F32, F64, I32, I64, U8));

  /** Four values each dtype holds exactly. */
  static final Map<Integer, double[]> VALUES = Map.of(
      F32, new double[] {1.5, -2.25, 0, 3}, F64, new double[] {1.5, -2.25, 0, 1e300},
      F16, new double[] {1.5, -2.25, 0, 3}, BF16, new double[] {1.5, -2.25, 0, 3},
      I8, new double[] {1, -128, 0, 127}, U8, new double[] {1, 255, 0, 3}, I16, new double[] {300, -32768, 0, 3},
      I32, new double[] {100000, -2147483648.0, 0, 3}, I64, new double[] {1L << 40, -2, 0, 3},
      BOOL, new double[] {1, 0, 1, 1});

  /** A tensor of {@code dtype} holding {@code VALUES.get(dtype)}, built from raw bytes. */
  static Tensor tensor(int dtype) {
    double[] v = VALUES.get(dtype);
    ByteBuffer b = ByteBuffer.allocateDirect(v.length * (int) Accel.dtypeSize(dtype)).order(ByteOrder.nativeOrder());
    for (double x : v) {
      if (dtype == F32) b.putFloat((float) x);
      else if (dtype == F64) b.putDouble(x);
      else if (dtype == F16) b.putShort(half(x));
      else if (dtype == BF16) b.putShort((short) (Float.floatToIntBits((float) x) >>> 16));
      else if (dtype == I8 || dtype == U8 || dtype == BOOL) b.put((byte) (long) x);
      else if (dtype == I16) b.putShort((short) x);
      else if (dtype == I32) b.putInt((int) x);
      else b.putLong((long) x);
    }
    b.flip();
    return Tensor.of(b, dtype, v.length);
  }

  /** IEEE half bits of the few values used here. */
  static short half(double x) {
    if (x == 1.5) return 0x3E00;
    if (x == -2.25) return (short) 0xC080;
    if (x == 3) return 0x4200;
    return 0;
  }

  static double[] read(Tensor t, int to) {
    double[] out = new double[(int) t.numel()];
    if (to == F32) { float[] a = t.toFloatArray(); for (int i = 0; i < a.length; ++i) out[i] = a[i]; }
    else if (to == F64) out = t.toDoubleArray();
    else if (to == I32) { int[] a = t.toIntArray(); for (int i = 0; i < a.length; ++i) out[i] = a[i]; }
    else if (to == I64) { long[] a = t.toLongArray(); for (int i = 0; i < a.length; ++i) out[i] = a[i]; }
    else { byte[] a = t.toByteArray(); for (int i = 0; i < a.length; ++i) out[i] = a[i] & 0xff; }
    return out;
  }

  @Test
  void everyDtypeThroughEveryAccessor() {
    int[] targets = {F32, F64, I32, I64, U8};
    for (int from : NAMES.keySet()) {
      try (Tensor t = tensor(from)) {
        assertEquals(from, t.dtype());
        for (int to : targets) {
          String what = NAMES.get(from) + " -> " + NAMES.get(to);
          if (EXACT.get(from).contains(to)) {
            assertArrayEquals(VALUES.get(from), read(t, to), what);
          } else {
            InvalidArgumentError e = assertThrows(InvalidArgumentError.class, () -> read(t, to), what);
            assertTrue(e.getMessage().contains("dtype is " + NAMES.get(from) + ", and " + NAMES.get(to) + " cannot"),
                what + ": " + e.getMessage());
          }
        }
      }
    }
  }

  /** The two cases: int32 read as floats returned reinterpreted bits, int64 a byte count. */
  @Test
  void reportedCases() {
    try (Tensor t = Tensor.of(new int[] {1, 2, 3, 4}, 4)) {
      InvalidArgumentError e = assertThrows(InvalidArgumentError.class, t::toFloatArray);
      assertEquals("toFloatArray: the tensor's dtype is int32, and float32 cannot hold every int32 value exactly; "
          + "read it as float64, int32, int64", e.getMessage());
      assertArrayEquals(new double[] {1, 2, 3, 4}, t.toDoubleArray());
      assertArrayEquals(new long[] {1, 2, 3, 4}, t.toLongArray());
    }
    try (Tensor t = Tensor.of(new long[] {1, 2, 3, 4}, 4)) {
      InvalidArgumentError e = assertThrows(InvalidArgumentError.class, t::toFloatArray);
      assertTrue(e.getMessage().startsWith("toFloatArray: the tensor's dtype is int64"), e.getMessage());
    }
  }

  @Test
  void loadCheckpointWithReport(@org.junit.jupiter.api.io.TempDir java.nio.file.Path dir) {
    try (Accelerator acc = new Accelerator(null); Model model = Model.fromJson("{\"type\": \"mlp\", \"widths\": [4, 8, 3]}");
         Model bigger = Model.fromJson("{\"type\": \"mlp\", \"widths\": [4, 8, 3, 3]}")) {
      acc.prepare(model, null, null, null);
      acc.saveModel(model, dir.toString(), null);
      assertEquals("{\"missing_keys\": [\"4.weight\", \"4.bias\"], \"unexpected_keys\": [], \"tied_keys\": []}",
          bigger.loadCheckpointWithReport(dir.toString()));
      assertThrows(NotFoundError.class, () -> bigger.loadCheckpointWithReport(dir.resolve("missing").toString()));
    }
  }

  @Test
  void pretrainedRoundTrip(@org.junit.jupiter.api.io.TempDir java.nio.file.Path dir) {
    String gpt = "{\"type\": \"gpt\", \"vocab_size\": 23, \"n_positions\": 16, \"n_embd\": 16, \"n_layer\": 2,"
        + " \"n_head\": 2}";
    String folder = dir.resolve("gpt").toString();
    try (Model model = Model.fromJson(gpt)) {
      model.savePretrained(folder, "{\"max_shard_size\": \"10KB\"}");
      assertTrue(java.nio.file.Files.exists(dir.resolve("gpt").resolve("model.safetensors.index.json")));
      try (Model back = Model.fromPretrained(folder, null)) {
        assertEquals(model.numParameters(), back.numParameters());
        for (long i = 0; i < model.numParameters(); ++i) {
          String name = model.parameterName(i);
          try (Tensor a = model.getTensor(name); Tensor b = back.getTensor(name)) {
            assertArrayEquals(a.toFloatArray(), b.toFloatArray(), name);
          }
        }
      }
      NotFoundError e = assertThrows(NotFoundError.class, () -> Model.fromPretrained(dir.toString(), null));
      assertTrue(e.getMessage().contains("has no config.json"), e.getMessage());
    }
  }

  @Test
  void forwardNoGrad() {
    try (Accelerator acc = new Accelerator(null); Model model = Model.fromJson("{\"type\": \"mlp\", \"widths\": [4, 8, 3]}");
         Tensor x = Tensor.of(new float[] {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, -0.5f, 1f, 2f}, 2, 4);
         Tensor y = Tensor.of(new long[] {0, 2}, 2)) {
      acc.prepare(model, null, null, null);
      model.eval();
      try (Tensor a = model.forward(x); Tensor b = model.forwardNoGrad(x); Tensor la = Accel.computeLoss("cross_entropy", a, y);
           Tensor lb = Accel.computeLoss("cross_entropy", b, y)) {
        org.junit.jupiter.api.Assertions.assertArrayEquals(a.toFloatArray(), b.toFloatArray());
        acc.backward(la);
        assertThrows(AccelError.class, () -> acc.backward(lb));
      }
    }
  }

  /** Runs System.gc() until {@code done} holds (10 s at most). */
  static boolean gcUntil(java.util.function.BooleanSupplier done) throws InterruptedException {
    for (int i = 0; i < 1000 && !done.getAsBoolean(); ++i) {
      System.gc();
      Thread.sleep(10);
    }
    return done.getAsBoolean();
  }

  @Test
  void unclosedProxyIsFreedByTheCleaner() throws Exception {
    Tensor t = Tensor.of(new float[] {1f, 2f}, 2);
    NativeCleaner.Owner owner = t.swigOwner;
    assertEquals(0, owner.frees());
    t = null;
    assertTrue(gcUntil(() -> owner.frees() == 1), "the Cleaner never freed an unreachable Tensor");
  }

  @Test
  void closeThenGcFreesOnce() throws Exception {
    Tensor t = Tensor.of(new float[] {1f, 2f}, 2);
    NativeCleaner.Owner owner = t.swigOwner;
    t.close();
    t.close(); // idempotent
    assertEquals(1, owner.frees());
    assertThrows(FailedPreconditionError.class, t::numel);
    WeakReference<Tensor> ref = new WeakReference<>(t);
    // A sentinel collected with it: once the Cleaner has freed the sentinel, it has processed this GC.
    Model sentinel = Model.fromJson("{\"type\": \"mlp\", \"widths\": [2, 2]}");
    NativeCleaner.Owner sentinelOwner = sentinel.swigOwner;
    t = null;
    sentinel = null;
    assertTrue(gcUntil(() -> ref.get() == null && sentinelOwner.frees() == 1), "not collected");
    assertEquals(1, owner.frees(), "close() and the Cleaner both freed the Tensor");
    // The library is still sound afterwards.
    try (Tensor u = Tensor.of(new float[] {3f}, 1)) {
      assertEquals(3.0, u.item());
    }
  }
}
