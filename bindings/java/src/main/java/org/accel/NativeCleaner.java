package org.accel;

import java.lang.ref.Cleaner;
import java.util.function.LongConsumer;

/**
 * Frees the native object behind each proxy class (Tensor, Model, ...) through {@link Cleaner} instead of
 * the deprecated {@code finalize()}: {@code close()} runs the cleaning action now, and a proxy that was never
 * closed is freed after it becomes unreachable. {@link Cleaner.Cleanable#clean()} runs an action at most
 * once, so close() followed by a collection (or close() twice) frees the native object once.
 */
final class NativeCleaner {
  /** One daemon thread for every proxy of the package. */
  private static final Cleaner CLEANER = Cleaner.create();

  private NativeCleaner() {}

  /**
   * The cleaning action: the native pointer, whether Java owns it, and the JNI function freeing it. It must
   * not reference the proxy (the proxy would never become unreachable), so it holds the pointer by value.
   */
  static final class Owner implements Runnable {
    private final LongConsumer free;
    private long ptr;
    private boolean owned;
    private int frees;

    Owner(long ptr, boolean owned, LongConsumer free) {
      this.ptr = ptr;
      this.owned = owned;
      this.free = free;
    }

    /** Directors hand ownership to C++ and back (swigReleaseOwnership / swigTakeOwnership). */
    synchronized void setOwned(boolean owned) {
      this.owned = owned;
    }

    @Override
    public synchronized void run() {
      long p = ptr;
      boolean own = owned;
      ptr = 0;
      owned = false;
      if (p != 0 && own) {
        free.accept(p);
        ++frees;
      }
    }

    /** How many times this action freed its object: 0 or 1 (read by the tests). */
    synchronized int frees() {
      return frees;
    }
  }

  /** Registers {@code owner} to run when {@code proxy} becomes unreachable or when the result is cleaned. */
  static Cleaner.Cleanable register(Object proxy, Owner owner) {
    return CLEANER.register(proxy, owner);
  }
}
