#include "common/error.hpp"
#include "parallel/tensor_parallel/vocab_parallel.hpp"

namespace accel::parallel::tp {

int64_t padded_vocab_size(int64_t vocab_size, int64_t tp)
{
    if (vocab_size < 1 || tp < 1) fail(ACCEL_ERR_INTERNAL, "tensor parallel: vocabulary or tp size below 1");
    return (vocab_size + tp - 1) / tp * tp;
}

at::Tensor vocab_parallel_embedding(const at::Tensor &ids, const at::Tensor &weight, int64_t vocab_start,
                                    const Group &group, int64_t padding_idx)
{
    if (!weight.defined() || weight.dim() != 2) fail(ACCEL_ERR_INTERNAL, "vocabulary-parallel embedding: a 2-d weight is needed");
    const int64_t rows = weight.size(0);
    at::Tensor outside = (ids < vocab_start).logical_or(ids >= vocab_start + rows);
    at::Tensor local = (ids - vocab_start).masked_fill(outside, 0);
    const bool pad_here = padding_idx >= vocab_start && padding_idx < vocab_start + rows;
    at::Tensor partial =
        at::embedding(weight, local, pad_here ? padding_idx - vocab_start : -1).masked_fill(outside.unsqueeze(-1), 0.0);
    return reduce_from_region(partial, group);
}

} // namespace accel::parallel::tp
