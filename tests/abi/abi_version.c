/* The soname carries the ABI version, and the version macros equal the run-time values. */
#include <accel/accel.h>

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    char want[64];
    int failures = 0;
    snprintf(want, sizeof want, "libaccel.so.%d", ACCEL_ABI_VERSION);
    if (argc < 2 || strcmp(argv[1], want) != 0) {
        fprintf(stderr, "soname %s, expected %s\n", argc > 1 ? argv[1] : "(none)", want);
        ++failures;
    }
    if (accel_abi_version() != ACCEL_ABI_VERSION) ++failures;
    if (accel_version_number() != ACCEL_VERSION_NUMBER) ++failures;
    if (strcmp(accel_version_string(), ACCEL_VERSION_STRING) != 0) ++failures;
    if (ACCEL_VERSION_NUMBER != ACCEL_VERSION_MAJOR * 1000000 + ACCEL_VERSION_MINOR * 1000 + ACCEL_VERSION_PATCH)
        ++failures;
    printf("abi_version: %d checks, %d failed\n", 5, failures);
    return failures == 0 ? 0 : 1;
}
