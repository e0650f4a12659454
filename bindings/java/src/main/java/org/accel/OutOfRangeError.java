package org.accel;

/** ACCEL_ERR_OUT_OF_RANGE: index or step beyond bounds. */
public class OutOfRangeError extends AccelError {
  private static final long serialVersionUID = 1L;

  public OutOfRangeError(String message, int status) {
    super(message, status);
  }
}
