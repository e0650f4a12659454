// Model: a module built from a JSON spec (torch::nn) or loaded from TorchScript, behind one interface.
#pragma once

#include "config/accelerator_config.hpp"
#include "model/load_report.hpp"

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace accel {

struct AcceleratorState;
class Linear;

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// A named sub-module: what a wrap policy (FSDP's TRANSFORMER_BASED_WRAP / SIZE_BASED_WRAP, tensor or
// pipeline parallel plans) looks at. GPT models list "transformer.h.<i>" as type "gpt_block".
struct ModuleUnit {
    std::string name;                         // module path, e.g. "transformer.h.3" ("" for none)
    std::string type;                         // layer-type name: "gpt_block", "embedding", "linear", ...
    std::vector<std::string> parameter_names; // full names, as in named_parameters(), in that order
};

// A linear layer of a model where a decorator (LoRA, later tensor-parallel or quantized layers) can take
// its place: assigning *linear replaces what the model computes with (linear.hpp's seam).
struct LinearSlot {
    std::string module;              // HF module path: "transformer.h.0.attn.c_attn", "model.layers.0.self_attn.q_proj"
    std::shared_ptr<Linear> *linear; // the model's own pointer, valid for the model's life
    size_t layer;                    // the top-level layer it belongs to (layer_types()'s index; 0 without layers)
};

// What a sharding engine (src/parallel/fsdp) does around a forward: gather a unit's parameters just
// before its layers compute and free them after. accel::forward() calls before/after_forward; models
// with layers (layer_types() not empty) call before/after_layer around each top-level layer.
class ForwardHooks {
public:
    virtual ~ForwardHooks() = default;
    // Returns the input the model computes with (a sharding engine may cast it to its parameters' dtype).
    virtual at::Tensor before_forward(const at::Tensor &input) = 0;
    virtual void before_layer(size_t layer) = 0;
    virtual at::Tensor after_layer(size_t layer, const at::Tensor &out) = 0;
    virtual at::Tensor after_forward(const at::Tensor &out) = 0;
    // Fails with ACCEL_ERR_FAILED_PRECONDITION when the parameters cannot be read or written now
    // (their storage is sharded across processes). `what` names the caller.
    virtual void check_access(const char *what) const = 0;
};

class Model {
public:
    virtual ~Model() = default;

    virtual at::Tensor forward(const at::Tensor &input) = 0;
    virtual void train(bool on) = 0;
    virtual bool is_training() const = 0;

    // Stable for the model's life: names are handed out as borrowed C strings.
    const NamedTensors &named_parameters() const { return parameters_; }
    const NamedTensors &named_buffers() const { return buffers_; }
    std::vector<at::Tensor> parameters() const;
    // Parameters then buffers, by state-dict key.
    const at::Tensor *find_tensor(const std::string &key) const;
    // Copies values in (dtype converted; shapes checked). All entries are checked before any is written.
    // `copy` (optional) does each copy instead of dst.copy_(src), e.g. to batch them (checkpoint loading).
    using CopyFn = std::function<void(const at::Tensor &dst, const at::Tensor &src)>;
    // The state dict (parameters, then buffers; detached). `dedupe_shared`: tensors sharing a storage are
    // listed once, under the first name (what safetensors needs).
    NamedTensors state_dict(bool dedupe_shared) const;
    // Strict: any missing or unexpected key is INVALID_ARGUMENT (nothing written).
    // Returns what did not match (load_report.hpp).
    LoadReport load_state_dict(const NamedTensors &entries, bool strict, const CopyFn &copy = {});

    // Frozen parameters (Hugging Face fine-tuning's param.requires_grad_(False)): the flag is the parameter's
    // at::Tensor::requires_grad, and every consumer asks it (optimizer creation, DDP buckets, the sharding
    // engine, clipping). Sets it on every parameter whose name matches the shell-style `glob` (fnmatch, `*`
    // crosses dots, as in param_groups); a frozen parameter's gradient is dropped. Returns how many matched.
    // INVALID_ARGUMENT when the glob matches no parameter; FAILED_PRECONDITION once the model is prepared or an
    // optimizer holds its parameters (they decided what trains when they were built). `what` names the glob's
    // argument in messages.
    size_t set_requires_grad(const std::string &glob, bool requires_grad, const std::string &what = "name_glob");
    // An optimizer over this model holds the returned token while it lives: set_requires_grad is refused then.
    std::shared_ptr<void> hold_parameters();

    // Where the parameters are (the CPU for a model without any).
    at::Device device() const;
    // Moves every parameter (with its gradient) and buffer to `device` in place: the tensor objects stay
    // the same, so optimizers, names handed out and tied weights stay valid (nn.Module.to's rule).
    void to(const at::Device &device);
    // How many times to() moved something: optimizers over the model move their state after it.
    uint64_t placement() const { return placement_; }

    // Prepares the Linear layers for emulated FP8 training (src/precision/fp8); called when a model is
    // prepared with mixed_precision "fp8". Idempotent. Models that cannot run it fail with UNIMPLEMENTED.
    virtual void enable_fp8(const config::FP8RecipeKwargs &recipe);
    // dynamo_backend at prepare (config/dynamo.hpp's name: "NO", "EAGER", "OFI"). "NO" and "EAGER" run the model
    // as written; "OFI" (TorchScript's freeze + optimize_for_inference for evaluation) is TorchScript models' own,
    // and other models fail with UNIMPLEMENTED naming why.
    virtual void set_compile_backend(const std::string &backend);

    // The model's sub-modules in forward order, each parameter in at most one of them (tied weights
    // under their first owner). Empty for models without a known structure (TorchScript).
    virtual std::vector<ModuleUnit> units() const { return {}; }
    // Recompute the activations of the layers marked in `layers` (indexed as layer_types()) in backward
    // instead of keeping them; all false: off. Models without layers fail with UNIMPLEMENTED.
    virtual void set_activation_checkpointing(const std::vector<bool> &layers);
    virtual bool activation_checkpointing() const { return false; }
    // The types of the top-level layers in forward order ("linear", "transformer_encoder_layer", ...), and
    // for each parameter (named_parameters() order) the layer it belongs to. Empty for models without
    // a layer structure (TorchScript), which shard as one unit.
    virtual std::vector<std::string> layer_types() const { return {}; }
    virtual std::vector<size_t> parameter_layers() const;
    // Hugging Face's config.json for this model ("" when it has none): save_model writes it beside the
    // weights so that transformers' from_pretrained loads the folder as it is.
    virtual std::string hf_config_json() const { return {}; }
    // Hugging Face's config.hidden_size (0 when the model has none): Accelerate fills DeepSpeed's "auto" bucket
    // sizes from it.
    virtual int64_t hidden_size() const { return 0; }
    // The linear layers a decorator may replace, in forward order (empty: none, e.g. TorchScript).
    virtual std::vector<LinearSlot> linear_slots() { return {}; }

    // Set by a sharding engine when the model is prepared (null otherwise).
    std::shared_ptr<ForwardHooks> forward_hooks;
    // Fails when forward_hooks say the parameters cannot be touched now; `what` names the caller. Without
    // forward_hooks, also when a parameter is still on the meta device (empty init), unless `loading` (writing
    // values into the model is what materialises it).
    void check_tensor_access(const char *what, bool loading = false) const
    {
        if (forward_hooks) forward_hooks->check_access(what);
        else if (!loading) check_materialized(what);
    }
    // ACCEL_ERR_FAILED_PRECONDITION naming the first parameter or buffer still on the meta device (a model built
    // with empty_init whose weights were never loaded): it has a shape but no values to compute with or save.
    void check_materialized(const char *what) const;

    // The accelerator this model was prepared by (null when not prepared).
    std::shared_ptr<AcceleratorState> prepared_by;

protected:
    // Maps a state-dict key from a file onto one of this model's keys: another spelling of a tensor
    // (a tied weight's second name, a checkpoint saved without the base-model prefix), or "" for an
    // entry the model does not need (a buffer the format stores but the model recomputes). Used by
    // find_tensor and load_state_dict for keys that are not the model's own.
    virtual std::string canonical_key(const std::string &key) const { return key; }
    // Subclasses call this once their module exists.
    void set_tensors(NamedTensors parameters, NamedTensors buffers);
    // Registers a decorator's own parameters (LoRA's adapters) right after the parameter named `after`, so that
    // a layer's parameters stay contiguous (parameter_layers(), sharding units). Only before the model is handed
    // out: names already lent as C strings would move.
    void insert_parameters_after(const std::string &after, NamedTensors added);
    // `units` with each inserted parameter listed right after the one it was inserted after: subclasses'
    // units() end with it.
    std::vector<ModuleUnit> with_inserted_parameters(std::vector<ModuleUnit> units) const;
    // Code that decorates linear slots (src/model/lora.cpp) registers the decorators' parameters.
    friend struct LinearDecorating;
    // src/quantization/quantize_model.cpp registers the quantization state of the layers it replaces.
    friend struct ModelQuantizing;

private:
    const at::Tensor *find_own(const std::string &key) const;
    NamedTensors parameters_;
    NamedTensors buffers_;
    std::vector<std::pair<std::string, std::string>> inserted_; // (inserted parameter, the one it follows)
    uint64_t placement_ = 0;
    std::vector<std::weak_ptr<void>> holders_; // hold_parameters()' tokens
};

// `on_parameter` (optional) is called with each parameter as soon as its layer (a GPT model: its tensor, or
// its block) exists, before the next is built: zero3_init_flag partitions them there.
using ParameterFn = std::function<void(const at::Tensor &)>;
std::shared_ptr<Model> make_model_from_json(const char *spec_json, const ParameterFn &on_parameter = {});
std::shared_ptr<Model> load_torchscript_model(const std::string &path);

} // namespace accel
