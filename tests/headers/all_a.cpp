/* Includes everything twice over two translation units: a definition in a header would not link. */
#include <accel/accel.h>
#include <accel/accel.h>

int accel_headers_other(void);

int main(void)
{
    /* Version macros and the run-time values agree. */
    if (accel_version_number() != ACCEL_VERSION_NUMBER || accel_abi_version() != ACCEL_ABI_VERSION) return 1;
    return accel_headers_other();
}
