// A communicator whose ranks are threads of one process, for unit tests (as PyTorch's tests use a
// threaded process group): DDP, the sharding engine and tensor-parallel layers run on 2..N ranks in
// milliseconds, with no launcher, sockets or child processes. The real backends keep their multi-process
// tests (tests/distributed).
//
// Every collective is a rendezvous of all ranks of the group: each deposits a copy of its input, the last
// to arrive computes the result once (reductions in rank order, so every rank gets bit-identical values),
// then all are released. Each rank must call the same collectives in the same order, as with any backend;
// a rank that calls another kind, another shape or another root makes every rank fail with
// ACCEL_ERR_FAILED_PRECONDITION naming both calls (a real backend would hang or mix data). A rank that does
// not arrive within the timeout makes the waiting ones fail with ACCEL_ERR_DEADLINE_EXCEEDED naming the
// missing ranks, so a broken test fails instead of hanging. After any failure the group is poisoned: every
// later call on any rank fails with ACCEL_ERR_ABORTED repeating the first cause.
//
// Operations complete before they return (allreduce_async's Work is already done): ranks run concurrently
// on their own threads, so a rank blocked in a collective is what the others are waiting for anyway.
#pragma once

#include "distributed/communicator.hpp"

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

namespace accel::distributed {

// One communicator per rank of a new world of `size` threads. Communicator r belongs to the thread that
// plays rank r; collectives block until every rank called them (or the timeout passes).
std::vector<std::shared_ptr<Communicator>> make_thread_communicators(int32_t size,
                                                                    std::chrono::milliseconds timeout =
                                                                        std::chrono::seconds(20));

// Runs fn(rank's communicator) on `size` threads at once and joins them. When a rank throws (a failed
// check, an accel::Error), the group is aborted so that the others stop waiting for it, and the first
// exception of a rank that failed by itself (not by the abort) is rethrown here once every thread ended.
void run_on_threads(int32_t size, const std::function<void(const std::shared_ptr<Communicator> &)> &fn,
                    std::chrono::milliseconds timeout = std::chrono::seconds(20));

} // namespace accel::distributed
