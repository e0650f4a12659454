// Models built from a JSON spec as a torch::nn::Sequential.
#include "model/model.hpp"

#include "big_modeling/empty_init.hpp"
#include "common/error.hpp"
#include "common/out_of_memory.hpp"
#include "config/model_spec.hpp"
#include "model/activation_checkpoint.hpp"
#include "model/gpt_model.hpp"
#include "model/llama_model.hpp"
#include "model/linear.hpp"
#include "model/lora.hpp"
#include "model/transformer_block.hpp"
#include "distributed/communicator.hpp"
#include "parallel/pipeline/stage_init.hpp"
#include "parallel/pipeline/stage_model.hpp"
#include "parallel/tensor_parallel/block_plan.hpp"
#include "parallel/tensor_parallel/mappings.hpp"
#include "parallel/tensor_parallel/rng_tracker.hpp"
#include "parallel/tensor_parallel/sequential_plan.hpp"
#include "parallel/tensor_parallel/split_model.hpp"
#include "precision/fp8_linear.hpp"

#include <ATen/autocast_mode.h>
#include <torch/version.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/modules/transformerlayer.h>

#include <algorithm>
#include <cmath>

#if TORCH_VERSION_MAJOR >= 2
using std::get_if; // LibTorch 2's module options hold std::variant, 1.x's c10::variant
#else
using c10::get_if;
#endif

namespace accel {

// PyTorch's TransformerEncoderLayer computed by accel's block over the layer's own parameters (their names,
// self_attn.in_proj_weight and so on, and the module's initialisation stay LibTorch's): q scaled by
// 1/sqrt(head_dim) before the product, dropout p on the attention weights, on both residual branches and after
// the activation; layer norms with the layer's eps.
std::shared_ptr<TransformerBlock> encoder_layer_block(const torch::nn::TransformerEncoderLayerImpl &layer, bool norm_first,
                                                      bool batch_first)
{
    const auto &o = layer.options;
    auto b = std::make_shared<TransformerBlock>();
    // batch_first computes on (batch, seq, feature) as it comes, without transposing: the input's gradient then
    // has the layout PyTorch's batch_first layer gives it (contiguous). Transposed, it reached a gelu before the
    // layer as a permuted tensor, and LibTorch 1.13's CPU gelu backward computes wrong values for a permuted
    // grad_output (relu and tanh do not): conv2d, gelu, flatten, this layer trained to NaN.
    b->options.seq_first = !batch_first;
    b->options.norm_first = norm_first;
    b->options.n_head = o.nhead();
    b->options.layer_norm_eps = layer.norm1->options.eps();
    b->options.activation = get_if<torch::enumtype::kGELU>(&o.activation()) != nullptr ? "gelu" : "relu";
    b->options.query_scale = 1.0 / std::sqrt(static_cast<double>(o.d_model() / o.nhead()));
    b->options.attn_dropout = b->options.resid_dropout = b->options.mlp_dropout = o.dropout();
    const auto &attn = layer.self_attn;
    b->qkv = make_linear(attn->in_proj_weight, attn->in_proj_bias, Linear::Layout::OutIn);
    b->out_proj = make_linear(attn->out_proj->weight, attn->out_proj->bias, Linear::Layout::OutIn);
    b->fc1 = make_linear(layer.linear1->weight, layer.linear1->bias, Linear::Layout::OutIn);
    b->fc2 = make_linear(layer.linear2->weight, layer.linear2->bias, Linear::Layout::OutIn);
    b->norm1_weight = layer.norm1->weight;
    b->norm1_bias = layer.norm1->bias;
    b->norm2_weight = layer.norm2->weight;
    b->norm2_bias = layer.norm2->bias;
    return b;
}

namespace {

NamedTensors to_named(const torch::OrderedDict<std::string, at::Tensor> &dict)
{
    NamedTensors out;
    for (const auto &item : dict) out.emplace_back(item.key(), item.value());
    return out;
}

class NnModel final : public Model, public parallel::tp::TensorParallelModel, public parallel::pp::PipelineStageModel {
public:
    NnModel(torch::nn::Sequential seq, std::vector<bool> batch_first, std::vector<std::string> types,
            std::vector<parallel::tp::SequentialLayer> tp_layers)
        : seq_(std::move(seq)), batch_first_(std::move(batch_first)), types_(std::move(types)),
          tp_layers_(std::move(tp_layers))
    {
        set_tensors(to_named(seq_->named_parameters(true)), to_named(seq_->named_buffers(true)));
        // Linear layers compute through the linear seam over the module's own parameters (which keep their
        // names, "<layer>.weight" / "<layer>.bias"); fp8 or a tensor-parallel layer replaces the seam's object.
        for (const auto &m : *seq_) {
            auto lin = std::dynamic_pointer_cast<torch::nn::LinearImpl>(m.ptr());
            linear_.push_back(lin ? make_linear(lin->weight, lin->bias, Linear::Layout::OutIn) : nullptr);
            auto enc = std::dynamic_pointer_cast<torch::nn::TransformerEncoderLayerImpl>(m.ptr());
            blocks_.push_back(enc ? encoder_layer_block(*enc, false, batch_first_[blocks_.size()]) : nullptr);
        }
        checkpointed_.assign(linear_.size(), false);
        block_end_ = seq_->size(); // the pipeline's blocks are the layers; uncut: all of them
        size_t i = 0;
        for (const auto &m : *seq_) {
            const bool norm = types_[i] == "layer_norm" || types_[i] == "transformer_encoder_layer";
            const auto params = m.ptr()->parameters(true);
            // The same TensorImpl follows every later change of the parameter's dtype (set_data).
            norm_weight_.push_back(norm && !params.empty() ? params.front() : at::Tensor());
            ++i;
        }
    }

    // Sequential::forward, layer by layer, so that linear and transformer layers compute through accel's
    // seams (fp8 inside an fp8 scope).
    at::Tensor forward(const at::Tensor &input) override
    {
        if (pipelined()) return through_pipeline(input, nullptr, "forward");
        return run_layers(input, 0, seq_->size());
    }

    // Pipeline parallelism (stage_model.hpp): the layers are the blocks, cut where their parameter counts balance
    // (or at pp_split_points); a stage runs its layers on whatever the previous stage sent (the pipeline carries
    // each boundary's shape with it: pipeline_shape's hidden_size 0).
    Model &stage_model() override { return *this; }
    Shape pipeline_shape() const override
    {
        Shape s;
        s.type = "sequential";
        return s;
    }
    std::vector<int64_t> block_costs() const override { return costs_by_name(*this, "", seq_->size()); }
    at::Tensor tied_embedding() const override { return {}; } // a spec's layers share no parameter
    void apply_pipeline_stage(const std::vector<std::pair<int64_t, int64_t>> &chunks, bool first, bool last) override
    {
        check_pipelinable();
        std::vector<std::vector<at::Tensor>> by_layer(seq_->size()); // "<layer>.<name>", LoRA's adapters included
        for (const auto &[name, t] : named_parameters()) by_layer[std::stoul(name)].push_back(t);
        cut_stage(*this, "sequential", chunks, first, last, seq_->size(), [&by_layer](size_t i) { return by_layer[i]; }, {}, {});
    }
    at::Tensor forward_stage(const at::Tensor &input, KvCache *cache) override
    {
        if (!pipelined()) fail(ACCEL_ERR_INTERNAL, "sequential: forward_stage without a pipeline stage");
        if (cache != nullptr) fail(ACCEL_ERR_UNIMPLEMENTED, "sequential: generation applies to gpt and llama models only");
        // Token ids that crossed a stage boundary (before the embedding, after parameterless layers such as flatten)
        // arrive as the pipeline's float32; small integers are exact in it.
        const bool ids = !stage_first_ && types_[block_begin_] == "embedding";
        return run_layers(ids ? input.to(at::kLong) : input, block_begin_, block_end_);
    }
    void mark_logits(const at::Tensor &) const override {}
    bool sequence_parallel() const override { return sequence_parallel_ && tp_group_ != nullptr; }

    // Layers [begin, end) on `input` (the whole model: 0 to size), linear and transformer layers through accel's
    // seams (fp8 inside an fp8 scope).
    at::Tensor run_layers(const at::Tensor &input, size_t begin, size_t end)
    {
        at::Tensor x = input;
        ForwardHooks *hooks = forward_hooks.get();
        const bool grad_on = at::GradMode::is_enabled(); // recomputation only matters for a backward
        for (size_t i = begin; i < end; ++i) {
            torch::nn::AnyModule &m = *(seq_->begin() + static_cast<std::ptrdiff_t>(i));
            if (hooks) hooks->before_layer(i);
            // Under autocast a 16-bit activation reaching a layer norm (alone or inside a transformer layer,
            // whose residual stream it is) with float32 weights is upcast first: LibTorch 1.13's CPU layer norm
            // takes no bfloat16 input with float32 weights, and autocast computes normalisations in float32
            // anyway. (Weights made 16-bit by sharding's bf16 policy take the 16-bit input as it is.)
            if (norm_weight_[i].defined() && at::autocast::is_cpu_enabled() &&
                (x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kHalf) &&
                norm_weight_[i].scalar_type() == at::kFloat)
                x = x.to(at::kFloat);
            const bool train = seq_->is_training();
            if (sequence_parallel_ && tp_group_ && i == sp_.first) x = scatter_positions(x);
            if (split_dropout_.size() > i && split_dropout_[i]) {
                // Inside a split region: this rank's features, this rank's masks (rng_tracker.hpp).
                x = parallel::tp::region_dropout(x, tp_layers_[i].p, train, tp_dropout_);
            } else if (grad_on && checkpointed_[i]) {
                std::vector<at::Tensor> params = m.ptr()->parameters(true);
                if (linear_[i])
                    for (const auto &t : linear_[i]->added_parameters()) params.push_back(t); // LoRA's adapters
                // A split layer's rerun draws its masks again (a transformer layer's heads and hidden features, a
                // rowwise LoRA adapter's input): the tp generator goes back with the default one.
                std::vector<ExtraGenerator> extra;
                if (train && tp_dropout_) extra.push_back(parallel::tp::checkpoint_generator(tp_dropout_));
                x = checkpoint_layer(x, params,
                                     [m, lin = linear_[i], block = blocks_[i], train](const at::Tensor &in) mutable {
                                         return layer_forward(m, lin.get(), block.get(), train, in);
                                     },
                                     train, std::move(extra));
            } else {
                x = layer_forward(m, linear_[i].get(), blocks_[i].get(), train, x);
            }
            // Past the last split block the layers compute on every position again (replicated).
            if (sequence_parallel_ && tp_group_ && i == sp_.last)
                x = parallel::tp::gather_sequence_to_replicated(x, tp_group_, sequence_dim(x));
            if (hooks) x = hooks->after_layer(i, x);
        }
        return x;
    }
    // Every marked layer with parameters but batch_norm (recomputing it would update its running
    // statistics twice, as with torch.utils.checkpoint).
    void set_activation_checkpointing(const std::vector<bool> &layers) override
    {
        size_t i = 0;
        for (const auto &m : *seq_) {
            const bool on = i < layers.size() && layers[i] && types_[i] != "batch_norm" && !m.ptr()->parameters(true).empty();
            if (on && linear_[i] && linear_[i]->stateful_forward())
                fail(ACCEL_ERR_UNIMPLEMENTED, "activation_checkpointing: layer " + std::to_string(i) + " computes in fp8, "
                                              "whose scaling state would be updated again by the recomputation");
            checkpointed_[i++] = on;
        }
    }
    bool activation_checkpointing() const override
    {
        return std::find(checkpointed_.begin(), checkpointed_.end(), true) != checkpointed_.end();
    }
    // One unit per layer ("0", "1", ...), typed by its spec name ("linear", "transformer_encoder_layer").
    std::vector<ModuleUnit> units() const override
    {
        std::vector<ModuleUnit> out;
        size_t i = 0;
        for (const auto &m : *seq_) {
            ModuleUnit u{std::to_string(i), types_[i], {}};
            for (const auto &p : m.ptr()->named_parameters(true)) u.parameter_names.push_back(u.name + "." + p.key());
            out.push_back(std::move(u));
            ++i;
        }
        return with_inserted_parameters(std::move(out));
    }
    // Each linear layer, named by its index as PEFT names a module of an nn.Sequential ("0", "2", ...).
    std::vector<LinearSlot> linear_slots() override
    {
        std::vector<LinearSlot> out;
        for (size_t i = 0; i < linear_.size(); ++i)
            if (linear_[i]) out.push_back({std::to_string(i), &linear_[i], i});
        return out;
    }
    // The spec's tp_plan (sequential_plan.hpp) over the mesh's tp group: linear layers split column- or row-wise
    // through the linear seam, transformer_encoder_layer layers by heads and MLP columns (block_plan.hpp).
    void apply_tensor_parallel(const std::shared_ptr<distributed::Communicator> &group) override
    {
        namespace tp = parallel::tp;
        if (!group) fail(ACCEL_ERR_INTERNAL, "sequential: tensor parallelism without a group");
        if (tp_group_) fail(ACCEL_ERR_FAILED_PRECONDITION, "sequential: tensor parallelism is already applied");
        const int64_t n = group->size();
        std::vector<tp::LayerSplit> splits = tp::plan_sequential(tp_layers_, tp_plan(), n);
        // Sequence parallelism: the blocks' activations are this rank's positions, split along the layout's
        // sequence dimension; the blocks' linears gather and reduce-scatter it.
        tp::LinearPlanOptions layer;
        tp::SequenceRegion region;
        if (sequence_parallel_) {
            region = tp::plan_sequence_parallel(tp_layers_, splits);
            layer.column.sequence_dim = layer.row.sequence_dim = region.sequence_dim;
        }
        for (size_t i = 0; i < splits.size(); ++i) { // every refusal before anything is split
            if (splits[i] == tp::LayerSplit::Block) {
                const std::string key = "layers[" + std::to_string(i) + "].";
                tp::check_block(*blocks_[i], block_modules(i), {}, n, key + "nhead", key + "dim_feedforward", layer);
            } else if (linear_[i] && splits[i] != tp::LayerSplit::None) {
                tp::check_parallelizable(*linear_[i], std::to_string(i));
            }
        }
        if (n == 1) return;
        // Dropout inside the split regions draws from this rank's generator (rng_tracker.hpp), seeded from set_seed's.
        auto dropout = tp::make_dropout_generator(group->rank());
        std::vector<bool> split_dropout(splits.size(), false);
        std::map<std::string, tp::ParameterSlicing> plan;
        tp::LinearPlanOptions rowwise; // its input is this rank's features (a LoRA adapter's dropout on it)
        rowwise.dropout = dropout;
        for (size_t i = 0; i < splits.size(); ++i) {
            const std::string name = std::to_string(i);
            tp::LinearPlanOptions gathered;
            gathered.column.gather_output = true;
            switch (splits[i]) {
            case tp::LayerSplit::Colwise: tp::parallelize_linear(linear_[i], name, tp::LinearStyle::Colwise, group, plan); break;
            case tp::LayerSplit::ColwiseRep:
                tp::parallelize_linear(linear_[i], name, tp::LinearStyle::Colwise, group, plan, gathered);
                break;
            case tp::LayerSplit::Rowwise:
                tp::parallelize_linear(linear_[i], name, tp::LinearStyle::Rowwise, group, plan, rowwise);
                break;
            case tp::LayerSplit::Block: {
                tp::parallelize_block(*blocks_[i], block_modules(i), {}, group, plan, layer, dropout);
                if (sequence_parallel_) blocks_[i]->options.sequence_parallel = group;
                // torch's MultiheadAttention names the fused projection's tensors in_proj_weight / in_proj_bias.
                for (const char *what : {"weight", "bias"}) {
                    auto it = plan.find(name + ".self_attn.in_proj." + what);
                    if (it == plan.end()) continue;
                    plan[name + ".self_attn.in_proj_" + what] = it->second;
                    plan.erase(it);
                }
                break;
            }
            case tp::LayerSplit::SplitDropout: split_dropout[i] = true; break;
            case tp::LayerSplit::None: break;
            }
        }
        tp_dropout_ = std::move(dropout);
        split_dropout_ = std::move(split_dropout);
        sp_ = region;
        tp_group_ = group;
        tp_slicing_ = std::move(plan);
    }
    const std::map<std::string, parallel::tp::ParameterSlicing> &tensor_parallel_slicing() const override
    {
        return tp_slicing_;
    }
    const std::shared_ptr<distributed::Communicator> &tensor_parallel_group() const override { return tp_group_; }
    std::shared_ptr<parallel::tp::DropoutGenerator> tensor_parallel_dropout() const override { return tp_dropout_; }
    void enable_sequence_parallel() override
    {
        if (tp_group_) fail(ACCEL_ERR_FAILED_PRECONDITION, "sequential: sequence parallelism after tensor parallelism");
        sequence_parallel_ = true;
    }

    void train(bool on) override { seq_->train(on); }
    bool is_training() const override { return seq_->is_training(); }
    std::vector<std::string> layer_types() const override { return types_; }
    void enable_fp8(const config::FP8RecipeKwargs &recipe) override
    {
        // A layer whose forward is already stateful is already fp8 (enable_fp8 runs once per prepare).
        auto plain = [this](size_t i) { return linear_[i] && !linear_[i]->stateful_forward(); };
        for (size_t i = 0; i < linear_.size(); ++i) // checked first: nothing changes when one is refused
            if (plain(i) && !linear_[i]->added_parameters().empty())
                fail(ACCEL_ERR_UNIMPLEMENTED, "fp8: layer " + std::to_string(i) + " has LoRA adapters, which the fp8 "
                                              "emulation would not compute; use bf16 for LoRA training");
        for (size_t i = 0; i < linear_.size(); ++i)
            if (plain(i) && checkpointed_[i])
                fail(ACCEL_ERR_UNIMPLEMENTED, "fp8: layer " + std::to_string(i) + " is recomputed in backward "
                                              "(activation_checkpointing), which would update its scaling state again");
        for (size_t i = 0; i < linear_.size(); ++i)
            if (plain(i)) linear_[i] = fp8::make_fp8_linear(linear_[i], recipe);
    }

private:
    torch::nn::Sequential seq_;
    std::vector<bool> batch_first_;                               // per layer
    std::vector<std::string> types_;                              // per layer: the spec's type name
    std::vector<std::shared_ptr<Linear>> linear_;                 // per layer; null if not a linear layer
    std::vector<bool> checkpointed_;                              // per layer: recomputed in backward
    std::vector<at::Tensor> norm_weight_; // per layer: a parameter of a layer whose input goes into a layer norm

    std::vector<std::shared_ptr<TransformerBlock>> blocks_; // per layer; null if not a transformer layer
    std::vector<parallel::tp::SequentialLayer> tp_layers_;  // per layer: what the tensor-parallel plan reads
    std::shared_ptr<distributed::Communicator> tp_group_;   // set by apply_tensor_parallel
    std::map<std::string, parallel::tp::ParameterSlicing> tp_slicing_;
    std::shared_ptr<parallel::tp::DropoutGenerator> tp_dropout_; // this tp rank's, for the split regions' dropout
    std::vector<bool> split_dropout_; // per layer (empty without tp): a dropout inside a split region
    bool sequence_parallel_ = false;  // enable_sequence_parallel
    parallel::tp::SequenceRegion sp_; // under sequence parallelism: the layers that hold this rank's positions

    // What a pipeline cannot cut into stages equal to one process, refused by name before the cut (every rank checks
    // every layer, so all refuse alike): the pipeline's micro-batches are slices of the batch's first dimension.
    void check_pipelinable() const
    {
        const auto refuse = [](size_t i, const std::string &why) {
            fail(ACCEL_ERR_UNIMPLEMENTED, "parallelism_config.pp_size: a sequential model's layers[" + std::to_string(i) + "] " + why +
                                              " under pipeline parallelism is not built");
        };
        for (size_t i = 0; i < types_.size(); ++i) {
            // Its batch statistics would be a micro-batch's, not the batch's (and its running ones updated per micro-batch).
            if (types_[i] == "batch_norm") refuse(i, "batch_norm (statistics over a micro-batch, not the batch)");
            // Sequence-first: the first dimension is the positions, which micro-batches must not split.
            if (types_[i] == "transformer_encoder_layer" && !batch_first_[i])
                refuse(i, "transformer_encoder_layer without batch_first (micro-batches split the first dimension)");
        }
    }

    // The positions' dimension of a split block's input: an unbatched [T, C] is a batch of one (layer_forward).
    int64_t sequence_dim(const at::Tensor &x) const { return x.dim() == 2 ? 0 : sp_.sequence_dim; }
    // Entering the first split block from replicated layers: this rank's 1/tp of the positions.
    at::Tensor scatter_positions(const at::Tensor &x) const
    {
        if (x.dim() != 2 && x.dim() != 3) return x; // the block refuses its shape by name (layer_forward)
        const int64_t dim = sequence_dim(x);
        parallel::tp::check_sequence_split(x.size(dim), false, tp_group_->size(), "sequential");
        return parallel::tp::scatter_sequence(x, tp_group_, dim);
    }

    parallel::tp::BlockModules block_modules(size_t i) const
    {
        const std::string p = std::to_string(i) + ".";
        return {p + "self_attn.in_proj", p + "self_attn.out_proj", p + "linear1", p + "linear2"};
    }

    // A layer: linear layers and transformer layers through accel's seams, the others as their module.
    static at::Tensor layer_forward(torch::nn::AnyModule &m, Linear *lin, const TransformerBlock *block, bool train,
                                    const at::Tensor &x)
    {
        if (lin) return lin->forward(x);
        if (!block) return m.forward(x);
        // (seq, batch, feature), or (batch, seq, feature) with batch_first; an unbatched (seq, feature) is a
        // batch of one, as in PyTorch.
        const int64_t batch_dim = block->options.seq_first ? 1 : 0;
        if (x.dim() == 2) return block->forward(x.unsqueeze(batch_dim), train).squeeze(batch_dim);
        if (x.dim() != 3)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "transformer_encoder_layer: expected a 2-D or 3-D input, got shape " +
                                                 c10::str(x.sizes()));
        return block->forward(x, train);
    }
};

void add_layer(torch::nn::Sequential &seq, const config::LayerSpec &l)
{
    namespace nn = torch::nn;
    if (l.type == "linear") {
        seq->push_back(nn::Linear(nn::LinearOptions(l.in_features, l.out_features).bias(l.bias)));
    } else if (l.type == "conv2d") {
        seq->push_back(nn::Conv2d(nn::Conv2dOptions(l.in_channels, l.out_channels, l.kernel_size)
                                      .stride(l.stride)
                                      .padding(l.padding)
                                      .bias(l.bias)));
    } else if (l.type == "relu") {
        seq->push_back(nn::ReLU());
    } else if (l.type == "gelu") {
        seq->push_back(nn::GELU());
    } else if (l.type == "tanh") {
        seq->push_back(nn::Tanh());
    } else if (l.type == "sigmoid") {
        seq->push_back(nn::Sigmoid());
    } else if (l.type == "dropout") {
        seq->push_back(nn::Dropout(nn::DropoutOptions(l.p)));
    } else if (l.type == "layer_norm") {
        seq->push_back(nn::LayerNorm(
            nn::LayerNormOptions(l.normalized_shape).eps(l.eps).elementwise_affine(l.elementwise_affine)));
    } else if (l.type == "batch_norm") {
        if (l.dims == 1)
            seq->push_back(nn::BatchNorm1d(nn::BatchNorm1dOptions(l.num_features)
                                               .eps(l.eps)
                                               .momentum(l.momentum)
                                               .affine(l.affine)
                                               .track_running_stats(l.track_running_stats)));
        else
            seq->push_back(nn::BatchNorm2d(nn::BatchNorm2dOptions(l.num_features)
                                               .eps(l.eps)
                                               .momentum(l.momentum)
                                               .affine(l.affine)
                                               .track_running_stats(l.track_running_stats)));
    } else if (l.type == "embedding") {
        seq->push_back(nn::Embedding(nn::EmbeddingOptions(l.num_embeddings, l.embedding_dim)));
    } else if (l.type == "flatten") {
        seq->push_back(nn::Flatten(nn::FlattenOptions().start_dim(l.start_dim).end_dim(l.end_dim)));
    } else if (l.type == "transformer_encoder_layer") {
        nn::TransformerEncoderLayerOptions o(l.d_model, l.nhead);
        o.dim_feedforward(l.dim_feedforward).dropout(l.dropout);
        if (l.activation == "gelu") o.activation(torch::kGELU);
        else o.activation(torch::kReLU);
        seq->push_back(nn::TransformerEncoderLayer(o));
    } else {
        fail(ACCEL_ERR_INTERNAL, "unhandled layer type " + l.type);
    }
}

void check_fits(const config::ModelSpec &spec)
{
    const uint64_t ceiling = memory_ceiling();
    if (spec.bytes <= ceiling) return;
    if (spec.gpt || spec.llama)
        fail(ACCEL_ERR_RESOURCE_EXHAUSTED, std::string(spec.gpt ? "vocab_size, n_positions, n_embd, n_layer, n_inner"
                                                                : "vocab_size, hidden_size, intermediate_size, "
                                                                  "num_hidden_layers") +
                                               ": the model's parameters need " + std::to_string(spec.bytes) +
                                               " bytes, more than this machine's memory and swap (" +
                                               std::to_string(ceiling) + " bytes)");
    const config::LayerSpec *largest = &spec.layers.front();
    for (const auto &l : spec.layers)
        if (l.bytes > largest->bytes) largest = &l;
    fail(ACCEL_ERR_RESOURCE_EXHAUSTED, largest->size_keys + ": the model's parameters need " +
                                           std::to_string(spec.bytes) + " bytes (this layer " +
                                           std::to_string(largest->bytes) + "), more than this machine's memory and swap (" +
                                           std::to_string(ceiling) + " bytes)");
}

// The spec's "frozen" globs, whatever the model type (one place for every type the spec builds).
std::shared_ptr<Model> with_frozen(std::shared_ptr<Model> model, const std::vector<std::string> &frozen)
{
    for (size_t i = 0; i < frozen.size(); ++i) model->set_requires_grad(frozen[i], false, "frozen[" + std::to_string(i) + "]");
    return model;
}

std::shared_ptr<Model> construct_model(const config::ModelSpec &spec, const ParameterFn &on_parameter);

// Every model type has a tensor-parallel plan, which the spec's tp_plan overrides (applied at prepare).
std::shared_ptr<Model> build_model(const config::ModelSpec &spec, const ParameterFn &on_parameter)
{
    std::shared_ptr<Model> m = construct_model(spec, on_parameter);
    if (auto *planned = dynamic_cast<parallel::tp::TensorParallelModel *>(m.get())) planned->set_tp_plan(spec.tp_plan);
    return m;
}

std::shared_ptr<Model> construct_model(const config::ModelSpec &spec, const ParameterFn &on_parameter)
{
    if (spec.gpt) return std::make_shared<GptModel>(*spec.gpt, on_parameter);
    if (spec.llama) return std::make_shared<LlamaModel>(*spec.llama, on_parameter);
    torch::nn::Sequential seq;
    std::vector<bool> batch_first;
    std::vector<std::string> types;
    for (const auto &l : spec.layers) {
        add_layer(seq, l);
        if (on_parameter)
            for (const auto &p : seq[seq->size() - 1]->parameters()) on_parameter(p);
        types.push_back(l.type);
        batch_first.push_back(l.type == "transformer_encoder_layer" && l.batch_first);
    }
    std::vector<parallel::tp::SequentialLayer> tp_layers;
    for (const auto &l : spec.layers)
        tp_layers.push_back({l.type, l.tp_plan, l.in_features, l.out_features, l.nhead, l.dim_feedforward,
                             l.type == "transformer_encoder_layer" ? l.dropout : l.p, l.batch_first});
    return std::make_shared<NnModel>(std::move(seq), std::move(batch_first), std::move(types), std::move(tp_layers));
}

} // namespace

// The spec's "lora" object: adapters on the built model, its other parameters frozen.
static std::shared_ptr<Model> with_lora(std::shared_ptr<Model> model, const std::optional<config::LoraConfig> &lora,
                                        const ParameterFn &on_parameter)
{
    if (lora) apply_lora(*model, *lora, on_parameter);
    return model;
}

std::shared_ptr<Model> make_model_from_json(const char *spec_json, const ParameterFn &on_parameter)
{
    config::ModelSpec spec = config::parse_model_spec(spec_json);
    if (!spec.empty_init) {
        check_fits(spec);
        // pp_size > 1 (an accelerator's scope on this thread): only this rank's pipeline stage holds memory.
        if (auto stage = on_parameter ? nullptr : parallel::pp::StageAtInit::for_new_model(spec)) {
            auto model = build_model(spec, stage->hook());
            stage->finish(*model);
            return with_frozen(std::move(model), spec.frozen);
        }
        return with_frozen(with_lora(build_model(spec, on_parameter), spec.lora, on_parameter), spec.frozen);
    }
    // Each parameter goes to the meta device as soon as it is made: the whole model never needs the memory
    // check_fits asks for. LoRA's new adapters stay real (small, and no checkpoint of the base holds them).
    if (on_parameter)
        fail(ACCEL_ERR_UNIMPLEMENTED, "empty_init: not while an accelerator with deepspeed_plugin.zero3_init_flag (or "
                                      "fsdp_plugin.cpu_ram_efficient_loading) lives, which partitions the parameters "
                                      "as they are made");
    return with_frozen(with_lora(build_model(spec, big_modeling::empty_init_hook()), spec.lora, {}), spec.frozen);
}

} // namespace accel
