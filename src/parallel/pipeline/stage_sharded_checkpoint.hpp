// save_state's SHARDED_STATE_DICT under pp x sharding (issue 36): every rank writes its own pieces into the folder a
// sharded save without a pipeline writes (sharded_folder.hpp: rank{r}.safetensors, metadata.json), the tensors under
// the whole model's names, so the folder is one sharded state dict of the whole model, loadable by the same loader
// onto any mesh: the same pp x fsdp, another pp size, plain FSDP of any size, or one process.
// The pp x dp world maps onto the layout's ranks stage-major: stage s's shard-group rank r writes rank{s * W + r}
// (W: the stage's shard group, dp_shard x cp), metadata.json's world_size is pp x W. A tensor two stages hold (the
// tied embedding, on the first and last) is written once, by the first of them. Under HSDP the first replica of
// each stage writes, as without a pipeline. Under pp x tp each of those ranks' tp ranks writes its pieces of its
// slices as without a pipeline (rank file (s * W + r) x tp + tp rank), metadata.json saying how each tensor is split.
#pragma once

#include "state/state_dict.hpp"

namespace accel::ckpt {
struct TpSave;
}

namespace accel::parallel::pp {

class PipelineParallel;

// The stage's sharded state dict `mine` (its engine's, or its sharded optimizer's: pieces over the stage's W shard
// ranks; the other stages' tensors listed with no elements) as its part of the whole model's: world_size pp * W,
// rank stage * W + mine.rank, the pieces' ranks moved alike; it keeps the tensors this stage holds first among the
// stages (a tensor no stage holds elements of: the first stage listing it), with their local pieces. On the pp
// group's first stage (where the main process writes metadata.json) the tensors of every stage, in stage order
// (each name once), with their pieces; elsewhere only its own. `rest` (an optimizer's state besides its tensors)
// is joined as save_state's FULL path joins it (joined_stage_optimizer_state: one process's ids, the first stage's
// entry of a parameter two stages hold) on the first stage of the group whose first stage has `main`. Collective
// over the pp group (every stage passes the same W; INTERNAL otherwise).
// `tp` (pp x tp: how the stage's own tensors are split, tp_save over them) gains, on the first stage, the splits of
// the other stages' tensors listed there, so metadata.json says how every tensor is split.
ShardedState whole_model_pieces(PipelineParallel &pipeline, const ShardedState &mine, bool main, ckpt::TpSave *tp = nullptr);

} // namespace accel::parallel::pp
