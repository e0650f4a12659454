/* dispatch.i - accel/dispatch.h: dispatch with CPU and disk offload (Accelerate's dispatch_model and
 * load_checkpoint_and_dispatch) as methods of Model. Included by accel.i after the classes. */

%extend Model {
    /** Accelerate's dispatch_model: modules where @p device_map_json says ({"model.layers.0": "disk", "": "cpu"});
     *  disk modules live in options' "offload_dir" (Accelerate's offload folder) and are read there layer by layer
     *  during forward_no_grad / generate. @p options_json e.g. {"offload_dir": "/tmp/offload"}. */
    void dispatch(const char *device_map_json, const char *options_json = NULL)
    {
        ACCEL_CHECK(accel_model_dispatch(ACCEL_H($self, "Model"), device_map_json, options_json));
    }
    /** Accelerate's load_checkpoint_and_dispatch: loads @p checkpoint_path, then dispatches with options'
     *  "device_map" (an object) and "offload_folder". */
    void load_checkpoint_and_dispatch(const char *checkpoint_path, const char *options_json = NULL)
    {
        ACCEL_CHECK(accel_model_load_checkpoint_and_dispatch(ACCEL_H($self, "Model"), checkpoint_path, options_json));
    }
}
