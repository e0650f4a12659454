// A fake communicator for playing several ranks one after the other in one process: rank 0's broadcasts
// are recorded and replayed, in order, to each other rank (data loader tests).
#pragma once

#include "common/error.hpp"
#include "distributed/communicator.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <deque>
#include <memory>
#include <vector>

namespace accel::test {

// What rank 0 broadcast, queued for each other rank.
struct Broadcasts {
    std::vector<std::deque<at::Tensor>> to_rank;
};

class ReplayCommunicator : public accel::distributed::Communicator {
public:
    ReplayCommunicator(int32_t rank, int32_t size, std::shared_ptr<Broadcasts> log)
        : rank_(rank), size_(size), log_(std::move(log))
    {
        log_->to_rank.resize(static_cast<size_t>(size));
    }
    const char *backend() const override { return "replay"; }
    int32_t rank() const override { return rank_; }
    int32_t size() const override { return size_; }
    std::chrono::milliseconds timeout() const override { return std::chrono::milliseconds(1000); }
    void broadcast(at::Tensor &tensor, int32_t root) override
    {
        EXPECT_EQ(root, 0);
        if (rank_ == 0) {
            for (int32_t r = 1; r < size_; ++r) log_->to_rank[static_cast<size_t>(r)].push_back(tensor.clone());
            return;
        }
        auto &q = log_->to_rank[static_cast<size_t>(rank_)];
        if (q.empty()) accel::fail(ACCEL_ERR_INTERNAL, "replay: rank 0 broadcast less than this rank receives");
        at::Tensor t = q.front();
        q.pop_front();
        if (!t.sizes().equals(tensor.sizes()) || t.scalar_type() != tensor.scalar_type())
            accel::fail(ACCEL_ERR_INTERNAL, "replay: shape or dtype differs from rank 0's broadcast");
        tensor.copy_(t);
    }
    std::shared_ptr<accel::distributed::Work> allreduce_async(at::Tensor &, accel::distributed::ReduceOp) override
    {
        unused("allreduce");
    }
    std::vector<at::Tensor> allgather(const at::Tensor &) override { unused("allgather"); }
    at::Tensor reduce_scatter(const at::Tensor &, accel::distributed::ReduceOp) override { unused("reduce_scatter"); }
    void send(const at::Tensor &, int32_t, int32_t) override { unused("send"); }
    void recv(at::Tensor &, int32_t, int32_t) override { unused("recv"); }
    void barrier() override { unused("barrier"); }
    std::shared_ptr<Communicator> new_group(const std::vector<int32_t> &) override { unused("new_group"); }

private:
    [[noreturn]] static void unused(const char *op) { accel::fail(ACCEL_ERR_INTERNAL, std::string("replay: ") + op); }
    int32_t rank_, size_;
    std::shared_ptr<Broadcasts> log_;
};

} // namespace accel::test
