package org.accel;

/** ACCEL_ERR_UNKNOWN: unclassified failure. */
public class UnknownError extends AccelError {
  private static final long serialVersionUID = 1L;

  public UnknownError(String message, int status) {
    super(message, status);
  }
}
