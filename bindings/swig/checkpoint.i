/* checkpoint.i - accel/checkpoint.h: save_state / load_state (with options), save_model, loading weights,
 * byte blobs registered for checkpointing (helpers in typemaps/blobs.i). Included by accel.i after the classes.
 *
 * Not wrapped: accel_accelerator_register_for_checkpointing (C callbacks would need SWIG directors in
 * three languages); register_bytes_for_checkpointing + get_checkpointing_bytes cover custom state. */

%extend Accelerator {
    /** Save the state (Accelerate's checkpoint layout) into @p output_dir (null/None: the next automatic
     *  checkpoint folder); @p options_json e.g. {"safe_serialization": false}. Returns the folder written. */
    std::string save_state(const char *output_dir = NULL, const char *options_json = NULL)
    {
        char *dir = NULL;
        ACCEL_CHECK(accel_accelerator_save_state_with_options(ACCEL_H($self, "Accelerator"), output_dir, options_json,
                                                              &dir));
        return accel_swig::owned_string(dir);
    }
    /** Load state saved by save_state() (null/None: the newest automatic checkpoint); @p options_json e.g.
     *  {"strict": false}. Returns the folder loaded. */
    std::string load_state(const char *input_dir = NULL, const char *options_json = NULL)
    {
        char *dir = NULL;
        ACCEL_CHECK(accel_accelerator_load_state_with_options(ACCEL_H($self, "Accelerator"), input_dir, options_json,
                                                              &dir));
        return accel_swig::owned_string(dir);
    }
    /** Automatic resume: load the newest complete automatic checkpoint; false (nothing loaded) on a fresh
     *  start. Needs project_config.automatic_checkpoint_naming. */
    bool load_latest_state()
    {
        bool found = false;
        ACCEL_CHECK(accel_accelerator_load_latest_state(ACCEL_H($self, "Accelerator"), &found));
        return found;
    }
    /** Wait for the asynchronous save_state ({"async": true}) in progress, if any; raises its failure. */
    void wait_for_checkpoint()
    {
        ACCEL_CHECK(accel_accelerator_wait_for_checkpoint(ACCEL_H($self, "Accelerator")));
    }
    /** Save @p model's weights for inference (model.safetensors, or shards and an index beyond
     *  {"max_shard_size": "200MB"}). */
    void save_model(const Model *model, const char *save_directory, const char *options_json = NULL)
    {
        ACCEL_CHECK(accel_accelerator_save_model(ACCEL_H($self, "Accelerator"), ACCEL_H(model, "Model"), save_directory,
                                                 options_json));
    }
    /** The number the next automatic checkpoint gets (ProjectConfiguration.iteration). */
    int64_t project_iteration() const
    {
        int64_t v = 0;
        ACCEL_CHECK(accel_accelerator_get_project_iteration(ACCEL_H($self, "Accelerator"), &v));
        return v;
    }
    /** Size in bytes of the blob registered at @p index; prefer get_checkpointing_bytes(). */
    int64_t checkpointing_bytes_size(int32_t index) const
    {
        return (int64_t)accel_swig::checkpointing_bytes_size(ACCEL_H($self, "Accelerator"), index);
    }
#if defined(SWIGPYTHON)
    /** Register a byte blob (any buffer) saved by save_state and replaced by load_state; returns its index. */
    int32_t register_bytes_for_checkpointing(const void *IN_BYTES, size_t IN_NBYTES)
    {
        return accel_swig::register_bytes(ACCEL_H($self, "Accelerator"), IN_BYTES, IN_NBYTES);
    }
    /** Copy the blob at @p index into a writable buffer of checkpointing_bytes_size(index) bytes. */
    void copy_checkpointing_bytes(int32_t index, void *OUT_BYTES, size_t OUT_NBYTES) const
    {
        accel_swig::copy_checkpointing_bytes(ACCEL_H($self, "Accelerator"), index, OUT_BYTES, OUT_NBYTES);
    }
#else
    /** Register a byte blob saved by save_state and replaced by load_state; returns its index. */
    int32_t register_bytes_for_checkpointing(const uint8_t *IN_ARRAY, size_t IN_COUNT)
    {
        return accel_swig::register_bytes(ACCEL_H($self, "Accelerator"), IN_ARRAY, IN_COUNT);
    }
    /** Copy the blob at @p index into an array of checkpointing_bytes_size(index) bytes. */
    void copy_checkpointing_bytes(int32_t index, uint8_t *OUT_ARRAY, size_t OUT_COUNT) const
    {
        accel_swig::copy_checkpointing_bytes(ACCEL_H($self, "Accelerator"), index, OUT_ARRAY, OUT_COUNT);
    }
#endif
}

%newobject Model::from_pretrained;
%extend Model {
    /** A model from a Hugging Face folder (transformers' from_pretrained, no download): config.json's
     *  model_type (gpt2, llama, mistral, qwen2) picks the model; the weights come from model.safetensors, shards
     *  with model.safetensors.index.json, or pytorch_model.bin. @p options_json e.g. {"strict": false,
     *  "torch_dtype": "bfloat16"} (not strict: what did not match is printed as a warning). */
    static Model *from_pretrained(const char *path, const char *options_json = NULL)
    {
        accel_model_t *m = NULL;
        ACCEL_CHECK(accel_model_from_pretrained(path, options_json, &m));
        return accel_swig::wrap<Model>(m);
    }
    /** Write a Hugging Face folder (config.json and safetensors, sharded by max_shard_size with the index) that
     *  transformers' from_pretrained loads; a prepared model is gathered on the main process (every process
     *  calls this). @p options_json e.g. {"max_shard_size": "200MB", "safe_serialization": false}. */
    void save_pretrained(const char *path, const char *options_json = NULL)
    {
        ACCEL_CHECK(accel_model_save_pretrained(ACCEL_H($self, "Model"), path, options_json));
    }
    /** Load weights from a .safetensors / torch.save file or a (sharded) checkpoint folder;
     *  @p options_json e.g. {"strict": true, "dtype": "bfloat16"}. */
    void load_checkpoint(const char *path, const char *options_json = NULL)
    {
        ACCEL_CHECK(accel_model_load_checkpoint(ACCEL_H($self, "Model"), path, options_json));
    }
    /** load_checkpoint(), returning what did not match as JSON: {"missing_keys": [...], "unexpected_keys":
     *  [...], "tied_keys": [{"key": "lm_head.weight", "loaded_into": "wte.weight"}]} (empty lists when the file
     *  matched the model exactly). */
    std::string load_checkpoint_with_report(const char *path, const char *options_json = NULL)
    {
        char *out = NULL;
        ACCEL_CHECK(accel_model_load_checkpoint_with_report(ACCEL_H($self, "Model"), path, options_json, &out));
        return accel_swig::owned_string(out);
    }
}

%inline %{
/** Join sharded weights (save_model shards with an index, or a SHARDED_STATE_DICT checkpoint) into one file,
 *  as accelerate.utils.merge_fsdp_weights; @p options_json e.g. {"safe_serialization": false}. Returns the
 *  file written. */
std::string merge_weights(const char *checkpoint_dir, const char *output_path, const char *options_json = NULL)
{
    char *out = NULL;
    ACCEL_CHECK(accel_checkpoint_merge_weights(checkpoint_dir, output_path, options_json, &out, NULL));
    return accel_swig::owned_string(out);
}
%}
