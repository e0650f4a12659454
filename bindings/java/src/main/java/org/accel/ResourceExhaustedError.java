package org.accel;

/** ACCEL_ERR_RESOURCE_EXHAUSTED: out of memory. */
public class ResourceExhaustedError extends AccelError {
  private static final long serialVersionUID = 1L;

  public ResourceExhaustedError(String message, int status) {
    super(message, status);
  }
}
