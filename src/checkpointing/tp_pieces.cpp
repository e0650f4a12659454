#include "checkpointing/tp_pieces.hpp"

#include <algorithm>

namespace accel::ckpt {

namespace {

// A tensor seen as [outer, n, inner] around the split dimension, n cut as `groups` blocks of `size` parts.
struct Geometry {
    uint64_t outer = 1, n = 0, inner = 1, block = 0, part = 0, slice_n = 0;
    uint64_t total() const { return outer * n * inner; }
    uint64_t slice_total() const { return outer * slice_n * inner; }
};

Geometry geometry(const std::vector<uint64_t> &whole, const TpSplit &s)
{
    Geometry g;
    const auto d = static_cast<size_t>(s.dim);
    for (size_t i = 0; i < whole.size(); ++i) {
        if (i < d) g.outer *= whole[i];
        if (i > d) g.inner *= whole[i];
    }
    g.n = whole[d];
    const uint64_t padded = s.groups == 1 ? (g.n + s.size - 1) / s.size * s.size : g.n;
    g.block = padded / s.groups;
    g.part = g.block / s.size;
    g.slice_n = g.part * s.groups;
    return g;
}

} // namespace

std::string tp_split_problem(const std::vector<uint64_t> &whole, const TpSplit &s)
{
    if (s.dim < 0 || static_cast<size_t>(s.dim) >= whole.size())
        return "split dimension " + std::to_string(s.dim) + " of a tensor of " + std::to_string(whole.size()) + " dimensions";
    if (s.size < 1 || s.groups < 1 || s.size > (1u << 20) || s.groups > (1u << 20))
        return "tp size " + std::to_string(s.size) + " / groups " + std::to_string(s.groups) + " out of range";
    const uint64_t n = whole[static_cast<size_t>(s.dim)];
    if (n > (uint64_t{1} << 62)) // padded up to a multiple of size below: no wrap-around
        return "dimension " + std::to_string(s.dim) + " of " + std::to_string(n) + " out of range";
    if (s.groups > 1 && n % (s.groups * s.size) != 0)
        return "dimension " + std::to_string(s.dim) + " of " + std::to_string(n) + " does not split into " +
               std::to_string(s.groups) + " x " + std::to_string(s.size) + " equal parts";
    return {};
}

std::vector<uint64_t> tp_slice_shape(const std::vector<uint64_t> &whole, const TpSplit &s)
{
    std::vector<uint64_t> out = whole;
    out[static_cast<size_t>(s.dim)] = geometry(whole, s).slice_n;
    return out;
}

void whole_to_slice_runs(const std::vector<uint64_t> &whole, const TpSplit &s, uint64_t offset, uint64_t numel,
                         const SliceRunFn &fn)
{
    const Geometry g = geometry(whole, s);
    if (g.total() == 0) return;
    for (uint64_t i = offset, end = offset + numel; i < end;) {
        const uint64_t o = i / (g.n * g.inner), c = i / g.inner % g.n, in = i % g.inner;
        const uint64_t grp = c / g.block, within = c % g.block, rank = within / g.part, q = within % g.part;
        // Up to the end of this rank's part of the block (or of the whole dimension: the padding is not there).
        const uint64_t count = std::min(end - i, std::min(g.part - q, g.n - c) * g.inner - in);
        fn(rank, (o * g.slice_n + grp * g.part + q) * g.inner + in, count);
        i += count;
    }
}

void slice_to_whole_runs(const std::vector<uint64_t> &whole, const TpSplit &s, uint64_t rank, uint64_t offset,
                         uint64_t numel, const WholeRunFn &fn)
{
    const Geometry g = geometry(whole, s);
    if (g.slice_total() == 0) return;
    for (uint64_t j = offset, end = offset + numel; j < end;) {
        const uint64_t o = j / (g.slice_n * g.inner), lc = j / g.inner % g.slice_n, in = j % g.inner;
        const uint64_t grp = lc / g.part, q = lc % g.part, c = grp * g.block + rank * g.part + q;
        if (c >= g.n) { // padding rows, to the end of the part (groups is 1: the part ends the slice's row)
            const uint64_t count = std::min(end - j, (g.part - q) * g.inner - in);
            fn(std::nullopt, count);
            j += count;
            continue;
        }
        const uint64_t count = std::min(end - j, std::min(g.part - q, g.n - c) * g.inner - in);
        fn((o * g.n + c) * g.inner + in, count);
        j += count;
    }
}

} // namespace accel::ckpt
