// Join: join_uneven_inputs for DDP, as PyTorch's torch.distributed.algorithms.Join with DDP's join hook.
// Inside the scope, a rank that still has batches announces each collective group of a joinable DDP model
// (its buffer broadcast before a training forward, its bucket all-reduces after a synchronised backward)
// with one all-reduce of a small count vector: 1 for "still here", which model and which group. A rank
// that ran out of batches (finish(), at the scope's end) keeps answering that all-reduce with zeros and
// shadows what the vector names (zeros into the bucket all-reduces, receiving the buffer broadcast) until
// the count is 0: every rank is done. Gradients are still divided by the whole group size, so a joined
// rank's zeros count in the average (Join's divide_by_initial_world_size=True, PyTorch's default).
// Then, as DDP's post hook, every model is broadcast from the last rank that finished, so that ranks that
// stopped stepping early leave the scope with the same weights.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace accel::distributed {
class Communicator;
}

namespace accel::parallel {

class DistributedDataParallel;

class Join {
public:
    enum class Op { Buffers = 0, Gradients = 1 };

    Join(std::shared_ptr<distributed::Communicator> comm, std::vector<DistributedDataParallel *> joinables);

    // On a rank with batches, before `op` of joinable `index`: tells the others (collective). Returns the
    // rank the buffer broadcast comes from (the lowest rank with batches, DDP's authoritative rank); fails
    // on every rank alike when ranks with batches announce different collectives (e.g. one syncs
    // gradients while another is inside no_sync: nothing could match them).
    int32_t notify(size_t index, Op op);
    // The scope's end on this rank: shadows the others' collectives until every rank got here, then
    // broadcasts every joinable's parameters and buffers from the last rank to finish (collective).
    void finish();

    int64_t shadowed() const { return shadowed_; } // collective groups this rank shadowed (diagnostics)

private:
    struct Announcement {
        int64_t remaining = 0; // ranks with batches
        size_t index = 0;
        Op op = Op::Buffers;
        int32_t root = 0;
    };
    // One all-reduce of this rank's vector (zeros when joined), decoded.
    Announcement exchange(bool here, size_t index, Op op);

    std::shared_ptr<distributed::Communicator> comm_;
    std::vector<DistributedDataParallel *> joinables_;
    int64_t shadowed_ = 0;
};

} // namespace accel::parallel
