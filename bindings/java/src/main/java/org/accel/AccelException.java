package org.accel;

/**
 * Implemented by every exception accel throws: {@link AccelError} and its subclasses, and
 * {@link InvalidArgumentError} (an {@link IllegalArgumentException}; Java allows one superclass).
 * Catch both with {@code catch (AccelError | InvalidArgumentError e)}, or catch {@code RuntimeException}
 * and test {@code instanceof AccelException}.
 */
public interface AccelException {
  /** The accel_status_t code (for example 3 for ACCEL_ERR_INVALID_ARGUMENT). */
  int getStatus();

  /** The status name, for example "ACCEL_ERR_INVALID_ARGUMENT". */
  default String getStatusName() {
    return AccelError.statusName(getStatus());
  }

  /** The library's message (accel_last_error_message()), naming the argument or JSON path. */
  String getMessage();
}
