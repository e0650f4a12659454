// The whole tensors of a model split by tensor parallelism, for as long as a checkpoint needs them (save_state,
// load_state, save_model), as FSDP's FULL_STATE_DICT gathers a sharded model:
// each split parameter is gathered over the tp group into its unsplit tensor (the vocabulary's padding rows
// dropped), in place (set_data: the model's tensors, the optimizer's state keys and DDP's references keep
// their identity), and afterwards cut back to this rank's slice of whatever the whole tensor then holds (a
// loaded checkpoint). The optimizer state of those parameters goes the same
// way, so a checkpoint holds one process's layout whatever tp saved or loads it.
#pragma once

#include "parallel/tensor_parallel/slicing.hpp"
#include "state/state_dict.hpp"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace accel {
class AcceleratedOptimizer;
class Model;
} // namespace accel

namespace accel::distributed {
class Communicator;
}

namespace accel::parallel::tp {

// How tensor parallelism split `model`: each split parameter's slicing by name, and the group. Null group
// when the model is not split (no plan applied, or tp 1).
struct SplitModel {
    const std::map<std::string, ParameterSlicing> *slicing = nullptr;
    std::shared_ptr<distributed::Communicator> group;
    explicit operator bool() const { return group != nullptr; }
};
SplitModel split_of(const Model &model);

// A split parameter and its slice before it was gathered (sharing its storage), to restore it into.
struct KeptSlice {
    at::Tensor param, before;
};
// Every split parameter whole (collective over the tp group: every rank, the same models in the same order),
// and back to this rank's slice (local; a parameter already a slice is left as it is): into the storage kept
// by the gathering (the sharding engine's parameters are views of its flat buffers, which must stay so), else
// a new one (a loaded whole tensor of a parameter that was not gathered).
std::vector<KeptSlice> gather_parameters(const Model &model);
void slice_parameters(const Model &model, const std::vector<KeptSlice> &kept);
// The same for `optimizer`'s state of the split parameters (its tensors shaped as their parameter; state
// of another shape - AdaLomo's factored moments - is UNIMPLEMENTED, named). No state yet: nothing to do.
void gather_optimizer_state(const Model &model, AcceleratedOptimizer &optimizer);
void slice_optimizer_state(const Model &model, AcceleratedOptimizer &optimizer);

// TP inside the sharding engine (whose parameters are views of its flat buffers and whose optimizer steps flat
// shards: neither can take whole tensors in place). save_state: the optimizer's state dict as the engine gives it
// (PyTorch's per-parameter form, each split parameter's per-element tensors shaped as this rank's slice) with those
// tensors joined over the tp group into one process's shapes (collective over the group: every rank, the same
// dict). load_state: a whole state dict (a FULL folder) with them cut to this rank's slices, and whole weights
// likewise (local). `names`: the trainable parameters in the state dict's id order (param_names_by_group, group
// after group). Tensors of another shape than their parameter (factored moments) are UNIMPLEMENTED, named.
PyRef joined_optimizer_state(const Model &model, const PyObj &state_dict, const std::vector<std::string> &names);
PyRef sliced_optimizer_state(const Model &model, const PyObj &state_dict, const std::vector<std::string> &names);
TensorList sliced_weights(const Model &model, TensorList whole);

// save_state / load_state / save_model: the split models (and their optimizers' state) whole while this
// lives, then sliced again (also when the checkpoint failed: a failed load leaves the gathered tensors as
// they were, so the slices are the ones before). No forward in between: the model computes with its slices.
class WholeForCheckpoint {
public:
    struct Part {
        const Model *model;
        std::vector<AcceleratedOptimizer *> optimizers;
    };
    explicit WholeForCheckpoint(std::vector<Part> parts);
    ~WholeForCheckpoint();
    WholeForCheckpoint(const WholeForCheckpoint &) = delete;
    WholeForCheckpoint &operator=(const WholeForCheckpoint &) = delete;

private:
    void release() noexcept;
    std::vector<Part> parts_;
    std::vector<KeptSlice> kept_;
};

} // namespace accel::parallel::tp
