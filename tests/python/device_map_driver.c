/* The accel side of device_map_reference.py, through the public C API:
 *   device_map_driver infer SPEC_JSON OPTIONS_JSON   prints accel_model_infer_auto_device_map's map
 *   device_map_driver sizes SPEC_JSON OPTIONS_JSON   prints accel_model_compute_module_sizes' answer
 * The model is built from SPEC_JSON with "empty_init": true added by the caller. Exit 1 with the message on failure. */
#include <accel/accel.h>

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc != 4 || (strcmp(argv[1], "infer") != 0 && strcmp(argv[1], "sizes") != 0)) {
        fprintf(stderr, "usage: device_map_driver infer|sizes SPEC_JSON OPTIONS_JSON\n");
        return 2;
    }
    accel_model_t *model = NULL;
    char *out = NULL;
    accel_status_t st = accel_model_create_from_json(argv[2], &model);
    if (st == ACCEL_OK)
        st = strcmp(argv[1], "infer") == 0 ? accel_model_infer_auto_device_map(model, argv[3], &out)
                                           : accel_model_compute_module_sizes(model, argv[3], &out);
    if (st != ACCEL_OK) {
        fprintf(stderr, "%s: %s\n", accel_status_name(st), accel_last_error_message());
        accel_model_free(model);
        return 1;
    }
    printf("%s\n", out);
    accel_string_free(out);
    accel_model_free(model);
    return 0;
}
