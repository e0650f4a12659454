package org.accel;

/** A non-zero accel_status_t. Each status has a subclass; unknown codes are plain AccelError. */
public class AccelError extends RuntimeException implements AccelException {
  private static final long serialVersionUID = 1L;
  private static final String[] NAMES = {
    "ACCEL_OK", "ACCEL_ERR_CANCELLED", "ACCEL_ERR_UNKNOWN", "ACCEL_ERR_INVALID_ARGUMENT",
    "ACCEL_ERR_DEADLINE_EXCEEDED", "ACCEL_ERR_NOT_FOUND", "ACCEL_ERR_ALREADY_EXISTS",
    "ACCEL_ERR_PERMISSION_DENIED", "ACCEL_ERR_RESOURCE_EXHAUSTED", "ACCEL_ERR_FAILED_PRECONDITION",
    "ACCEL_ERR_ABORTED", "ACCEL_ERR_OUT_OF_RANGE", "ACCEL_ERR_UNIMPLEMENTED", "ACCEL_ERR_INTERNAL",
    "ACCEL_ERR_UNAVAILABLE", "ACCEL_ERR_DATA_LOSS",
  };

  private final int status;

  public AccelError(String message, int status) {
    super(message);
    this.status = status;
  }

  @Override
  public int getStatus() {
    return status;
  }

  static String statusName(int status) {
    return status >= 0 && status < NAMES.length ? NAMES[status] : "ACCEL_ERR_UNRECOGNIZED";
  }
}
