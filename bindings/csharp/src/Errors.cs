// Exceptions thrown by the accel bindings: one class per accel_status_t code.
using System;

namespace Accel
{
    /// <summary>A non-zero accel_status_t: the base of every accel exception, with one subclass per status
    /// (codes this version does not know are plain AccelError). Message is the library's, naming the
    /// argument or the JSON path.</summary>
    public class AccelError : Exception
    {
        static readonly string[] Names = {
            "ACCEL_OK", "ACCEL_ERR_CANCELLED", "ACCEL_ERR_UNKNOWN", "ACCEL_ERR_INVALID_ARGUMENT",
            "ACCEL_ERR_DEADLINE_EXCEEDED", "ACCEL_ERR_NOT_FOUND", "ACCEL_ERR_ALREADY_EXISTS",
            "ACCEL_ERR_PERMISSION_DENIED", "ACCEL_ERR_RESOURCE_EXHAUSTED", "ACCEL_ERR_FAILED_PRECONDITION",
            "ACCEL_ERR_ABORTED", "ACCEL_ERR_OUT_OF_RANGE", "ACCEL_ERR_UNIMPLEMENTED", "ACCEL_ERR_INTERNAL",
            "ACCEL_ERR_UNAVAILABLE", "ACCEL_ERR_DATA_LOSS",
        };

        public AccelError(string message, int status) : base(message) { Status = status; }
        /// <summary>The accel_status_t code.</summary>
        public int Status { get; }
        /// <summary>The status name, e.g. "ACCEL_ERR_INVALID_ARGUMENT".</summary>
        public string StatusName => NameOf(Status);

        internal static string NameOf(int status) =>
            status >= 0 && status < Names.Length ? Names[status] : "ACCEL_ERR_UNRECOGNIZED";

        /// <summary>The exception for a status code (used by the native layer).</summary>
        public static AccelError Create(string message, int status)
        {
            switch (status) {
            case 1: return new CancelledError(message, status);
            case 2: return new UnknownError(message, status);
            case 3: return new InvalidArgumentError(message, status);
            case 4: return new DeadlineExceededError(message, status);
            case 5: return new NotFoundError(message, status);
            case 6: return new AlreadyExistsError(message, status);
            case 7: return new PermissionDeniedError(message, status);
            case 8: return new ResourceExhaustedError(message, status);
            case 9: return new FailedPreconditionError(message, status);
            case 10: return new AbortedError(message, status);
            case 11: return new OutOfRangeError(message, status);
            case 12: return new UnimplementedError(message, status);
            case 13: return new InternalError(message, status);
            case 14: return new UnavailableError(message, status);
            case 15: return new DataLossError(message, status);
            default: return new AccelError(message, status);
            }
        }
    }

    /// <summary>ACCEL_ERR_INVALID_ARGUMENT: NULL handle, bad JSON, unknown key, wrong type, dtype or shape.</summary>
    public class InvalidArgumentError : AccelError { public InvalidArgumentError(string m, int s) : base(m, s) {} }
    public class CancelledError : AccelError { public CancelledError(string m, int s) : base(m, s) {} }
    public class UnknownError : AccelError { public UnknownError(string m, int s) : base(m, s) {} }
    public class DeadlineExceededError : AccelError { public DeadlineExceededError(string m, int s) : base(m, s) {} }
    public class NotFoundError : AccelError { public NotFoundError(string m, int s) : base(m, s) {} }
    public class AlreadyExistsError : AccelError { public AlreadyExistsError(string m, int s) : base(m, s) {} }
    public class PermissionDeniedError : AccelError { public PermissionDeniedError(string m, int s) : base(m, s) {} }
    public class ResourceExhaustedError : AccelError { public ResourceExhaustedError(string m, int s) : base(m, s) {} }
    /// <summary>Wrong call order, object not prepared, or used after Dispose().</summary>
    public class FailedPreconditionError : AccelError { public FailedPreconditionError(string m, int s) : base(m, s) {} }
    public class AbortedError : AccelError { public AbortedError(string m, int s) : base(m, s) {} }
    public class OutOfRangeError : AccelError { public OutOfRangeError(string m, int s) : base(m, s) {} }
    public class UnimplementedError : AccelError { public UnimplementedError(string m, int s) : base(m, s) {} }
    public class InternalError : AccelError { public InternalError(string m, int s) : base(m, s) {} }
    public class UnavailableError : AccelError { public UnavailableError(string m, int s) : base(m, s) {} }
    public class DataLossError : AccelError { public DataLossError(string m, int s) : base(m, s) {} }
}
