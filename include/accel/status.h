/** @file
 * status codes and the per-thread error message. */
#ifndef ACCEL_STATUS_H
#define ACCEL_STATUS_H

#include <accel/common.h>

ACCEL_BEGIN_DECLS

/** Every fallible function returns one of these; 0 is success. The set only grows:
 *  treat an unknown value as a generic error. */
typedef int32_t accel_status_t;
/** Values of accel_status_t. */
enum accel_status_enum {
    ACCEL_OK = 0,                      /**< success */
    ACCEL_ERR_CANCELLED = 1,           /**< a callback asked to stop */
    ACCEL_ERR_UNKNOWN = 2,             /**< unclassified failure */
    ACCEL_ERR_INVALID_ARGUMENT = 3,    /**< NULL handle, bad JSON, unknown key, wrong type, dtype or shape */
    ACCEL_ERR_DEADLINE_EXCEEDED = 4,   /**< collective or rendezvous timeout */
    ACCEL_ERR_NOT_FOUND = 5,           /**< missing checkpoint, file or key */
    ACCEL_ERR_ALREADY_EXISTS = 6,      /**< output exists and overwriting is off */
    ACCEL_ERR_PERMISSION_DENIED = 7,   /**< file system permissions */
    ACCEL_ERR_RESOURCE_EXHAUSTED = 8,  /**< out of memory */
    ACCEL_ERR_FAILED_PRECONDITION = 9, /**< wrong call order, object not prepared, bound elsewhere */
    ACCEL_ERR_ABORTED = 10,            /**< the accelerator already failed */
    ACCEL_ERR_OUT_OF_RANGE = 11,       /**< index or step beyond bounds */
    ACCEL_ERR_UNIMPLEMENTED = 12,      /**< feature not built yet or not compiled in */
    ACCEL_ERR_INTERNAL = 13,           /**< bug or unexpected LibTorch error */
    ACCEL_ERR_UNAVAILABLE = 14,        /**< peer process or communication backend lost */
    ACCEL_ERR_DATA_LOSS = 15           /**< corrupt or truncated data */
};

/**
 * The message of the calling thread's last failed accel_* call; "" after a
 * successful call. Never NULL. Valid until the next accel_* call on this thread.
 * Threads: safe from any thread (per-thread storage).
 *
 * @return The message, in thread-local storage owned by the library: never free it.
 * Ownership: takes no pointer; returns a value.
 */
ACCEL_API const char *accel_last_error_message(void) ACCEL_NOEXCEPT;

/**
 * Static name of a status ("ACCEL_ERR_INVALID_ARGUMENT"); "ACCEL_ERR_UNRECOGNIZED" for unknown values.
 *
 * @param status  Any value.
 * @return A static string: never free it.
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: safe from any thread.
 */
ACCEL_API const char *accel_status_name(accel_status_t status) ACCEL_NOEXCEPT;

/**
 * Frees a string the library handed out through a `char **out` parameter. NULL is fine.
 *
 * @param str  A string from a `char **out` parameter, or NULL.
 * Ownership: takes @p str: it must not be used after the call.
 * Threads: safe from any thread.
 */
ACCEL_API void accel_string_free(char *str) ACCEL_NOEXCEPT;

ACCEL_END_DECLS

#endif /* ACCEL_STATUS_H */
