// Pipeline parallelism's counterpart of zero3_init_flag (issue 36: no whole model on any rank).
//
// While an accelerator with parallelism_config.pp_size > 1 lives (without a sharding plugin), a gpt or llama
// model built from a JSON spec (or by from_pretrained) on the thread that created it holds only that rank's stage:
// each parameter of another stage is drawn as a whole model's build draws it (so the generator advances alike and
// the stage's parameters are bit for bit those of a model built in one process) and moved to the meta device at
// once, before the next is made; so the build never holds more than the stage plus one tensor. After the build the
// other stages' parameters hold zero elements, as prepare's cut (GptModel::apply_pipeline_stage) leaves them, and
// from_pretrained reads none of their tensors. Until the accelerator prepares it, the model refuses to compute or be
// read (its ForwardHooks name the stage); prepare_pipeline then uses the stage it was built with.
// Under pp x tp the other stages' parameters stay on meta (their shapes, no memory) until prepare has applied the
// tensor-parallel plan and cut the model. The scope is the creating thread's (thread ranks of a test each hold
// theirs); a model built on another thread, a lora or empty_init spec, other model types than gpt and llama, and a
// cut the config refuses are built whole and cut at prepare.
#pragma once

#include "config/parallelism_config.hpp"
#include "model/model.hpp"

#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace accel::config {
struct ModelSpec;
}

namespace accel::parallel::pp {

class StageAtInit final : public ForwardHooks, public std::enable_shared_from_this<StageAtInit> {
public:
    // Held by an accelerator with pp_size > 1 for its life: models built meanwhile on this thread are stage
    // `stage` of `stages` cut by `config`. The newest scope still held wins. `keep_shapes` (pp x tp): the other
    // stages' parameters stay on the meta device until prepare, so that the tensor-parallel plan, applied to the
    // whole model before the cut, sees their shapes (release_elsewhere then empties them).
    static std::shared_ptr<void> scope(int32_t stages, int32_t stage, const config::ParallelismConfig &config,
                                       bool keep_shapes = false);
    // The builder of a model about to be built from `spec`, or null (see above for what is built whole).
    static std::shared_ptr<StageAtInit> for_new_model(const config::ModelSpec &spec);
    // The builder of a model built by stage and not prepared yet (null otherwise).
    static std::shared_ptr<StageAtInit> of(const Model &model);

    // The order the model's constructor makes its parameters in: `before` tensors ahead of the blocks (the first
    // stage's), `per_block` for each block, then the last stage's; `costs`: each block's parameter count.
    // `tied`: whether the first of the `before` tensors is the head too (tied word embeddings: the last stage's).
    struct Layout {
        size_t before = 0, per_block = 0, after = 0;
        bool tied = false;
        std::vector<int64_t> costs;
        std::string block_prefix = "transformer.h."; // block i's parameters are named block_prefix + i + "."
    };
    StageAtInit(int32_t stages, int32_t stage, config::ParallelismConfig config, Layout layout, bool keep_shapes);
    // The on_parameter hook (model.hpp) for the build: another stage's parameter goes to the meta device.
    ParameterFn hook();
    // After the build: every parameter checked by name against the part the hook took it for (INTERNAL when the
    // model's order is not the one assumed), the other stages' left with zero elements (on meta with their shapes
    // under keep_shapes), the model's forward_hooks set to this.
    void finish(Model &model);
    // The other stages' parameters with zero elements on the device of the stage's own, as prepare's cut leaves
    // them (nothing to do unless keep_shapes left them on meta).
    void release_elsewhere(Model &model) const;
    // Whether `param` belongs to another stage (holds no values here).
    bool elsewhere(const at::Tensor &param) const { return elsewhere_.count(param.unsafeGetTensorImpl()) != 0; }

    int32_t stages() const { return stages_; }
    int32_t stage() const { return stage_; }
    // This stage's chunks of blocks [begin, end), as prepare cuts them (stages.hpp's stage_chunks).
    const std::vector<std::pair<int64_t, int64_t>> &chunks() const { return chunks_; }
    // FAILED_PRECONDITION unless `config` cuts the model into the stage it was built as, with tensor parallelism
    // (`tp`) as it was built for (prepare's check: a model is prepared by the accelerator it was built under).
    void check_same_cut(int32_t stages, int32_t stage, const config::ParallelismConfig &config, bool tp) const;

    // ForwardHooks: nothing runs or is read until prepared (the other stages' parameters exist on their ranks only).
    at::Tensor before_forward(const at::Tensor &input) override;
    void before_layer(size_t) override; // GptModel::forward calls it first
    at::Tensor after_layer(size_t, const at::Tensor &out) override { return out; }
    at::Tensor after_forward(const at::Tensor &out) override { return out; }
    void check_access(const char *what) const override;

private:
    bool keeps(size_t index) const; // the hook's index-th parameter (GPT's order) is this stage's
    std::string describe() const;

    int32_t stages_, stage_;
    config::ParallelismConfig config_;
    Layout layout_;
    std::vector<std::pair<int64_t, int64_t>> chunks_;
    bool keep_shapes_;
    size_t made_ = 0; // parameters the hook has seen
    std::vector<const void *> order_; // their tensor objects, in build order (finish checks them)
    std::set<const void *> elsewhere_;
};

} // namespace accel::parallel::pp
