/* A program outside the accel tree that only sees the installed headers and library. */
#include <accel/accel.h>

#include <stdio.h>

int main(void)
{
    accel_accelerator_t *acc = NULL;
    accel_status_t st = accel_accelerator_create("{\"gradient_accumulation_steps\": 2}", &acc);
    if (st != ACCEL_OK) {
        fprintf(stderr, "%s: %s\n", accel_status_name(st), accel_last_error_message());
        return 1;
    }
    printf("accel %s (ABI %d) works from an installed prefix\n", accel_version_string(), accel_abi_version());
    accel_accelerator_free(acc);
    return 0;
}
