// Accelerator::join_uneven_inputs_begin / _end: Accelerate's join_uneven_inputs context manager. The
// protocol itself (announcements, shadowing, the final broadcast) is parallel/join.hpp's.
#include "accelerator/accelerator.hpp"

#include "common/error.hpp"
#include "data_loader/data_loader_shard.hpp"
#include "distributed/device_mesh.hpp"
#include "model/model.hpp"
#include "parallel/ddp.hpp"
#include "parallel/join.hpp"
#include "parallel/wrapper.hpp"

#include <algorithm>
#include <optional>

namespace accel {

struct Accelerator::JoinScope {
    std::shared_ptr<parallel::Join> join; // null: join off (even batches, or nothing DDP-wrapped)
    std::vector<parallel::DistributedDataParallel *> ddps;
    // Loaders whose even_batches was overridden, with the override they had before.
    std::vector<std::pair<std::shared_ptr<DataLoaderShard>, std::optional<bool>>> loaders;
};

void Accelerator::join_uneven_inputs_begin(const std::vector<Model *> &joinables, int even_batches)
{
    if (join_)
        fail(ACCEL_ERR_FAILED_PRECONDITION, "join_uneven_inputs_begin: already inside join_uneven_inputs (it does not "
                                            "nest); call accel_accelerator_join_uneven_inputs_end first");
    if (even_batches < -1 || even_batches > 1)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "even_batches: expected -1 (the accelerator's), 0 or 1, got " +
                                             std::to_string(even_batches));
    const auto &sharding = state_->config.sharding;
    if (sharding.enabled())
        fail(ACCEL_ERR_UNIMPLEMENTED,
             std::string("join_uneven_inputs: not supported with ") +
                 (sharding.frontend == "deepspeed" ? "deepspeed_plugin" : "fsdp_plugin") +
                 ": the sharding engine's all-gathers and reduce-scatters have no join hook (Accelerate supports "
                 "join_uneven_inputs for DDP only); keep dataloader_config.even_batches true");
    std::vector<Model *> models = joinables;
    if (models.empty())
        for (const auto &m : models_) models.push_back(m.get());
    auto scope = std::make_shared<JoinScope>();
    for (size_t i = 0; i < models.size(); ++i) {
        Model *m = models[i];
        const std::string what = "joinables[" + std::to_string(i) + "]";
        if (m == nullptr) fail(ACCEL_ERR_INVALID_ARGUMENT, what + ": must not be NULL");
        if (m->prepared_by != state_) fail(ACCEL_ERR_FAILED_PRECONDITION, what + ": not prepared by this accelerator");
        parallel::ParallelWrapper *w = wrapper_of(*m);
        parallel::DistributedDataParallel *ddp = w != nullptr ? w->ddp() : nullptr;
        // Another wrapper (tensor parallelism) has collectives of its own that nothing would shadow: a hang.
        if (w != nullptr && ddp == nullptr)
            fail(ACCEL_ERR_UNIMPLEMENTED, what + ": join_uneven_inputs supports models wrapped by DDP only; this one is "
                                                "split by tensor parallelism, whose collectives have no join hook");
        // One process: no DDP, nothing to join (Accelerate's null context).
        if (ddp != nullptr && std::find(scope->ddps.begin(), scope->ddps.end(), ddp) == scope->ddps.end())
            scope->ddps.push_back(ddp);
    }
    // Accelerate overrides its batch samplers' even_batches; iterable and dispatched loaders keep theirs
    // (it warns that they cannot take the override).
    if (even_batches >= 0)
        for (const auto &dl : dataloaders_) {
            if (dl->iterable() || dl->dispatches()) continue;
            scope->loaders.emplace_back(dl, dl->even_batches_override());
            dl->set_even_batches(even_batches == 1);
        }
    const bool even = even_batches >= 0 ? even_batches == 1 : state_->config.dataloader.even_batches;
    // Join(enable=not even_batches): with even batches every rank has as many batches, nothing to shadow.
    if (!even && !scope->ddps.empty()) {
        scope->join = std::make_shared<parallel::Join>(state_->mesh->group(distributed::MeshDim::DpCp), scope->ddps);
        for (size_t i = 0; i < scope->ddps.size(); ++i) scope->ddps[i]->set_join(scope->join, i);
    }
    join_ = std::move(scope);
}

void Accelerator::join_uneven_inputs_end()
{
    if (!join_)
        fail(ACCEL_ERR_FAILED_PRECONDITION, "join_uneven_inputs_end: no matching accel_accelerator_join_uneven_inputs_begin");
    std::shared_ptr<JoinScope> scope = std::move(join_); // the scope ends even if the shadowing fails
    join_.reset();
    for (auto &[dl, before] : scope->loaders) dl->set_even_batches(before);
    for (auto *ddp : scope->ddps) ddp->set_join(nullptr, 0);
    if (scope->join) scope->join->finish();
}

} // namespace accel
