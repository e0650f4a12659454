#include "parallel/tensor_parallel/plan.hpp"

#include "common/error.hpp"
#include "config/accelerator_config.hpp"
#include "distributed/communicator.hpp"
#include "distributed/device_mesh.hpp"
#include "model/gpt_model.hpp"
#include "model/llama_model.hpp"
#include "model/model.hpp"
#include "parallel/tensor_parallel/split_model.hpp"
#include "parallel/ddp.hpp"
#include "parallel/whole_gradients.hpp"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

namespace accel::parallel::tp {

namespace {

using distributed::Communicator;
using distributed::ReduceOp;

class TensorParallelWrapper final : public ParallelWrapper {
public:
    TensorParallelWrapper(std::vector<at::Tensor> split, std::vector<at::Tensor> replicated,
                          std::shared_ptr<Communicator> tp_group, std::shared_ptr<ParallelWrapper> data_parallel)
        : split_(std::move(split)), replicated_(std::move(replicated)), tp_(std::move(tp_group)),
          dp_(std::move(data_parallel))
    {
    }

    void set_require_sync(bool on) override
    {
        if (dp_) dp_->set_require_sync(on);
    }
    void before_forward() override
    {
        if (dp_) dp_->before_forward();
    }
    void finish_backward() override
    {
        if (dp_) dp_->finish_backward();
    }
    void abort_backward() override
    {
        if (dp_) dp_->abort_backward();
    }

    // torch's clip_grad_norm_ over the whole model: the split parameters' part of the norm is reduced over the
    // tp group (each shard once), the replicated ones' (equal on every tp rank) added once.
    double clip_grad_norm(double max_norm, double norm_type, bool clip) override
    {
        at::NoGradGuard no_grad;
        const double part = tensor_parallel_norm_part(split_, replicated_, *tp_, norm_type).item<double>();
        const double total = std::isinf(norm_type) ? part : std::pow(part, 1.0 / norm_type);
        if (clip) {
            const double coef = std::min(1.0, max_norm / (total + 1e-6));
            for (const auto *params : {&split_, &replicated_})
                for (const auto &p : *params)
                    if (p.grad().defined()) p.grad().mul_(coef);
        }
        return total;
    }
    void clip_grad_value(double clip_value) override
    {
        whole_clip_grad_value(split_, clip_value);
        whole_clip_grad_value(replicated_, clip_value);
    }
    WrapperMemory memory() const override
    {
        std::vector<at::Tensor> all = split_;
        all.insert(all.end(), replicated_.begin(), replicated_.end());
        WrapperMemory m = whole_memory(all);
        if (dp_) m.ddp_bucket_bytes = dp_->memory().ddp_bucket_bytes;
        return m;
    }
    // The model computes with each rank's slices: there is no whole form to compute with while summoned (code
    // written for FSDP - summon, then generate - goes on with the model as it is, as for DDP).
    void summon_full_params(bool) override
    {
        fail(ACCEL_ERR_FAILED_PRECONDITION,
             "model: is split by tensor parallelism (tp_size " + std::to_string(tp_->size()) +
                 "): it computes with each rank's slices, which accel_model_get_tensor reads; save_model and "
                 "save_state write the whole tensors");
    }
    // free_memory: the data-parallel wrapper lets go; the model stays split (the limitations page says so).
    void release(Model &model) override
    {
        if (dp_) dp_->release(model);
    }
    DistributedDataParallel *ddp() override { return dp_ ? dp_->ddp() : nullptr; }

private:
    std::vector<at::Tensor> split_, replicated_;
    std::shared_ptr<Communicator> tp_;
    std::shared_ptr<ParallelWrapper> dp_;
};

} // namespace

void TensorParallelModel::enable_sequence_parallel()
{
    fail(ACCEL_ERR_UNIMPLEMENTED, "parallelism_config.tp_handler.sequence_parallel: sequence parallelism is built for "
                                  "the gpt and llama models and sequential models with transformer_encoder_layer blocks "
                                  "only");
}

std::vector<at::Tensor> apply_plan(Model &model, const distributed::DeviceMesh &mesh, bool sequence_parallel)
{
    auto *planned = dynamic_cast<TensorParallelModel *>(&model);
    if (sequence_parallel) {
        auto *gpt = dynamic_cast<GptModel *>(&model);
        auto *llama = dynamic_cast<LlamaModel *>(&model);
        if (gpt != nullptr) gpt->set_sequence_parallel(true);
        else if (llama != nullptr) llama->set_sequence_parallel(true);
        else if (planned != nullptr) planned->enable_sequence_parallel();
        else fail(ACCEL_ERR_UNIMPLEMENTED, "parallelism_config.tp_handler.sequence_parallel: a model without a "
                                           "tensor-parallel plan (TorchScript) cannot split its positions");
    }
    if (planned == nullptr)
        fail(ACCEL_ERR_UNIMPLEMENTED, "parallelism_config.tp_size: tensor parallelism has plans for the models built "
                                      "from a JSON spec (gpt, llama, sequential, mlp); other model types (TorchScript) "
                                      "are not built yet");
    planned->apply_tensor_parallel(mesh.group(distributed::MeshDim::Tp));
    std::vector<at::Tensor> split;
    for (const auto &[name, p] : model.named_parameters())
        if (planned->tensor_parallel_slicing().count(name) != 0) split.push_back(p);
    return split;
}

at::Tensor tensor_parallel_norm_part(const std::vector<at::Tensor> &split, const std::vector<at::Tensor> &replicated,
                                     Communicator &tp_group, double norm_type)
{
    const bool inf = std::isinf(norm_type);
    at::Tensor part = grad_norm_part(split, norm_type);
    tp_group.allreduce(part, inf ? ReduceOp::Max : ReduceOp::Sum);
    const at::Tensor rep = grad_norm_part(replicated, norm_type);
    return inf ? at::maximum(part, rep) : part + rep;
}

std::shared_ptr<ParallelWrapper> prepare_tensor_parallel(Model &model, const distributed::DeviceMesh &mesh,
                                                         const config::DistributedDataParallelKwargs &ddp,
                                                         bool sequence_parallel)
{
    using distributed::MeshDim;
    std::vector<at::Tensor> split = apply_plan(model, mesh, sequence_parallel), replicated;
    for (const auto &[name, p] : model.named_parameters())
        if (std::none_of(split.begin(), split.end(), [&p = p](const at::Tensor &s) { return s.is_same(p); }))
            replicated.push_back(p);
    // Gradients are averaged over the data-parallel ranks (dp_cp): every rank of one tp group saw the same batch.
    std::shared_ptr<ParallelWrapper> dp;
    const auto &dp_group = mesh.group(MeshDim::DpCp);
    if (dp_group->size() > 1)
        dp = std::make_shared<DistributedDataParallel>(model.named_parameters(), model.named_buffers(), dp_group, ddp);
    return std::make_shared<TensorParallelWrapper>(std::move(split), std::move(replicated), mesh.group(MeshDim::Tp),
                                                   std::move(dp));
}

} // namespace accel::parallel::tp
