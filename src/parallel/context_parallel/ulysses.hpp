// Ulysses sequence parallelism (parallelism_config.sp_size, DeepSpeed's UlyssesSPAttentionHF as Accelerate
// 1.12 wires it with sp_backend "deepspeed"): the sequence stays split over the group everywhere except in
// attention. Before it, an all-to-all turns each rank's [B, H, T / sp, D] (its part of the sequence, every
// head) into [B, H / sp, T, D] (the whole sequence, its share of the heads); attention then runs unsplit on
// whole sequences; a second all-to-all turns the result back. Each all-to-all's backward is the other.
//
// accel reuses context parallelism's sequence layout (sequence_split.hpp: chunks r and 2 x sp - 1 - r): the
// loader, positions and loss are cp's, and the gathered sequence is put back in whole-sequence order
// (unshard_sequence) before attention. Heads (and key/value heads) must divide by the group's size.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <vector>

namespace accel::distributed {
class Communicator;
}

namespace accel::parallel::cp {

using SpGroup = std::shared_ptr<distributed::Communicator>;

// `parts[j]` to rank j, and what rank j sent this rank back in `parts[j]` (same shapes on every rank); no
// autograd. Each pair of ranks exchanges once, in one global order of pairs (the lower rank sends first),
// so blocking sends never wait on each other in a cycle whatever the group's size.
std::vector<at::Tensor> all_to_all(std::vector<at::Tensor> parts, distributed::Communicator &group);

// [B, H, T_local, D] (this rank's part of the sequence) -> [B, H / sp, T, D] (heads h of rank r's share
// r x H / sp ..., the whole sequence in order), differentiable. INVALID_ARGUMENT naming `what` and the sizes
// when H does not divide by sp.
at::Tensor sequence_to_heads(const at::Tensor &x, const SpGroup &group, const char *what);
// The inverse: [B, H / sp, T, D] -> [B, H, T_local, D].
at::Tensor heads_to_sequence(const at::Tensor &y, const SpGroup &group);

} // namespace accel::parallel::cp
