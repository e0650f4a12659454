/* save.i - accel/checkpoint.h's accel_accelerator_save (Accelerator.save for named tensors, one safetensors
 * file written by the main process only). Included by accel.i after the classes (StateDictEntries). */
%extend Accelerator {
    /** Accelerator.save: the entries' tensors to @p path as safetensors, on the main process only (the others
     *  return at once). */
    void save_entries(const StateDictEntries *entries, const char *path)
    {
        if (entries == NULL) {
            accel_swig::fail(ACCEL_ERR_INVALID_ARGUMENT, "entries: must not be None/null");
            return;
        }
        std::vector<const char *> keys;
        for (const std::string &k : entries->keys)
            keys.push_back(k.c_str());
        ACCEL_CHECK(accel_accelerator_save(ACCEL_H($self, "Accelerator"), keys.data(), entries->tensors.data(),
                                           keys.size(), path));
    }
#if defined(SWIGPYTHON)
%pythoncode %{
    def save(self, tensors, path):
        """Accelerator.save for a dict of name -> Tensor: one safetensors file at ``path``, written by the main
        process only."""
        entries = StateDictEntries()
        for key, tensor in tensors.items():
            entries.add(key, tensor)
        self.save_entries(entries, path)
%}
#endif
}
