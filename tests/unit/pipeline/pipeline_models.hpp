// The model specs of the pipeline tests' thread ranks (pipeline_parallel_test.cpp, pipeline_tensor_parallel_test.cpp):
// small enough to train 20 steps in well under a second, with the gpt's vocabulary (37) and sequence (8).
#pragma once

#include <cstdint>
#include <string>

namespace accel_test {

// A Llama with grouped-query attention (4 query heads sharing 2 key/value heads); `extra`: more keys (", ...").
inline std::string llama_json(int64_t layers, bool tied, const std::string &extra = "")
{
    return std::string(R"({"type": "llama", "vocab_size": 37, "hidden_size": 16, "intermediate_size": 24, )"
                       R"("num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 16, )"
                       R"("num_hidden_layers": )") +
           std::to_string(layers) + ", \"tie_word_embeddings\": " + (tied ? "true" : "false") + extra + "}";
}

} // namespace accel_test
