// Checks shared by the thread-rank tests of tensor and context parallelism: tensor closeness with a message, the
// tolerance relative to a whole tensor's size, a model's tp plan, and the whole-tensor view used by checkpoints.
#pragma once

#include "model/model.hpp"
#include "parallel/tensor_parallel/slicing.hpp"
#include "parallel/tensor_parallel/split_model.hpp"
#include "parallel/tensor_parallel/whole_state.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace accel_test {

inline void expect_close(const at::Tensor &got, const at::Tensor &want, const std::string &what, double tol = 1e-6)
{
    ASSERT_TRUE(got.defined()) << what << ": undefined";
    ASSERT_EQ(got.sizes(), want.sizes()) << what;
    const double diff = (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>();
    EXPECT_LE(diff, tol) << what << ": max difference " << diff;
}

// 1e-5 of the tensor's largest magnitude (at least 1e-5): the split reorders sums.
inline double rel_tol(const at::Tensor &whole) { return 1e-5 * std::max(1.0, whole.abs().max().item<double>()); }

inline const std::map<std::string, accel::parallel::tp::ParameterSlicing> &plan_of(accel::Model &m)
{
    return dynamic_cast<accel::parallel::tp::TensorParallelModel &>(m).tensor_parallel_slicing();
}

// While save_model / save_state see it (WholeForCheckpoint), a split model holds `whole`'s tensors, and its very
// slices again afterwards.
inline void expect_whole_for_checkpoint(accel::Model &m, accel::Model &whole)
{
    namespace tp = accel::parallel::tp;
    std::vector<at::Tensor> slices;
    for (const auto &p : m.parameters()) slices.push_back(p.detach().clone());
    {
        tp::WholeForCheckpoint gathered(std::vector<tp::WholeForCheckpoint::Part>{{&m, {}}});
        for (size_t i = 0; i < m.named_parameters().size(); ++i)
            EXPECT_TRUE(at::equal(m.named_parameters()[i].second, whole.named_parameters()[i].second))
                << m.named_parameters()[i].first << " gathered";
    }
    for (size_t i = 0; i < slices.size(); ++i)
        EXPECT_TRUE(at::equal(m.parameters()[i], slices[i])) << m.named_parameters()[i].first << " sliced again";
}

} // namespace accel_test
