#include "data_loader/dataset.hpp"

namespace accel {

Batch TensorDataset::get_batch(const at::Tensor &indices) const
{
    Batch b;
    b.inputs = features.index_select(0, indices);
    if (labels.defined()) b.labels = labels.index_select(0, indices);
    return b;
}

int64_t num_token_windows(int64_t num_tokens, int64_t block_size, int64_t stride)
{
    const int64_t window = block_size + 1;
    return num_tokens < window ? 0 : (num_tokens - window) / stride + 1;
}

} // namespace accel
