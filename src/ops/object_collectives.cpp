#include "ops/object_collectives.hpp"

#include "common/error.hpp"
#include "distributed/communicator.hpp"

#include <algorithm>
#include <cstring>

namespace accel::ops {

namespace {
// The size header's marker for "this process's input was invalid".
constexpr int64_t kInvalid = -1;

[[noreturn]] void fail_invalid(const std::string &own_reason, const std::vector<int32_t> &bad, const char *op)
{
    if (!own_reason.empty()) fail(ACCEL_ERR_INVALID_ARGUMENT, own_reason);
    std::string ranks;
    for (int32_t r : bad) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    fail(ACCEL_ERR_INVALID_ARGUMENT, std::string(op) + ": the input of process " + ranks +
                                         " was invalid (that process's error says why); nothing was exchanged");
}

void check_root(const distributed::Communicator &comm, int32_t from_process)
{
    if (from_process < 0 || from_process >= comm.size())
        fail(ACCEL_ERR_OUT_OF_RANGE, "from_process: expected a rank in 0.." + std::to_string(comm.size() - 1) +
                                         ", got " + std::to_string(from_process));
}
} // namespace

std::vector<std::string> gather_object(distributed::Communicator &comm, const ObjectInput &mine, const char *op)
{
    if (comm.size() == 1) {
        if (!mine.invalid.empty()) fail(ACCEL_ERR_INVALID_ARGUMENT, mine.invalid);
        return {std::string(mine.bytes)};
    }
    // Sizes first: one int64 per process (kInvalid for a process whose input was unusable).
    at::Tensor header = at::full({1}, mine.invalid.empty() ? static_cast<int64_t>(mine.bytes.size()) : kInvalid, at::kLong);
    std::vector<at::Tensor> headers = comm.allgather(header);
    std::vector<int64_t> sizes;
    std::vector<int32_t> bad;
    for (size_t r = 0; r < headers.size(); ++r) {
        sizes.push_back(headers[r].item<int64_t>());
        if (sizes.back() == kInvalid) bad.push_back(static_cast<int32_t>(r));
    }
    if (!bad.empty()) fail_invalid(mine.invalid, bad, op);
    const int64_t longest = *std::max_element(sizes.begin(), sizes.end());
    std::vector<std::string> out(sizes.size());
    if (longest == 0) return out; // every object empty: nothing more to move
    // An all-gather needs one shape everywhere: each process's bytes padded to the longest.
    at::Tensor padded = at::zeros({longest}, at::kByte);
    if (!mine.bytes.empty()) std::memcpy(padded.data_ptr(), mine.bytes.data(), mine.bytes.size());
    std::vector<at::Tensor> all = comm.allgather(padded);
    for (size_t r = 0; r < out.size(); ++r)
        out[r].assign(static_cast<const char *>(all[r].data_ptr()), static_cast<size_t>(sizes[r]));
    return out;
}

std::vector<std::string> broadcast_object_list(distributed::Communicator &comm, const std::vector<std::string_view> &items,
                                               const std::string &invalid, int32_t from_process, const char *op)
{
    check_root(comm, from_process);
    const bool root = comm.rank() == from_process;
    if (comm.size() == 1) {
        if (!invalid.empty()) fail(ACCEL_ERR_INVALID_ARGUMENT, invalid);
        return {items.begin(), items.end()};
    }
    // The count (or kInvalid), then every entry's size, then the entries back to back.
    at::Tensor count = at::full({1}, root ? (invalid.empty() ? static_cast<int64_t>(items.size()) : kInvalid) : 0,
                                at::kLong);
    comm.broadcast(count, from_process);
    const int64_t n = count.item<int64_t>();
    if (n == kInvalid) fail_invalid(root ? invalid : std::string(), {from_process}, op);
    std::vector<std::string> out(static_cast<size_t>(n));
    if (n == 0) return out;
    at::Tensor sizes = at::empty({n}, at::kLong);
    int64_t total = 0;
    if (root) {
        for (int64_t i = 0; i < n; ++i) sizes.data_ptr<int64_t>()[i] = static_cast<int64_t>(items[static_cast<size_t>(i)].size());
    }
    comm.broadcast(sizes, from_process);
    const int64_t *s = sizes.data_ptr<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
        if (s[i] < 0) fail(ACCEL_ERR_INTERNAL, std::string(op) + ": received a negative size");
        total += s[i];
    }
    if (total == 0) return out;
    at::Tensor payload = at::empty({total}, at::kByte);
    auto *p = static_cast<char *>(payload.data_ptr());
    if (root) {
        for (const auto &item : items) {
            if (!item.empty()) std::memcpy(p, item.data(), item.size());
            p += item.size();
        }
    }
    comm.broadcast(payload, from_process);
    p = static_cast<char *>(payload.data_ptr());
    for (int64_t i = 0; i < n; ++i) {
        out[static_cast<size_t>(i)].assign(p, static_cast<size_t>(s[i]));
        p += s[i];
    }
    return out;
}

} // namespace accel::ops
