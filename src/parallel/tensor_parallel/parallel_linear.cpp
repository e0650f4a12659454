#include "parallel/tensor_parallel/parallel_linear.hpp"

#include "common/error.hpp"
#include "distributed/communicator.hpp"
#include "model/plain_linear.hpp"
#include "parallel/tensor_parallel/group_capsule.hpp"
#include "precision/autocast.hpp"

#include <torch/csrc/autograd/custom_function.h>

#include <array>
#include <optional>
#include <utility>

namespace accel::parallel::tp {

namespace {

using distributed::Communicator;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The dtype the device's autocast computes a linear in at this moment (none when it is off), and a tensor cast as
// autocast casts a linear's operands (floating tensors but double, on the device autocast serves).
std::optional<at::ScalarType> autocast_target(const at::Tensor &x)
{
    const at::DeviceType d = x.device().type();
    if ((d != at::kCPU && d != at::kCUDA) || !autocast_enabled(d)) return std::nullopt;
    return autocast_dtype_of(d);
}

at::Tensor autocast_like(const at::Tensor &t, std::optional<at::ScalarType> dtype)
{
    if (!dtype || !t.defined() || !t.is_floating_point() || t.scalar_type() == at::kDouble) return t;
    return t.to(*dtype);
}

// The column layer under sequence parallelism with the plain local layer: forward all-gathers the input's sequence
// shard and multiplies; backward keeps only the shard (1/tp of the gathered input that autograd would keep) and
// all-gathers it again for the weight's gradient, then reduce-scatters the input's gradient (Megatron-LM's
// LinearWithGradAccumulationAndAsyncCommunication with sequence_parallel). The forward's autocast is replayed on
// the operands in backward, so every gradient is the one of gather_sequence followed by the local layer, bit for bit.
struct SequenceGatheredLinear : torch::autograd::Function<SequenceGatheredLinear> {
    // `bias` optional: LibTorch's Functions take no undefined tensor as an input.
    static at::Tensor forward(AutogradContext *ctx, const at::Tensor &x, const at::Tensor &weight,
                              const c10::optional<at::Tensor> &maybe_bias, const Group &group, int64_t dim,
                              Linear::Layout layout)
    {
        const at::Tensor bias = maybe_bias.value_or(at::Tensor());
        const std::optional<at::ScalarType> dtype = autocast_target(x);
        ctx->saved_data["group"] = group_capsule(group);
        ctx->saved_data["dim"] = dim;
        ctx->saved_data["layout"] = static_cast<int64_t>(layout);
        ctx->saved_data["dtype"] = dtype ? static_cast<int64_t>(*dtype) : int64_t{-1};
        ctx->save_for_backward({x, weight, bias});
        return plain_linear(autocast_like(all_gather_along(x, *group, dim), dtype), autocast_like(weight, dtype),
                            autocast_like(bias, dtype), layout);
    }

    static variable_list backward(AutogradContext *ctx, variable_list grad)
    {
        const variable_list saved = ctx->get_saved_variables();
        const at::Tensor &x = saved[0], &weight = saved[1], &bias = saved[2];
        Communicator &group = capsule_group(ctx->saved_data["group"]);
        const int64_t dim = ctx->saved_data["dim"].toInt();
        const int64_t code = ctx->saved_data["dtype"].toInt();
        const std::optional<at::ScalarType> dtype =
            code < 0 ? std::nullopt : std::optional<at::ScalarType>(static_cast<at::ScalarType>(code));
        const std::array<bool, 3> needed = {ctx->needs_input_grad(0), ctx->needs_input_grad(1),
                                            bias.defined() && ctx->needs_input_grad(2)};
        const at::Tensor full = autocast_like(all_gather_along(x, group, dim), dtype); // the forward's, again
        const LinearGradients g =
            plain_linear_backward(grad[0], full, autocast_like(weight, dtype), autocast_like(bias, dtype),
                                  static_cast<Linear::Layout>(ctx->saved_data["layout"].toInt()), needed);
        auto as = [](const at::Tensor &t, const at::Tensor &like) { return t.defined() ? t.to(like.scalar_type()) : t; };
        at::Tensor grad_x = needed[0] ? reduce_scatter_along(as(g.input, x), group, dim) : at::Tensor();
        return {grad_x, as(g.weight, weight), as(g.bias, bias), at::Tensor(), at::Tensor(), at::Tensor()};
    }
};

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
        : ParallelLinearBase(std::move(local), std::move(group)), options_(o),
          keep_shard_(o.sequence_dim >= 0 && group_->size() > 1 && is_plain_linear(*local_))
    {
    }
    at::Tensor forward(const at::Tensor &x) override
    {
        at::Tensor y = keep_shard_ ? gathered_product(x) : local_->forward(region_input(x));
        return options_.gather_output ? gather_last_dim(y, group_) : y;
    }
    const at::Tensor &bias() const override { return local_->bias(); }

private:
    at::Tensor region_input(const at::Tensor &x) const
    {
        return options_.sequence_dim >= 0 ? gather_sequence(x, group_, options_.sequence_dim) : copy_to_region(x, group_);
    }
    at::Tensor gathered_product(const at::Tensor &x) const
    {
        const at::Tensor &bias = local_->bias();
        return SequenceGatheredLinear::apply(x, local_->weight(), bias.defined() ? c10::optional<at::Tensor>(bias) : c10::nullopt,
                                             group_, options_.sequence_dim, local_->layout());
    }

    ColumnParallelOptions options_;
    bool keep_shard_; // sequence parallelism over the plain layer: SequenceGatheredLinear
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
