// deepspeed_plugin.zero3_init_flag: DeepSpeed's zero.Init for the models accel builds.
//
// While an accelerator created with ZeRO stage 3 and the flag lives (Accelerate's switch is process-wide
// too: transformers asks is_deepspeed_zero3_enabled() when it builds a model), a model built from a JSON
// spec is partitioned parameter by parameter as it is built: each new parameter takes rank 0's values
// (broadcast, as DeepSpeed starts every rank from rank 0's weights), this process keeps its 1/N slice and
// the whole tensor's storage is freed before the next layer is built. No process holds more than one whole
// layer of the model at a time. (A model whose whole size exceeds the machine's memory and swap is still
// refused when built: make_model_from_json checks the whole size.) Building is then collective: every
// process builds the same models in the same order.
//
// fsdp_plugin.cpu_ram_efficient_loading holds a scope for from_pretrained only (transformers reads the flag there
// alone): a pretrained model is built partitioned and each process reads only its slices of the weight files, so no
// process holds the whole model; models built from a JSON spec are not partitioned by it.
//
// The partitioned model cannot compute or be read until it is prepared: its ForwardHooks refuse, naming
// the flag. The sharding engine gathers each parameter straight into its unit's buffer as it packs the
// units (one unit whole at a time); any other preparation gathers every parameter whole first.
#pragma once

#include "model/model.hpp"

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

namespace accel::distributed {
class Communicator;
}

namespace accel::parallel {

class PartitionedAtInit final : public ForwardHooks {
public:
    // Held by an accelerator with zero3_init_flag for its life: models built meanwhile are partitioned
    // over `comm`. The newest scope still held wins.
    // `flag` names the setting in messages; `pretrained_only`: only from_pretrained's models are partitioned.
    static std::shared_ptr<void> scope(std::shared_ptr<distributed::Communicator> comm, const char *flag,
                                       bool pretrained_only);
    // A partitioner for a model about to be built (`pretrained`: by from_pretrained), or null when no scope
    // that applies is held.
    static std::shared_ptr<PartitionedAtInit> for_new_model(bool pretrained = false);
    // The partitioner of a model built partitioned and not gathered yet (null otherwise).
    static std::shared_ptr<PartitionedAtInit> of(const Model &model);

    PartitionedAtInit(std::shared_ptr<distributed::Communicator> comm, const char *flag);
    // The setting that partitions ("deepspeed_plugin.zero3_init_flag", "fsdp_plugin.cpu_ram_efficient_loading").
    const char *flag() const { return flag_; }

    // Collective: rank 0's values, this process's slice kept, the parameter's storage freed.
    void partition(const at::Tensor &param);
    // Whether `param` was partitioned and is not gathered yet.
    bool holds(const at::Tensor &param) const;
    // Collective (every process, the same parameters in the same order): the values of `param` into `dst`
    // (flat, its numel); its slice is dropped. The parameter's own storage stays freed.
    void gather_into(const at::Tensor &param, const at::Tensor &dst);
    // This process's slice of `param`, to write into (a flat view of the elements it keeps, without the padding),
    // and `offset`, where the slice starts in the flattened parameter. Not collective: from_pretrained fills it
    // with the matching range of a weights file, so that no process reads more than its slices.
    at::Tensor slice_of(const at::Tensor &param, int64_t &offset);
    // from_pretrained's dtype (the folder's, or torch_dtype) for a partitioned parameter: its slice is converted and
    // the parameter (still without storage) takes the dtype, as whole loading converts the whole tensor. Not collective.
    void convert(const at::Tensor &param, at::ScalarType dtype);
    // Collective: every parameter still held gets its storage and values back, in partition order.
    void restore_all();
    // Whether any parameter is partitioned and not gathered yet.
    bool holds_any() const { return !slices_.empty(); }

    // ForwardHooks: nothing can run or be read while partitioned.
    at::Tensor before_forward(const at::Tensor &input) override;
    void before_layer(size_t) override {}
    at::Tensor after_layer(size_t, const at::Tensor &out) override { return out; }
    at::Tensor after_forward(const at::Tensor &out) override { return out; }
    void check_access(const char *what) const override;

private:
    struct Slice {
        at::Tensor param, mine; // the parameter (no storage) and this process's slice (padded)
    };
    std::vector<Slice>::iterator find(const at::Tensor &param);
    void gather(const Slice &s, const at::Tensor &dst); // collective: the whole values (flat) into dst

    std::shared_ptr<distributed::Communicator> comm_;
    const char *flag_;
    std::vector<Slice> slices_; // in partition order
};

} // namespace accel::parallel
