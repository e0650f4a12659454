/* state_dict.i - accel/checkpoint.h's accel_accelerator_get_state_dict (Accelerate's get_state_dict(model)) and
 * the accel_state_dict_t it returns. The SWIG layer boxes the state dict (StateDict: count, get_key, get_tensor); each
 * language turns it into its native mapping, in the state dict's order: Python a dict, Java a LinkedHashMap,
 * C# a Dictionary (whose enumeration keeps insertion order while nothing is removed). Included by accel.i after
 * the classes. */
/* In the runtime section: SWIG emits the %extend bodies with the class they extend (Accelerator, declared in
 * accel.i before this file), so the box must be known ahead of the header section. */
%insert("runtime") %{
struct accel_state_dict;
struct StateDict { struct accel_state_dict *h; };
%}

#if defined(SWIGJAVA)
ACCEL_JAVA_CLOSABLE(StateDict)
#elif defined(SWIGCSHARP)
%ignore StateDict::close;
#endif
ACCEL_HANDLE_CLASS(StateDict)
%newobject StateDict::get_tensor;
%extend StateDict {
    ~StateDict() { accel_state_dict_free($self->h); delete $self; }
    /** Free the state dict now (tensors taken from it stay valid); later calls raise FailedPreconditionError. */
    void close() { accel_state_dict_free($self->h); $self->h = NULL; }
    /** Number of entries (0 on the processes that rank0_only leaves out). */
    int64_t count() const
    {
        size_t n = 0;
        const accel_state_dict_t *sd = ACCEL_H($self, "StateDict");
        if (sd)
            ACCEL_CHECK(accel_state_dict_get_count(sd, &n));
        return (int64_t)n;
    }
    /** Key of entry @p index. */
    std::string get_key(int64_t index) const
    {
        const char *s = NULL;
        const accel_state_dict_t *sd = ACCEL_H($self, "StateDict");
        if (sd == NULL)
            return "";
        if (index < 0) {
            accel_swig::fail(ACCEL_ERR_OUT_OF_RANGE, "index: expected >= 0");
            return "";
        }
        ACCEL_CHECK(accel_state_dict_get_key(sd, (size_t)index, &s));
        return accel_swig::borrowed_string(s);
    }
    /** Tensor of entry @p index (a new handle onto the state dict's copy). */
    Tensor *get_tensor(int64_t index) const
    {
        accel_tensor_t *t = NULL;
        const accel_state_dict_t *sd = ACCEL_H($self, "StateDict");
        if (sd == NULL)
            return NULL;
        if (index < 0) {
            accel_swig::fail(ACCEL_ERR_OUT_OF_RANGE, "index: expected >= 0");
            return NULL;
        }
        ACCEL_CHECK(accel_state_dict_get_tensor(sd, (size_t)index, &t));
        return accel_swig::wrap<Tensor>(t);
    }
}

#if defined(SWIGCSHARP)
%csmethodmodifiers Accelerator::get_state_dict_entries "internal";
#endif
%newobject Accelerator::get_state_dict_entries;
%extend Accelerator {
    /** accel_accelerator_get_state_dict: prefer get_state_dict() / getStateDict() / GetStateDict(). */
    StateDict *get_state_dict_entries(const Model *model, const char *options_json = NULL)
    {
        accel_state_dict_t *sd = NULL;
        ACCEL_CHECK(accel_accelerator_get_state_dict(ACCEL_H($self, "Accelerator"), ACCEL_H(model, "Model"),
                                                     options_json, &sd));
        return accel_swig::wrap<StateDict>(sd);
    }
#if defined(SWIGPYTHON)
%pythoncode %{
    def get_state_dict(self, model, unwrap=True, rank0_only=None):
        """Accelerate's ``accelerator.get_state_dict(model, unwrap=True)``: the model's state dict as a dict of
        key -> Tensor (copies, in the model's order). A model sharded by fsdp_plugin / deepspeed_plugin is gathered
        whole first: call it on every process then; with ``rank0_only`` (None: Accelerate's choice, True for FSDP
        and ZeRO-3) the processes other than 0 receive ``{}``."""
        import json
        sd = self.get_state_dict_entries(model, json.dumps({"unwrap": bool(unwrap), "rank0_only": rank0_only}))
        try:
            return {sd.get_key(i): sd.get_tensor(i) for i in range(sd.count())}
        finally:
            sd.close()
%}
#elif defined(SWIGJAVA)
%proxycode %{
  /** Accelerate's {@code get_state_dict(model)}: the model's state dict, key to tensor in the model's order
   *  (copies; close the tensors when done). A model sharded by fsdp_plugin / deepspeed_plugin is gathered whole
   *  first: call it on every process then; under FSDP and ZeRO-3 only process 0 receives the entries, as in
   *  Accelerate (the others an empty map). */
  public java.util.LinkedHashMap<String, Tensor> getStateDict(Model model) {
    return getStateDict(model, null);
  }

  /** The same with options: {@code {"unwrap": true, "rank0_only": null | true | false}} (null: the defaults). */
  public java.util.LinkedHashMap<String, Tensor> getStateDict(Model model, String optionsJson) {
    try (StateDict sd = getStateDictEntries(model, optionsJson)) {
      java.util.LinkedHashMap<String, Tensor> out = new java.util.LinkedHashMap<>();
      for (long i = 0; i < sd.count(); ++i)
        out.put(sd.getKey(i), sd.getTensor(i));
      return out;
    }
  }
%}
#elif defined(SWIGCSHARP)
%proxycode %{
  /// <summary>Accelerate's get_state_dict(model): the model's state dict, key to tensor in the model's order
  /// (copies; dispose the tensors when done). A model sharded by fsdp_plugin / deepspeed_plugin is gathered whole
  /// first: call it on every process then; under FSDP and ZeRO-3 only process 0 receives the entries, as in
  /// Accelerate (the others an empty dictionary). <paramref name="optionsJson"/>: null or
  /// {"unwrap": true, "rank0_only": null | true | false}.</summary>
  public global::System.Collections.Generic.Dictionary<string, Tensor> GetStateDict(Model model, string optionsJson = null) {
    using (StateDict sd = GetStateDictEntries(model, optionsJson)) {
      var out_ = new global::System.Collections.Generic.Dictionary<string, Tensor>();
      for (long i = 0; i < sd.Count(); ++i)
        out_.Add(sd.GetKey(i), sd.GetTensor(i));
      return out_;
    }
  }
%}
#endif
}
