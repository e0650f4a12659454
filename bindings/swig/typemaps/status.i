/* typemaps/status.i - accel_status_t -> exception, one shared dispatcher.
 *
 * Every wrapped method body calls ACCEL_CHECK(accel_...(...)). A non-zero status is recorded, with a copy of
 * accel_last_error_message(), in a per-thread "pending" slot; the first failure of a call wins. After the
 * call returns, the language's %exception block (python/accel_python.i, java/accel_java.i,
 * csharp/accel_csharp.i) turns a pending status into that language's exception: AccelError or the
 * subclass for the status (unknown codes -> AccelError). Nothing here depends on the target language. */

%{
#include <accel/accel.h>
#include <string>

namespace accel_swig {

struct Pending {
    accel_status_t status = ACCEL_OK;
    std::string message;
};

/* Per thread: Python releases the GIL around calls, so two threads may be inside the library at once. */
inline Pending &pending()
{
    static thread_local Pending p;
    return p;
}

inline void reset()
{
    Pending &p = pending();
    p.status = ACCEL_OK;
    p.message.clear();
}

/* Records a failure unless one is already pending (the first cause is the useful one). */
inline void fail(accel_status_t status, const char *message)
{
    Pending &p = pending();
    if (p.status == ACCEL_OK) {
        p.status = status;
        p.message = message ? message : "";
    }
}

/* Returns true when @p status is ACCEL_OK; otherwise records it with the thread's last error message. */
inline bool check(accel_status_t status)
{
    if (status == ACCEL_OK)
        return true;
    fail(status, accel_last_error_message());
    return false;
}

inline bool failed() { return pending().status != ACCEL_OK; }

/* Exception class names, by status, shared by every language (Python adds "accel.errors.", Java
 * "org/accel/", C# "Accel."). Index = status code; unknown codes use "AccelError". */
inline const char *error_class_name(accel_status_t status)
{
    static const char *const names[] = {
        "AccelError",             /* 0: never raised */
        "CancelledError",         /* 1 */
        "UnknownError",           /* 2 */
        "InvalidArgumentError",   /* 3 */
        "DeadlineExceededError",  /* 4 */
        "NotFoundError",          /* 5 */
        "AlreadyExistsError",     /* 6 */
        "PermissionDeniedError",  /* 7 */
        "ResourceExhaustedError", /* 8 */
        "FailedPreconditionError",/* 9 */
        "AbortedError",           /* 10 */
        "OutOfRangeError",        /* 11 */
        "UnimplementedError",     /* 12 */
        "InternalError",          /* 13 */
        "UnavailableError",       /* 14 */
        "DataLossError",          /* 15 */
    };
    if (status <= 0 || status >= (accel_status_t)(sizeof names / sizeof names[0]))
        return "AccelError";
    return names[status];
}

} // namespace accel_swig

#define ACCEL_CHECK(expr) accel_swig::check((expr))
%}
