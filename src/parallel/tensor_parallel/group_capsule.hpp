// A tensor-parallel group carried through an autograd Function: backward runs after forward returned, so
// the Function keeps the group alive in its context (saved_data holds custom classes as capsules).
#pragma once

#include "distributed/communicator.hpp"

#include <ATen/core/ivalue.h>

#include <memory>
#include <utility>

namespace accel::parallel::tp {

struct GroupCapsule : torch::CustomClassHolder {
    explicit GroupCapsule(std::shared_ptr<distributed::Communicator> g) : group(std::move(g)) {}
    std::shared_ptr<distributed::Communicator> group;
};

inline c10::IValue group_capsule(const std::shared_ptr<distributed::Communicator> &group)
{
    return c10::IValue::make_capsule(c10::make_intrusive<GroupCapsule>(group));
}

inline distributed::Communicator &capsule_group(const c10::IValue &v)
{
    return *static_cast<GroupCapsule *>(v.toCapsule().get())->group;
}

} // namespace accel::parallel::tp
