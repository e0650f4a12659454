// save_model of a pipeline model without the whole model on any rank (issue 36): each stage writes the tensors
// it holds as its own numbered shards of transformers' sharded folder (model-0000i-of-0000n.safetensors, or the
// pickle layout's pytorch_model-0000i-of-0000n.bin), under the whole model's names, and the main process writes
// the index and config.json. The folder is one process's model to every loader (from_pretrained,
// load_checkpoint_in_model, merge-weights, transformers), loadable at any pp size or none.
#pragma once

#include <memory>
#include <string>

namespace accel {
class Model;
struct PyObj;
namespace config {
struct SaveModelOptions;
}
namespace distributed {
class Communicator;
}
} // namespace accel

namespace accel::parallel::pp {

class PipelineParallel;

// Whether save_model writes `options` stage by stage: not for PEFT's adapter folder or merged adapters, nor with
// save_on_each_node (every node its own folder), which gather the whole model as before (WholeStages).
bool saves_by_stage(const config::SaveModelOptions &options, bool save_on_each_node);

// Collective over the pipeline's pp group (every rank calls it; under pp x tp the stage's tp slices already
// gathered, whole_state.hpp). `writes`: this process writes the main process's files. The pp group holding such a
// process writes: each stage the tensors it holds first among the stages (a tied embedding once), numbered after
// the earlier stages' shards (one small allgather of the counts), each shard within max_shard_size. The other
// groups (other tp / dp ranks) write nothing. A failure on any rank of the group fails every one of them with its
// message, and the shards already written are removed, so no folder is left with half a model and an index.
void save_model_by_stage(const Model &model, PipelineParallel &pipeline, const std::string &dir,
                         const config::SaveModelOptions &options, bool writes);

// Whether this process writes the main files (`writes`) or shares `model`'s tp group with one that does: under
// pp x tp that group gathers the slices the writer writes, so WholeStages::FirstStageOnly fills its first stages in
// (collective over the tp group; `writes` itself without tp).
bool near_writer(const Model &model, bool writes);

// save_state's FULL_STATE_DICT of a stage's optimizer under the sharding engine (pp x fsdp_plugin): `mine` is the
// stage's state_dict() (one process's ids and param_groups, state only for the stage's parameters, joined from its
// dp shards, and under tp over the stage's tp group). Returns, on each stage with `near_writer` set (save_state: the
// process writing the main files: the main process, on the first stage; under save_on_each_node each node's local
// main process, on any stage), one process's state dict: every stage's entries joined (a parameter two stages hold,
// the tied embedding, once: the first stage's), received stage after stage point to point; `mine` unchanged
// elsewhere (nothing written there). A pp group without a writer exchanges nothing. Collective over the pp group.
std::shared_ptr<PyObj> joined_stage_optimizer_state(PipelineParallel &pipeline, std::shared_ptr<PyObj> mine,
                                                    bool near_writer);

// A two-level dict ({key: {key: value}}, as an optimizer state dict's "state") sent from one stage of `pp` to
// another point to point, its tensors as they are (no copy of them made to send them); and received. save_state
// under pp x deepspeed_plugin sends each stage's part of DeepSpeed's files to the first stage this way.
void send_stage_entries(distributed::Communicator &pp, const PyObj &entries, int32_t dst);
std::shared_ptr<PyObj> recv_stage_entries(distributed::Communicator &pp, int32_t src);

} // namespace accel::parallel::pp
