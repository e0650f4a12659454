/* big_modeling.i - accel/big_modeling.h: module sizes and device maps (Accelerate's compute_module_sizes,
 * infer_auto_device_map, check_device_map) as methods of Model. Included by accel.i after the classes. */

%extend Model {
    /** Accelerate's infer_auto_device_map: the device map as JSON ({"model.layers.0": 0, ..., "lm_head": "cpu"}).
     *  @p options_json e.g. {"max_memory": {"0": "10GiB", "cpu": "30GiB"}, "no_split_module_classes":
     *  ["LlamaDecoderLayer"], "dtype": "float16", "balanced": false}. Works on an empty ("empty_init") model. */
    std::string infer_auto_device_map(const char *options_json = NULL)
    {
        char *out = NULL;
        ACCEL_CHECK(accel_model_infer_auto_device_map(ACCEL_H($self, "Model"), options_json, &out));
        return accel_swig::owned_string(out);
    }
    /** Accelerate's compute_module_sizes and get_max_layer_size as JSON: {"sizes": {"": total, name: bytes, ...},
     *  "max_layer_size": bytes, "max_layer_names": [...]}. @p options_json e.g. {"dtype": "bfloat16"}. */
    std::string compute_module_sizes(const char *options_json = NULL)
    {
        char *out = NULL;
        ACCEL_CHECK(accel_model_compute_module_sizes(ACCEL_H($self, "Model"), options_json, &out));
        return accel_swig::owned_string(out);
    }
    /** Accelerate's check_device_map: raises unless @p device_map_json gives every tensor a device. */
    void check_device_map(const char *device_map_json)
    {
        ACCEL_CHECK(accel_model_check_device_map(ACCEL_H($self, "Model"), device_map_json));
    }
}
