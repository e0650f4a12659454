package org.accel;

import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * Routes libaccel's messages (its own warnings included, and {@link Accel#logWrite}'s) to java.util.logging:
 * each goes to {@code Logger.getLogger(name)} ("accel" for the library's own) at the matching level. SLF4J users
 * bridge java.util.logging as usual (jul-to-slf4j). Call {@link #install()} once, before the first Accelerator.
 */
public final class AccelLogging {
  private AccelLogging() {}

  // The library keeps only a pointer to the callback: this reference keeps it alive while installed.
  private static LogCallback installed;

  /** Python logging's numbers (accel/log.h) as java.util.logging levels. */
  public static Level toLevel(int level) {
    if (level >= 40) return Level.SEVERE; // ERROR, CRITICAL
    if (level >= 30) return Level.WARNING;
    if (level >= 20) return Level.INFO;
    if (level >= 10) return Level.FINE; // DEBUG
    return Level.FINEST;
  }

  /** Send every message to java.util.logging; with several processes the text starts "[rank&lt;i&gt;] ". */
  public static synchronized void install() {
    final boolean several = Accel.processCount() > 1;
    LogCallback callback = new LogCallback() {
      @Override
      public void onMessage(int level, String name, int processIndex, String message) {
        Logger logger = Logger.getLogger(name);
        Level l = toLevel(level);
        if (logger.isLoggable(l)) logger.log(l, several ? "[rank" + processIndex + "] " + message : message);
      }
    };
    Accel.logSetCallback(callback);
    installed = callback;
  }

  /** Back to standard error. */
  public static synchronized void uninstall() {
    Accel.logSetCallback(null);
    installed = null;
  }
}
