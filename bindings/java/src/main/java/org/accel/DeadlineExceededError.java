package org.accel;

/** ACCEL_ERR_DEADLINE_EXCEEDED: collective or rendezvous timeout. */
public class DeadlineExceededError extends AccelError {
  private static final long serialVersionUID = 1L;

  public DeadlineExceededError(String message, int status) {
    super(message, status);
  }
}
