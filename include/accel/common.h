/** @file
 * export, linkage and attribute macros shared by every public header. */
#ifndef ACCEL_COMMON_H
#define ACCEL_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(SWIG) || defined(ACCEL_STATIC)
#  define ACCEL_API
#elif defined(_WIN32)
#  if defined(ACCEL_BUILDING)
#    define ACCEL_API __declspec(dllexport)
#  else
#    define ACCEL_API __declspec(dllimport)
#  endif
#elif defined(__GNUC__) || defined(__clang__)
#  define ACCEL_API __attribute__((visibility("default")))
#else
#  define ACCEL_API
#endif

#ifdef __cplusplus
#  define ACCEL_BEGIN_DECLS extern "C" {
#  define ACCEL_END_DECLS }
#  define ACCEL_NOEXCEPT noexcept
#else
#  define ACCEL_BEGIN_DECLS
#  define ACCEL_END_DECLS
#  define ACCEL_NOEXCEPT
#endif

#if defined(SWIG)
#  define ACCEL_NODISCARD
#  define ACCEL_DEPRECATED(msg)
#elif defined(__GNUC__) || defined(__clang__)
#  define ACCEL_NODISCARD __attribute__((warn_unused_result))
#  define ACCEL_DEPRECATED(msg) __attribute__((deprecated(msg)))
#else
#  define ACCEL_NODISCARD
#  define ACCEL_DEPRECATED(msg)
#endif

/**
 * @def ACCEL_API
 * Marks a declaration as part of the library's interface: default visibility on GCC and Clang, dllexport while
 * building the library (ACCEL_BUILDING) and dllimport otherwise on Windows; empty for ACCEL_STATIC and SWIG.
 *
 * @def ACCEL_BEGIN_DECLS
 * `extern "C" {` in C++, empty in C: the headers declare C functions in both languages.
 *
 * @def ACCEL_END_DECLS
 * Closes ACCEL_BEGIN_DECLS.
 *
 * @def ACCEL_NOEXCEPT
 * `noexcept` in C++, empty in C: no function lets an exception cross the ABI.
 *
 * @def ACCEL_NODISCARD
 * Warns when a caller ignores the returned status (GCC, Clang).
 *
 * @def ACCEL_DEPRECATED(msg)
 * Marks a declaration as deprecated, with @p msg naming its replacement (GCC, Clang).
 */

#endif /* ACCEL_COMMON_H */
