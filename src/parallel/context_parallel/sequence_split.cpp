#include "parallel/context_parallel/sequence_split.hpp"

#include "common/error.hpp"

#include <string>

namespace accel::parallel::cp {

void check_sequence_length(int64_t length, int32_t cp_size, const char *what)
{
    if (length % (2 * static_cast<int64_t>(cp_size)) != 0)
        fail(ACCEL_ERR_INVALID_ARGUMENT,
             std::string(what) + ": a sequence of " + std::to_string(length) + " tokens does not split into 2 x cp_size = " +
                 std::to_string(2 * cp_size) + " equal chunks (context parallelism load-balances causal attention by "
                                              "chunks r and 2 x cp_size - 1 - r); use a length that is a multiple of " +
                 std::to_string(2 * cp_size));
}

void check_model_input(int64_t local_length, bool has_cache, const char *model)
{
    if (has_cache) // forward_cached sets the cp group aside: generation runs whole on every rank
        fail(ACCEL_ERR_INTERNAL, std::string(model) + ": a key/value cache reached the context-parallel forward");
    if (local_length % 2 != 0)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "input: under context parallelism a " + std::string(model) +
                                             " model takes this rank's part of each sequence (two equal chunks, as the "
                                             "prepared loader splits it), got " +
                                             std::to_string(local_length) + " tokens");
}

at::Tensor shard_sequence(const at::Tensor &x, int64_t dim, int32_t rank, int32_t size)
{
    if (size == 1) return x;
    check_sequence_length(x.size(dim), size, "context parallel");
    const int64_t chunk = x.size(dim) / (2 * size);
    const auto c = chunks_of(rank, size);
    return at::cat({x.narrow(dim, c[0] * chunk, chunk), x.narrow(dim, c[1] * chunk, chunk)}, dim);
}

at::Tensor unshard_sequence(const std::vector<at::Tensor> &parts, int64_t dim)
{
    const auto size = static_cast<int32_t>(parts.size());
    if (size == 1) return parts.front();
    std::vector<at::Tensor> chunks(static_cast<size_t>(2 * size));
    for (int32_t r = 0; r < size; ++r) {
        auto halves = parts[static_cast<size_t>(r)].chunk(2, dim);
        const auto c = chunks_of(r, size);
        chunks[static_cast<size_t>(c[0])] = halves[0];
        chunks[static_cast<size_t>(c[1])] = halves[1];
    }
    return at::cat(chunks, dim);
}

at::Tensor sequence_positions(int64_t local_length, int32_t rank, int32_t size, at::TensorOptions options)
{
    options = options.dtype(at::kLong);
    if (size == 1) return at::arange(local_length, options);
    const int64_t chunk = local_length / 2;
    const auto c = chunks_of(rank, size);
    return at::cat({at::arange(c[0] * chunk, (c[0] + 1) * chunk, options), at::arange(c[1] * chunk, (c[1] + 1) * chunk, options)});
}

} // namespace accel::parallel::cp
