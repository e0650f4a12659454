// accel's own transformer block (architecture.md, "The seams"): self-attention and an MLP with residuals and
// layer norms, its four matrices behind the linear seam (model/linear.hpp), so that tensor parallelism splits
// the fused q/k/v projection by heads and fp8 or quantized layers replace a Linear, not the block. One
// computation serves the GPT-2 block (pre-norm, Conv1D weights, causal, key/value cache) and the JSON spec's
// transformer_encoder_layer (PyTorch's TransformerEncoderLayer: post-norm, fused in_proj, no mask); the
// options say where the two conventions differ, so each keeps the numerics it had.
//
// The block holds no parameter names: the model registers its tensors (HF's "attn.c_attn.weight", torch's
// "self_attn.in_proj_weight") and hands the same tensors to the block.
#pragma once

#include "model/linear.hpp"

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace torch::nn {
class TransformerEncoderLayerImpl;
}

namespace accel::distributed {
class Communicator;
}

namespace accel::parallel::tp {
class DropoutGenerator;
}

namespace accel::parallel::cp {
struct ContextParallel;
}

namespace accel {

struct TransformerBlockOptions {
    int64_t n_head = 1;
    // Tensor parallelism: the q/k/v projection yields this rank's n_head / tp_size heads only (whole heads,
    // parallel/tensor_parallel), the attention computes those, and out_proj takes their features.
    int64_t tp_size = 1;
    // Tensor parallelism with the MLP replicated (a tp_plan override: fc1 and fc2 whole on every rank), so its
    // dropout draws the same mask on every rank. (A replicated attention is tp_size 1.)
    bool mlp_replicated = false;
    double layer_norm_eps = 1e-5;
    // "relu", "gelu" (exact), "gelu_new" / "gelu_pytorch_tanh" (tanh approximation), anything else: silu
    // (HF's ACT2FN names that GPT-2 configs use).
    std::string activation = "relu";
    bool norm_first = false; // GPT-2 and norm_first=True: x + f(norm(x)); else PyTorch's norm(x + f(x))
    bool causal = false;     // each position sees itself and the earlier ones (decoders)
    // The layout of the block's input and residual stream: [T, B, C] as PyTorch's layer takes it without
    // batch_first, else [B, T, C]. Dropout masks follow the memory order.
    bool seq_first = false;
    // Scaling of the attention scores: PyTorch's MultiheadAttention multiplies q by query_scale before the
    // product; HF's GPT-2 divides the product by each of score_divisors in turn (sqrt(head_dim), then the
    // layer index + 1 when scale_attn_by_inverse_layer_idx). Kept apart: the order decides the last bits.
    double query_scale = 1.0;
    std::vector<double> score_divisors;
    // Dropout probabilities, drawn in this order: attention weights, attention output (before its residual),
    // inside the MLP after the activation (PyTorch's `dropout`; GPT-2 has none), MLP output.
    double attn_dropout = 0.0, resid_dropout = 0.0, mlp_dropout = 0.0;
    // Context parallelism: the block's input is this rank's part of each sequence and attention runs over the
    // whole sequence through the cp group (parallel/context_parallel/attention.hpp); no key/value cache.
    std::shared_ptr<const parallel::cp::ContextParallel> context_parallel;
    // Sequence parallelism over this tp group (null: off): the input is this rank's 1/tp of the positions
    // ([B, T / tp, C]); the tp-parallel linears gather and reduce-scatter the sequence, the norms run on the shard
    // and their gradients are summed over the group.
    std::shared_ptr<distributed::Communicator> sequence_parallel;
    // Tensor parallelism: this tp rank's dropout generator (rng_tracker.hpp) for the split regions - the attention
    // probabilities of this rank's heads, the MLP's hidden features, and under sequence parallelism the residual
    // dropout on this rank's positions. Null: every dropout draws from the default generator.
    std::shared_ptr<parallel::tp::DropoutGenerator> tp_dropout;
    // Selective recomputation (Megatron-LM's recompute_granularity "selective"): in training with gradients, the
    // attention core keeps only q, k and v and computes its scores, softmax and dropout again in backward (with
    // the same masks). Not with a key/value cache (no backward there) nor context parallelism (refused at apply).
    bool recompute_attention = false;
};

struct TransformerBlock {
    TransformerBlockOptions options;
    at::Tensor norm1_weight, norm1_bias, norm2_weight, norm2_bias; // norm1 around attention, norm2 around the MLP
    std::shared_ptr<Linear> qkv;      // fused [q | k | v] projection, C -> 3C
    std::shared_ptr<Linear> out_proj; // C -> C
    std::shared_ptr<Linear> fc1, fc2; // C -> inner -> C

    // x [B, T, C] -> [B, T, C] ([T, B, C] with seq_first). With `kv` (incremental decoding) the block's keys and values of the earlier
    // positions come in kv->first / second ([B, H, past, D], undefined when none) and leave extended by T.
    at::Tensor forward(const at::Tensor &x, bool train, std::pair<at::Tensor, at::Tensor> *kv = nullptr) const;
};

// PyTorch's TransformerEncoderLayer (its parameters and options; norm_first and batch_first as Python's options,
// which LibTorch's C++ layer lacks) as a block over the same tensors. Defined beside the JSON-spec models
// (nn_model.cpp), which already pay for LibTorch's module headers.
std::shared_ptr<TransformerBlock> encoder_layer_block(const torch::nn::TransformerEncoderLayerImpl &layer, bool norm_first,
                                                      bool batch_first);

// HF's activation functions by name (TransformerBlockOptions::activation).
at::Tensor activation(const std::string &name, const at::Tensor &x);

} // namespace accel
