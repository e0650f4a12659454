// The key/value cache of a decoder's incremental generation (GptModel, LlamaModel): one pair per block, in the
// layout each model's attention keeps ([B, heads, T, head_dim]). One type for every model, so that a pipeline
// stage (parallel/pipeline/stage_model.hpp) takes the same cache whatever the model.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace accel {

struct KvCache {
    std::vector<at::Tensor> keys, values;
    // The positions cached. A pipeline stage fills only its own blocks' entries: the first it holds says.
    int64_t length() const
    {
        for (const auto &k : keys)
            if (k.defined()) return k.size(2);
        return 0;
    }
};

} // namespace accel
