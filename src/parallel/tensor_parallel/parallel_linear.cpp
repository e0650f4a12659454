#include "parallel/tensor_parallel/parallel_linear.hpp"

#include "common/error.hpp"
#include "distributed/communicator.hpp"

#include <utility>

namespace accel::parallel::tp {

namespace {

// What every decorator forwards to the layer it wraps.
class ParallelLinearBase : public Linear {
public:
    ParallelLinearBase(std::shared_ptr<Linear> local, Group group) : local_(std::move(local)), group_(std::move(group))
    {
        if (!local_ || !group_) fail(ACCEL_ERR_INTERNAL, "tensor parallel linear: no local layer or no group");
    }
    const at::Tensor &weight() const override { return local_->weight(); }
    Layout layout() const override { return local_->layout(); }
    bool stateful_forward() const override { return local_->stateful_forward(); }
    std::vector<at::Tensor> added_parameters() const override { return local_->added_parameters(); }
    bool random_forward() const override { return local_->random_forward(); }

protected:
    std::shared_ptr<Linear> local_;
    Group group_;
};

class ColumnParallelLinear final : public ParallelLinearBase {
public:
    ColumnParallelLinear(std::shared_ptr<Linear> local, Group group, ColumnParallelOptions o)
        : ParallelLinearBase(std::move(local), std::move(group)), options_(o)
    {
    }
    at::Tensor forward(const at::Tensor &x) override
    {
        at::Tensor in = options_.sequence_dim >= 0 ? gather_sequence(x, group_, options_.sequence_dim)
                                                   : copy_to_region(x, group_);
        at::Tensor y = local_->forward(in);
        return options_.gather_output ? gather_last_dim(y, group_) : y;
    }
    const at::Tensor &bias() const override { return local_->bias(); }

private:
    ColumnParallelOptions options_;
};

class RowParallelLinear final : public ParallelLinearBase {
public:
    RowParallelLinear(std::shared_ptr<Linear> local, at::Tensor bias, Group group, RowParallelOptions o)
        : ParallelLinearBase(std::move(local), std::move(group)), bias_(std::move(bias)), options_(o)
    {
        if (local_->bias().defined())
            fail(ACCEL_ERR_INTERNAL, "row parallel linear: the local layer must not add the bias (it is added once, "
                                     "after the reduction)");
    }
    at::Tensor forward(const at::Tensor &x) override
    {
        at::Tensor in = options_.input_is_parallel ? x : scatter_last_dim(x, group_);
        at::Tensor partial = local_->forward(in);
        at::Tensor y = options_.sequence_dim >= 0 ? reduce_scatter_sequence(partial, group_, options_.sequence_dim)
                                                  : reduce_from_region(partial, group_);
        if (!bias_.defined()) return y;
        // Sequence parallelism: each rank adds the bias to its positions only; its gradient is summed over tp.
        return y + (options_.sequence_dim >= 0 ? copy_to_region(bias_, group_) : bias_);
    }
    const at::Tensor &bias() const override { return bias_; }

private:
    at::Tensor bias_;
    RowParallelOptions options_;
};

} // namespace

std::shared_ptr<Linear> make_column_parallel_linear(std::shared_ptr<Linear> local, Group group,
                                                    ColumnParallelOptions options)
{
    return std::make_shared<ColumnParallelLinear>(std::move(local), std::move(group), options);
}

std::shared_ptr<Linear> make_row_parallel_linear(std::shared_ptr<Linear> local, at::Tensor bias, Group group,
                                                 RowParallelOptions options)
{
    return std::make_shared<RowParallelLinear>(std::move(local), std::move(bias), std::move(group), options);
}

} // namespace accel::parallel::tp
