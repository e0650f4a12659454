package org.accel;

/** ACCEL_ERR_DATA_LOSS: corrupt or truncated data. */
public class DataLossError extends AccelError {
  private static final long serialVersionUID = 1L;

  public DataLossError(String message, int status) {
    super(message, status);
  }
}
