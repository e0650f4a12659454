// Typed form of a model's JSON spec ({"type": "mlp"}, {"type": "sequential", "layers": [...]}, {"type": "gpt"} or
// {"type": "llama"}).
#pragma once

#include "config/gpt_config.hpp"
#include "config/lora_config.hpp"
#include "config/tp_plan_config.hpp"
#include "config/llama_config.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace accel::config {

struct LayerSpec {
    std::string type; // linear, conv2d, relu, gelu, tanh, sigmoid, dropout, layer_norm, batch_norm, embedding, flatten,
                      // transformer_encoder_layer
    // linear
    int64_t in_features = 0, out_features = 0;
    bool bias = true;
    // conv2d
    int64_t in_channels = 0, out_channels = 0, kernel_size = 1, stride = 1, padding = 0;
    // dropout
    double p = 0.5;
    // layer_norm
    std::vector<int64_t> normalized_shape;
    double eps = 1e-5;
    bool elementwise_affine = true;
    // batch_norm
    int64_t num_features = 0, dims = 1;
    double momentum = 0.1;
    bool affine = true, track_running_stats = true;
    // embedding
    int64_t num_embeddings = 0, embedding_dim = 0;
    // flatten
    int64_t start_dim = 1, end_dim = -1;
    // transformer_encoder_layer (PyTorch's nn.TransformerEncoderLayer, post-norm)
    int64_t d_model = 0, nhead = 0, dim_feedforward = 2048;
    double dropout = 0.1;
    std::string activation = "relu";
    bool batch_first = false;
    // linear: "colwise", "rowwise", "colwise_rep" or "replicate"; transformer_encoder_layer: "auto" (heads split,
    // MLP column- then row-wise) or "replicate"; "" when absent (replicated). Used under tensor parallelism.
    std::string tp_plan;

    // fp32 bytes of the layer's parameters and buffers, and the JSON keys whose sizes make them up (for
    // messages): computed while parsing so that impossible sizes are rejected before LibTorch is asked.
    uint64_t bytes = 0;
    std::string size_keys;
};

struct ModelSpec {
    std::vector<LayerSpec> layers; // an mlp spec is expanded into linear/activation/dropout layers
    uint64_t bytes = 0;            // sum of the layers' bytes (at most INT64_MAX); a gpt model's parameter bytes
    std::optional<GptConfig> gpt;  // {"type": "gpt"}: a GPT-2 decoder (src/model/gpt_model.cpp), no layers
    // "lora": PEFT's LoraConfig keys (src/model/lora.hpp adapts the built model), for every model type; read before
    // the type's own keys so that each type's parser accepts it.
    std::optional<LoraConfig> lora;
    std::optional<LlamaConfig> llama; // {"type": "llama"}: the Llama family (src/model/llama_model.cpp), no layers
    // "frozen": globs over parameter names (Model::set_requires_grad(glob, false)), for every model type; read
    // before the type's own keys so that each type's parser accepts it.
    std::vector<std::string> frozen;
    // "empty_init": parameters on the meta device (Accelerate's init_empty_weights; src/big_modeling/empty_init.hpp),
    // for every model type.
    bool empty_init = false;
    // "base_model_tp_plan" then "tp_plan" (transformers' names): module-name patterns to tp_plan styles, for every
    // model type (a JSON-spec model's modules are its layer indices); read before the type's own keys.
    TpPlan tp_plan;
};

// Parses a spec. Sizes whose byte count overflows are ACCEL_ERR_INVALID_ARGUMENT naming their keys.


ModelSpec parse_model_spec(const char *json);

} // namespace accel::config
