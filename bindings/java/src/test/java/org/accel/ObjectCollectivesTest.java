package org.accel;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.List;
import org.junit.jupiter.api.Test;

/** Object collectives in one process (several processes: tests/distributed/dist_objects.c): bytes and JSON. */
class ObjectCollectivesTest {
  static byte[] utf8(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  @Test
  void bytesComeBackAsSent() {
    try (Accelerator acc = new Accelerator()) {
      List<byte[]> all = acc.gatherObject(new byte[] {1, 0, 2});
      assertEquals(1, all.size());
      assertArrayEquals(new byte[] {1, 0, 2}, all.get(0));
      assertArrayEquals(new byte[0], acc.gatherObject(new byte[0]).get(0));
      assertArrayEquals(utf8("xyz"), acc.broadcastObject(utf8("xyz"), 0));
      List<byte[]> list = acc.broadcastObjectList(List.of(utf8("alpha"), new byte[0]), 0);
      assertEquals(2, list.size());
      assertArrayEquals(utf8("alpha"), list.get(0));
      assertEquals(0, list.get(1).length);
      assertEquals("[1, {\"a\": 2}]", acc.gatherObjectJson("[1, {\"a\": 2}]"));
      assertEquals("{\"k\": [true]}", acc.broadcastObjectJson("{\"k\": [true]}", 0));
    }
  }

  @Test
  void badInputsAreNamed() {
    try (Accelerator acc = new Accelerator()) {
      InvalidArgumentError e = assertThrows(InvalidArgumentError.class, () -> acc.gatherObjectJson("{\"a\": 1}"));
      assertTrue(e.getMessage().contains("expected a JSON array"), e.getMessage());
      assertThrows(InvalidArgumentError.class, () -> acc.broadcastObjectJson("[1,", 0));
      assertThrows(OutOfRangeError.class, () -> acc.broadcastObject(utf8("x"), 1));
    }
  }
}
