#include "accelerator/accelerator.hpp"
#include "tracking/tracking.hpp"

#include "big_modeling/dispatch.hpp"
#include "checkpointing/async_save.hpp"

#include "common/allocator.hpp"
#include "common/blas_kernels.hpp"
#include "common/error.hpp"
#include "common/out_of_memory.hpp"
#include "logging/logger.hpp"
#include "data_loader/data_loader_shard.hpp"
#include "distributed/communicator.hpp"
#include "distributed/device_mesh.hpp"
#include "parallel/ddp.hpp"
#include "parallel/fsdp/sharded_data_parallel.hpp"
#include "parallel/fsdp/zero_init.hpp"
#include "parallel/pipeline/pipeline_parallel.hpp"
#include "parallel/pipeline/stage_init.hpp"
#include "parallel/context_parallel/plan.hpp"
#include "parallel/tensor_parallel/plan.hpp"
#include "parallel/whole_gradients.hpp"
#include "model/model.hpp"
#include "model/selective_recompute.hpp"
#include "quantization/quantize_model.hpp"
#include "optimizer/accelerated_optimizer.hpp"
#include "common/offload_files.hpp"
#include "precision/autocast.hpp"
#include "precision/grad_scaler.hpp"
#include "state/device.hpp"
#include "scheduler/accelerated_scheduler.hpp"
#include "profiling/ranges.hpp"

#include <ATen/core/grad_mode.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <mutex>

namespace accel {

namespace {

// float32 maths at a fraction of this CPU's speed (common/blas_kernels.hpp): said once per process, by the
// main process, when nothing chose OpenBLAS's kernels (accel launch sets OPENBLAS_CORETYPE; any non-empty value
// of the variable keeps this quiet).
void warn_generic_blas_once(bool main_process)
{
    static std::once_flag once;
    std::call_once(once, [main_process] {
        if (!main_process) return;
        if (const auto kernels = generic_openblas_kernels())
            logging::log(ACCEL_LOG_WARNING,
                         logging::printf_string("OpenBLAS does not know this CPU and chose its generic %s kernels: "
                                                "float32 matrix products run 2-3x slower; start the process with "
                                                "OPENBLAS_CORETYPE=%s (accel launch does)",
                                                kernels->chosen.c_str(), kernels->suggested.c_str()),
                         /*main_process_only=*/false); // the caller passed whether this is the main process
    });
}

// The mesh of this job: parallelism_config's sizes (checked against the job when parsed), else what the plugins
// imply (sharded: (1, world), or (nodes, per node) for HYBRID_SHARD; otherwise DDP's (world, 1)).
distributed::MeshShape mesh_shape_of(const config::AcceleratorConfig &c, int32_t world)
{
    if (const auto &p = c.parallelism; p.given)
        return distributed::mesh_shape(p.dp_replicate_size, p.dp_shard_size, p.sequence_parallel_size(), p.tp_size, p.pp_size);
    if (c.sharding.enabled()) return parallel::sharded_mesh_shape(c.sharding, world);
    return distributed::mesh_shape(world, 1, 1, 1);
}

// What backward differentiates: Accelerate always divides by gradient_accumulation_steps (dividing by 1 is
// skipped: same bits), then fp16's scaler.scale(loss), after the division, as Accelerate.
at::Tensor scaled_for_backward(AcceleratorState &state, const at::Tensor &loss)
{
    const int64_t steps = state.gradient.num_steps();
    at::Tensor scaled = steps == 1 ? loss : loss / static_cast<double>(steps);
    if (state.scaler && state.scaler->is_enabled()) scaled = state.scaler->scale(scaled);
    return scaled;
}

// fp16's scaler under the sharding engine, a pipeline or tensor parallelism: each rank unscales only its part of
// the gradients (its shards, its stage, its slices), so an inf found on any rank must skip the step on all.
void share_found_inf(AcceleratorState &state)
{
    if (!state.scaler || !state.comm || state.comm->size() <= 1) return;
    auto comm = state.comm;
    state.scaler->set_found_inf_reducer([comm](at::Tensor &found) {
        at::Tensor t = found.reshape({1}).clone();
        comm->allreduce(t, distributed::ReduceOp::Max);
        found.copy_(t.reshape(found.sizes()));
    });
}

// Not sharded, MegatronLMPlugin's gradient_clipping (config.sharding.gradient_clipping: megatron_lm_plugin.cpp
// puts it there; without deepspeed_plugin nothing else sets it): every step that acts clips the gradients by their
// global norm first, after the scaler's unscaling, as Megatron's train step does. The wrapper's norm covers the
// whole mesh (tp shards once, replicated parameters once, every pipeline stage): what clip_grad_norm computes.
void clip_inside_step(AcceleratedOptimizer &optimizer, const std::shared_ptr<parallel::ParallelWrapper> &wrapper,
                      double max_norm)
{
    if (max_norm <= 0.0 || optimizer.is_sharded()) return;
    if (!wrapper) {
        Model *model = optimizer.model().get(); // the optimizer holds it, and the hook is the optimizer's
        optimizer.set_before_step([model, max_norm] { parallel::whole_clip_grad_norm(model->parameters(), max_norm, 2.0, true); });
        return;
    }
    std::weak_ptr<parallel::ParallelWrapper> weak = wrapper;
    optimizer.set_before_step([weak, max_norm] {
        if (auto w = weak.lock()) w->clip_grad_norm(max_norm, 2.0, true);
    });
}

// The model passed to accumulate() communicates its gradients on this batch only when sync_gradients, or on every
// batch with sync_each_batch (no_sync otherwise). As Accelerate's accumulate(*models), other models keep syncing
// every batch.
bool syncs_this_batch(const AcceleratorState &s)
{
    return s.gradient.sync_gradients() || (s.num_processes() > 1 && s.gradient.plugin().sync_each_batch);
}

// train_step's micro-batch `i` of `count`: rows [i * n / count, (i + 1) * n / count) of the inputs, and of the labels
// when they have as many rows (else whole). Refused by name when count does not divide the rows.
std::pair<at::Tensor, at::Tensor> micro_batch(const Batch &batch, int64_t i, int64_t count)
{
    const int64_t rows = batch.inputs.dim() > 0 ? batch.inputs.size(0) : 0;
    if (rows % count != 0)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "batch: " + std::to_string(rows) + " rows do not split into num_micro_batches (" +
                                             std::to_string(count) + ", MegatronLMPlugin's at pp_degree 1) equal micro-batches");
    const int64_t n = rows / count;
    const bool split_labels = batch.labels.defined() && batch.labels.dim() > 0 && batch.labels.size(0) == rows;
    return {batch.inputs.narrow(0, i * n, n), split_labels ? batch.labels.narrow(0, i * n, n) : batch.labels};
}

} // namespace

Accelerator::Accelerator(const char *config_json)
    : state_(std::make_shared<AcceleratorState>(config::parse_accelerator_config(config_json)))
{
    state_->accelerator = this;
    project_iteration_ = state_->config.project.iteration;
    tune_allocator_once(state_->config.malloc_tuning);
    const auto &c = state_->config;
    state_->device = select_device(c);
    if (c.mixed_precision == ACCEL_MIXED_PRECISION_FP16) {
        // Accelerate silently trains in fp32 where the device has no fp16 autocast; accel says so. The device
        // that computes is probed: the GPU where models are placed on one, else the CPU.
        const at::DeviceType computes = state_->places_on_device() ? state_->device.type() : at::kCPU;
        std::string why;
        if (c.autocast.enabled && !fp16_autocast_available(computes, &why))
            fail(ACCEL_ERR_UNIMPLEMENTED,
                 std::string("mixed_precision: \"fp16\" needs fp16 kernels, and this LibTorch has none on the ") +
                     (computes == at::kCPU ? "CPU" : "GPU") + " (" + why + "); use \"bf16\", or set "
                     "kwargs_handlers.autocast.enabled to false to compute in fp32 with fp16's dynamic loss scaler");
        // A GradScaler exists for fp16 (Accelerate's rule); GradScalerKwargs.enabled=false turns it off.
        if (c.grad_scaler.enabled) state_->scaler = std::make_shared<GradScaler>(c.grad_scaler);
    }
    // One communicator per process, created by the first accelerator (a world of one: "single").
    state_->comm = distributed::process_communicator(c);
    // Every sub-communicator of the mesh is made here, once, in one order on every rank (collective).
    state_->mesh = std::make_shared<distributed::DeviceMesh>(mesh_shape_of(c, state_->comm->size()), state_->comm);
    warn_generic_blas_once(state_->process_index() == 0 && !state_->places_on_device());
    // Gloo and MPI move host memory here: GPU tensors between processes need nccl.
    if (state_->places_on_device() && state_->comm->size() > 1 && std::string(state_->comm->backend()) != "nccl")
        fail(ACCEL_ERR_UNIMPLEMENTED, std::string("kwargs_handlers.init_process_group.backend: \"") +
                                          state_->comm->backend() + "\" with models on " + state_->device.str() +
                                          " is not supported; use \"nccl\", or set \"cpu\": true");
    // zero3_init_ holds the scope of either flag: models built meanwhile (from_pretrained's only, for FSDP's) are
    // partitioned.
    if (c.sharding.zero3_init_flag)
        zero3_init_ =
            parallel::PartitionedAtInit::scope(state_->comm, "deepspeed_plugin.zero3_init_flag", false);
    else if (c.sharding.cpu_ram_efficient_loading)
        zero3_init_ =
            parallel::PartitionedAtInit::scope(state_->comm, "fsdp_plugin.cpu_ram_efficient_loading", true);
    // parallelism_config.pp_size > 1: models built meanwhile on this thread hold only this rank's pipeline stage
    // (parallel/pipeline/stage_init.hpp), sharded or not. Under tp_size > 1 the other stages' parameters
    // keep their shapes on meta until prepare's tensor-parallel plan and cut; so not when prepare places the model on
    // a GPU first (meta tensors do not move). The scope is held beside zero3_init_'s (one member for the scopes of
    // models built meanwhile).
    const auto &mesh = *state_->mesh;
    const bool tp = mesh.size(distributed::MeshDim::Tp) > 1;
    if (mesh.size(distributed::MeshDim::Pp) > 1 && !(tp && state_->places_on_device()))
        zero3_init_ = std::make_shared<std::pair<std::shared_ptr<void>, std::shared_ptr<void>>>(
            zero3_init_, parallel::pp::StageAtInit::scope(mesh.size(distributed::MeshDim::Pp),
                                                         mesh.rank_in(distributed::MeshDim::Pp), c.parallelism, tp));
}

// Scopes left open by autocast_begin are closed in reverse order (on the freeing thread).
Accelerator::~Accelerator()
{
    state_->accelerator = nullptr;
    while (!autocast_scopes_.empty()) autocast_scopes_.pop_back();
    state_->profile.reset(); // a profile still running stops unwritten (the profiler is off afterwards)
    pending_save_.reset(); // waits for the files (a failure is printed: nobody is left to report it to)
}

tracking::Trackers &Accelerator::trackers()
{
    if (!trackers_)
        trackers_ = std::make_unique<tracking::Trackers>(state_->config.log_with, state_->config.project.logging_dir,
                                                         state_->process_index() == 0);
    return *trackers_;
}

void Accelerator::check_owner(const std::shared_ptr<AcceleratorState> &owner, const char *what) const
{
    if (owner != nullptr && owner != state_)
        fail(ACCEL_ERR_FAILED_PRECONDITION, std::string(what) + ": already prepared by another accelerator");
}

// A bitsandbytes-style quantized model trains its adapters alone or under DDP (QLoRA); the engines that split or
// re-type its weights would meet packed integer storage they do not know (Accelerate refuses quantized models
// spread over devices too), so each is refused by name instead of failing inside.
void Accelerator::refuse_quantized_model_under_parallelism(Model &model) const
{
    if (!is_quantized(model)) return;
    const auto refuse = [](const std::string &what) {
        fail(ACCEL_ERR_UNIMPLEMENTED, "model: a quantized model (accel_model_quantize) under " + what +
                                          " is not supported; train its LoRA adapters in one process or under DDP");
    };
    if (state_->config.sharding.enabled())
        refuse(state_->config.sharding.frontend == "deepspeed" ? "deepspeed_plugin" : "fsdp_plugin");
    if (state_->config.mixed_precision == ACCEL_MIXED_PRECISION_FP8) refuse("mixed_precision \"fp8\"");
    if (state_->mesh && state_->mesh->size(distributed::MeshDim::Tp) > 1) refuse("tensor parallelism (tp_size > 1)");
    if (state_->mesh && state_->mesh->size(distributed::MeshDim::Pp) > 1) refuse("pipeline parallelism (pp_size > 1)");
}

void Accelerator::prepare_model(Model &model)
{
    check_owner(model.prepared_by, "model");
    // Its offloaded weights exist only while their layer computes: nothing could train or shard them.
    if (big_modeling::is_dispatched(model))
        fail(ACCEL_ERR_FAILED_PRECONDITION, "model: a dispatched model (accel_model_dispatch, disk offload) is for "
                                            "inference and cannot be prepared; prepare the model in memory instead");
    refuse_quantized_model_under_parallelism(model);
    // A model built partitioned (zero3_init_flag) is gathered as the sharding engine packs it; anything else
    // needs it whole first.
    if (auto partitioned = parallel::PartitionedAtInit::of(model); partitioned && !state_->config.sharding.enabled()) {
        partitioned->restore_all();
        model.forward_hooks.reset();
    }
    // A model built as a pipeline stage (stage_init.hpp) holds nothing of the others: only a pipeline can run it.
    if (auto built = parallel::pp::StageAtInit::of(model); built && (!state_->mesh || state_->mesh->size(distributed::MeshDim::Pp) <= 1))
        built->check_access("model");
    // device_placement: the model moves to the accelerator's device (in place: an optimizer created over
    // it keeps its parameters).
    if (state_->places_on_device()) {
        if (state_->config.sharding.enabled())
            fail(ACCEL_ERR_UNIMPLEMENTED, std::string(state_->config.sharding.frontend == "deepspeed" ? "deepspeed_plugin"
                                                                                                  : "fsdp_plugin") +
                                              ": sharded training on a GPU (" + state_->device.str() +
                                              ") is not supported yet; set \"cpu\": true to shard on the CPU");
        model.to(state_->device);
    }
    // FP8: Linear layers run through the emulated delayed-scaling path (fails for TorchScript models).
    if (state_->config.mixed_precision == ACCEL_MIXED_PRECISION_FP8) model.enable_fp8(state_->config.fp8_recipe);
    // dynamo_backend: "ofi" evaluates a TorchScript model through a frozen copy, rebuilt when the weights' version
    // counters or storage change. The sharding and tp/pp/cp engines write weights through collectives that bump no
    // counter, so "ofi" stays with one process or DDP (whose broadcasts bump them: parallel/ddp.cpp).
    const auto splits = [this](distributed::MeshDim d) { return state_->mesh && state_->mesh->size(d) > 1; };
    if (state_->config.dynamo_backend == "OFI" &&
        (state_->config.sharding.enabled() || splits(distributed::MeshDim::Tp) || splits(distributed::MeshDim::Pp) ||
         splits(distributed::MeshDim::Cp)))
        fail(ACCEL_ERR_UNIMPLEMENTED, "dynamo_backend: \"ofi\" is not supported with fsdp_plugin, deepspeed_plugin or "
                                      "parallelism_config's tp/pp/cp dimensions: their collectives rewrite the weights "
                                      "without the version counters the frozen copy is checked against; use \"no\"");
    model.set_compile_backend(state_->config.dynamo_backend);
    // MegatronLMPlugin's recompute_activation; before context parallelism, which refuses it by name.
    if (state_->config.selective_recompute) apply_selective_recompute(model);
    // parallelism_config.cp_size (or sp_size: Ulysses) > 1: attention over the whole sequence through the cp
    // group; the wrappers below average the gradients over dp_cp.
    if (state_->mesh && state_->mesh->size(distributed::MeshDim::Cp) > 1)
        parallel::cp::prepare_context_parallel(model, *state_->mesh, state_->config.parallelism.sequence_strategy());
    // fsdp_plugin / deepspeed_plugin: the sharding engine (also with one process), instead of DDP.
    if (state_->config.sharding.enabled()) {
        if (sharded_of(model) == nullptr) {
            if (model.prepared_by != nullptr)
                fail(ACCEL_ERR_FAILED_PRECONDITION, "model: already prepared");
            std::shared_ptr<parallel::ParallelWrapper> wrapper;
            const bool pipelined = state_->mesh->size(distributed::MeshDim::Pp) > 1;
            if (pipelined) {
                // pp x sharding: the stage cut first, then the engine over the stage's parameters, inside the
                // pipeline (which runs its backward passes; parallel/pipeline/pipeline_parallel.hpp).
                wrapper = parallel::pp::prepare_pipeline(model, *state_->mesh, state_->config.parallelism, nullptr,
                                                         &state_->config.sharding);
            } else {
                // tp_size > 1 (Accelerate's 2D: FSDP over dp_shard, TP over tp): the plan narrows the model first,
                // then the engine shards each rank's slices over dp_shard_cp.
                const bool tp = state_->mesh->size(distributed::MeshDim::Tp) > 1;
                const std::vector<at::Tensor> tp_split = tp ? parallel::tp::apply_plan(model, *state_->mesh,
                                                                                         state_->config.parallelism.sequence_parallel)
                                                            : std::vector<at::Tensor>{};
                auto engine = std::make_shared<parallel::ShardedDataParallel>(model, *state_->mesh, state_->config.sharding);
                if (tp) engine->set_tensor_parallel(state_->mesh->group(distributed::MeshDim::Tp), tp_split);
                wrapper = engine;
            }
            if (state_->config.sharding.activation_checkpointing) {
                try {
                    model.set_activation_checkpointing(wrapper->sharded()->checkpointed_layers());
                } catch (const Error &e) {
                    if (!pipelined) wrapper->release(model); // the model as it was (a stage stays cut)
                    fail(e.code(), std::string("fsdp_plugin.") + e.what());
                }
            }
            wrapper->set_require_sync(!state_->in_accumulate || state_->gradient.sync_gradients());
            wrappers_.emplace_back(&model, wrapper);
            share_found_inf(*state_);
            for (const auto &o : optimizers_)
                if (o->model().get() == &model) shard_optimizer(o);
        }
        model.prepared_by = state_;
        return;
    }
    // parallelism_config.pp_size > 1: this rank's stage of the model, and the pipeline that train_step runs.
    if (state_->mesh && state_->mesh->size(distributed::MeshDim::Pp) > 1 && wrapper_of(model) == nullptr) {
        wrappers_.emplace_back(&model, parallel::pp::prepare_pipeline(model, *state_->mesh, state_->config.parallelism,
                                                                          &state_->config.ddp));
        wrappers_.back().second->set_require_sync(!state_->in_accumulate || state_->gradient.sync_gradients());
        share_found_inf(*state_);
    }
    // parallelism_config.tp_size > 1: the model's tensor-parallel plan, with DDP over dp_replicate inside.
    else if (state_->mesh && state_->mesh->size(distributed::MeshDim::Tp) > 1 && wrapper_of(model) == nullptr) {
        wrappers_.emplace_back(&model, parallel::tp::prepare_tensor_parallel(model, *state_->mesh, state_->config.ddp,
                                                                                      state_->config.parallelism.sequence_parallel));
        wrappers_.back().second->set_require_sync(!state_->in_accumulate || state_->gradient.sync_gradients());
        share_found_inf(*state_);
    }
    // Several processes: DistributedDataParallel (weights from rank 0, bucketed gradient all-reduce).
    else if (state_->comm && state_->comm->size() > 1 && wrapper_of(model) == nullptr) {
        // Gradients are averaged over every data-parallel process (dp_cp; the world unless tp or cp split it).
        wrappers_.emplace_back(&model, std::make_shared<parallel::DistributedDataParallel>(
                                           model.named_parameters(), model.named_buffers(),
                                           state_->mesh->group(distributed::MeshDim::DpCp), state_->config.ddp));
        wrappers_.back().second->set_require_sync(!state_->in_accumulate || state_->gradient.sync_gradients());
    }
    model.prepared_by = state_;
    for (const auto &o : optimizers_) // prepared before their model: their step's clipping goes through its wrapper
        if (o->model().get() == &model) shard_optimizer(o);
}

parallel::ParallelWrapper *Accelerator::wrapper_of(const Model &model) const
{
    for (const auto &d : wrappers_)
        if (d.first == &model) return d.second.get();
    return nullptr;
}

parallel::ShardedDataParallel *Accelerator::sharded_of(const Model &model) const
{
    parallel::ParallelWrapper *w = wrapper_of(model);
    return w != nullptr ? w->sharded() : nullptr;
}

void Accelerator::shard_optimizer(const std::shared_ptr<AcceleratedOptimizer> &optimizer)
{
    parallel::ShardedDataParallel *engine = sharded_of(*optimizer->model());
    std::shared_ptr<parallel::ParallelWrapper> wrapper;
    for (const auto &d : wrappers_)
        if (d.first == optimizer->model().get()) wrapper = d.second;
    // Not sharded: only the clipping inside the step (MegatronLMPlugin's), through the model's wrapper if any.
    if (engine == nullptr) return clip_inside_step(*optimizer, wrapper, state_->config.sharding.gradient_clipping);
    if (optimizer->is_sharded()) return;
    std::weak_ptr<parallel::ShardedDataParallel> weak = std::shared_ptr<parallel::ShardedDataParallel>(wrapper, engine);
    // DeepSpeed's gradient_clipping, or MegatronLMPlugin's (its distributed optimizer runs this engine; with
    // fsdp_plugin only MegatronLMPlugin sets it).
    const double clip = state_->config.sharding.gradient_clipping;
    // The offload folder first: a path that cannot be used fails before anything changes.
    const auto &s = state_->config.sharding;
    std::unique_ptr<OffloadFiles> files;
    if (s.offload_optimizer_device == "nvme")
        files = std::make_unique<OffloadFiles>(s.offload_optimizer_nvme_path, "optimizer", state_->process_index(),
                                               s.offload_optimizer_nvme_path_key);
    auto before = [weak, clip] {
        // DeepSpeed clips inside its step (gradient_clipping), after fp16's unscaling and overflow check;
        // the inner step runs right after.
        if (auto e = weak.lock())
            if (clip > 0.0) e->clip_grad_norm(clip, 2.0, true);
    };
    // The clipping hook runs first, then the engine gathers what the step changed.
    optimizer->shard_over(
        engine->optimizer_params(), engine->layout(), [weak] {
            if (auto e = weak.lock()) e->after_optimizer_step();
        },
        [weak] {
            if (auto e = weak.lock()) e->zero_grad();
        },
        before);
    if (s.offload_optimizer_device != "none") optimizer->offload(s.offload_optimizer_device, std::move(files));
}

void Accelerator::free_memory()
{
    finish_async_save();
    if (state_->in_accumulate)
        fail(ACCEL_ERR_FAILED_PRECONDITION, "free_memory: inside accumulate(); call accumulate_end first");
    if (!autocast_scopes_.empty())
        fail(ACCEL_ERR_FAILED_PRECONDITION, "free_memory: inside autocast(); call autocast_end first");
    if (join_)
        fail(ACCEL_ERR_FAILED_PRECONDITION,
             "free_memory: inside join_uneven_inputs(); call accel_accelerator_join_uneven_inputs_end first");
    for (const auto &d : wrappers_)
        if (d.second->summoned())
            fail(ACCEL_ERR_FAILED_PRECONDITION, "free_memory: a model's parameters are summoned; call "
                                                "accel_accelerator_summon_full_params_end first");
    // The optimizers' state is joined through the engines, which the models' release ends; the optimizers
    // are rebuilt after it, over parameters back in their own dtype (under a 16-bit policy they were 16-bit
    // copies, and the state loaded over them was rounded to it).
    std::vector<PyRef> states;
    for (const auto &o : optimizers_) states.push_back(o->unsharded_state());
    for (auto &d : wrappers_) {
        d.second->release(*d.first);
        d.first->prepared_by = nullptr;
    }
    for (size_t i = 0; i < optimizers_.size(); ++i) {
        optimizers_[i]->unshard(states[i]);
        optimizers_[i]->set_before_step(nullptr); // unprepared, it steps as created (no clipping of Megatron's)
        optimizers_[i]->prepared_by = nullptr;
    }
    for (const auto &m : models_) m->prepared_by = nullptr;
    for (const auto &s : schedulers_) s->prepared_by = nullptr;
    wrappers_.clear();
    models_.clear();
    optimizers_.clear();
    schedulers_.clear();
    dataloaders_.clear(); // they stay prepared (this process's batches), as Accelerate's
    state_->step = 0;
}

void Accelerator::summon_full_params(Model &model, bool on)
{
    if (model.prepared_by != state_) fail(ACCEL_ERR_FAILED_PRECONDITION, "model: not prepared by this accelerator");
    parallel::ParallelWrapper *w = wrapper_of(model);
    if (w == nullptr) parallel::refuse_summon_whole_model();
    w->summon_full_params(on);
}

std::string Accelerator::memory_stats_json() const
{
    const auto &sc = state_->config.sharding;
    std::string strategy = sc.enabled() ? sc.strategy : (state_->comm->size() > 1 ? "DDP" : "NONE");
    std::string out = "{\"rank\": " + std::to_string(state_->comm->rank()) +
                      ", \"num_processes\": " + std::to_string(state_->comm->size()) + ", \"strategy\": \"" + strategy +
                      "\", \"models\": [";
    for (size_t i = 0; i < models_.size(); ++i) {
        const Model &m = *models_[i];
        const parallel::ParallelWrapper *w = wrapper_of(m);
        const parallel::WrapperMemory mem = w != nullptr ? w->memory() : parallel::whole_memory(m.parameters());
        const int64_t params = mem.parameter_bytes, grads = mem.gradient_bytes, gathered = mem.gathered_bytes,
                      peak_gathered = mem.peak_gathered_bytes, units = mem.num_units,
                      peak_state = mem.peak_model_state_bytes, buckets = mem.ddp_bucket_bytes,
                      offloaded_params = mem.offloaded_parameter_bytes, all_gathers = mem.all_gathers,
                      reductions = mem.reductions;
        int64_t opt = 0, offloaded = 0, peak_opt = 0;
        for (const auto &o : optimizers_)
            if (o->model().get() == &m) {
                opt += o->state_bytes();
                offloaded += o->offloaded_bytes();
                peak_opt += o->peak_state_bytes();
            }
        const int64_t state = params + grads + opt;
        out += std::string(i ? ", " : "") + "{\"parameter_bytes\": " + std::to_string(params) +
               ", \"gradient_bytes\": " + std::to_string(grads) + ", \"optimizer_state_bytes\": " + std::to_string(opt) +
               ", \"model_state_bytes\": " + std::to_string(state) + ", \"gathered_bytes\": " + std::to_string(gathered) +
               ", \"peak_gathered_bytes\": " + std::to_string(peak_gathered) +
               ", \"peak_parameter_gradient_gathered_bytes\": " + std::to_string(std::max(peak_state, params + grads + gathered)) +
               ", \"ddp_bucket_bytes\": " + std::to_string(buckets) + ", \"offloaded_bytes\": " + std::to_string(offloaded) +
               ", \"peak_optimizer_state_bytes\": " + std::to_string(peak_opt) +
               ", \"offloaded_parameter_bytes\": " + std::to_string(offloaded_params) +
               ", \"num_units\": " + std::to_string(units) + ", \"all_gathers\": " + std::to_string(all_gathers) +
               ", \"gradient_reductions\": " + std::to_string(reductions) + "}";
    }
    struct rusage ru {};
    getrusage(RUSAGE_SELF, &ru);
    return out + "], \"peak_rss_bytes\": " + std::to_string(static_cast<int64_t>(ru.ru_maxrss) * 1024) + "}";
}

void Accelerator::wait_for_everyone() { state_->comm->barrier(); }

bool Accelerator::check_trigger()
{
    // As Accelerate: a sum over the processes of each one's flag, and the flag is cleared once seen.
    at::Tensor flag = at::full({1}, trigger_ ? 1.0f : 0.0f, at::kFloat);
    if (state_->comm && state_->comm->size() > 1) state_->comm->allreduce(flag, distributed::ReduceOp::Sum);
    if (flag.item<float>() < 1.0f) return false;
    trigger_ = false;
    return true;
}

// main_process_first: the others wait before the block, the main process after it (one barrier each).
void Accelerator::main_process_first_begin(bool local)
{
    const auto &t = state_->config.topology;
    bool is_main = local ? t.local_rank == 0 : t.rank == 0;
    if (!is_main) state_->comm->barrier();
    state_->main_process_first.push_back(is_main);
}

void Accelerator::main_process_first_end()
{
    auto &open = state_->main_process_first;
    if (open.empty()) fail(ACCEL_ERR_FAILED_PRECONDITION, "main_process_first_end: no matching main_process_first_begin");
    bool is_main = open.back();
    open.pop_back();
    if (is_main) state_->comm->barrier();
}

std::string Accelerator::parallel_ranks_json() const
{
    using distributed::MeshDim;
    const distributed::DeviceMesh &m = *state_->mesh;
    std::string out = "{\"world_size\": " + std::to_string(m.shape().world()) + ", \"rank\": " + std::to_string(m.rank());
    const std::pair<const char *, MeshDim> named[] = {{"data_parallel", MeshDim::DpReplicate},
                                                      {"data_parallel_shard", MeshDim::DpShard},
                                                      {"tensor_parallel", MeshDim::Tp},
                                                      {"context_parallel", MeshDim::Cp}};
    for (const auto &[name, dim] : named)
        out += std::string(", \"") + name + "_rank\": " + std::to_string(m.rank_in(dim)) + ", \"" + name +
               "_size\": " + std::to_string(m.size(dim));
    out += ", \"pipeline_parallel_rank\": " + std::to_string(m.rank_in(MeshDim::Pp)) +
           ", \"pipeline_parallel_size\": " + std::to_string(m.size(MeshDim::Pp)) + ", \"mesh\": {";
    for (int32_t d = 0; d < distributed::kMeshGroups; ++d) {
        const auto dim = static_cast<MeshDim>(d);
        out += std::string(d ? ", \"" : "\"") + distributed::mesh_dim_name(dim) + "\": {\"size\": " +
               std::to_string(m.size(dim)) + ", \"rank\": " + std::to_string(m.rank_in(dim)) + "}";
    }
    out += "}";
    // A prepared pipeline: its schedule and this stage's last train_step (the bubble measured: the share of the
    // schedule's wall time outside this stage's forwards, losses and backwards).
    for (const auto &w : wrappers_)
        if (const parallel::pp::PipelineParallel *pipe = w.second->pipeline(); pipe != nullptr) {
            const auto &t = pipe->last_times();
            out += ", \"pipeline\": {\"schedule\": \"" + pipe->schedule() + "\", \"num_micro_batches\": " +
                   std::to_string(pipe->num_micro_batches()) + ", \"chunks\": " + std::to_string(pipe->chunks()) +
                   ", \"last_step\": {\"wall_seconds\": " + std::to_string(t.wall) + ", \"busy_seconds\": " +
                   std::to_string(t.busy) + ", \"bubble\": " + std::to_string(t.bubble_fraction()) +
                   ", \"peak_live_micro_batches\": " + std::to_string(t.peak_live) +
                   ", \"after_schedule_seconds\": " + std::to_string(t.after) + "}}";
            break;
        }
    return out + "}";
}

std::string Accelerator::ddp_stats_json() const
{
    std::string out = "{\"backend\": \"" + std::string(state_->comm->backend()) + "\", \"num_processes\": " +
                      std::to_string(state_->comm->size()) + ", \"models\": [";
    size_t i = 0;
    for (const auto &w : wrappers_) {
        const parallel::DistributedDataParallel *d = w.second->ddp();
        if (d == nullptr) continue;
        const auto st = d->stats();
        std::string sizes;
        for (size_t k = 0; k < st.bucket_sizes.size(); ++k) sizes += (k ? ", " : "") + std::to_string(st.bucket_sizes[k]);
        out += std::string(i++ ? ", " : "") + "{\"num_buckets\": " + std::to_string(st.num_buckets) +
               ", \"bucket_bytes\": " + std::to_string(st.bucket_bytes) + ", \"bucket_sizes\": [" + sizes +
               "], \"syncs\": " + std::to_string(st.syncs) + ", \"sync_seconds\": " + std::to_string(st.sync_seconds) +
               ", \"wait_seconds\": " + std::to_string(st.wait_seconds) +
               ", \"busy_seconds\": " + std::to_string(st.busy_seconds) + "}";
    }
    return out + "]}";
}

void Accelerator::prepare_optimizer(const std::shared_ptr<AcceleratedOptimizer> &optimizer)
{
    check_owner(optimizer->prepared_by, "optimizer");
    check_owner(optimizer->model()->prepared_by, "optimizer's model");
    if (optimizer->prepared_by == state_) return;
    // hf_ds_config's optimizer block takes the DummyOptim's place (Accelerate's _prepare_deepspeed).
    const auto &ds = state_->config.sharding.ds_optimizer;
    const bool dummy = optimizer->config().type == "dummy";
    if (dummy && !ds)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "optimizer: a dummy optimizer (Accelerate's DummyOptim) needs an optimizer block "
                                         "in deepspeed_plugin.hf_ds_config; create a real one otherwise");
    if (!dummy && ds)
        fail(ACCEL_ERR_INVALID_ARGUMENT, ds->key + ": the DeepSpeed config has an optimizer and the program passed "
                                         "one; create it with {\"type\": \"dummy\"} (Accelerate's DummyOptim) or remove the block");
    if (dummy) {
        config::OptimizerConfig c = ds->config;
        if (ds->auto_lr) c.lr = optimizer->config().lr;
        if (ds->auto_weight_decay) c.weight_decay = optimizer->config().weight_decay;
        optimizer->become(c);
    }
    optimizer->prepared_by = state_;
    optimizers_.push_back(optimizer);
    shard_optimizer(optimizer); // over the engine's shards when its model is sharded
}

void Accelerator::check_dataloader(const DataLoaderShard &loader) const
{
    // hf_ds_config: train_micro_batch_size_per_gpu "auto" is this loader's batch per process (Accelerate's fill),
    // and DeepSpeed's triangle must then hold.
    const auto &c = state_->config;
    const auto train = c.sharding.ds_train_batch_size_to_check, fixed_micro = c.sharding.ds_micro_batch_size_to_check;
    if ((!train && !fixed_micro) || loader.prepared_by() == state_) return;
    const int64_t world = state_->data_parallel_size(); // the data shards, each its own micro-batch
    const int64_t micro = c.dataloader.split_batches ? loader.options().batch_size / world : loader.options().batch_size;
    // A warning, not a refusal: an evaluation loader legitimately has another batch size.
    if (fixed_micro && micro != *fixed_micro && state_->process_index() == 0)
        logging::log_as(ACCEL_LOG_WARNING, 0, state_->num_processes(),
                        logging::printf_string(
                            "deepspeed_plugin.hf_ds_config.train_micro_batch_size_per_gpu is %lld but this data "
                            "loader gives each process %lld samples per batch; the loader's batch is what trains (as "
                            "under Accelerate); write \"auto\" or make them agree if this is the training loader",
                            static_cast<long long>(*fixed_micro), static_cast<long long>(micro)));
    if (!train) return;
    const int64_t accumulation = c.gradient_accumulation.num_steps;
    if (micro * accumulation * world != *train)
        fail(ACCEL_ERR_INVALID_ARGUMENT,
             "deepspeed_plugin.hf_ds_config.train_batch_size: " + std::to_string(*train) + " is not the data loader's "
                 "batch size per process (" + std::to_string(micro) + ", train_micro_batch_size_per_gpu \"auto\") x "
                 "gradient_accumulation_steps (" + std::to_string(accumulation) + ") x " + std::to_string(world) +
                 " process(es)");
}

void Accelerator::prepare_dataloader(DataLoaderShard &loader)
{
    check_owner(loader.prepared_by(), "dataloader");
    check_dataloader(loader);
    if (loader.prepared_by() != state_) loader.prepare(state_);
}

void Accelerator::prepare_scheduler(AcceleratedScheduler &scheduler)
{
    check_owner(scheduler.prepared_by, "scheduler");
    if (scheduler.optimizer()->prepared_by != state_)
        fail(ACCEL_ERR_FAILED_PRECONDITION, "scheduler: its optimizer must be prepared by this accelerator first");
    if (scheduler.prepared_by == state_) return;
    // hf_ds_config's scheduler block takes the DummyScheduler's place, "auto" filled as Accelerate fills it.
    const auto &ds = state_->config.sharding.ds_scheduler;
    const config::SchedulerConfig &mine = scheduler.config();
    const bool dummy = mine.type == "dummy";
    if (dummy && !ds)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "scheduler: a dummy scheduler (Accelerate's DummyScheduler) needs a scheduler block "
                                         "in deepspeed_plugin.hf_ds_config; create a real one otherwise");
    if (!dummy && !ds && state_->config.sharding.ds_optimizer)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "scheduler: its optimizer comes from deepspeed_plugin.hf_ds_config's optimizer "
                                         "block; schedule it with a scheduler block there and a dummy scheduler");
    if (!dummy && ds)
        fail(ACCEL_ERR_INVALID_ARGUMENT, ds->key + ": the DeepSpeed config has a scheduler and the program passed "
                                         "one; create it with {\"type\": \"dummy\"} (Accelerate's DummyScheduler) or remove the block");
    if (dummy) {
        config::SchedulerConfig c = ds->config;
        if (ds->auto_min_lr) c.warmup_min_lr = 0.0;
        if (ds->auto_max_lr) c.warmup_max_lr = scheduler.optimizer()->lr(0);
        if (ds->auto_warmup) c.num_warmup_steps = mine.num_warmup_steps;
        if (ds->auto_total) {
            if (mine.num_training_steps < 0)
                fail(ACCEL_ERR_INVALID_ARGUMENT, ds->key + ".params.total_num_steps: \"auto\" needs the dummy scheduler's "
                                                 "total_num_steps");
            // Accelerate: the schedule counts optimizer steps of one process.
            const int64_t n = state_->config.dataloader.split_batches ? 1 : state_->num_processes();
            c.num_training_steps = (mine.num_training_steps + n - 1) / n;
        }
        if (c.num_warmup_steps < 1)
            fail(ACCEL_ERR_INVALID_ARGUMENT, ds->key + ".params.warmup_num_steps: must be a positive integer (DeepSpeed's "
                                             "rule), got " + std::to_string(c.num_warmup_steps));
        scheduler.become(c);
    }
    scheduler.prepared_by = state_;
}

namespace {
template <class T>
void remember(std::vector<std::shared_ptr<T>> &list, const std::shared_ptr<T> &object)
{
    if (std::find(list.begin(), list.end(), object) == list.end()) list.push_back(object);
}
} // namespace

void Accelerator::prepare_model(const std::shared_ptr<Model> &model)
{
    prepare_model(*model);
    remember(models_, model);
}

void Accelerator::prepare_dataloader(const std::shared_ptr<DataLoaderShard> &loader)
{
    prepare_dataloader(*loader);
    remember(dataloaders_, loader);
}

void Accelerator::prepare_scheduler(const std::shared_ptr<AcceleratedScheduler> &scheduler)
{
    prepare_scheduler(*scheduler);
    remember(schedulers_, scheduler);
}

void Accelerator::check_loss(const at::Tensor &loss)
{
    if (!loss.defined()) fail(ACCEL_ERR_INVALID_ARGUMENT, "loss: must not be NULL");
    if (loss.numel() != 1)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "loss: expected a scalar, got shape " + c10::str(loss.sizes()));
    if (!loss.requires_grad())
        fail(ACCEL_ERR_INVALID_ARGUMENT, "loss: does not require grad (compute it from a model's outputs, e.g. with "
                                         "accel_loss_compute)");
}

void Accelerator::run_backward(const at::Tensor &loss, bool retain_graph)
{
    try {
        loss.backward({}, retain_graph);
    } catch (const c10::Error &e) {
        for (auto &d : wrappers_) d.second->abort_backward(); // leave no bucket half-done
        // A second backward through the same graph is a call-order mistake, not an internal error.
        std::string msg = e.what_without_backtrace();
        if (msg.find("backward through the graph a second time") == std::string::npos) throw;
        fail(ACCEL_ERR_FAILED_PRECONDITION, "loss: backward already ran through this loss's graph; compute the "
                                            "loss again from a new forward");
    }
}

void Accelerator::backward(const at::Tensor &loss)
{
    profiling::Range range(profiling::kBackward);
    check_loss(loss);
    for (auto &d : wrappers_)
        if (d.second->pipeline() != nullptr)
            fail(ACCEL_ERR_FAILED_PRECONDITION, "backward: a pipeline-parallel model (parallelism_config.pp_size > 1) has "
                                                "no single loss to call backward on; accel_accelerator_train_step runs "
                                                "the pipeline's schedule (forward and backward of every micro-batch)");
    run_backward(scaled_for_backward(*state_, loss), false);
    // DDP: wait for the buckets launched during backward and write the averaged gradients.
    for (auto &d : wrappers_) d.second->finish_backward();
}

void Accelerator::accumulate_begin(const Model *model)
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
    const bool sync = syncs_this_batch(s);
    for (auto &d : wrappers_)
        if (d.first == model) d.second->set_require_sync(sync);
    s.in_accumulate = true;
}

void Accelerator::accumulate_end()
{
    if (!state_->in_accumulate) fail(ACCEL_ERR_FAILED_PRECONDITION, "accumulate_end: no matching accumulate_begin");
    state_->in_accumulate = false;
    for (auto &d : wrappers_) d.second->set_require_sync(true); // leaving no_sync
}

double Accelerator::clip_grad_norm(Model &model, double max_norm, double norm_type)
{
    if (!(max_norm >= 0.0) || std::isinf(max_norm))
        fail(ACCEL_ERR_INVALID_ARGUMENT, "max_norm: expected a finite number >= 0, got " + std::to_string(max_norm));
    if (!(norm_type > 0.0))
        fail(ACCEL_ERR_INVALID_ARGUMENT, "norm_type: expected a number > 0 or INFINITY, got " + std::to_string(norm_type));
    unscale_gradients(nullptr); // the norm is that of the true (unscaled) gradients
    // A wrapper splitting the gradients computes the global norm from every rank's part. Under DeepSpeed
    // the step clips (gradient_clipping), so this only measures (Accelerate returns None there); so does
    // MegatronLMPlugin's gradient_clipping (clipping twice would shrink the gradients a second time).
    const bool clip = state_->config.sharding.frontend != "deepspeed" && state_->config.sharding.gradient_clipping == 0.0;
    if (auto *w = wrapper_of(model)) return w->clip_grad_norm(max_norm, norm_type, clip);
    return parallel::whole_clip_grad_norm(model.parameters(), max_norm, norm_type, clip);
}

void Accelerator::clip_grad_value(Model &model, double clip_value)
{
    if (!(clip_value >= 0.0) || std::isinf(clip_value))
        fail(ACCEL_ERR_INVALID_ARGUMENT, "clip_value: expected a finite number >= 0, got " + std::to_string(clip_value));
    unscale_gradients(nullptr);
    if (auto *w = wrapper_of(model)) return w->clip_grad_value(clip_value);
    parallel::whole_clip_grad_value(model.parameters(), clip_value);
}

void Accelerator::unscale_gradients(AcceleratedOptimizer *optimizer)
{
    GradScaler *s = state_->scaler.get();
    if (s == nullptr || !s->is_enabled()) return;
    if (optimizer != nullptr) {
        if (optimizer->prepared_by != state_)
            fail(ACCEL_ERR_FAILED_PRECONDITION, "optimizer: not prepared by this accelerator");
        s->unscale_(optimizer, optimizer->params());
        return;
    }
    for (const auto &o : optimizers_) s->unscale_(o.get(), o->params());
}

void Accelerator::autocast_begin()
{
    const auto &c = state_->config;
    // Accelerate's autocast(): torch.autocast for native AMP (bf16, fp8 -> bf16, fp16), else a null context.
    if (c.mixed_precision == ACCEL_MIXED_PRECISION_NO) {
        autocast_scopes_.push_back(nullptr);
        return;
    }
    autocast_scopes_.push_back(
        std::make_unique<AutocastScope>(state_->places_on_device() ? state_->device.type() : at::kCPU,
                                        autocast_dtype(*state_), c.autocast.cache_enabled, c.autocast.enabled));
}

void Accelerator::autocast_end()
{
    if (autocast_scopes_.empty()) fail(ACCEL_ERR_FAILED_PRECONDITION, "autocast_end: no matching autocast_begin");
    autocast_scopes_.pop_back();
}

bool Accelerator::optimizer_step_was_skipped() const
{
    for (const auto &o : optimizers_)
        if (o->step_was_skipped()) return true;
    return false;
}

double Accelerator::train_step(Model &model, AcceleratedOptimizer &optimizer, AcceleratedScheduler *scheduler,
                               const Batch &batch, const Loss &loss)
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
    accumulate_begin(&model);
    try {
        if (auto *w = wrapper_of(model); w != nullptr && w->pipeline() != nullptr) {
            // The pipeline runs forward, loss and backward of every micro-batch itself.
            const double value = w->pipeline()->run(
                batch.inputs, batch.labels,
                [&](const at::Tensor &out, const at::Tensor &labels) { return compute_loss(loss, out, labels); },
                [this](const at::Tensor &l) { return scaled_for_backward(*state_, l); });
            optimizer.step();
            if (scheduler != nullptr) scheduler->step();
            optimizer.zero_grad();
            accumulate_end();
            return value;
        }
        const auto forward_loss = [&](const at::Tensor &inputs, const at::Tensor &labels) {
            at::Tensor out;
            try {
                if (auto *w = wrapper_of(model); w != nullptr && model.is_training()) w->before_forward();
                out = forward(model, inputs, true);
            } catch (const c10::Error &e) {
                fail_if_out_of_memory(e.what_without_backtrace(), "batch: running the model on inputs of shape " +
                                                                      c10::str(inputs.sizes()));
                // As accel_model_forward: inputs the model cannot take are an argument error, not an internal one.
                fail(ACCEL_ERR_INVALID_ARGUMENT, "batch: the model cannot run on inputs of shape " +
                                                     c10::str(inputs.sizes()) + " and dtype " +
                                                     c10::toString(inputs.scalar_type()) + ": " + e.what_without_backtrace());
            }
            return compute_loss(loss, out, labels);
        };
        // MegatronLMPlugin's num_micro_batches at pp_degree 1 (config/megatron_lm_plugin.cpp): Megatron's
        // forward_backward_no_pipelining splits the batch into that many micro-batches, each loss divided by their
        // count before its backward, the gradients communicated after the last only; it reports their mean loss.
        const int64_t micro = state_->config.parallelism.pp_size > 1 ? 1 : state_->config.parallelism.num_micro_batches;
        double value = 0.0;
        if (micro <= 1) {
            at::Tensor l = forward_loss(batch.inputs, batch.labels);
            backward(l);
            value = l.item<double>();
        } else {
            parallel::ParallelWrapper *w = wrapper_of(model);
            const bool sync = syncs_this_batch(*state_);
            for (int64_t i = 0; i < micro; ++i) {
                const auto [inputs, labels] = micro_batch(batch, i, micro);
                if (w != nullptr) w->set_require_sync(sync && i == micro - 1);
                at::Tensor l = forward_loss(inputs, labels);
                backward(l / static_cast<double>(micro));
                value += l.item<double>() / static_cast<double>(micro);
            }
        }
        optimizer.step();
        if (scheduler != nullptr) scheduler->step();
        optimizer.zero_grad();
        accumulate_end();
        return value;
    } catch (...) {
        accumulate_end();
        throw;
    }
}

} // namespace accel
