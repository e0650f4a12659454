// Whether LibTorch's own graph optimisations for TorchScript models would pay here (issue 41 item 3): a scripted
// 3-layer MLP (GELU), its eval forward plain vs torch::jit::freeze + optimize_for_inference (Accelerate's "ofi"
// backend), and a training step (forward + backward) with the profiling executor's CPU fusion off (LibTorch's
// default) vs on. Prints each ratio (baseline / optimised; the median of alternating rounds, so drift of a loaded
// machine falls on both sides alike). Usage: bench_torchscript_optimizations [width [batch]].
#include <torch/script.h>
#include <torch/csrc/jit/passes/tensorexpr_fuser.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

namespace torch::jit {
void overrideCanFuseOnCPU(bool value); // torch/csrc/jit/codegen/fuser/interface.h, which Debian does not install
}

namespace {

double ms_per_call(const std::function<void()> &f, int n)
{
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) f();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / n;
}

// Median over `rounds` of base / optimised, each round timing both back to back after a warm-up.
void compare(const char *what, const std::function<void()> &base, const std::function<void()> &opt, int n)
{
    for (int i = 0; i < 5; ++i) {
        base();
        opt();
    }
    std::vector<double> ratios, base_ms, opt_ms;
    for (int r = 0; r < 7; ++r) {
        base_ms.push_back(ms_per_call(base, n));
        opt_ms.push_back(ms_per_call(opt, n));
        ratios.push_back(base_ms.back() / opt_ms.back());
    }
    auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
    };
    std::printf("%s: %.3f ms -> %.3f ms, ratio %.2fx (median of 7 rounds; rounds %.2fx-%.2fx)\n", what,
                median(base_ms), median(opt_ms), median(ratios), *std::min_element(ratios.begin(), ratios.end()),
                *std::max_element(ratios.begin(), ratios.end()));
}

} // namespace

int main(int argc, char **argv)
{
    const int64_t width = argc > 1 ? std::atoi(argv[1]) : 1024, batch = argc > 2 ? std::atoi(argv[2]) : 64;
    torch::manual_seed(0);
    torch::jit::Module m("mlp");
    for (int i = 0; i < 3; ++i) {
        m.register_parameter("w" + std::to_string(i), (torch::randn({width, width}) * 0.02).requires_grad_(), false);
        m.register_parameter("b" + std::to_string(i), torch::zeros({width}).requires_grad_(), false);
    }
    m.define(R"(
def forward(self, x):
    h = torch.gelu(torch.addmm(self.b0, x, self.w0))
    h = torch.gelu(torch.addmm(self.b1, h, self.w1))
    return torch.addmm(self.b2, h, self.w2)
)");
    const auto x = torch::randn({batch, width});
    std::printf("TorchScript MLP 3 x %lld, batch %lld, %d thread(s)\n", static_cast<long long>(width),
                static_cast<long long>(batch), at::get_num_threads());
    {
        torch::NoGradGuard no_grad;
        m.eval();
        torch::jit::Module frozen = torch::jit::freeze(m);
        torch::jit::Module optimised = torch::jit::optimize_for_inference(frozen);
        const double diff = (m.forward({x}).toTensor() - optimised.forward({x}).toTensor()).abs().max().item<double>();
        std::printf("optimize_for_inference: max |difference| %.3g\n", diff);
        compare("eval forward, plain -> freeze + optimize_for_inference", [&] { m.forward({x}); },
                [&] { optimised.forward({x}); }, 50);
    }
    m.train();
    auto step = [&x](torch::jit::Module &module) {
        module.forward({x}).toTensor().pow(2).mean().backward();
        for (auto p : module.parameters()) p.mutable_grad() = at::Tensor();
    };
    torch::jit::Module fused = m.clone(); // its own executor, profiled with fusion on
    try {
        torch::jit::overrideCanFuseOnCPU(true);
        torch::jit::setTensorExprFuserEnabled(true);
        for (int i = 0; i < 3; ++i) step(fused); // the profiling runs, then the optimised graph
        compare("train step, fusion off -> CPU fusion (NNC)", [&] { step(m); }, [&] { step(fused); }, 20);
    } catch (const std::exception &e) {
        std::string what = e.what();
        std::printf("train step with CPU fusion: not available in this LibTorch: %s\n",
                    what.find("LLVM Backend not found") != std::string::npos ? "LLVM Backend not found" : what.c_str());
    }
    return 0;
}
