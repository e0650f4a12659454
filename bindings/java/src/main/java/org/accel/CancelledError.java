package org.accel;

/** ACCEL_ERR_CANCELLED: a callback asked to stop. */
public class CancelledError extends AccelError {
  private static final long serialVersionUID = 1L;

  public CancelledError(String message, int status) {
    super(message, status);
  }
}
