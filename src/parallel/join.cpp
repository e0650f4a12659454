#include "parallel/join.hpp"

#include "common/error.hpp"
#include "distributed/communicator.hpp"
#include "parallel/ddp.hpp"

#include <ATen/ATen.h>

#include <string>

namespace accel::parallel {

Join::Join(std::shared_ptr<distributed::Communicator> comm, std::vector<DistributedDataParallel *> joinables)
    : comm_(std::move(comm)), joinables_(std::move(joinables))
{
}

// The vector: [ranks here, then per joinable one slot per Op, then one slot per rank]. Summed, a slot equal
// to `ranks here` says every rank with batches announced that collective; the rank slots name who is here.
Join::Announcement Join::exchange(bool here, size_t index, Op op)
{
    const size_t ops = 2, world = static_cast<size_t>(comm_->size());
    const size_t rank_base = 1 + ops * joinables_.size();
    at::Tensor v = at::zeros({static_cast<int64_t>(rank_base + world)}, at::kLong);
    if (here) {
        auto *p = v.data_ptr<int64_t>();
        p[0] = 1;
        p[1 + ops * index + static_cast<size_t>(op)] = 1;
        p[rank_base + static_cast<size_t>(comm_->rank())] = 1;
    }
    comm_->allreduce(v, distributed::ReduceOp::Sum);
    const auto *p = v.data_ptr<int64_t>();
    Announcement a;
    a.remaining = p[0];
    if (a.remaining == 0) return a;
    bool agreed = false;
    for (size_t i = 0; i < joinables_.size() && !agreed; ++i)
        for (size_t o = 0; o < ops && !agreed; ++o)
            if (p[1 + ops * i + o] == a.remaining) {
                agreed = true;
                a.index = i;
                a.op = static_cast<Op>(o);
            }
    if (!agreed)
        fail(ACCEL_ERR_FAILED_PRECONDITION,
             "join_uneven_inputs: the " + std::to_string(a.remaining) + " processes that still have batches issue "
             "different collectives (one synchronises gradients or broadcasts buffers while another does not, e.g. "
             "inside no_sync / accumulate at different micro-steps, or a different model); every process with "
             "batches must run the same steps");
    for (size_t r = 0; r < world; ++r)
        if (p[rank_base + r] != 0) {
            a.root = static_cast<int32_t>(r);
            break;
        }
    return a;
}

int32_t Join::notify(size_t index, Op op) { return exchange(true, index, op).root; }

void Join::finish()
{
    bool last_joiner = true; // never had to shadow: every other rank was done when this one got here
    for (;;) {
        const Announcement a = exchange(false, 0, Op::Buffers);
        if (a.remaining == 0) break;
        last_joiner = false;
        ++shadowed_;
        DistributedDataParallel &ddp = *joinables_[a.index];
        if (a.op == Op::Buffers) ddp.broadcast_buffers_from(a.root);
        else ddp.shadow_gradients();
    }
    // DDP's _sync_final_model: the highest rank among the last joiners is the authority.
    at::Tensor t = at::full({1}, last_joiner ? comm_->rank() : -1, at::kLong);
    comm_->allreduce(t, distributed::ReduceOp::Max);
    const auto root = static_cast<int32_t>(t.item<int64_t>());
    for (DistributedDataParallel *ddp : joinables_) ddp->broadcast_state_from(root);
}

} // namespace accel::parallel
