"""Exceptions raised by accel: one class per accel_status_t code, all derived from AccelError.

The native module raises ``<Class>(message, status)`` for a non-zero status; the message is the
library's ``accel_last_error_message()`` (it names the argument or the JSON path). Some classes also
derive from the matching built-in exception, so ordinary ``except ValueError`` code works.
"""

__all__ = [
    "AccelError", "CancelledError", "UnknownError", "InvalidArgumentError", "DeadlineExceededError",
    "NotFoundError", "AlreadyExistsError", "PermissionDeniedError", "ResourceExhaustedError",
    "FailedPreconditionError", "AbortedError", "OutOfRangeError", "UnimplementedError", "InternalError",
    "UnavailableError", "DataLossError", "error_class",
]

_STATUS_NAMES = {
    1: "ACCEL_ERR_CANCELLED", 2: "ACCEL_ERR_UNKNOWN", 3: "ACCEL_ERR_INVALID_ARGUMENT",
    4: "ACCEL_ERR_DEADLINE_EXCEEDED", 5: "ACCEL_ERR_NOT_FOUND", 6: "ACCEL_ERR_ALREADY_EXISTS",
    7: "ACCEL_ERR_PERMISSION_DENIED", 8: "ACCEL_ERR_RESOURCE_EXHAUSTED", 9: "ACCEL_ERR_FAILED_PRECONDITION",
    10: "ACCEL_ERR_ABORTED", 11: "ACCEL_ERR_OUT_OF_RANGE", 12: "ACCEL_ERR_UNIMPLEMENTED",
    13: "ACCEL_ERR_INTERNAL", 14: "ACCEL_ERR_UNAVAILABLE", 15: "ACCEL_ERR_DATA_LOSS",
}


class AccelError(Exception):
    """A non-zero accel_status_t. ``status`` is the code, ``status_name`` its name, ``message`` the detail."""

    status = None

    def __init__(self, message="", status=None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status

    @property
    def status_name(self):
        return _STATUS_NAMES.get(self.status, "ACCEL_ERR_UNRECOGNIZED")

    def __str__(self):
        return self.message


def _make(name, code, *bases):
    cls = type(name, (AccelError,) + bases, {"status": code, "__doc__": _STATUS_NAMES[code]})
    cls.__module__ = __name__
    return cls


CancelledError = _make("CancelledError", 1)
UnknownError = _make("UnknownError", 2)
InvalidArgumentError = _make("InvalidArgumentError", 3, ValueError)
DeadlineExceededError = _make("DeadlineExceededError", 4)
NotFoundError = _make("NotFoundError", 5)
AlreadyExistsError = _make("AlreadyExistsError", 6)
PermissionDeniedError = _make("PermissionDeniedError", 7)
ResourceExhaustedError = _make("ResourceExhaustedError", 8, MemoryError)
FailedPreconditionError = _make("FailedPreconditionError", 9)
AbortedError = _make("AbortedError", 10)
OutOfRangeError = _make("OutOfRangeError", 11, IndexError)
UnimplementedError = _make("UnimplementedError", 12, NotImplementedError)
InternalError = _make("InternalError", 13)
UnavailableError = _make("UnavailableError", 14)
DataLossError = _make("DataLossError", 15)

_BY_STATUS = {cls.status: cls for cls in (
    CancelledError, UnknownError, InvalidArgumentError, DeadlineExceededError, NotFoundError,
    AlreadyExistsError, PermissionDeniedError, ResourceExhaustedError, FailedPreconditionError,
    AbortedError, OutOfRangeError, UnimplementedError, InternalError, UnavailableError, DataLossError)}


def error_class(status):
    """The exception class for a status code; AccelError for codes this version does not know."""
    return _BY_STATUS.get(status, AccelError)
