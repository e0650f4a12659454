package org.accel;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.logging.Handler;
import java.util.logging.Level;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/** libaccel's messages routed to java.util.logging (AccelLogging), the level and logWrite's filters. */
class LoggingTest {
  static final class Records extends Handler {
    final List<LogRecord> records = new ArrayList<>();
    Logger logger; // held: java.util.logging keeps loggers only weakly, and a collected one loses its handler
    @Override public synchronized void publish(LogRecord r) { records.add(r); }
    @Override public void flush() {}
    @Override public void close() {}
  }

  @AfterEach
  void restore() {
    AccelLogging.uninstall();
    Accel.logSetLevel(30);
  }

  private static Records attach(String name) {
    Records h = new Records();
    Logger logger = Logger.getLogger(name);
    logger.setLevel(Level.ALL);
    logger.addHandler(h);
    h.logger = logger;
    return h;
  }

  @Test
  void messagesReachJavaUtilLogging() {
    Records train = attach("accel_test.train");
    AccelLogging.install();
    Accel.logSetLevel(20);
    assertEquals(20, Accel.logGetLevel());
    Accel.logWrite(null, "accel_test.train", 20, "epoch 3", true, false);
    Accel.logWrite(null, "accel_test.train", 10, "hidden", false, false);
    try (Accelerator acc = new Accelerator()) {
      Accel.logWrite(acc, "accel_test.train", 40, "ordered", false, true);
    }
    assertEquals(2, train.records.size());
    assertEquals(Level.INFO, train.records.get(0).getLevel());
    assertEquals("epoch 3", train.records.get(0).getMessage());
    assertEquals(Level.SEVERE, train.records.get(1).getLevel());
    assertEquals("ordered", train.records.get(1).getMessage());
  }

  @Test
  void libraryWarningsUseLoggerAccel() throws Exception {
    Records own = attach("accel");
    AccelLogging.install();
    java.nio.file.Path dir = java.nio.file.Files.createTempDirectory("accel-log");
    try (Accelerator acc = new Accelerator();
         Model small = Model.fromJson("{\"type\": \"mlp\", \"widths\": [6, 16, 3]}");
         Model big = Model.fromJson("{\"type\": \"mlp\", \"widths\": [6, 16, 3, 3]}")) {
      acc.saveModel(small, dir.toString());
      big.loadCheckpoint(dir.toString());
    }
    assertEquals(1, own.records.size());
    assertEquals(Level.WARNING, own.records.get(0).getLevel());
    assertTrue(own.records.get(0).getMessage().contains("4.weight"));
  }

  @Test
  void badLevelsAreRefused() {
    assertThrows(InvalidArgumentError.class, () -> Accel.logSetLevel(99));
    assertThrows(InvalidArgumentError.class, () -> Accel.logWrite(null, "x", 0, "m", true, false));
  }
}
