package org.accel;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** save_state / load_state pre-hooks (C-level checks: tests/capi/test_state_hooks.c) and join_uneven_inputs in one
 *  process. */
class StateHooksTest {
  @Test
  void hooksAddAndReadFiles(@TempDir Path dir) throws Exception {
    List<String> seen = new ArrayList<>();
    try (Accelerator acc = new Accelerator()) {
      long save = acc.registerSaveStatePreHook(new StateHook() {
        @Override
        public void call(String folder, int processIndex) {
          try {
            Files.write(Path.of(folder, "extra.txt"), ("rank " + processIndex).getBytes(StandardCharsets.UTF_8));
          } catch (java.io.IOException e) {
            throw new RuntimeException(e);
          }
        }
      });
      acc.registerLoadStatePreHook(new StateHook() {
        @Override
        public void call(String folder, int processIndex) {
          try {
            seen.add(Files.readString(Path.of(folder, "extra.txt")));
          } catch (java.io.IOException e) {
            throw new RuntimeException(e);
          }
        }
      });
      String ckpt = dir.resolve("ckpt").toString();
      acc.saveState(ckpt);
      acc.loadState(ckpt);
      assertEquals(List.of("rank 0"), seen);
      acc.removeStateHook(save);
      assertThrows(NotFoundError.class, () -> acc.removeStateHook(save));
      long refuse = acc.registerSaveStatePreHook(new StateHook() {
        @Override
        public void call(String folder, int processIndex) {
          throw new IllegalStateException("no room for this");
        }
      });
      AccelError e = assertThrows(AccelError.class, () -> acc.saveState(dir.resolve("refused").toString()));
      assertTrue(e.getMessage().contains("pre-hook " + refuse + " failed"), e.getMessage());
      assertTrue(e.getMessage().contains("no room for this"), e.getMessage());
      assertFalse(Files.exists(dir.resolve("refused")));
    }
  }

  @Test
  void saveWritesSafetensors(@TempDir Path dir) throws Exception {
    try (Accelerator acc = new Accelerator(); Tensor w = Tensor.of(new float[] {1, 2, 3, 4}, 2, 2)) {
      Path file = dir.resolve("t.safetensors");
      acc.save(java.util.Map.of("w", w), file.toString());
      byte[] data = Files.readAllBytes(file);
      long n = java.nio.ByteBuffer.wrap(data, 0, 8).order(java.nio.ByteOrder.LITTLE_ENDIAN).getLong();
      String header = new String(data, 8, (int) n, StandardCharsets.UTF_8);
      assertTrue(header.contains("\"w\":{\"dtype\":\"F32\",\"shape\":[2,2]"), header);
      assertEquals(8 + n + 16, data.length);
    }
  }

  @Test
  void joinUnevenInputsScope() {
    try (Accelerator acc = new Accelerator()) {
      try (var s = acc.joinUnevenInputs(null, false)) {
        assertThrows(FailedPreconditionError.class, () -> acc.joinUnevenInputs(null, null));
      }
      assertThrows(FailedPreconditionError.class, () -> acc.joinUnevenInputsEnd());
    }
  }
}
