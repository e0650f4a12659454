#include "parallel/tensor_parallel/rng_tracker.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

namespace accel::parallel::tp {

namespace {
// Megatron's offset of the tensor-model-parallel seed from the data seed.
constexpr uint64_t kModelParallelSeedOffset = 2718;
} // namespace

DropoutGenerator::DropoutGenerator(uint64_t seed, int64_t rank)
    : seed_(seed + kModelParallelSeedOffset + static_cast<uint64_t>(rank)),
      generator_(at::make_generator<at::CPUGeneratorImpl>(seed_))
{
}

at::Tensor DropoutGenerator::dropout(const at::Tensor &x, double p)
{
    if (p >= 1.0) return x * 0.0;
    // (bernoulli_ takes the generator's lock itself.)
    at::Tensor keep = at::empty_like(x).bernoulli_(1.0 - p, generator_);
    return x * keep / (1.0 - p);
}

at::Tensor DropoutGenerator::state() const { return generator_.get_state(); }

void DropoutGenerator::set_state(const at::Tensor &state) { generator_.set_state(state); }

std::shared_ptr<DropoutGenerator> make_dropout_generator(int64_t tp_rank)
{
    return std::make_shared<DropoutGenerator>(at::detail::getDefaultCPUGenerator().current_seed(), tp_rank);
}

at::Tensor region_dropout(const at::Tensor &x, double p, bool train, const std::shared_ptr<DropoutGenerator> &split)
{
    if (!train || p <= 0.0) return x;
    return split ? split->dropout(x, p) : at::dropout(x, p, true);
}

ExtraGenerator checkpoint_generator(const std::shared_ptr<DropoutGenerator> &g)
{
    return {[g] { return g->state(); }, [g](const at::Tensor &state) { g->set_state(state); }};
}

} // namespace accel::parallel::tp
