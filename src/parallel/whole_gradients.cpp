#include "parallel/whole_gradients.hpp"

#include <ATen/core/grad_mode.h>

#include <cmath>

namespace accel::parallel {

double whole_clip_grad_norm(const std::vector<at::Tensor> &params, double max_norm, double norm_type, bool clip)
{
    std::vector<at::Tensor> grads;
    for (const auto &p : params)
        if (p.grad().defined()) grads.push_back(p.grad());
    if (grads.empty()) return 0.0;
    at::NoGradGuard no_grad;
    at::Tensor total;
    if (std::isinf(norm_type)) {
        std::vector<at::Tensor> maxes;
        for (const auto &g : grads) maxes.push_back(g.abs().max());
        total = at::stack(maxes).max();
    } else {
        std::vector<at::Tensor> norms;
        for (const auto &g : grads) norms.push_back(at::norm(g, norm_type));
        total = at::norm(at::stack(norms), norm_type);
    }
    if (clip) {
        at::Tensor coef = at::clamp(max_norm / (total + 1e-6), c10::nullopt, 1.0);
        for (auto &g : grads) g.mul_(coef);
    }
    return total.item<double>();
}

void whole_clip_grad_value(const std::vector<at::Tensor> &params, double clip_value)
{
    at::NoGradGuard no_grad;
    for (const auto &p : params)
        if (p.grad().defined()) p.grad().clamp_(-clip_value, clip_value);
}

at::Tensor grad_norm_part(const std::vector<at::Tensor> &params, double norm_type)
{
    at::NoGradGuard no_grad;
    const bool inf = std::isinf(norm_type);
    at::Tensor acc = at::zeros({1}, at::kDouble);
    for (const auto &p : params) {
        if (!p.grad().defined()) continue;
        at::Tensor g = p.grad().to(at::kDouble).abs();
        // Reduced where the gradient lives; only the scalar comes to the CPU.
        acc = inf ? at::maximum(acc, g.max().cpu().reshape({1})) : acc + g.pow(norm_type).sum().cpu();
    }
    return acc;
}

WrapperMemory whole_memory(const std::vector<at::Tensor> &params)
{
    WrapperMemory m;
    for (const auto &p : params) {
        m.parameter_bytes += p.numel() * static_cast<int64_t>(p.element_size());
        if (p.grad().defined()) m.gradient_bytes += p.grad().numel() * static_cast<int64_t>(p.grad().element_size());
    }
    return m;
}

} // namespace accel::parallel
