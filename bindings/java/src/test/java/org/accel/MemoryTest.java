package org.accel;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.Test;

/** findExecutableBatchSize (C-level checks: tests/capi/test_memory.c): a step failing above a size lands on the
 *  largest of the sequence that fits, with either factor; other exceptions are rethrown unchanged; reaching zero;
 *  a real forward pass under max_memory_bytes. */
class MemoryTest {
  private static Accel.BatchSizeFunction failsAbove(long fits, List<Long> tried) {
    return batchSize -> {
      tried.add(batchSize);
      if (batchSize > fits) {
        throw new ResourceExhaustedError("out of memory (a test's step)", AccelConstants.ACCEL_ERR_RESOURCE_EXHAUSTED);
      }
    };
  }

  @Test
  void landsOnTheLargestSizeThatFits() {
    List<Long> tried = new ArrayList<>();
    assertEquals(32, Accel.findExecutableBatchSize(128, null, failsAbove(37, tried)));
    assertEquals(Arrays.asList(128L, 64L, 32L), tried);

    tried.clear();
    assertEquals(36, Accel.findExecutableBatchSize(128, "{\"reduce_batch_size_factor\": 0.9}", failsAbove(37, tried)));
    assertEquals(Arrays.asList(128L, 115L, 103L, 92L, 82L, 73L, 65L, 58L, 52L, 46L, 41L, 36L), tried);

    tried.clear(); // the JVM's own out-of-memory error counts too
    assertEquals(16, Accel.findExecutableBatchSize(64, null, batchSize -> {
      tried.add(batchSize);
      if (batchSize > 20) throw new OutOfMemoryError("Java heap space");
    }));
    assertEquals(Arrays.asList(64L, 32L, 16L), tried);
  }

  @Test
  void otherExceptionsPropagateUnchanged() {
    IllegalStateException mine = new IllegalStateException("the data set is gone");
    List<Long> tried = new ArrayList<>();
    IllegalStateException thrown = assertThrows(IllegalStateException.class,
        () -> Accel.findExecutableBatchSize(64, null, batchSize -> {
          tried.add(batchSize);
          if (batchSize > 32) throw new OutOfMemoryError();
          throw mine;
        }));
    assertSame(mine, thrown);
    assertEquals(Arrays.asList(64L, 32L), tried);

    tried.clear();
    ResourceExhaustedError zero = assertThrows(ResourceExhaustedError.class,
        () -> Accel.findExecutableBatchSize(4, null, failsAbove(0, tried)));
    assertTrue(zero.getMessage().contains("reached zero"), zero.getMessage());
    assertEquals(Arrays.asList(4L, 2L, 1L), tried);
    assertThrows(InvalidArgumentError.class,
        () -> Accel.findExecutableBatchSize(4, "{\"reduce_batch_size_factor\": 1.5}", batchSize -> {}));
  }

  @Test
  void forwardUnderAMemoryBudget() {
    List<String> seen = new ArrayList<>();
    try (Model model = Model.fromJson("{\"type\": \"mlp\", \"widths\": [256, 1024, 4]}")) {
      long found = Accel.findExecutableBatchSize(1024, "{\"max_memory_bytes\": \"4MB\"}", batchSize -> {
        try (Tensor x = Tensor.of(new float[(int) batchSize * 256], batchSize, 256); Tensor out = model.forward(x)) {
          seen.add(batchSize + " ok");
        } catch (AccelError e) {
          seen.add(batchSize + " " + e.getStatusName());
          throw e;
        }
      });
      assertEquals(256, found);
    }
    assertEquals(Arrays.asList("1024 ACCEL_ERR_RESOURCE_EXHAUSTED", "512 ACCEL_ERR_RESOURCE_EXHAUSTED", "256 ok"), seen);
  }
}
