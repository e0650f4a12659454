package org.accel;

/** ACCEL_ERR_INVALID_ARGUMENT: NULL handle, bad JSON, unknown key, wrong type, dtype or shape. */
public class InvalidArgumentError extends IllegalArgumentException implements AccelException {
  private static final long serialVersionUID = 1L;
  private final int status;

  public InvalidArgumentError(String message, int status) {
    super(message);
    this.status = status;
  }

  @Override
  public int getStatus() {
    return status;
  }
}
