package org.accel;

/** ACCEL_ERR_ABORTED: the accelerator already failed. */
public class AbortedError extends AccelError {
  private static final long serialVersionUID = 1L;

  public AbortedError(String message, int status) {
    super(message, status);
  }
}
