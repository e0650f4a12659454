// SHARDED_STATE_DICT under tensor parallelism inside the sharding engine (TP x FSDP / ZeRO-3): the engine's
// parameters and its optimizer's state are this tp rank's slices, and its pieces are flat ranges of them. Saving,
// each split tensor says how it is split (checkpointing's TpSave: the slices' pieces, the whole shape); loading,
// a folder of whole tensors (any mesh's, read through checkpointing/tp_pieces.hpp) is seen as this rank's slices
// by range, so each rank reads only its part, the vocabulary's padding rows as zeros.
#pragma once

#include "checkpointing/checkpointing.hpp"
#include "parallel/tensor_parallel/slicing.hpp"
#include "state/state_dict.hpp"

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace accel {
class Model;
}

namespace accel::parallel::tp {

// How a tensor named as in a sharded state dict is split (null: not split).
using SlicingOf = std::function<const ParameterSlicing *(const std::string &name)>;

// The split parameters of `model` by every name the model gives them (a tied head's too: the engine saves a
// tied weight under its first name). Empty when the model is not split.
std::map<std::string, ParameterSlicing> slicing_by_name(const Model &model);
// An optimizer's sharded tensors, "state.{id}.{key}" (`ids`: the parameter names in the state dict's id order),
// by their parameter's slicing (DATA_LOSS naming `what` for another name).
SlicingOf optimizer_slicing(std::map<std::string, ParameterSlicing> by_name, std::vector<std::string> ids, std::string what);
SlicingOf model_slicing(std::map<std::string, ParameterSlicing> by_name);

// What save_state records for `state` (this tp rank's pieces of `model`, or of its optimizer's state): the split
// tensors by name. Optimizer state not shaped as its parameter's slice (factored moments) is UNIMPLEMENTED, named.
ckpt::TpSave tp_save(const Model &model, const ShardedState &state, const SlicingOf &slicing_of);
// `whole` (a source of whole tensors) as tp rank `rank` of `size`'s slices of the tensors slicing_of names
// (the others as they are; a tensor not of the whole size along its split dimension too, for the load to name).
ShardedSource sliced_source(const ShardedSource &whole, SlicingOf slicing_of, int64_t rank, int64_t size);

} // namespace accel::parallel::tp
