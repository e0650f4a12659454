#include "random/random.hpp"

#include "common/error.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>

#include <mutex>

namespace accel {

void set_seed(uint64_t seed, bool deterministic)
{
    at::manual_seed(seed);
    if (deterministic) at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
}

PyRef rng_state_dict()
{
    auto gen = at::detail::getDefaultCPUGenerator();
    at::Tensor state;
    {
        std::lock_guard<std::mutex> lock(gen.mutex());
        state = gen.get_state();
    }
    auto d = py_dict();
    py_set(*d, "torch_manual_seed", py_tensor(state));
    return d;
}

ApplyState load_rng_state_dict(const PyObj &d, const std::string &what)
{
    if (!d.is_dict()) fail(ACCEL_ERR_DATA_LOSS, what + ": not a dict");
    at::Tensor rng;
    if (const PyObj *seed = d.get("torch_manual_seed")) {
        if (seed->kind != PyObj::Kind::Tensor || seed->tensor.scalar_type() != at::kByte)
            fail(ACCEL_ERR_DATA_LOSS, what + ": \"torch_manual_seed\" is not a uint8 tensor");
        rng = seed->tensor.contiguous();
        try { // on a generator of its own, so that a bad state changes nothing
            at::make_generator<at::CPUGeneratorImpl>().set_state(rng);
        } catch (const c10::Error &) {
            fail(ACCEL_ERR_DATA_LOSS, what + ": \"torch_manual_seed\" is not a CPU generator state of this LibTorch");
        }
    }
    return [rng] {
        if (!rng.defined()) return;
        auto gen = at::detail::getDefaultCPUGenerator();
        std::lock_guard<std::mutex> lock(gen.mutex());
        gen.set_state(rng);
    };
}

} // namespace accel
