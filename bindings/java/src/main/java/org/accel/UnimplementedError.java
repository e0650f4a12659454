package org.accel;

/** ACCEL_ERR_UNIMPLEMENTED: feature not built yet or not compiled in. */
public class UnimplementedError extends AccelError {
  private static final long serialVersionUID = 1L;

  public UnimplementedError(String message, int status) {
    super(message, status);
  }
}
