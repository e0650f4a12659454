// One rank's files of save_state's DeepSpeed layout (checkpointing/deepspeed_folder.hpp), from the sharding
// engine's pieces and the sharded optimizer's: what Accelerator::add_deepspeed_files writes, callable on its own
// (the unit tests run it on threads). Under pipeline parallelism the folder is the one a ZeRO run without a
// pipeline of the same data-parallel size writes: the partitions are of the whole model's flat groups, each stage
// moving its parameters' elements into them and sending its part to the first stage, which writes the files.
#pragma once

#include "state/state_dict.hpp"

#include <string>
#include <utility>
#include <vector>

namespace accel {
class AcceleratedOptimizer;
class Model;
namespace distributed {
class Communicator;
}
namespace parallel {
class ShardedDataParallel;
namespace pp {
class PipelineParallel;
}
} // namespace parallel

struct DeepSpeedSave {
    distributed::Communicator *dp = nullptr;          // the data-parallel group the ZeRO partitions span
    parallel::pp::PipelineParallel *pipeline = nullptr; // the model's pipeline (pp_size > 1), else null
    bool writes = true; // this rank's replica writes (the first over dp_replicate); the others only take part
    bool main = false;  // writes the ZeRO-1/2 model states (data-parallel rank 0; under pp the first stage's)
    bool bf16 = false;
};

// The files (names inside the tag folder) and their objects this rank writes; none on a rank that writes nothing
// (another replica, a later pipeline stage). Collective over `dp` and, under pp, over the pipeline's pp group.
// UNIMPLEMENTED naming what the layout cannot hold (parameters of one optimizer group at different step counts;
// under pp: tensor parallelism, sharded frozen parameters).
std::vector<std::pair<std::string, PyRef>> deepspeed_rank_files(const Model &model, parallel::ShardedDataParallel &engine,
                                                                const AcceleratedOptimizer &optimizer, const DeepSpeedSave &how);

} // namespace accel
