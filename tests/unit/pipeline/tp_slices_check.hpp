// A pipeline stage's trained parameters against one process's (pipeline_mesh_test.cpp, pipeline_spec_mesh_test.cpp):
// each rank's tp slices of its stage's parameters (summoned whole from the shards when sharded) against the
// reference's final weights sliced alike.
#pragma once

#include "distributed/device_mesh.hpp"
#include "model/model.hpp"
#include "parallel/tensor_parallel/slicing.hpp"
#include "parallel/tensor_parallel/split_model.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>

namespace accel_test {

inline void check_weights(accel::Model &m, const accel::Model &ref, const accel::distributed::DeviceMesh &mesh,
                          int32_t tp_size, int32_t rank)
{
    namespace tp = accel::parallel::tp;
    const auto &plan = dynamic_cast<tp::TensorParallelModel &>(m).tensor_parallel_slicing();
    const int32_t t = mesh.rank_in(accel::distributed::MeshDim::Tp);
    int64_t held = 0;
    for (size_t i = 0; i < m.named_parameters().size(); ++i) {
        const auto &[name, p] = m.named_parameters()[i];
        if (p.numel() == 0) continue; // another stage's
        ++held;
        const at::Tensor &whole = ref.named_parameters()[i].second;
        const auto it = plan.find(name);
        const at::Tensor want = it == plan.end() ? whole : tp::slice_parameter(whole, it->second, t, tp_size);
        ASSERT_EQ(p.sizes(), want.sizes()) << name << " (rank " << rank << ")";
        const double diff = (p - want).abs().max().item<double>();
        EXPECT_LE(diff, 1e-5 * std::max(1.0, whole.abs().max().item<double>())) << name << " after training (rank " << rank << ")";
    }
    EXPECT_GT(held, 0);
    EXPECT_EQ(plan.empty(), tp_size == 1);
}

} // namespace accel_test
