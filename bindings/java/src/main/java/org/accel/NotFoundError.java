package org.accel;

/** ACCEL_ERR_NOT_FOUND: missing checkpoint, file or key. */
public class NotFoundError extends AccelError {
  private static final long serialVersionUID = 1L;

  public NotFoundError(String message, int status) {
    super(message, status);
  }
}
