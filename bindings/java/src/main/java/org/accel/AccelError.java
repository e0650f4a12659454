package org.accel;

/**
 * A non-zero accel_status_t: the base of every exception accel throws. Each status has a subclass
 * (InvalidArgumentError, NotFoundError, ...); codes this version does not know are plain AccelError.
 * The message is the library's (accel_last_error_message()), naming the argument or JSON path.
 */
public class AccelError extends RuntimeException {
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

  /** The accel_status_t code (for example 3 for ACCEL_ERR_INVALID_ARGUMENT). */
  public int getStatus() {
    return status;
  }

  /** The status name, for example "ACCEL_ERR_INVALID_ARGUMENT". */
  public String getStatusName() {
    return status >= 0 && status < NAMES.length ? NAMES[status] : "ACCEL_ERR_UNRECOGNIZED";
  }
}
