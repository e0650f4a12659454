package org.accel;

/** ACCEL_ERR_PERMISSION_DENIED: file system permissions. */
public class PermissionDeniedError extends AccelError {
  private static final long serialVersionUID = 1L;

  public PermissionDeniedError(String message, int status) {
    super(message, status);
  }
}
