package org.accel;

/** ACCEL_ERR_INVALID_ARGUMENT: NULL handle, bad JSON, unknown key, wrong type, dtype or shape. */
public class InvalidArgumentError extends AccelError {
  private static final long serialVersionUID = 1L;

  public InvalidArgumentError(String message, int status) {
    super(message, status);
  }
}
