#include <accel/accel.h>

int accel_headers_other(void)
{
    accel_accelerator_t *acc = 0;
    accel_status_t st = accel_accelerator_create(0, &acc);
    accel_accelerator_free(acc);
    return st == ACCEL_OK ? 0 : 1;
}
