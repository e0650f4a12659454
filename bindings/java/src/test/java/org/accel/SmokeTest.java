package org.accel;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** The bindings' smoke scenario (conventions.md, "Tests") and the Java-specific mappings. */
class SmokeTest {
  static final String MODEL = "{\"type\": \"mlp\", \"widths\": [4, 8, 3]}";

  static Tensor[] data(int n) {
    float[] x = new float[n * 4];
    long[] y = new long[n];
    for (int i = 0; i < n; ++i) {
      y[i] = i % 3;
      for (int j = 0; j < 4; ++j)
        x[i * 4 + j] = ((i * 7 + j * 3) % 11) / 11.0f;
    }
    return new Tensor[] {Tensor.of(x, n, 4), Tensor.of(y, n)};
  }

  @Test
  void abiMatches() {
    assertEquals(AccelConstants.BUILT_ABI_VERSION, Accel.abiVersion());
    assertFalse(Accel.versionString().isEmpty());
  }

  @Test
  void smokeScenario() throws Exception {
    Accel.setSeed(0);
    Accelerator acc = new Accelerator("{\"gradient_accumulation_steps\": 2}");
    Model model = Model.fromJson(MODEL);
    Optimizer opt = new Optimizer(model, "{\"type\": \"sgd\", \"lr\": 0.1}");
    Scheduler sched = new Scheduler(opt, "{\"type\": \"linear\", \"num_warmup_steps\": 0, \"num_training_steps\": 10}");
    Tensor[] xy = data(24); // 6 batches: 2 trained, 2 after the save, repeated after the load, 1 more
    DataLoader dl = new DataLoader(xy[0], xy[1], "{\"batch_size\": 4}");
    acc.prepare(model, opt, dl, sched);
    assertEquals(2, acc.gradientAccumulationSteps());

    String p0 = model.parameterName(0);
    float[] before = model.getTensor(p0).toFloatArray();
    List<Boolean> syncs = new ArrayList<>();
    for (int i = 0; i < 2; ++i) {
      try (Batch batch = dl.nextBatch(); Accelerator.Scope s = acc.accumulate(model);
           Tensor in = batch.inputs(); Tensor labels = batch.labels(); Tensor out = model.forward(in);
           Tensor loss = Accel.computeLoss("cross_entropy", out, labels)) {
        assertTrue(loss.item() > 0.0);
        acc.backward(loss);
        opt.step();
        sched.step();
        opt.zeroGrad();
        syncs.add(acc.syncGradients());
      }
    }
    assertEquals(List.of(false, true), syncs);
    assertEquals(2, acc.step());
    assertEquals(1, sched.getStepCount());
    assertFalse(java.util.Arrays.equals(before, model.getTensor(p0).toFloatArray()));

    // save_state / load_state: two more steps after the load repeat the two steps after the save exactly
    // (weights, optimizer, scheduler, accumulate()'s step and the loader's position are restored).
    Path dir = Files.createTempDirectory("accel-java");
    String ckpt = dir.resolve("ckpt").toString();
    // Saved asynchronously: the two steps run while the files are written, and change nothing in them.
    assertEquals(ckpt, acc.saveState(ckpt, "{\"async\": true}"));
    float[] saved = model.getTensor(p0).toFloatArray();
    long savedStep = acc.step();
    long savedSchedSteps = sched.getStepCount();
    float[] first = twoSteps(acc, model, opt, sched, dl);
    acc.waitForCheckpoint();
    assertTrue(Files.isRegularFile(dir.resolve("ckpt").resolve("model.safetensors")));
    long firstStep = acc.step();
    assertFalse(java.util.Arrays.equals(saved, first));
    assertEquals(savedStep + 2, firstStep);
    assertEquals(ckpt, acc.loadState(ckpt));
    assertArrayEquals(saved, model.getTensor(p0).toFloatArray());
    assertEquals(savedStep, acc.step());
    assertEquals(savedSchedSteps, sched.getStepCount());
    assertArrayEquals(first, twoSteps(acc, model, opt, sched, dl));
    assertEquals(firstStep, acc.step());
    deleteTree(dir);

    // An invalid config: InvalidArgumentError, an AccelError naming the JSON path.
    AccelError bad = assertThrows(InvalidArgumentError.class,
        () -> new Accelerator("{\"kwargs_handlers\": {\"autocast\": {\"enabled\": \"yes\"}}}"));
    assertTrue(bad.getMessage().contains("kwargs_handlers.autocast.enabled"), bad.getMessage());
    assertEquals(AccelConstants.ACCEL_ERR_INVALID_ARGUMENT, bad.getStatus());
    assertEquals("ACCEL_ERR_INVALID_ARGUMENT", bad.getStatusName());

    // Free the accelerator before its children: they stay usable.
    acc.close();
    try (Batch batch = dl.nextBatch(); Tensor in = batch.inputs(); Tensor out = model.forward(in)) {
      assertArrayEquals(new long[] {4, 3}, out.shape());
    }
    opt.step();
    sched.close();
    dl.close();
    opt.close();
    model.close();
    xy[0].close();
    xy[1].close();
  }

  /** Two train steps (train_step enters accumulate() itself); returns the first parameter afterwards. */
  static float[] twoSteps(Accelerator acc, Model model, Optimizer opt, Scheduler sched, DataLoader dl) {
    for (int i = 0; i < 2; ++i) {
      try (Batch batch = dl.nextBatch()) {
        acc.trainStep(model, opt, sched, batch, "cross_entropy");
      }
    }
    return model.getTensor(model.parameterName(0)).toFloatArray();
  }

  @Test
  void profileWritesAChromeTrace() throws Exception {
    // No output_trace_dir: refused. With one: profile_0.json holds the operators and accel's ranges.
    try (Accelerator bare = new Accelerator()) {
      AccelError e = assertThrows(FailedPreconditionError.class, () -> bare.profile());
      assertTrue(e.getMessage().contains("output_trace_dir"), e.getMessage());
    }
    Path dir = Files.createTempDirectory("accel-java-profile");
    Accelerator acc = new Accelerator("{\"kwargs_handlers\": {\"profile\": {\"output_trace_dir\": \"" + dir + "\"}}}");
    Model model = Model.fromJson(MODEL);
    Optimizer opt = new Optimizer(model, "{\"type\": \"sgd\", \"lr\": 0.1}");
    Tensor[] xy = data(8);
    DataLoader dl = new DataLoader(xy[0], xy[1], "{\"batch_size\": 4}");
    acc.prepare(model, opt, dl, null);
    try (Accelerator.Scope p = acc.profile(); Batch batch = dl.nextBatch()) {
      acc.trainStep(model, opt, null, batch, "cross_entropy");
    }
    String trace = Files.readString(dir.resolve("profile_0.json"));
    assertTrue(trace.contains("\"aten::addmm\"") && trace.contains("\"accel::optimizer_step\""), trace);
    deleteTree(dir);
  }

  static void deleteTree(Path dir) throws java.io.IOException {
    try (var paths = Files.walk(dir)) {
      for (Path p : paths.sorted(java.util.Comparator.reverseOrder()).toList())
        Files.delete(p);
    }
  }

  @Test
  void closedObjectThrows() {
    Model model = Model.fromJson(MODEL);
    model.close();
    model.close();
    FailedPreconditionError e = assertThrows(FailedPreconditionError.class, model::numParameters);
    assertTrue(e.getMessage().contains("used after close"), e.getMessage());
  }

  @Test
  void accumulateEndWithoutBeginIsAccelError() {
    try (Accelerator acc = new Accelerator()) {
      AccelError e = assertThrows(FailedPreconditionError.class, acc::accumulateEnd);
      assertEquals(AccelConstants.ACCEL_ERR_FAILED_PRECONDITION, e.getStatus());
    }
  }

  @Test
  void tensorsAndBuffers() {
    try (Tensor t = Tensor.of(new double[] {1, 2, 3, 4, 5, 6}, 2, 3)) {
      assertArrayEquals(new long[] {2, 3}, t.shape());
      assertEquals(AccelConstants.ACCEL_DTYPE_FLOAT64, t.dtype());
      assertArrayEquals(new double[] {1, 2, 3, 4, 5, 6}, t.toDoubleArray());
      ByteBuffer raw = t.toByteBuffer();
      assertEquals(48, raw.capacity());
      assertEquals(2.0, raw.getDouble(8));
    }
    ByteBuffer b = ByteBuffer.allocateDirect(8).order(ByteOrder.nativeOrder());
    b.putFloat(1.5f).putFloat(-2f).flip();
    try (Tensor t = Tensor.of(b, AccelConstants.ACCEL_DTYPE_FLOAT32, 2)) {
      assertArrayEquals(new float[] {1.5f, -2f}, t.toFloatArray());
    }
    assertThrows(InvalidArgumentError.class, () -> Tensor.of(new float[3], 2, 2));
    assertThrows(IllegalArgumentException.class,
        () -> Tensor.of(ByteBuffer.allocate(4), AccelConstants.ACCEL_DTYPE_FLOAT32, 1));
  }

  @Test
  void iterationAndStateDict() {
    Tensor[] xy = data(10);
    try (DataLoader dl = new DataLoader(xy[0], null, "{\"batch_size\": 4}")) {
      int n = 0;
      for (Batch b : dl) {
        try (b) {
          assertNull(b.labels());
          assertNotNull(b.inputs());
          ++n;
        }
      }
      assertEquals(3, n);
    }
    Accel.setSeed(1);
    Model m1 = Model.fromJson(MODEL);
    Accel.setSeed(2);
    Model m2 = Model.fromJson(MODEL);
    Map<String, Tensor> sd = m1.stateDict();
    m2.loadStateDict(sd, true);
    String k = sd.keySet().iterator().next();
    assertArrayEquals(sd.get(k).toFloatArray(), m2.getTensor(k).toFloatArray());
  }

  @Test
  void nativeLoaderReportsEveryPathTried() {
    NativeLoader.load(); // already loaded: no-op
    UnsatisfiedLinkError e = assertThrows(UnsatisfiedLinkError.class,
        () -> NativeLoader.loadLibrary("accel_missing_for_test"));
    String msg = e.getMessage();
    assertTrue(msg.contains("libaccel_missing_for_test.so"), msg);
    assertTrue(msg.contains("jar:/native/" + NativeLoader.platform() + "/"), msg);
    for (String dir : System.getProperty("java.library.path").split(java.io.File.pathSeparator))
      if (!dir.isEmpty())
        assertTrue(msg.contains(dir), msg);
  }

  @Test
  void collectivesSingleProcess() {
    try (Accelerator acc = new Accelerator();
         Tensor t = Tensor.of(new float[] {1, 2, 3, 4, 5, 6}, 3, 2)) {
      float[] v = t.toFloatArray();
      try (Tensor g = acc.gather(t); Tensor m = acc.gatherForMetrics(t); Tensor r = acc.reduce(t, "mean");
           Tensor rs = acc.reduce(t); Tensor p = acc.padAcrossProcesses(t, 0, -1.0, true);
           Tensor s = acc.splitBetweenProcesses(t, true)) {
        for (Tensor out : new Tensor[] {g, m, r, rs, p, s})
          assertArrayEquals(v, out.toFloatArray());
        assertArrayEquals(new long[] {3, 2}, p.shape());
      }
      InvalidArgumentError bad = assertThrows(InvalidArgumentError.class, () -> acc.reduce(t, "product"));
      assertTrue(bad.getMessage().contains("reduction"), bad.getMessage());
      acc.broadcast(t, 0);
      assertArrayEquals(v, t.toFloatArray());
      assertThrows(OutOfRangeError.class, () -> acc.broadcast(t, 1));
      acc.waitForEveryone();
      try (Accelerator.Scope outer = acc.mainProcessFirst(); Accelerator.Scope inner = acc.localMainProcessFirst()) {
        assertTrue(acc.isMainProcess());
      }
      assertThrows(FailedPreconditionError.class, acc::mainProcessFirstEnd);
      assertEquals(1, acc.numLocalProcesses());
      assertTrue(acc.isLastProcess());
      List<String> ran = new ArrayList<>();
      acc.onMainProcess(() -> ran.add("main"));
      acc.onLocalMainProcess(() -> ran.add("local"));
      acc.onLastProcess(() -> ran.add("last"));
      acc.onProcess(1, () -> ran.add("one"));
      assertEquals(List.of("main", "local", "last"), ran);
      assertEquals("single", acc.distributedBackend());
      assertTrue(acc.ddpStatsJson().contains("\"models\""));
      assertEquals(0, acc.gradScalerGrowthTracker());
      assertEquals(0, Accel.processLocalIndex());
      assertEquals(1, Accel.processLocalCount());
      assertTrue(Accel.processIsLocalMain());
    }
    Tensor[] xy = data(10);
    try (DataLoader dl = new DataLoader(xy[0], xy[1], "{\"batch_size\": 4}")) {
      List<long[]> seen = new ArrayList<>();
      for (Batch b : dl)
        try (b; Tensor idx = b.indices()) {
          seen.add(idx.toLongArray());
        }
      assertEquals(3, seen.size());
      assertArrayEquals(new long[] {8, 9}, seen.get(2));
    }
  }

  @Test
  void trackerCallbacks() {
    List<String> seen = new ArrayList<>();
    try (Accelerator acc = new Accelerator()) {
      acc.addTracker("recorder", new TrackerCallback() {
        @Override
        public int onEvent(int event, String json, long step) {
          seen.add(event + " " + step + " " + json);
          return 0;
        }
      });
      System.gc(); // the accelerator keeps the tracker alive
      acc.initTrackers("run", "{\"lr\": 0.1}", null);
      acc.log("{\"loss\": 0.5}", 3);
      acc.endTraining();
    }
    assertEquals(3, seen.size(), seen.toString());
    assertTrue(seen.get(0).startsWith(AccelConstants.ACCEL_TRACKER_EVENT_INIT + " -1 ") && seen.get(0).contains("\"lr\""),
        seen.get(0));
    assertTrue(seen.get(1).startsWith(AccelConstants.ACCEL_TRACKER_EVENT_LOG + " 3 ") && seen.get(1).contains("loss"),
        seen.get(1));
    assertTrue(seen.get(2).startsWith(AccelConstants.ACCEL_TRACKER_EVENT_FINISH + " -1 "), seen.get(2));
    // A Java exception in the tracker fails the call with its text; a returned status fails it with that status.
    try (Accelerator acc = new Accelerator()) {
      acc.addTracker("failing", new TrackerCallback() {
        @Override
        public int onEvent(int event, String json, long step) {
          if (event == AccelConstants.ACCEL_TRACKER_EVENT_LOG) throw new IllegalStateException("the metrics service is down");
          return 0;
        }
      });
      acc.initTrackers("run", null, null);
      AccelError e = assertThrows(AccelError.class, () -> acc.log("{\"x\": 1}", 0));
      assertTrue(e.getMessage().contains("the metrics service is down"), e.getMessage());
    }
    try (Accelerator acc = new Accelerator()) {
      acc.addTracker("refusing", new TrackerCallback() {
        @Override
        public int onEvent(int event, String json, long step) {
          return event == AccelConstants.ACCEL_TRACKER_EVENT_LOG ? AccelConstants.ACCEL_ERR_UNAVAILABLE : 0;
        }
      });
      acc.initTrackers("run", null, null);
      UnavailableError e = assertThrows(UnavailableError.class, () -> acc.log("{\"x\": 1}", 0));
      assertTrue(e.getMessage().contains("refusing"), e.getMessage());
    }
  }

  @Test
  void checkpointOptionsBlobsAndSaveModel() throws Exception {
    Path dir = Files.createTempDirectory("accel-java-ckpt");
    Path project = dir.resolve("proj");
    try (Accelerator acc = new Accelerator("{\"project_config\": {\"project_dir\": \"" + project
             + "\", \"automatic_checkpoint_naming\": true}}");
         Model model = Model.fromJson(MODEL);
         Optimizer opt = new Optimizer(model, "{\"type\": \"sgd\", \"lr\": 0.1}")) {
      acc.prepare(model, opt, null, null);
      assertEquals(0, acc.registerBytesForCheckpointing("first".getBytes(java.nio.charset.StandardCharsets.UTF_8)));
      assertEquals(1, acc.registerBytesForCheckpointing(new byte[0]));
      assertEquals(0, acc.projectIteration());
      assertFalse(acc.loadLatestState()); // automatic resume: a fresh start loads nothing
      String first = acc.saveState(null, "{\"safe_serialization\": false}");
      assertEquals(project.resolve("checkpoints").resolve("checkpoint_0").toString(), first);
      assertTrue(Files.isRegularFile(Path.of(first, "pytorch_model.bin")));
      assertEquals(1, acc.projectIteration());
      assertArrayEquals("first".getBytes(java.nio.charset.StandardCharsets.UTF_8), acc.getCheckpointingBytes(0));
      assertEquals(0, acc.getCheckpointingBytes(1).length);
      assertThrows(OutOfRangeError.class, () -> acc.getCheckpointingBytes(2));
      InvalidArgumentError bad = assertThrows(InvalidArgumentError.class,
          () -> acc.saveState(null, "{\"safe_serialization\": \"yes\"}"));
      assertTrue(bad.getMessage().contains("safe_serialization"), bad.getMessage());
      assertEquals(first, acc.loadState(null, "{\"strict\": true}"));
      assertTrue(acc.loadLatestState());
      assertEquals(1, acc.projectIteration());

      String exported = dir.resolve("export").toString();
      acc.saveModel(model, exported, "{\"max_shard_size\": 200}");
      assertTrue(Files.isRegularFile(Path.of(exported, "model.safetensors.index.json")));
      Accel.setSeed(5);
      try (Model other = Model.fromJson(MODEL)) {
        String k = model.stateDictKey(0);
        assertFalse(java.util.Arrays.equals(model.getTensor(k).toFloatArray(), other.getTensor(k).toFloatArray()));
        other.loadCheckpoint(exported, "{\"strict\": true}");
        for (long i = 0; i < model.stateDictSize(); ++i) {
          String key = model.stateDictKey(i);
          assertArrayEquals(model.getTensor(key).toFloatArray(), other.getTensor(key).toFloatArray());
        }
        // The shards merged into one pytorch_model.bin (merge_fsdp_weights) load the same weights.
        String merged = Accel.mergeWeights(exported, dir.resolve("merged").toString(), "{\"safe_serialization\": false}");
        assertTrue(merged.endsWith("pytorch_model.bin"), merged);
        other.loadCheckpoint(merged, "{\"strict\": true}");
        String k0 = model.stateDictKey(0);
        assertArrayEquals(model.getTensor(k0).toFloatArray(), other.getTensor(k0).toFloatArray());
        assertThrows(NotFoundError.class, () -> other.loadCheckpoint(dir.resolve("missing").toString()));
      }
    } finally {
      deleteTree(dir);
    }
  }
}
