#include "parallel/context_parallel/loss.hpp"

#include "distributed/communicator.hpp"
#include "parallel/output_marks.hpp"

#include <ATen/core/grad_mode.h>

#include <utility>

namespace accel::parallel::cp {

namespace {
using Group = std::shared_ptr<distributed::Communicator>;
OutputMarks<Group> &marks()
{
    static OutputMarks<Group> m;
    return m;
}
} // namespace

void mark_context_parallel(const at::Tensor &outputs, Group group) { marks().mark(outputs, std::move(group)); }

Group context_parallel_of(const at::Tensor &outputs) { return marks().find(outputs).value_or(nullptr); }

at::Tensor whole_sequence_loss(const at::Tensor &local_mean, const at::Tensor &local_count, distributed::Communicator &group)
{
    const at::Tensor count = local_count.to(local_mean.scalar_type());
    // A rank whose positions are all ignored contributes 0 (its mean is NaN), still through the graph.
    const at::Tensor local_sum = at::where(count > 0, local_mean * count, at::zeros_like(local_mean));
    at::Tensor totals;
    {
        at::NoGradGuard no_grad;
        totals = at::stack({local_sum.detach(), count}).to(at::kDouble).cpu().contiguous();
        group.allreduce(totals, distributed::ReduceOp::Sum);
    }
    const double sum = totals[0].item<double>(), n = totals[1].item<double>();
    // Every position ignored everywhere: NaN, as the mean of nothing is in one process.
    const at::Tensor scaled = local_sum * (static_cast<double>(group.size()) / n);
    const at::Tensor whole = at::full({}, sum / n, local_mean.options());
    return scaled + (whole - scaled).detach();
}

} // namespace accel::parallel::cp
