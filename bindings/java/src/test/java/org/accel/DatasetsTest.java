package org.accel;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/** Datasets written in Java (issue 35): map-style and iterable datasets give a tensor loader's batches,
 *  workers call get from native threads (attached to the JVM) and give the same batches, an exception in a
 *  callback fails nextBatch with its message, a collate, and an iterable with state resumes exactly; documents
 *  packed into windows ("packing") equal the hand-packed stream's windows and resume exactly. */
class DatasetsTest {
  static final int N = 22;

  /** Sample i = ([i, -i], 100 + i). */
  static class Rows extends MapDataset {
    final long failAt;

    Rows(long failAt) { this.failAt = failAt; }

    @Override public long length() { return N; }

    @Override public void get(long index, Sample sample) {
      if (index == failAt)
        throw new IllegalStateException("row " + index + " is missing from the table");
      try (Tensor x = Tensor.of(new float[] {index, -index}, 2); Tensor y = Tensor.of(new long[] {100 + index})) {
        sample.setInputs(x);
        sample.setLabels(y);
      }
    }
  }

  /** The same rows as a stream whose state is the next row. */
  static class Stream extends IterableDataset {
    long pos;
    final List<Long> epochs = new ArrayList<>();

    @Override public void setEpoch(long epoch) { epochs.add(epoch); pos = 0; }

    @Override public boolean next(Sample sample) {
      if (pos >= N)
        return false;
      long i = pos++;
      try (Tensor x = Tensor.of(new float[] {i, -i}, 2); Tensor y = Tensor.of(new long[] {100 + i})) {
        sample.setInputs(x);
        sample.setLabels(y);
      }
      return true;
    }

    @Override public boolean stateful() { return true; }
    @Override public String state() { return Long.toString(pos); }
    @Override public void loadState(String state) { pos = Long.parseLong(state); }
  }

  static Tensor[] tensors() {
    float[] x = new float[N * 2];
    long[] y = new long[N];
    for (int i = 0; i < N; ++i) {
      x[2 * i] = i;
      x[2 * i + 1] = -i;
      y[i] = 100 + i;
    }
    return new Tensor[] {Tensor.of(x, N, 2), Tensor.of(y, N)};
  }

  static List<String> pass(DataLoader dl) {
    List<String> out = new ArrayList<>();
    for (Batch b : dl) {
      try (Batch batch = b; Tensor x = batch.inputs(); Tensor y = batch.labels()) {
        out.add(java.util.Arrays.toString(x.toFloatArray()) + java.util.Arrays.toString(y.toLongArray()));
      }
    }
    return out;
  }

  @Test
  void mapAndIterableEqualTheTensorLoader() {
    Tensor[] t = tensors();
    String shuffled = "{\"batch_size\": 3, \"shuffle\": true, \"seed\": 7}";
    try (DataLoader ref = new DataLoader(t[0], t[1], shuffled);
         DataLoader map = DataLoader.fromMapDataset(new Rows(-1), shuffled)) {
      assertEquals(ref.length(), map.length());
      assertEquals(pass(ref), pass(map));
    }
    Stream stream = new Stream();
    try (DataLoader ref = new DataLoader(t[0], t[1], "{\"batch_size\": 4}");
         DataLoader it = DataLoader.fromIterableDataset(stream, "{\"batch_size\": 4}")) {
      List<String> want = pass(ref);
      assertEquals(want, pass(it));
      assertEquals(want, pass(it));
      assertEquals(List.of(0L, 1L), stream.epochs);
    }
  }

  @Test
  void workersFromNativeThreadsGiveTheSameBatches() {
    String config = "{\"batch_size\": 3, \"shuffle\": true, \"seed\": 11, \"num_workers\": %d}";
    List<String> want;
    try (DataLoader dl = DataLoader.fromMapDataset(new Rows(-1), String.format(config, 0))) {
      want = pass(dl);
    }
    for (int w : new int[] {2, 4}) {
      try (DataLoader dl = DataLoader.fromMapDataset(new Rows(-1), String.format(config, w))) {
        assertEquals(want, pass(dl));
        assertEquals(want.size(), pass(dl).size());
      }
    }
  }

  @Test
  void exceptionInACallbackFailsNextBatch() {
    for (int w : new int[] {0, 2}) {
      try (DataLoader dl = DataLoader.fromMapDataset(new Rows(7), "{\"batch_size\": 4, \"num_workers\": " + w + "}")) {
        dl.nextBatch().close();
        AccelError e = assertThrows(AccelError.class, dl::nextBatch);
        assertTrue(e.getMessage().contains("row 7 is missing from the table"), e.getMessage());
      }
    }
  }

  @Test
  void javaCollate() {
    Collate sum = new Collate() {
      @Override public void collate(SampleList samples, Sample batch) {
        int n = (int) samples.size();
        float[] x = new float[n];
        long[] y = new long[n];
        for (int i = 0; i < n; ++i) {
          try (Tensor in = samples.inputs(i); Tensor lab = samples.labels(i)) {
            float[] v = in.toFloatArray();
            x[i] = v[0] + v[1] + 1;
            y[i] = lab.toLongArray()[0];
          }
        }
        try (Tensor bx = Tensor.of(x, n, 1); Tensor by = Tensor.of(y, n)) {
          batch.setInputs(bx);
          batch.setLabels(by);
        }
      }
    };
    try (DataLoader dl = DataLoader.fromMapDataset(new Rows(-1), "{\"batch_size\": 3}", sum);
         Batch b = dl.nextBatch(); Tensor x = b.inputs(); Tensor y = b.labels()) {
      assertArrayEquals(new float[] {1, 1, 1}, x.toFloatArray());
      assertArrayEquals(new long[] {100, 101, 102}, y.toLongArray());
    }
  }

  @Test
  void iterableResumesFromItsState() throws Exception {
    Path dir = Files.createTempDirectory("accel-datasets");
    List<String> rest;
    try (Accelerator acc = new Accelerator();
         DataLoader dl = DataLoader.fromIterableDataset(new Stream(), "{\"batch_size\": 3}")) {
      acc.prepareDataloader(dl);
      pass(dl);
      dl.nextBatch().close();
      dl.nextBatch().close();
      acc.saveState(dir.resolve("ckpt").toString());
      rest = pass(dl);
    }
    Stream stream = new Stream();
    try (Accelerator acc = new Accelerator();
         DataLoader dl = DataLoader.fromIterableDataset(stream, "{\"batch_size\": 3}")) {
      acc.prepareDataloader(dl);
      acc.loadState(dir.resolve("ckpt").toString());
      assertEquals(rest, pass(dl));
      assertEquals(List.of(1L), stream.epochs);
    }
  }

  /** Documents d = 10d, 10d + 1, ... (1 + d % 3 tokens), 9 of them; the state is the next document. */
  static class Documents extends IterableDataset {
    long pos;

    @Override public void setEpoch(long epoch) { pos = 0; }

    @Override public boolean next(Sample sample) {
      if (pos >= 9)
        return false;
      long[] doc = new long[(int) (1 + pos % 3)];
      for (int k = 0; k < doc.length; ++k)
        doc[k] = 10 * pos + k;
      ++pos;
      try (Tensor x = Tensor.of(doc, doc.length)) {
        sample.setInputs(x);
      }
      return true;
    }

    @Override public boolean stateful() { return true; }
    @Override public String state() { return Long.toString(pos); }
    @Override public void loadState(String state) { pos = Long.parseLong(state); }
  }

  static List<String> tokenPass(DataLoader dl) {
    List<String> out = new ArrayList<>();
    for (Batch b : dl) {
      try (Batch batch = b; Tensor x = batch.inputs(); Tensor y = batch.labels()) {
        out.add(java.util.Arrays.toString(x.toLongArray()) + java.util.Arrays.toString(y.toLongArray()));
      }
    }
    return out;
  }

  @Test
  void packsDocumentsAndResumes() throws Exception {
    String packing = "{\"batch_size\": 2, \"packing\": {\"block_size\": 3, \"eos_token_id\": -1}}";
    List<Long> stream = new ArrayList<>(); // each document, then EOS -1
    for (long d = 0; d < 9; ++d) {
      for (long k = 0; k <= d % 3; ++k)
        stream.add(10 * d + k);
      stream.add(-1L);
    }
    Path dir = Files.createTempDirectory("accel-packing");
    List<String> rest;
    try (Accelerator acc = new Accelerator();
         DataLoader dl = DataLoader.fromIterableDataset(new Documents(), packing)) {
      acc.prepareDataloader(dl);
      try (Batch b = dl.nextBatch(); Tensor x = b.inputs(); Tensor y = b.labels()) {
        long[] want = new long[6], wantLabels = new long[6];
        for (int i = 0; i < 6; ++i) { // windows 0 and 1: stream[0..3], stream[3..6]
          want[i] = stream.get(i);
          wantLabels[i] = stream.get(i + 1);
        }
        assertArrayEquals(want, x.toLongArray());
        assertArrayEquals(wantLabels, y.toLongArray());
      }
      dl.nextBatch().close();
      acc.saveState(dir.resolve("ckpt").toString());
      rest = tokenPass(dl);
      assertEquals(3, rest.size()); // 27 tokens: 8 full windows and a short one, in batches of 2
    }
    try (Accelerator acc = new Accelerator();
         DataLoader dl = DataLoader.fromIterableDataset(new Documents(), packing)) {
      acc.prepareDataloader(dl);
      acc.loadState(dir.resolve("ckpt").toString());
      assertEquals(rest, tokenPass(dl));
    }
  }
}
