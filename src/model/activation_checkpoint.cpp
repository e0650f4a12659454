#include "model/activation_checkpoint.hpp"

#include "precision/autocast.hpp"

#include <ATen/autocast_mode.h>
#include <ATen/core/ivalue.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <mutex>

namespace accel {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What backward needs to run the layer again: its forward, its parameters, the state of the generator of
// the device it ran on and the autocast state of that device at the time of the forward.
struct Recompute : torch::CustomClassHolder {
    MultiForward forward;
    std::vector<at::Tensor> inputs, params;
    bool random = false;
    at::Device device{at::kCPU};
    at::Tensor rng_state;
    std::vector<ExtraGenerator> extra;
    std::vector<at::Tensor> extra_states; // each extra generator's state at the forward
    bool autocast = false;
    at::ScalarType autocast_dtype = at::kBFloat16;
};

// Autocast's weight-cast cache would keep no-grad copies made by the checkpointed forward (and could
// hand them to the recomputation): both run with the cache off.
class AutocastCacheOff {
public:
    AutocastCacheOff() : was_(at::autocast::is_autocast_cache_enabled()) { at::autocast::set_autocast_cache_enabled(false); }
    ~AutocastCacheOff() { at::autocast::set_autocast_cache_enabled(was_); }

private:
    bool was_;
};

// The default generator of a device (the CPU's, or a GPU's: dropout there draws from it).
at::Generator generator_of(const at::Device &device)
{
    return device.is_cpu() ? at::detail::getDefaultCPUGenerator() : at::globalContext().defaultGenerator(device);
}

// The device's generator set to `state` for the recomputation, then back to where it was.
class RngSwap {
public:
    RngSwap(const at::Device &device, const at::Tensor &state) : device_(device)
    {
        if (!state.defined()) return;
        auto gen = generator_of(device_);
        std::lock_guard<std::mutex> lock(gen.mutex());
        current_ = gen.get_state();
        gen.set_state(state);
    }
    ~RngSwap()
    {
        if (!current_.defined()) return;
        auto gen = generator_of(device_);
        std::lock_guard<std::mutex> lock(gen.mutex());
        gen.set_state(current_);
    }

private:
    at::Device device_;
    at::Tensor current_;
};

// The extra generators set to their forward states for the recomputation, then back to where they were.
class ExtraSwap {
public:
    ExtraSwap(const std::vector<ExtraGenerator> &extra, const std::vector<at::Tensor> &states) : extra_(extra)
    {
        for (size_t i = 0; i < states.size(); ++i) {
            current_.push_back(extra_[i].get_state());
            extra_[i].set_state(states[i]);
        }
    }
    ~ExtraSwap()
    {
        for (size_t i = 0; i < current_.size(); ++i) extra_[i].set_state(current_[i]);
    }

private:
    const std::vector<ExtraGenerator> &extra_;
    std::vector<at::Tensor> current_;
};

// Autocast of `device` as it was in the forward (backward runs with the caller's, normally off).
class AutocastState {
public:
    AutocastState(const at::Device &device, bool on, at::ScalarType dtype)
        : type_(device.type()), was_on_(autocast_enabled(type_)), was_dtype_(autocast_dtype_of(type_))
    {
        set_autocast(type_, on, dtype);
    }
    ~AutocastState() { set_autocast(type_, was_on_, was_dtype_); }

private:
    at::DeviceType type_;
    bool was_on_;
    at::ScalarType was_dtype_;
};

struct LayerCheckpoint : torch::autograd::Function<LayerCheckpoint> {
    static at::Tensor forward(AutogradContext *ctx, at::TensorList inputs, at::TensorList params,
                              c10::intrusive_ptr<Recompute> r)
    {
        (void)params; // inputs only so that autograd routes their gradients
        r->device = inputs.front().device();
        if (r->random) {
            auto gen = generator_of(r->device);
            std::lock_guard<std::mutex> lock(gen.mutex());
            r->rng_state = gen.get_state();
            for (const auto &g : r->extra) r->extra_states.push_back(g.get_state());
        }
        r->autocast = autocast_enabled(r->device.type());
        r->autocast_dtype = autocast_dtype_of(r->device.type());
        ctx->save_for_backward(inputs.vec());
        at::Tensor y;
        {
            AutocastCacheOff cache_off;
            y = r->forward(inputs.vec());
        }
        ctx->saved_data["recompute"] = c10::IValue::make_capsule(r);
        return y;
    }

    static variable_list backward(AutogradContext *ctx, variable_list grad_out)
    {
        auto r = c10::static_intrusive_pointer_cast<Recompute>(ctx->saved_data["recompute"].toCapsule());
        std::vector<at::Tensor> xs;
        for (const auto &saved : ctx->get_saved_variables()) xs.push_back(saved.detach().requires_grad_(saved.requires_grad()));
        at::Tensor y;
        {
            RngSwap rng(r->device, r->rng_state);
            ExtraSwap extra(r->extra, r->extra_states);
            AutocastState autocast(r->device, r->autocast, r->autocast_dtype);
            AutocastCacheOff cache_off;
            at::AutoGradMode grad_on(true);
            y = r->forward(xs);
        }
        const std::vector<at::Tensor> &params = r->params;
        std::vector<at::Tensor> inputs;
        std::vector<size_t> where; // index in the result of each input
        for (size_t i = 0; i < xs.size(); ++i)
            if (xs[i].requires_grad()) {
                inputs.push_back(xs[i]);
                where.push_back(i);
            }
        for (size_t i = 0; i < params.size(); ++i)
            if (params[i].requires_grad()) {
                inputs.push_back(params[i]);
                where.push_back(xs.size() + i);
            }
        variable_list result(xs.size() + params.size() + 1); // each input, each parameter, the Recompute (none)
        if (!inputs.empty()) {
            auto grads = torch::autograd::grad({y}, inputs, {grad_out[0]}, false, false, true);
            for (size_t i = 0; i < grads.size(); ++i) result[where[i]] = grads[i];
        }
        return result;
    }
};

} // namespace

at::Tensor checkpoint_function(const std::vector<at::Tensor> &inputs, const std::vector<at::Tensor> &params,
                               MultiForward forward, bool random, std::vector<ExtraGenerator> extra)
{
    auto r = c10::make_intrusive<Recompute>();
    r->forward = std::move(forward);
    r->inputs = inputs;
    r->params = params;
    r->random = random;
    r->extra = std::move(extra);
    at::Tensor y = LayerCheckpoint::apply(at::TensorList(r->inputs), at::TensorList(r->params), r);
    r->inputs.clear(); // held for apply's TensorList only: backward reads the saved ones
    return y;
}

at::Tensor checkpoint_layer(const at::Tensor &input, const std::vector<at::Tensor> &params, LayerForward forward,
                            bool random, std::vector<ExtraGenerator> extra)
{
    return checkpoint_function({input}, params,
                               [forward = std::move(forward)](const std::vector<at::Tensor> &in) { return forward(in[0]); },
                               random, std::move(extra));
}

} // namespace accel
