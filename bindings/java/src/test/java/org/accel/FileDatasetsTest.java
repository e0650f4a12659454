package org.accel;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/** DataLoader.fromFiles (accel_dataloader_create_from_files): a uint16 token file gives fromTokens' batches
 *  over the same tokens; a missing file is a NotFoundError naming it. */
class FileDatasetsTest {
  static List<String> pass(DataLoader dl) {
    List<String> out = new ArrayList<>();
    for (Batch b : dl) {
      try (Batch batch = b; Tensor x = batch.inputs(); Tensor y = batch.labels()) {
        out.add(java.util.Arrays.toString(x.toLongArray()) + java.util.Arrays.toString(y.toLongArray()));
      }
    }
    return out;
  }

  @Test
  void tokenFileEqualsFromTokens() throws Exception {
    int n = 300;
    long[] tokens = new long[n];
    ByteBuffer bytes = ByteBuffer.allocate(2 * n).order(ByteOrder.LITTLE_ENDIAN);
    for (int i = 0; i < n; ++i) {
      tokens[i] = (i * 7919L + 3) % 1000;
      bytes.putShort((short) tokens[i]);
    }
    Path file = Files.createTempFile("accel_java_tokens", ".bin");
    Files.write(file, bytes.array());
    String keys = "\"block_size\": 8, \"batch_size\": 4, \"shuffle\": true, \"seed\": 3";
    try (Tensor t = Tensor.of(tokens, n);
         DataLoader memory = DataLoader.fromTokens(t, "{" + keys + "}");
         DataLoader files = DataLoader.fromFiles(
             "{\"format\": \"tokens\", \"files\": \"" + file + "\", \"dtype\": \"uint16\", " + keys + "}")) {
      assertEquals(memory.length(), files.length());
      List<String> want = pass(memory);
      assertEquals(want, pass(files));
      assertEquals(want.size(), memory.length());
    } finally {
      Files.deleteIfExists(file);
    }
    NotFoundError e = assertThrows(NotFoundError.class, () -> DataLoader.fromFiles(
        "{\"format\": \"tokens\", \"files\": \"/nonexistent/java.bin\", \"dtype\": \"uint16\", \"block_size\": 4}"));
    assertTrue(e.getMessage().contains("/nonexistent/java.bin"), e.getMessage());
  }
}
