// Models loaded from TorchScript files.
#include "model/model.hpp"

#include "common/error.hpp"

#include <ATen/autocast_mode.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/serialization/import.h>

#include <fstream>
#include <optional>

namespace accel {

namespace {

template <class List>
NamedTensors to_named(const List &list)
{
    NamedTensors out;
    for (const auto &item : list) out.emplace_back(item.name, item.value);
    return out;
}

class ScriptModel final : public Model {
public:
    explicit ScriptModel(torch::jit::Module m) : module_(std::move(m))
    {
        set_tensors(to_named(module_.named_parameters(true)), to_named(module_.named_buffers(true)));
    }

    at::Tensor forward(const at::Tensor &input) override
    {
        // Training changes the weights: the frozen copy's memory is given back until the next evaluation.
        if (module_.is_training()) frozen_.reset();
        c10::IValue out = runs_frozen() ? frozen_forward(input) : module_.forward({input});
        if (out.isTensor()) return out.toTensor();
        // A module returning (output, ...) is common; the first element is the prediction.
        if (out.isTuple() && !out.toTupleRef().elements().empty() && out.toTupleRef().elements()[0].isTensor())
            return out.toTupleRef().elements()[0].toTensor();
        fail(ACCEL_ERR_INVALID_ARGUMENT, "model: the TorchScript forward returned " + out.tagKind() +
                                             ", expected a tensor or a tuple starting with one");
    }
    void train(bool on) override { module_.train(on); }
    void set_compile_backend(const std::string &backend) override;
    bool is_training() const override { return module_.is_training(); }
    void enable_fp8(const config::FP8RecipeKwargs &) override
    {
        fail(ACCEL_ERR_UNIMPLEMENTED, "model: mixed_precision \"fp8\" is not supported for TorchScript models: accel "
                                      "emulates FP8 by running the linear layers of models built from a JSON spec "
                                      "(accel_model_create_from_json) through its FP8 path, and a TorchScript graph's "
                                      "linear ops cannot be rerouted; use \"bf16\" or a JSON-built model");
    }

private:
    // dynamo_backend "ofi" (Accelerate: TorchScript's optimize_for_inference, inference only): eval forwards that
    // record no gradients and run outside autocast go through a frozen, optimized copy. A forward recording
    // gradients needs the weights as parameters, and autocast's casts may not reach the fused ops that
    // optimize_for_inference substitutes, so those run the module as written.
    bool runs_frozen() const
    {
        return ofi_ && !module_.is_training() && !c10::GradMode::is_enabled() && !at::autocast::is_enabled() &&
               !at::autocast::is_cpu_enabled();
    }
    c10::IValue frozen_forward(const at::Tensor &input);
    // Each parameter's and buffer's storage and version counter: an optimizer step, load_state or to() changes one.
    std::vector<std::pair<const void *, uint32_t>> weights_fingerprint() const;
    torch::jit::Module make_frozen() const;

    torch::jit::Module module_;
    bool ofi_ = false;
    std::optional<torch::jit::Module> frozen_;                   // the copy; dropped by a training forward
    std::vector<std::pair<const void *, uint32_t>> frozen_from_; // the weights it was made from
};

void ScriptModel::set_compile_backend(const std::string &backend)
{
    if (backend != "OFI") return Model::set_compile_backend(backend);
    // Made once here (and dropped) so that a graph freezing cannot handle is refused at prepare, not at the first
    // evaluation; the copy kept is made at the first eval forward, from the weights as they are then.
    make_frozen();
    ofi_ = true;
}

torch::jit::Module ScriptModel::make_frozen() const
{
    c10::NoGradGuard no_grad;
    try {
        // A deep copy: freeze() inlines the module's own tensors as constants, which an optimizer step would then
        // change under the frozen graph's folded ones.
        torch::jit::Module copy = module_.clone();
        copy.eval();
        torch::jit::Module frozen = torch::jit::freeze(copy);
        return torch::jit::optimize_for_inference(frozen);
    } catch (const c10::Error &e) {
        std::string msg = e.what_without_backtrace();
        fail(ACCEL_ERR_UNIMPLEMENTED, "dynamo_backend: \"ofi\" freezes the TorchScript model "
                                      "(torch::jit::freeze + optimize_for_inference), which failed for this "
                                      "model: " + msg.substr(0, msg.find('\n')).substr(0, 300));
    }
}

std::vector<std::pair<const void *, uint32_t>> ScriptModel::weights_fingerprint() const
{
    std::vector<std::pair<const void *, uint32_t>> out;
    for (const auto *list : {&named_parameters(), &named_buffers()})
        for (const auto &[name, t] : *list)
            out.emplace_back(t.defined() ? t.data_ptr() : nullptr, t.defined() ? t._version() : 0);
    return out;
}

c10::IValue ScriptModel::frozen_forward(const at::Tensor &input)
{
    auto now = weights_fingerprint();
    if (!frozen_ || now != frozen_from_) {
        frozen_.reset(); // the stale copy's memory back before the new one is made
        frozen_ = make_frozen();
        frozen_from_ = std::move(now);
    }
    return frozen_->forward({input});
}

} // namespace

std::shared_ptr<Model> load_torchscript_model(const std::string &path)
{
    if (!std::ifstream(path).good()) fail(ACCEL_ERR_NOT_FOUND, "path: cannot open \"" + path + "\"");
    torch::jit::Module m;
    try {
        m = torch::jit::load(path);
    } catch (const c10::Error &e) {
        std::string msg = e.what_without_backtrace();
        fail(ACCEL_ERR_DATA_LOSS, "path: \"" + path + "\" is not a readable TorchScript archive: " + msg.substr(0, 300));
    }
    return std::make_shared<ScriptModel>(std::move(m));
}

} // namespace accel
