package org.accel;

/** ACCEL_ERR_INTERNAL: bug or unexpected LibTorch error. */
public class InternalError extends AccelError {
  private static final long serialVersionUID = 1L;

  public InternalError(String message, int status) {
    super(message, status);
  }
}
