package org.accel;

/** ACCEL_ERR_ALREADY_EXISTS: output exists and overwriting is off. */
public class AlreadyExistsError extends AccelError {
  private static final long serialVersionUID = 1L;

  public AlreadyExistsError(String message, int status) {
    super(message, status);
  }
}
