package org.accel;

/** ACCEL_ERR_UNAVAILABLE: peer process or communication backend lost. */
public class UnavailableError extends AccelError {
  private static final long serialVersionUID = 1L;

  public UnavailableError(String message, int status) {
    super(message, status);
  }
}
