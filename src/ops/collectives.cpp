#include "ops/collectives.hpp"

#include "common/error.hpp"
#include "distributed/communicator.hpp"

#include <algorithm>
#include <cstring>

namespace accel::ops {

namespace {
void check_tensor(const at::Tensor &t)
{
    if (!t.defined()) fail(ACCEL_ERR_INVALID_ARGUMENT, "tensor: must not be NULL");
}

// Every rank's shape; fails naming the ranks when they differ (Accelerate's debug-mode check, always on:
// a mismatch would otherwise corrupt the collective).
void check_same_shapes(distributed::Communicator &comm, const at::Tensor &t, const char *op)
{
    // One small all-gather of [ndim, size0, ..., size7, dtype] per call.
    constexpr int64_t kMax = 8;
    at::Tensor mine = at::full({kMax + 2}, -1, at::kLong);
    auto *m = mine.data_ptr<int64_t>();
    m[0] = t.dim();
    for (int64_t d = 0; d < t.dim() && d < kMax; ++d) m[d + 1] = t.size(d);
    m[kMax + 1] = static_cast<int64_t>(t.scalar_type());
    auto all = comm.allgather(mine);
    for (int r = 0; r < comm.size(); ++r) {
        if (at::equal(all[static_cast<size_t>(r)], mine)) continue;
        const int64_t *o = all[static_cast<size_t>(r)].data_ptr<int64_t>();
        std::vector<int64_t> shape(o + 1, o + 1 + std::min<int64_t>(std::max<int64_t>(o[0], 0), kMax));
        fail(ACCEL_ERR_INVALID_ARGUMENT,
             std::string(op) + ": rank " + std::to_string(r) + " passed shape " + c10::str(c10::IntArrayRef(shape)) +
                 " (" + c10::toString(static_cast<at::ScalarType>(o[kMax + 1])) + "), rank " +
                 std::to_string(comm.rank()) + " shape " + c10::str(t.sizes()) + " (" + c10::toString(t.scalar_type()) +
                 "); every rank must pass the same shape and dtype (pad with accel_accelerator_pad_across_processes)");
    }
}
} // namespace

at::Tensor gather(distributed::Communicator &comm, const at::Tensor &t)
{
    check_tensor(t);
    if (comm.size() == 1) return t;
    at::Tensor x = t.dim() == 0 ? t.reshape({1}) : t;
    x = x.contiguous();
    check_same_shapes(comm, x, "gather");
    // Sent as bytes: the backends do not all move every dtype (Gloo has no bool), and a gather needs no arithmetic.
    // (Byte views over the tensor's memory, wherever it lives.)
    const auto as_bytes = [](const at::Tensor &v) {
        return at::from_blob(v.data_ptr(), {static_cast<int64_t>(v.nbytes())}, v.options().dtype(at::kByte));
    };
    at::Tensor joined = at::cat(comm.allgather(as_bytes(x)), 0);
    std::vector<int64_t> shape = x.sizes().vec();
    shape[0] *= comm.size();
    at::Tensor out = at::empty(shape, x.options());
    if (joined.numel() > 0) as_bytes(out).copy_(joined);
    return out;
}

at::Tensor gather_for_metrics(distributed::Communicator &comm, const GradientState &gs, const at::Tensor &t)
{
    at::Tensor all = gather(comm, t);
    if (gs.end_of_dataloader()) {
        const int64_t remainder = gs.remainder();
        if (remainder > 0 && all.dim() > 0 && remainder <= all.size(0)) return all.narrow(0, 0, remainder).clone();
    }
    return all;
}

at::Tensor reduce(distributed::Communicator &comm, const at::Tensor &t, const std::string &reduction)
{
    check_tensor(t);
    distributed::ReduceOp op;
    if (reduction == "sum" || reduction == "none") op = distributed::ReduceOp::Sum;
    else if (reduction == "mean") op = distributed::ReduceOp::Sum;
    else if (reduction == "max") op = distributed::ReduceOp::Max;
    else if (reduction == "min") op = distributed::ReduceOp::Min;
    else
        fail(ACCEL_ERR_INVALID_ARGUMENT, "reduction: expected \"sum\", \"mean\", \"max\", \"min\" or \"none\", got \"" +
                                             reduction + "\"");
    at::Tensor out = t.clone(at::MemoryFormat::Contiguous);
    if (comm.size() == 1) return out;
    check_same_shapes(comm, out, "reduce");
    comm.allreduce(out, op);
    if (reduction == "mean") {
        if (at::isFloatingType(out.scalar_type())) out.div_(comm.size());
        else out = out.div(comm.size()); // Python's true division: an integer mean becomes float
    }
    return out;
}

void broadcast(distributed::Communicator &comm, at::Tensor &t, int32_t from_process)
{
    check_tensor(t);
    if (from_process < 0 || from_process >= comm.size())
        fail(ACCEL_ERR_OUT_OF_RANGE, "from_process: expected a rank in 0.." + std::to_string(comm.size() - 1) +
                                         ", got " + std::to_string(from_process));
    if (comm.size() == 1) return;
    check_same_shapes(comm, t, "broadcast");
    if (t.is_contiguous()) {
        comm.broadcast(t, from_process);
    } else {
        at::Tensor c = t.contiguous();
        comm.broadcast(c, from_process);
        t.copy_(c);
    }
}

at::Tensor pad_across_processes(distributed::Communicator &comm, const at::Tensor &t, int64_t dim, double pad_index,
                                bool pad_first)
{
    check_tensor(t);
    if (comm.size() == 1) return t;
    // Every rank takes part in the size exchange, even when `dim` is out of range for it.
    at::Tensor dims = at::full({1}, t.dim(), at::kLong);
    auto all_dims = comm.allgather(dims);
    for (int r = 0; r < comm.size(); ++r)
        if (all_dims[r].item<int64_t>() != t.dim())
            fail(ACCEL_ERR_INVALID_ARGUMENT, "pad_across_processes: rank " + std::to_string(r) + " passed a tensor with " +
                                                 std::to_string(all_dims[r].item<int64_t>()) +
                                                 " dimensions, this rank " + std::to_string(t.dim()));
    if (t.dim() == 0) return t;
    at::Tensor shape = at::tensor(t.sizes().vec(), at::kLong);
    auto shapes = comm.allgather(shape);
    int64_t d = dim < 0 ? dim + t.dim() : dim;
    if (d < 0 || d >= t.dim()) return t; // out of range: unchanged, as Accelerate
    int64_t max_size = 0;
    for (auto &s : shapes) max_size = std::max(max_size, s[d].item<int64_t>());
    if (t.size(d) == max_size) return t;
    std::vector<int64_t> new_shape = t.sizes().vec();
    new_shape[static_cast<size_t>(d)] = max_size;
    at::Tensor out = at::zeros(new_shape, t.options()) + pad_index;
    out = out.to(t.scalar_type());
    int64_t start = pad_first ? max_size - t.size(d) : 0;
    out.narrow(d, start, t.size(d)).copy_(t);
    return out;
}

at::Tensor split_between_processes(distributed::Communicator &comm, const at::Tensor &t, bool apply_padding)
{
    check_tensor(t);
    if (t.dim() == 0) fail(ACCEL_ERR_INVALID_ARGUMENT, "tensor: expected at least 1 dimension to split, got a scalar");
    const int64_t p = comm.size();
    if (p == 1) return t;
    const int64_t n = t.size(0), r = comm.rank();
    const int64_t q = n / p, extra = n % p;
    const int64_t start = r * q + std::min(r, extra);
    const int64_t len = q + (r < extra ? 1 : 0);
    at::Tensor part = t.narrow(0, start, len).clone();
    if (apply_padding && extra > 0 && len < q + 1 && n > 0) {
        // Pad with the global last element up to q + 1 rows (Accelerate pads with inputs[-1]).
        at::Tensor last = t.narrow(0, n - 1, 1);
        std::vector<at::Tensor> parts{part};
        for (int64_t i = len; i < q + 1; ++i) parts.push_back(last);
        part = at::cat(parts, 0);
    }
    return part;
}

} // namespace accel::ops
