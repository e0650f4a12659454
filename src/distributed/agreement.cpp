#include "distributed/agreement.hpp"

#include "distributed/communicator.hpp"

#include <cstring>

namespace accel::distributed {

namespace {

// The status and message of a failure (an accel::Error keeps its status; anything else is internal).
std::pair<accel_status_t, std::string> outcome(std::exception_ptr e)
{
    try {
        std::rethrow_exception(e);
    } catch (const Error &err) {
        return {err.code(), err.what()};
    } catch (const std::exception &err) {
        return {ACCEL_ERR_INTERNAL, err.what()};
    } catch (...) {
        return {ACCEL_ERR_INTERNAL, "unknown error"};
    }
}

} // namespace

void agree(Communicator *comm, std::exception_ptr local)
{
    if (comm == nullptr || comm->size() == 1) {
        if (!local) return;
        auto [code, message] = outcome(local);
        throw Rejected(code, message, comm == nullptr ? 0 : comm->rank());
    }
    // The lowest failing rank (size when none failed), then its status and message from it.
    const int32_t rank = comm->rank();
    at::Tensor first = at::full({1}, static_cast<int64_t>(local ? rank : comm->size()), at::kLong);
    comm->allreduce_async(first, ReduceOp::Min)->wait();
    const auto failed = static_cast<int32_t>(first.item<int64_t>());
    if (failed == comm->size()) return;
    std::pair<accel_status_t, std::string> mine;
    if (rank == failed) mine = outcome(local);
    at::Tensor head = at::tensor({static_cast<int64_t>(mine.first), static_cast<int64_t>(mine.second.size())}, at::kLong);
    comm->broadcast(head, failed);
    at::Tensor text = at::empty({std::max<int64_t>(1, head[1].item<int64_t>())}, at::kByte);
    if (rank == failed) std::memcpy(text.data_ptr(), mine.second.data(), mine.second.size());
    comm->broadcast(text, failed);
    const std::string message(static_cast<const char *>(text.data_ptr()), static_cast<size_t>(head[1].item<int64_t>()));
    throw Rejected(static_cast<accel_status_t>(head[0].item<int64_t>()),
                   "process " + std::to_string(failed) + ": " + message, failed);
}

} // namespace accel::distributed
