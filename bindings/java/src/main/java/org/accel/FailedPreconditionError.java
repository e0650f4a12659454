package org.accel;

/** ACCEL_ERR_FAILED_PRECONDITION: wrong call order, object not prepared or closed. */
public class FailedPreconditionError extends AccelError {
  private static final long serialVersionUID = 1L;

  public FailedPreconditionError(String message, int status) {
    super(message, status);
  }
}
