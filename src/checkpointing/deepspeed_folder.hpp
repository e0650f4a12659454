// DeepSpeed's checkpoint layout (shared/spec/checkpoint-format.md §2.2), as Accelerate's save_state leaves
// it under DeepSpeed: <dir>/<tag>/ ("pytorch_model", "pytorch_model_{i}") holding the model states file(s)
// and one optimizer states file per data-parallel rank, and <dir>/latest naming the tag. What the files hold
// follows DeepSpeed's engine and ZeRO optimizers (the keys DeepSpeed's zero_to_fp32.py reads among them):
//   - ZeRO-1/2: each parameter group is one flat float32 vector (its parameters back to back), padded to a
//     multiple of 2 x world and cut into `world` equal partitions; rank r's file holds partition r
//     (single_partition_of_fp32_groups, without the padding) and the base optimizer's state over it.
//   - ZeRO-3: every parameter is cut into `world` partitions of ceil(numel / world) elements (the last padded);
//     rank r's flat group is its partition of each parameter of the group, back to back (fp32_flat_groups).
// This file knows the layout only: the partition arithmetic, the names, and reading such a folder back as
// sources by element range. The Accelerator hands it the values (src/accelerator/deepspeed_checkpoint.cpp).
#pragma once

#include "state/state_dict.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace accel::ckpt {

// "pytorch_model" for model 0, "pytorch_model_{i}" after (Accelerate's tags).
std::string deepspeed_tag(size_t i);
// mp_rank_{mp:02d}_model_states.pt (ZeRO-1/2: data-parallel rank 0 only) or
// zero_pp_rank_{r}_mp_rank_{mp:02d}_model_states.pt (ZeRO-3), as DeepSpeed's engine names them (_get_ckpt_name):
// `mp` is the model-parallel (tp) rank, `r` the rank in the data-parallel group the ZeRO partitions span.
std::string deepspeed_model_states_name(int stage, int32_t rank, int32_t mp = 0);
// [bf16_]zero_pp_rank_{r}_mp_rank_{mp:02d}_optim_states.pt (_get_zero_ckpt_name).
std::string deepspeed_optim_states_name(int32_t rank, bool bf16, int32_t mp = 0);

// DeepSpeed's partition of the trainable parameters (given group by group, each in optimizer order).
struct DsParam {
    std::string name;
    std::vector<int64_t> shape;
    size_t group = 0;
    int64_t numel() const;
};
// Elements [param_offset, param_offset + numel) of parameter `param` lie at `flat_offset` of a rank's flat
// tensor of the parameter's group.
struct DsRun {
    size_t param;
    int64_t param_offset, numel, flat_offset;
};
class DsPartition {
public:
    DsPartition(std::vector<DsParam> params, size_t groups, int stage, int32_t world);
    const std::vector<DsParam> &params() const { return params_; }
    size_t groups() const { return groups_; }
    int stage() const { return stage_; }
    int32_t world() const { return world_; }
    // Rank r's runs in group g, in flat order; the length of every rank's flat tensor of group g (with
    // padding); the padding at the end of rank r's (ZeRO-1/2 files hold the partition without it).
    std::vector<DsRun> runs(int32_t rank, size_t g) const;
    int64_t flat_numel(size_t g) const;
    int64_t padding(int32_t rank, size_t g) const;

private:
    std::vector<DsParam> params_;
    size_t groups_;
    int stage_;
    int32_t world_;
    std::vector<int64_t> group_numel_; // ZeRO-1/2: the group's elements; the partition size
    std::vector<int64_t> partition_;
};

// A DeepSpeed folder read back (any process count; sharded or not): the model's tensors (trainable
// parameters from the float32 partitions, buffers and frozen parameters from the model states) and the
// optimizer's state in accel's sharded form ("state.{id}.{key}" per parameter, `optimizer_rest` the rest),
// both readable by range. Every file is checked when opened: a missing, truncated or foreign one is
// DATA_LOSS naming it.
// How tensor parallelism cut a parameter of a folder saved under tp (mp_world_size > 1): along `dim` in `groups`
// blocks, `whole` long before padding (parallel/tensor_parallel/slicing.hpp's ParameterSlicing). accel records
// it in every model states file as "accel_tp_slicing" (DeepSpeed hands unknown keys back as client state), so
// the folder's slices can be joined without the model (merge-weights) or re-cut for another tp size.
struct DsSlicing {
    int64_t dim = -1, groups = 1, whole = 0;
};
struct DsFolder {
    int stage = 0;
    int32_t world = 1;
    // The model-parallel (tp) rank read and how many the folder holds (its model states' mp_world_size), with
    // the slicing of each split parameter (empty when mp_world is 1).
    int32_t mp_rank = 0, mp_world = 1;
    std::map<std::string, DsSlicing> slicing;
    std::vector<std::string> params; // the trainable parameters by optimizer id ("state.{id}.{key}")
    ShardedSource model;
    ShardedSource optimizer;
    PyRef optimizer_rest;
};
// Whether `dir` (a tag folder) holds DeepSpeed model or optimizer states files.
bool is_deepspeed_folder(const std::string &dir);
// The tag folder of model `i` in the save_state folder `dir`: <dir>/pytorch_model{_i} (Accelerate names the tag
// and passes it to DeepSpeed), else, for model 0, the tag <dir>/latest names (DeepSpeed's load_checkpoint with
// tag=None: a folder saved by DeepSpeed itself), unless `latest` is a link or the folder holds another layout's
// weights. DATA_LOSS naming `latest` when it names no folder.
std::string deepspeed_load_folder(const std::string &dir, size_t i);
// Whether the folder holds nothing but DeepSpeed's state files (*_model_states.pt, *_optim_states.pt, and accel's
// record of them, accel_checksums.json): a tag
// folder of an earlier save, which a save into the same folder may replace whole.
bool holds_only_deepspeed_files(const std::string &dir);
// How many model-parallel (tp) ranks' files the folder holds (1 for a folder saved without tp), by the names of
// data-parallel rank 0's optimizer states files.
int32_t deepspeed_mp_world(const std::string &dir);
// The files of model-parallel rank `mp` (tp rank; 0 for a folder saved without tp). OUT_OF_RANGE naming the folder
// when it holds fewer model-parallel ranks.
DsFolder read_deepspeed_folder(const std::string &dir, int32_t mp = 0);

// A DeepSpeed folder as one process's state (merge-weights; load_state at another tp size than the folder's): the
// model's tensors and the optimizer's per-element state of every model-parallel rank, the tp slices of each split
// parameter joined as accel_tp_slicing records (the vocabulary's padding dropped), the replicated ones from
// mp_rank 00; the optimizer's state dict in PyTorch's per-parameter form (optimizer.bin's). UNIMPLEMENTED naming
// the folder when it holds several model-parallel ranks without that record (a Megatron-DeepSpeed folder: the split
// dimensions are the model's).
struct DsWhole {
    TensorList model;
    PyRef optimizer;
};
DsWhole read_deepspeed_whole(const std::string &dir);

// The text of <output_dir>/zero_to_fp32.py, which save_state writes beside the layout where DeepSpeed copies its
// own recovery script: accel's, for the files accel writes, needing only Python's torch.
const char *zero_to_fp32_script();

} // namespace accel::ckpt

namespace accel::ckpt {

// What one rank writes, from values the Accelerator gathered (every tensor on the host, float32 where
// DeepSpeed keeps float32).
struct DsRankState {
    int32_t rank = 0;
    std::vector<at::Tensor> fp32;         // per group: the rank's flat master partition (flat_numel long)
    std::vector<PyRef> group_state;       // per group: the base optimizer's state entry over it, or null
    std::vector<PyRef> group_options;     // per group: the hyperparameters (without "params")
    TensorList module;                    // the model states' "module" (ZeRO-3: parameters as empty tensors)
    std::vector<std::string> buffer_names;
    std::vector<std::pair<std::string, std::vector<int64_t>>> frozen_shapes; // frozen parameters
    TensorList frozen_fragments;          // ZeRO-2: each frozen parameter whole; ZeRO-3: its partition
    std::vector<std::pair<std::string, std::string>> shared_params; // a tied name -> the name it shares with
    double clip_grad = 0.0;
    bool bf16 = false;
    int64_t global_steps = 0;
    int32_t mp_rank = 0, mp_world = 1;                          // tensor parallelism's rank and size
    std::vector<std::pair<std::string, DsSlicing>> tp_slicing; // the split parameters (under tp)
};
// The model states file's object (ZeRO-1/2: rank 0's only file; ZeRO-3: every rank's) and the optimizer
// states file's.
PyRef deepspeed_model_states(const DsPartition &part, const DsRankState &s);
PyRef deepspeed_optim_states(const DsPartition &part, const DsRankState &s);

} // namespace accel::ckpt
