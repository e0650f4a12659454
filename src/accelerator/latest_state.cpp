// Accelerator::load_latest_state: automatic resume for programs restarted by `accel launch --max_restarts` (or
// any supervisor). A program calls it once after prepare: on a fresh start nothing is loaded and it trains from
// step 0; after a restart it continues from the newest complete checkpoint. Completeness is load_state's: temp
// folders of saves killed midway are never candidates, and a published folder whose files do not match its
// manifest gives way to the one before it; this file only adds the "no checkpoint yet" answer, agreed by every
// process so that none of them loads while another starts afresh.
#include "accelerator/accelerator.hpp"

#include "checkpointing/checkpointing.hpp"
#include "checkpointing/temp_folder.hpp"
#include "common/error.hpp"
#include "common/files.hpp"
#include "distributed/communicator.hpp"

#include <ATen/ATen.h>

namespace accel {

namespace {

// Whether every process / no process sees a checkpoint. Processes that disagree (a project_dir that is not
// shared between machines, or a checkpoint appearing while they look) cannot resume consistently.
enum class Seen { none, all, some };

Seen agree_on_seen(distributed::Communicator *comm, bool seen)
{
    if (comm == nullptr || comm->size() == 1) return seen ? Seen::all : Seen::none;
    // min over {seen, !seen}: 1 in the first means all saw one, 1 in the second means none did.
    at::Tensor t = at::tensor({static_cast<int64_t>(seen), static_cast<int64_t>(!seen)}, at::kLong);
    comm->allreduce(t, distributed::ReduceOp::Min);
    if (t[0].item<int64_t>() == 1) return Seen::all;
    if (t[1].item<int64_t>() == 1) return Seen::none;
    return Seen::some;
}

} // namespace

std::optional<std::string> Accelerator::load_latest_state(const config::LoadStateOptions &options)
{
    wait_for_checkpoint(); // a save of this process still being written is a candidate
    const auto &project = state_->config.project;
    if (!project.automatic_checkpoint_naming)
        fail(ACCEL_ERR_FAILED_PRECONDITION, "load_latest_state: needs project_config.automatic_checkpoint_naming: "
                                            "true (and project_dir); with a folder of your own use load_state");
    const std::string base = join(normalize_path(*project.project_dir), "checkpoints");
    // Temp folders of saves killed midway (a worker killed by a restart) are not checkpoints; those whose
    // writer is dead go now, as load_state would remove them.
    if (is_dir(base)) ckpt::remove_stale_temp_folders(base);
    const bool seen = !ckpt::sorted_checkpoints(base).empty();
    switch (agree_on_seen(state_->comm.get(), seen)) {
    case Seen::none:
        return std::nullopt;
    case Seen::some:
        fail(ACCEL_ERR_FAILED_PRECONDITION,
             std::string("load_latest_state: process ") + std::to_string(state_->process_index()) +
                 (seen ? " sees" : " does not see") + " a checkpoint in \"" + base +
                 "\" and another process " + (seen ? "does not" : "does") +
                 "; every process must see the same project_dir (a folder shared by all machines)");
    case Seen::all:
        break;
    }
    return load_state(nullptr, options);
}

} // namespace accel
