// Models loaded from TorchScript files.
#include "model/model.hpp"

#include "common/error.hpp"

#include <torch/csrc/jit/serialization/import.h>

#include <fstream>

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
        c10::IValue out = module_.forward({input});
        if (out.isTensor()) return out.toTensor();
        // A module returning (output, ...) is common; the first element is the prediction.
        if (out.isTuple() && !out.toTupleRef().elements().empty() && out.toTupleRef().elements()[0].isTensor())
            return out.toTupleRef().elements()[0].toTensor();
        fail(ACCEL_ERR_INVALID_ARGUMENT, "model: the TorchScript forward returned " + out.tagKind() +
                                             ", expected a tensor or a tuple starting with one");
    }
    void train(bool on) override { module_.train(on); }
    bool is_training() const override { return module_.is_training(); }
    void enable_fp8(const config::FP8RecipeKwargs &) override
    {
        fail(ACCEL_ERR_UNIMPLEMENTED, "model: mixed_precision \"fp8\" is not supported for TorchScript models: accel "
                                      "emulates FP8 by running the linear layers of models built from a JSON spec "
                                      "(accel_model_create_from_json) through its FP8 path, and a TorchScript graph's "
                                      "linear ops cannot be rerouted; use \"bf16\" or a JSON-built model");
    }

private:
    torch::jit::Module module_;
};

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
