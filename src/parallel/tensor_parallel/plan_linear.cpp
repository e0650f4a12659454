#include "parallel/tensor_parallel/plan_linear.hpp"

#include "common/error.hpp"
#include "distributed/communicator.hpp"
#include "model/lora_linear.hpp"

#include <ATen/core/grad_mode.h>

namespace accel::parallel::tp {

namespace {

// Narrows `t` in place to this rank's slice along `dim` and records how under `name`.
void narrow(std::map<std::string, ParameterSlicing> &plan, const std::string &name, const at::Tensor &t, int64_t dim,
            int64_t groups, const Group &group)
{
    ParameterSlicing s{dim, groups, t.size(dim)};
    at::Tensor part = slice_parameter(t, s, group->rank(), group->size());
    at::Tensor mutable_t = t;
    mutable_t.set_data(part);
    plan[name] = s;
}

} // namespace

void check_parallelizable(const Linear &linear, const std::string &module, const LinearPlanOptions &options)
{
    const auto *lora = dynamic_cast<const LoraLinear *>(&linear);
    const Linear &base = lora != nullptr ? *lora->base() : linear;
    const std::string where = "tensor parallelism of " + module + ": ";
    if (base.stateful_forward() || base.random_forward() || !base.added_parameters().empty())
        fail(ACCEL_ERR_UNIMPLEMENTED, where + "a linear decorated by fp8 is not built yet");
    const bool sequence_parallel = options.column.sequence_dim >= 0 || options.row.sequence_dim >= 0;
    if (lora != nullptr && (sequence_parallel || !options.row.input_is_parallel))
        fail(ACCEL_ERR_UNIMPLEMENTED, where + "LoRA under sequence parallelism is not built yet");
}

void require_divides(const std::string &key, int64_t value, int64_t tp_size)
{
    if (value % tp_size != 0)
        fail(ACCEL_ERR_INVALID_ARGUMENT, key + " (" + std::to_string(value) + ") does not divide by parallelism_config.tp_size (" +
                                             std::to_string(tp_size) + ")");
}

void parallelize_linear(std::shared_ptr<Linear> &slot, const std::string &module, LinearStyle style, const Group &group,
                        std::map<std::string, ParameterSlicing> &plan, const LinearPlanOptions &options)
{
    if (!slot || !group) fail(ACCEL_ERR_INTERNAL, "tensor parallel: " + module + " without a layer or a group");
    check_parallelizable(*slot, module, options);
    auto *lora = dynamic_cast<LoraLinear *>(slot.get());
    if (lora != nullptr && style == LinearStyle::Rowwise && lora->config().lora_dropout > 0.0 && !options.dropout)
        fail(ACCEL_ERR_INTERNAL, "tensor parallel: " + module + "'s LoRA dropout on a split input without a tp generator");
    const std::shared_ptr<Linear> base = lora != nullptr ? lora->base() : slot;
    at::NoGradGuard no_grad;
    const at::Tensor w = base->weight(), b = base->bias();
    const Linear::Layout layout = base->layout();
    std::shared_ptr<Linear> parallel;
    if (style == LinearStyle::Colwise) {
        narrow(plan, module + ".weight", w, output_dim(layout), options.groups, group);
        if (b.defined()) narrow(plan, module + ".bias", b, 0, options.groups, group);
        parallel = make_column_parallel_linear(make_linear(w, b, layout), group, options.column);
        if (lora != nullptr) {
            narrow(plan, module + ".lora_B.weight", lora->lora_b(), 0, options.groups, group);
            lora->set_adapter_mapping([group](const at::Tensor &z) { return copy_to_region(z, group); });
        }
    } else {
        narrow(plan, module + ".weight", w, input_dim(layout), 1, group);
        parallel = make_row_parallel_linear(make_linear(w, {}, layout), b, group, options.row);
        if (lora != nullptr) {
            narrow(plan, module + ".lora_A.weight", lora->lora_a(), 1, 1, group);
            lora->set_adapter_mapping([group](const at::Tensor &z) { return reduce_from_region(z, group); });
            lora->set_split_dropout(options.dropout); // its input holds this rank's features
        }
    }
    if (lora != nullptr)
        lora->set_base(parallel);
    else
        slot = parallel;
}

} // namespace accel::parallel::tp
