#include "big_modeling/empty_init.hpp"

#include "common/allocator.hpp"
#include "common/error.hpp"

#include <c10/core/TensorImpl.h>

namespace accel::big_modeling {

namespace {
// Replaces what `t`'s TensorImpl holds (storage, sizes, dtype, device, dispatch keys) by `from`'s, keeping the
// object itself: what Tensor::set_data does, without its check that both sides are CPU/CUDA-like dense
// tensors (meta is not on its list, though a meta tensor and a CPU one are both plain TensorImpls). Only called
// on tensors without an autograd graph through them (a meta model never runs: Model::check_materialized).
void replace_contents(const at::Tensor &t, const at::Tensor &from)
{
    require(t.defined(), ACCEL_ERR_INTERNAL, "empty init: an undefined tensor");
    require(!t.is_sparse() && !from.is_sparse() && t.layout() == at::kStrided, ACCEL_ERR_UNIMPLEMENTED,
            "empty init: only dense tensors can move to and from the meta device");
    t.unsafeGetTensorImpl()->shallow_copy_from(from.getIntrusivePtr());
}
} // namespace

ParameterFn empty_init_hook()
{
    return [](const at::Tensor &p) {
        move_to_meta(p);
        // The values just made are freed, but glibc keeps freed heap pages (and accel raises its trim threshold,
        // allocator.hpp): without giving them back, the resident set of building grows towards the whole model's.
        return_free_memory();
    };
}

void move_to_meta(const at::Tensor &t)
{
    if (t.is_meta()) return;
    replace_contents(t, at::empty(t.sizes(), t.options().device(at::kMeta)));
}

void materialize(const at::Tensor &t, const at::Device &device)
{
    if (!t.is_meta()) return;
    replace_contents(t, at::empty(t.sizes(), t.options().device(device)));
}

std::string first_meta_tensor(const Model &model)
{
    for (const auto *list : {&model.named_parameters(), &model.named_buffers()})
        for (const auto &[name, t] : *list)
            if (t.defined() && t.is_meta()) return name;
    return {};
}

} // namespace accel::big_modeling
