#include "parallel/tensor_parallel/slicing.hpp"

#include "common/error.hpp"

#include <string>
#include <vector>

namespace accel::parallel::tp {

int64_t output_dim(Linear::Layout layout) { return layout == Linear::Layout::OutIn ? 0 : 1; }
int64_t input_dim(Linear::Layout layout) { return layout == Linear::Layout::OutIn ? 1 : 0; }

at::Tensor slice(const at::Tensor &t, int64_t dim, int64_t rank, int64_t size, int64_t groups)
{
    if (!t.defined() || dim < 0 || dim >= t.dim() || size < 1 || rank < 0 || rank >= size || groups < 1)
        fail(ACCEL_ERR_INTERNAL, "tensor parallel: slice of dimension " + std::to_string(dim) + " for rank " +
                                     std::to_string(rank) + " of " + std::to_string(size));
    const int64_t n = t.size(dim);
    if (n % (groups * size) != 0)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "tensor parallel: a dimension of " + std::to_string(n) +
                                             " does not split into " + std::to_string(groups) + " x " +
                                             std::to_string(size) + " equal parts");
    const int64_t block = n / groups, part = block / size;
    std::vector<at::Tensor> pieces;
    for (int64_t g = 0; g < groups; ++g) pieces.push_back(t.narrow(dim, g * block + rank * part, part));
    return at::cat(pieces, dim).contiguous();
}

at::Tensor join(const std::vector<at::Tensor> &parts, int64_t dim, int64_t groups)
{
    if (parts.empty() || groups < 1) fail(ACCEL_ERR_INTERNAL, "tensor parallel: join of no parts");
    const int64_t part = parts.front().size(dim);
    if (part % groups != 0) fail(ACCEL_ERR_INTERNAL, "tensor parallel: join of parts that do not hold the groups");
    std::vector<at::Tensor> pieces;
    for (int64_t g = 0; g < groups; ++g)
        for (const auto &p : parts) pieces.push_back(p.narrow(dim, g * (part / groups), part / groups));
    return at::cat(pieces, dim);
}

at::Tensor slice_parameter(const at::Tensor &whole, const ParameterSlicing &s, int64_t rank, int64_t size)
{
    if (s.dim < 0) return whole;
    at::Tensor t = whole;
    const int64_t n = t.size(s.dim);
    if (s.groups == 1 && n % size != 0) {
        auto pad_sizes = t.sizes().vec();
        pad_sizes[static_cast<size_t>(s.dim)] = (n + size - 1) / size * size - n;
        t = at::cat({t, at::zeros(pad_sizes, t.options())}, s.dim);
    }
    return slice(t, s.dim, rank, size, s.groups);
}

} // namespace accel::parallel::tp
