#include "accelerator/accelerator.hpp"

#include "common/allocator.hpp"
#include "common/error.hpp"
#include "data_loader/data_loader_shard.hpp"
#include "model/model.hpp"
#include "optimizer/accelerated_optimizer.hpp"
#include "precision/autocast.hpp"
#include "scheduler/accelerated_scheduler.hpp"

#include <cmath>

namespace accel {

Accelerator::Accelerator(const char *config_json)
    : state_(std::make_shared<AcceleratorState>(config::parse_accelerator_config(config_json)))
{
    tune_allocator_once(state_->config.malloc_tuning);
}

void Accelerator::check_owner(const std::shared_ptr<AcceleratorState> &owner, const char *what) const
{
    if (owner != nullptr && owner != state_)
        fail(ACCEL_ERR_FAILED_PRECONDITION, std::string(what) + ": already prepared by another accelerator");
}

void Accelerator::prepare_model(Model &model)
{
    check_owner(model.prepared_by, "model");
    model.prepared_by = state_;
}

void Accelerator::prepare_optimizer(const std::shared_ptr<AcceleratedOptimizer> &optimizer)
{
    check_owner(optimizer->prepared_by, "optimizer");
    check_owner(optimizer->model()->prepared_by, "optimizer's model");
    if (optimizer->prepared_by == state_) return;
    optimizer->prepared_by = state_;
    optimizers_.push_back(optimizer);
}

void Accelerator::prepare_dataloader(DataLoaderShard &loader)
{
    check_owner(loader.prepared_by(), "dataloader");
    if (loader.prepared_by() != state_) loader.prepare(state_);
}

void Accelerator::prepare_scheduler(AcceleratedScheduler &scheduler)
{
    check_owner(scheduler.prepared_by, "scheduler");
    if (scheduler.optimizer()->prepared_by != state_)
        fail(ACCEL_ERR_FAILED_PRECONDITION, "scheduler: its optimizer must be prepared by this accelerator first");
    scheduler.prepared_by = state_;
}

void Accelerator::backward(const at::Tensor &loss)
{
    if (!loss.defined()) fail(ACCEL_ERR_INVALID_ARGUMENT, "loss: must not be NULL");
    if (loss.numel() != 1)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "loss: expected a scalar, got shape " + c10::str(loss.sizes()));
    if (!loss.requires_grad())
        fail(ACCEL_ERR_INVALID_ARGUMENT, "loss: does not require grad (compute it from a model's outputs, e.g. with "
                                         "accel_loss_compute)");
    const int64_t steps = state_->gradient.num_steps();
    // Accelerate always divides by gradient_accumulation_steps; dividing by 1 is skipped (same bits).
    (steps == 1 ? loss : loss / static_cast<double>(steps)).backward();
}

void Accelerator::accumulate_begin()
{
    AcceleratorState &s = *state_;
    if (s.in_accumulate) fail(ACCEL_ERR_FAILED_PRECONDITION, "accumulate_begin: already inside accumulate(); call "
                                                             "accel_accelerator_accumulate_end first");
    const auto &plugin = s.gradient.plugin();
    if (plugin.sync_with_dataloader && s.gradient.end_of_dataloader()) {
        s.step = 0;
        s.gradient.set_sync_gradients(true);
    } else {
        s.step += 1;
        s.gradient.set_sync_gradients(s.step % plugin.num_steps == 0);
    }
    // With one process there is no gradient communication to suspend (DDP's no_sync comes with the
    // distributed backends).
    s.in_accumulate = true;
}

void Accelerator::accumulate_end()
{
    if (!state_->in_accumulate) fail(ACCEL_ERR_FAILED_PRECONDITION, "accumulate_end: no matching accumulate_begin");
    state_->in_accumulate = false;
}

double Accelerator::clip_grad_norm(Model &model, double max_norm, double norm_type)
{
    if (!(max_norm >= 0.0) || std::isinf(max_norm))
        fail(ACCEL_ERR_INVALID_ARGUMENT, "max_norm: expected a finite number >= 0, got " + std::to_string(max_norm));
    if (!(norm_type > 0.0))
        fail(ACCEL_ERR_INVALID_ARGUMENT, "norm_type: expected a number > 0 or INFINITY, got " + std::to_string(norm_type));
    std::vector<at::Tensor> grads;
    for (const auto &p : model.parameters())
        if (p.grad().defined()) grads.push_back(p.grad());
    if (grads.empty()) return 0.0;
    // The same operations as torch.nn.utils.clip_grad_norm_, so results match it bit for bit.
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
    at::Tensor coef = at::clamp(max_norm / (total + 1e-6), c10::nullopt, 1.0);
    for (auto &g : grads) g.mul_(coef);
    return total.item<double>();
}

void Accelerator::clip_grad_value(Model &model, double clip_value)
{
    if (!(clip_value >= 0.0) || std::isinf(clip_value))
        fail(ACCEL_ERR_INVALID_ARGUMENT, "clip_value: expected a finite number >= 0, got " + std::to_string(clip_value));
    at::NoGradGuard no_grad;
    for (const auto &p : model.parameters())
        if (p.grad().defined()) p.grad().clamp_(-clip_value, clip_value);
}

bool Accelerator::optimizer_step_was_skipped() const
{
    for (const auto &o : optimizers_)
        if (o->step_was_skipped()) return true;
    return false;
}

double Accelerator::train_step(Model &model, AcceleratedOptimizer &optimizer, AcceleratedScheduler *scheduler,
                               const Batch &batch, LossKind loss)
{
    if (model.prepared_by != state_) fail(ACCEL_ERR_FAILED_PRECONDITION, "model: not prepared by this accelerator");
    if (optimizer.prepared_by != state_)
        fail(ACCEL_ERR_FAILED_PRECONDITION, "optimizer: not prepared by this accelerator");
    if (scheduler != nullptr && scheduler->prepared_by != state_)
        fail(ACCEL_ERR_FAILED_PRECONDITION, "scheduler: not prepared by this accelerator");
    if (optimizer.model().get() != &model)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "optimizer: was created over a different model");
    if (scheduler != nullptr && scheduler->optimizer().get() != &optimizer)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "scheduler: was created over a different optimizer");
    accumulate_begin();
    try {
        at::Tensor out = forward(model, batch.inputs, true);
        at::Tensor value = compute_loss(loss, out, batch.labels);
        backward(value);
        optimizer.step();
        if (scheduler != nullptr) scheduler->step();
        optimizer.zero_grad();
        accumulate_end();
        return value.item<double>();
    } catch (...) {
        accumulate_end();
        throw;
    }
}

} // namespace accel
