// tp_plan overrides of the gpt and llama plans (parallel/tensor_parallel/tp_plan.hpp) and the tensor-parallel plans of
// JSON-spec models (sequential_plan.hpp, block_plan.hpp), on thread ranks: 20 AdamW steps through prepare's wrapper
// (accumulation 2, clipping) equal one process's on the same global batch within 1e-5 relative (float64, as the
// llama test: float32 AdamW turns the split's reordered sums into differences of about 1e-5, which would measure
// rounding rather than the plan); a replicated layer is whole on every rank; the checkpoint gathering gives one
// process's whole tensors; bad plans are refused by name before anything is split.
#include "common/error.hpp"
#include "config/accelerator_config.hpp"
#include "config/pretrained_config.hpp"
#include "distributed/communicator.hpp"
#include "distributed/device_mesh.hpp"
#include "distributed/thread_communicator.hpp"
#include "model/gpt_model.hpp"
#include "model/llama_model.hpp"
#include "model/model.hpp"
#include "ops/loss.hpp"
#include "parallel/tensor_parallel/plan.hpp"
#include "parallel/tensor_parallel/slicing.hpp"
#include "parallel/tensor_parallel/split_model.hpp"
#include "parallel/tensor_parallel/whole_state.hpp"
#include "parallel/whole_gradients.hpp"
#include "parallel_test_support.hpp"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dist = accel::distributed;
namespace tp = accel::parallel::tp;

namespace {

using namespace accel_test;

// `count` copies of one model (the same seed), in float64.
std::vector<std::shared_ptr<accel::Model>> copies(const std::string &spec, int32_t count)
{
    std::vector<std::shared_ptr<accel::Model>> out;
    for (int32_t i = 0; i < count; ++i) {
        at::manual_seed(71);
        out.push_back(accel::make_model_from_json(spec.c_str()));
        out.back()->train(true);
        at::NoGradGuard no_grad;
        for (const auto &p : out.back()->parameters()) at::Tensor(p).set_data(p.detach().to(at::kDouble));
    }
    return out;
}

// One micro-batch: inputs and targets of `rows` rows starting at `first`, and the loss on the model's outputs.
struct Task {
    std::function<at::Tensor(int64_t step, int64_t micro, int64_t first, int64_t rows)> input, target;
    accel::Loss loss;
};

// 20 steps of `task` at dp x tpn thread ranks against one process; returns the split parameters' names (of rank 0).
std::vector<std::string> check_training(int32_t dp, int32_t tpn, const std::string &spec, const Task &task)
{
    const int32_t world = dp * tpn;
    auto models = copies(spec, world + 1);
    constexpr int kSteps = 20, kMicro = 2;
    constexpr int64_t kRows = 4;
    constexpr double kClip = 0.05, kLr = 1e-2;
    auto adamw = [&](const std::vector<at::Tensor> &params) {
        return torch::optim::AdamW(params, torch::optim::AdamWOptions(kLr).weight_decay(0.01));
    };
    auto &ref = *models.back();
    auto ref_opt = adamw(ref.parameters());
    std::vector<double> ref_norms;
    for (int s = 0; s < kSteps; ++s) {
        for (int k = 0; k < kMicro; ++k)
            (accel::compute_loss(task.loss, ref.forward(task.input(s, k, 0, kRows)), task.target(s, k, 0, kRows)) / kMicro)
                .backward();
        ref_norms.push_back(accel::parallel::whole_clip_grad_norm(ref.parameters(), kClip, 2.0, true));
        ref_opt.step();
        ref_opt.zero_grad();
    }
    std::vector<std::string> split_names;
    dist::run_on_threads(world, [&](const std::shared_ptr<dist::Communicator> &comm) {
        dist::DeviceMesh mesh(dist::mesh_shape(dp, 1, 1, tpn), comm);
        auto &m = *models[static_cast<size_t>(comm->rank())];
        auto wrapper = tp::prepare_tensor_parallel(m, mesh, accel::config::DistributedDataParallelKwargs{});
        auto opt = adamw(m.parameters());
        const int64_t rows = kRows / dp, first = mesh.rank_in(dist::MeshDim::DpCp) * rows; // the tp group's rows
        for (int s = 0; s < kSteps; ++s) {
            for (int k = 0; k < kMicro; ++k) {
                wrapper->set_require_sync(k == kMicro - 1);
                at::Tensor loss = accel::compute_loss(task.loss, m.forward(task.input(s, k, first, rows)),
                                                      task.target(s, k, first, rows));
                (loss / kMicro).backward();
                wrapper->finish_backward();
            }
            const double norm = wrapper->clip_grad_norm(kClip, 2.0, true);
            EXPECT_NEAR(norm, ref_norms[static_cast<size_t>(s)], 1e-5 * ref_norms[static_cast<size_t>(s)]) << "step " << s;
            opt.step();
            opt.zero_grad();
        }
        const auto &plan = plan_of(m);
        const int32_t t = mesh.rank_in(dist::MeshDim::Tp);
        for (size_t i = 0; i < m.named_parameters().size(); ++i) {
            const auto &[name, p] = m.named_parameters()[i];
            const at::Tensor &whole = ref.named_parameters()[i].second;
            auto it = plan.find(name);
            const at::Tensor mine = it == plan.end() ? whole : tp::slice_parameter(whole, it->second, t, tpn);
            expect_close(p, mine, name + " after training (rank " + std::to_string(comm->rank()) + ")", rel_tol(whole));
        }
        if (comm->rank() == 0)
            for (const auto &[name, s] : plan) split_names.push_back(name);
    });
    return split_names;
}

bool contains(const std::vector<std::string> &names, const std::string &name)
{
    return std::find(names.begin(), names.end(), name) != names.end();
}

// Causal-LM batches over a vocabulary of 37.
Task causal_lm_task()
{
    at::manual_seed(72);
    const at::Tensor ids = at::randint(0, 37, {20, 2, 4, 8}, at::kLong), labels = at::randint(0, 37, {20, 2, 4, 8}, at::kLong);
    return {[ids](int64_t s, int64_t k, int64_t first, int64_t rows) { return ids[s][k].narrow(0, first, rows); },
            [labels](int64_t s, int64_t k, int64_t first, int64_t rows) { return labels[s][k].narrow(0, first, rows); },
            accel::Loss(accel::LossKind::CausalLm)};
}

// Regression on float64 features of shape [rows, rest...] -> [rows, outs...].
Task regression_task(std::vector<int64_t> in_shape, std::vector<int64_t> out_shape)
{
    at::manual_seed(73);
    std::vector<int64_t> in{20, 2, 4}, out{20, 2, 4};
    in.insert(in.end(), in_shape.begin(), in_shape.end());
    out.insert(out.end(), out_shape.begin(), out_shape.end());
    const at::Tensor x = at::randn(in, at::kDouble), y = at::randn(out, at::kDouble);
    return {[x](int64_t s, int64_t k, int64_t first, int64_t rows) { return x[s][k].narrow(0, first, rows); },
            [y](int64_t s, int64_t k, int64_t first, int64_t rows) { return y[s][k].narrow(0, first, rows); },
            accel::Loss(accel::LossKind::Mse)};
}

const char *kLlama = R"({"type": "llama", "vocab_size": 37, "hidden_size": 16, "intermediate_size": 24,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "initializer_range": 0.2)";
const char *kGpt = R"({"type": "gpt", "vocab_size": 37, "n_positions": 8, "n_embd": 16, "n_layer": 2, "n_head": 4,
    "attn_pdrop": 0, "resid_pdrop": 0, "embd_pdrop": 0)";

// An override that replicates a region: training equals one process, and the region's parameters are whole on every
// rank (not in the plan's split set) while the others stay split.
TEST(TensorParallelPlanOverrides, ReplicatedRegionTrainsAsOneProcess)
{
    const Task lm = causal_lm_task();
    // transformers' base_model_tp_plan spelling (relative to the base model), every layer's MLP.
    auto names = check_training(1, 2, std::string(kLlama) + R"(, "base_model_tp_plan": {"layers.*.mlp.gate_proj": "replicate",
        "layers.*.mlp.up_proj": "replicate", "layers.*.mlp.down_proj": "replicate"}})", lm);
    EXPECT_FALSE(contains(names, "model.layers.0.mlp.up_proj.weight"));
    EXPECT_FALSE(contains(names, "model.layers.1.mlp.down_proj.weight"));
    EXPECT_TRUE(contains(names, "model.layers.1.self_attn.q_proj.weight"));
    // Full names, one layer's attention; tp 2 x dp_replicate 2.
    names = check_training(2, 2, std::string(kLlama) + R"(, "tp_plan": {"model.layers.1.self_attn.*": "replicate"}})", lm);
    EXPECT_FALSE(contains(names, "model.layers.1.self_attn.k_proj.weight"));
    EXPECT_TRUE(contains(names, "model.layers.0.self_attn.k_proj.weight"));
    EXPECT_TRUE(contains(names, "model.layers.1.mlp.up_proj.weight"));
    // The gpt: block 0's attention (c_attn and c_proj) replicated; naming the head's built-in style is accepted.
    names = check_training(1, 2, std::string(kGpt) + R"(, "tp_plan": {"h.0.attn.*": "replicate", "lm_head": "colwise"}})", lm);
    EXPECT_FALSE(contains(names, "transformer.h.0.attn.c_attn.weight"));
    EXPECT_TRUE(contains(names, "transformer.h.0.mlp.c_fc.weight"));
    EXPECT_TRUE(contains(names, "transformer.h.1.attn.c_attn.weight"));
}

// The replicated parameters are whole tensors on each rank (shape checked against one process's).
TEST(TensorParallelPlanOverrides, ReplicatedParameterIsWhole)
{
    auto models = copies(std::string(kGpt) + R"(, "tp_plan": {"transformer.h.*.mlp.*": "replicate"}})", 3);
    dist::run_on_threads(2, [&](const std::shared_ptr<dist::Communicator> &comm) {
        auto &m = *models[static_cast<size_t>(comm->rank())];
        dynamic_cast<tp::TensorParallelModel &>(m).apply_tensor_parallel(comm);
        for (size_t i = 0; i < m.named_parameters().size(); ++i) {
            const auto &[name, p] = m.named_parameters()[i];
            const at::Tensor &whole = models.back()->named_parameters()[i].second;
            if (name.find(".mlp.") != std::string::npos) {
                EXPECT_TRUE(at::equal(p, whole)) << name;
            } else if (name.find("attn.c_attn.weight") != std::string::npos) {
                EXPECT_EQ(p.size(1), whole.size(1) / 2) << name;
            }
        }
    });
}

// Where transformers takes a plan: from_pretrained(tp_plan={...}) (full names; "auto" is the built-in plan) and a
// config.json's base_model_tp_plan (relative names) both reach the model; the latter first, so the option wins.
TEST(TensorParallelPlanOverrides, FromPretrainedOptionsAndConfigJson)
{
    const std::string config = R"({"model_type": "llama", "vocab_size": 37, "hidden_size": 16, "intermediate_size": 24,
        "num_hidden_layers": 1, "num_attention_heads": 4, "base_model_tp_plan": {"layers.*.mlp.up_proj": "colwise"}})";
    auto options = accel::config::parse_from_pretrained_options(
        R"({"tp_plan": {"model.layers.0.mlp.*": "replicate"}})", "options_json");
    auto m = accel::make_model_from_json(accel::config::spec_from_hf_config(config, "config.json", options.model_options).c_str());
    const auto &plan = dynamic_cast<tp::TensorParallelModel &>(*m).tp_plan();
    ASSERT_EQ(plan.size(), 2u);
    EXPECT_EQ(plan[0].pattern, "layers.*.mlp.up_proj");
    EXPECT_EQ(plan[1].style, accel::config::TpStyle::Replicate);
    EXPECT_EQ(plan[1].path, "tp_plan.model.layers.0.mlp.*");
    dist::run_on_threads(2, [&](const std::shared_ptr<dist::Communicator> &comm) {
        if (comm->rank() != 0) return;
        dynamic_cast<tp::TensorParallelModel &>(*m).apply_tensor_parallel(comm); // the MLP replicated as a whole
        EXPECT_EQ(plan_of(*m).count("model.layers.0.mlp.up_proj.weight"), 0u);
        EXPECT_EQ(plan_of(*m).count("model.layers.0.self_attn.q_proj.weight"), 1u);
    });
    options = accel::config::parse_from_pretrained_options(R"({"tp_plan": "auto"})", "options_json");
    m = accel::make_model_from_json(accel::config::spec_from_hf_config(config, "config.json", options.model_options).c_str());
    EXPECT_EQ(dynamic_cast<tp::TensorParallelModel &>(*m).tp_plan().size(), 1u);
}

struct Refusal {
    std::string spec;
    accel_status_t code;
    std::string words; // in the message
};

// Each spec refused with `code` and `words`, at spec parsing or at apply_tensor_parallel (tp 2, nothing split).
void check_refusals(const std::vector<Refusal> &cases)
{
    for (const auto &c : cases) {
        std::shared_ptr<accel::Model> m;
        try {
            m = accel::make_model_from_json(c.spec.c_str());
        } catch (const accel::Error &e) {
            EXPECT_EQ(e.code(), c.code) << c.spec << ": " << e.what();
            EXPECT_NE(std::string(e.what()).find(c.words), std::string::npos) << e.what();
            continue;
        }
        std::vector<at::Tensor> before;
        for (const auto &p : m->parameters()) before.push_back(p.detach().clone());
        dist::run_on_threads(2, [&](const std::shared_ptr<dist::Communicator> &comm) {
            if (comm->rank() != 0) return;
            try {
                dynamic_cast<tp::TensorParallelModel &>(*m).apply_tensor_parallel(comm);
                ADD_FAILURE() << c.spec << ": accepted";
            } catch (const accel::Error &e) {
                EXPECT_EQ(e.code(), c.code) << c.spec << ": " << e.what();
                EXPECT_NE(std::string(e.what()).find(c.words), std::string::npos) << e.what();
            }
        });
        for (size_t i = 0; i < before.size(); ++i)
            EXPECT_TRUE(at::equal(m->parameters()[i], before[i])) << c.spec << ": a refused plan changed a parameter";
    }
}

TEST(TensorParallelPlanOverrides, BadOverridesNamed)
{
    const std::string llama = kLlama, gpt = kGpt;
    check_refusals({
        {llama + R"(, "tp_plan": {"layers.*.self_attn.q_proj": "replicate"}})", ACCEL_ERR_INVALID_ARGUMENT,
         "split alike, but model.layers.0.self_attn.q_proj (\"replicate\") differs"},
        {llama + R"(, "tp_plan": {"layers.*.mlp.gate_proj": "rowwise"}})", ACCEL_ERR_INVALID_ARGUMENT,
         "model.layers.0.mlp.gate_proj (\"rowwise\"): rowwise needs a split input"},
        {llama + R"(, "tp_plan": {"layers.*.mlp.down_proj": "colwise"}})", ACCEL_ERR_INVALID_ARGUMENT,
         "model.layers.0.mlp.down_proj (\"colwise\"): its output joins the residual stream"},
        {llama + R"(, "tp_plan": {"layers.*.mlp.gate_proj": "replicate", "layers.*.mlp.up_proj": "replicate"}})",
         ACCEL_ERR_INVALID_ARGUMENT, "mlp.down_proj (\"rowwise\"): rowwise needs a split input, but"},
        {llama + R"(, "tp_plan": {"layers.*.mlp.up_proj": "colwise", "layers.*.nothing": "colwise"}})",
         ACCEL_ERR_INVALID_ARGUMENT, "tp_plan.layers.*.nothing: the pattern \"layers.*.nothing\" matches no module"},
        {llama + R"(, "tp_plan": {"layers.*.mlp.up_proj": "diagonal"}})", ACCEL_ERR_INVALID_ARGUMENT,
         "tp_plan.layers.*.mlp.up_proj: unknown tp_plan style \"diagonal\""},
        {llama + R"(, "tp_plan": {"layers.*.mlp.up_proj": "local_colwise"}})", ACCEL_ERR_UNIMPLEMENTED,
         "\"local_colwise\" is not built"},
        {llama + R"(, "tp_plan": ["colwise"]})", ACCEL_ERR_INVALID_ARGUMENT, "tp_plan: expected \"auto\" or an object"},
        {llama + R"(, "tp_plan": {"embed_tokens": "replicate"}})", ACCEL_ERR_UNIMPLEMENTED,
         "model.embed_tokens (\"replicate\"): this module is rowwise"},
        {llama + R"(, "tp_plan": {"layers.*.mlp.up_proj": "colwise_rep"}})", ACCEL_ERR_UNIMPLEMENTED,
         "mlp.up_proj (\"colwise_rep\")"},
        {gpt + R"(, "tp_plan": {"h.*.ln_1": "sequence_parallel"}})", ACCEL_ERR_UNIMPLEMENTED,
         "tp_handler.sequence_parallel"},
    });
}

// A replicated region under sequence parallelism: refused alike by the gpt and the llama (one check,
// sequence_parallel_refusals.hpp) before anything is sliced.
TEST(TensorParallelPlanOverrides, ReplicatedRegionUnderSequenceParallelRefused)
{
    for (const std::string &spec :
         {std::string(kGpt) + R"(, "tp_plan": {"transformer.h.*.mlp.*": "replicate"}})",
          std::string(kLlama) + R"(, "tp_plan": {"layers.*.mlp.gate_proj": "replicate", "layers.*.mlp.up_proj": "replicate",
              "layers.*.mlp.down_proj": "replicate"}})"}) {
        const auto m = accel::make_model_from_json(spec.c_str());
        auto &split = dynamic_cast<tp::TensorParallelModel &>(*m);
        if (auto *gpt = dynamic_cast<accel::GptModel *>(m.get())) gpt->set_sequence_parallel(true);
        else dynamic_cast<accel::LlamaModel &>(*m).set_sequence_parallel(true);
        const at::Tensor before = m->parameters()[0].detach().clone();
        dist::run_on_threads(2, [&](const std::shared_ptr<dist::Communicator> &comm) {
            if (comm->rank() != 0) return;
            try {
                split.apply_tensor_parallel(comm);
                ADD_FAILURE() << spec << ": accepted";
            } catch (const accel::Error &e) {
                EXPECT_EQ(e.code(), ACCEL_ERR_UNIMPLEMENTED) << e.what();
                EXPECT_NE(std::string(e.what()).find("a replicated attention or MLP under parallelism_config.tp_handler."
                                                     "sequence_parallel is not built yet"),
                          std::string::npos)
                    << e.what();
            }
        });
        EXPECT_TRUE(at::equal(m->parameters()[0], before)) << spec;
    }
}

// An mlp spec split by the top-level tp_plan over its layer names, and a sequential spec with per-layer entries and
// colwise_rep: at tp 2 and tp 2 x dp_replicate 2.
TEST(TensorParallelSequential, MlpEqualsOneProcess)
{
    const Task task = regression_task({6}, {4});
    const std::string mlp = R"({"type": "mlp", "widths": [6, 16, 8, 4], "activation": "gelu",
        "tp_plan": {"0": "colwise", "2": "rowwise"}})";
    for (int32_t dp : {1, 2}) {
        auto names = check_training(dp, 2, mlp, task);
        EXPECT_EQ(names, (std::vector<std::string>{"0.bias", "0.weight", "2.weight"})); // the row layer's bias is whole
    }
    const std::string seq = R"({"type": "sequential", "layers": [
        {"type": "linear", "in_features": 6, "out_features": 12, "tp_plan": "colwise"}, {"type": "tanh"},
        {"type": "dropout", "p": 0}, {"type": "linear", "in_features": 12, "out_features": 8, "tp_plan": "rowwise"},
        {"type": "relu"}, {"type": "linear", "in_features": 8, "out_features": 4, "tp_plan": "colwise_rep"}]})";
    auto names = check_training(1, 2, seq, task);
    EXPECT_TRUE(contains(names, "5.weight") && contains(names, "5.bias"));
}

// transformer_encoder_layer blocks with tp_plan "auto" (heads split, MLP column- then row-wise) between linear layers,
// in both layouts (batch_first and PyTorch's [T, B, C]).
TEST(TensorParallelSequential, TransformerEqualsOneProcess)
{
    for (const bool batch_first : {true, false}) {
        const std::string bf = batch_first ? "true" : "false";
        const std::string spec = R"({"type": "sequential", "layers": [
            {"type": "linear", "in_features": 6, "out_features": 16},
            {"type": "transformer_encoder_layer", "d_model": 16, "nhead": 4, "dim_feedforward": 24, "dropout": 0,
             "activation": "gelu", "batch_first": )" + bf + R"(, "tp_plan": "auto"},
            {"type": "transformer_encoder_layer", "d_model": 16, "nhead": 4, "dim_feedforward": 24, "dropout": 0,
             "batch_first": )" + bf + R"(, "tp_plan": "auto"},
            {"type": "linear", "in_features": 16, "out_features": 3}]})";
        // [rows, 5, 6] as batch_first; the other layout takes the same numbers as [5, rows, 6] (dimension 1 is
        // the batch there, and each rank's rows are its part of it).
        Task task = regression_task({5, 6}, {5, 3});
        if (!batch_first) {
            at::manual_seed(74);
            const at::Tensor x = at::randn({20, 2, 5, 4, 6}, at::kDouble), y = at::randn({20, 2, 5, 4, 3}, at::kDouble);
            task.input = [x](int64_t s, int64_t k, int64_t first, int64_t rows) { return x[s][k].narrow(1, first, rows); };
            task.target = [y](int64_t s, int64_t k, int64_t first, int64_t rows) { return y[s][k].narrow(1, first, rows); };
        }
        for (int32_t dp : {1, 2}) {
            auto names = check_training(dp, 2, spec, task);
            for (const char *n : {"1.self_attn.in_proj_weight", "1.self_attn.in_proj_bias", "2.self_attn.out_proj.weight",
                                  "2.linear1.weight", "2.linear1.bias", "2.linear2.weight"})
                EXPECT_TRUE(contains(names, n)) << n;
            EXPECT_FALSE(contains(names, "2.linear2.bias"));
            EXPECT_FALSE(contains(names, "0.weight"));
        }
    }
}

// save_model / save_state / get_state_dict gather the split tensors (whole_state.hpp): one process's tensors, then
// the very slices again.
TEST(TensorParallelSequential, WholeTensorsForCheckpoints)
{
    auto models = copies(R"({"type": "sequential", "layers": [
        {"type": "linear", "in_features": 6, "out_features": 8, "tp_plan": "colwise"}, {"type": "relu"},
        {"type": "linear", "in_features": 8, "out_features": 16, "tp_plan": "rowwise"},
        {"type": "transformer_encoder_layer", "d_model": 16, "nhead": 2, "dim_feedforward": 8, "dropout": 0,
         "tp_plan": "auto"}]})", 3);
    dist::run_on_threads(2, [&](const std::shared_ptr<dist::Communicator> &comm) {
        auto &m = *models[static_cast<size_t>(comm->rank())];
        dynamic_cast<tp::TensorParallelModel &>(m).apply_tensor_parallel(comm);
        EXPECT_EQ(plan_of(m).size(), 3u + 6u);
        accel_test::expect_whole_for_checkpoint(m, *models.back());
    });
}

TEST(TensorParallelSequential, BadPlansNamed)
{
    auto seq = [](const std::string &layers, const std::string &extra = "") {
        return R"({"type": "sequential", "layers": [)" + layers + "]" + extra + "}";
    };
    const std::string col = R"({"type": "linear", "in_features": 4, "out_features": 8, "tp_plan": "colwise"})";
    const std::string row = R"({"type": "linear", "in_features": 8, "out_features": 4, "tp_plan": "rowwise"})";
    check_refusals({
        {seq(row), ACCEL_ERR_INVALID_ARGUMENT, "layers[0] (linear, tp_plan \"rowwise\"): rowwise needs a split input"},
        {seq(R"({"type": "linear", "in_features": 4, "out_features": 7, "tp_plan": "colwise"},
                {"type": "linear", "in_features": 7, "out_features": 4, "tp_plan": "rowwise"})"),
         ACCEL_ERR_INVALID_ARGUMENT, "layers[0].out_features (7) does not divide by parallelism_config.tp_size (2)"},
        {seq(col + R"(, {"type": "relu"})"), ACCEL_ERR_INVALID_ARGUMENT, "colwise leaves its outputs split"},
        {seq(col + R"(, {"type": "layer_norm", "normalized_shape": [8]}, )" + row), ACCEL_ERR_INVALID_ARGUMENT,
         "layers[1] (layer_norm): sits between layers[0]"},
        {seq(col + ", " + col + ", " + row), ACCEL_ERR_INVALID_ARGUMENT, "layers[1] (linear, tp_plan \"colwise\"): sits between"},
        {seq(R"({"type": "linear", "in_features": 4, "out_features": 8}, {"type": "relu"})"), ACCEL_ERR_INVALID_ARGUMENT,
         "the JSON-spec model splits no layer"},
        {seq(R"({"type": "transformer_encoder_layer", "d_model": 6, "nhead": 3, "dropout": 0, "tp_plan": "auto"})"),
         ACCEL_ERR_INVALID_ARGUMENT, "layers[0].nhead (3) does not divide"},
        {seq(R"({"type": "transformer_encoder_layer", "d_model": 8, "nhead": 2, "dim_feedforward": 5, "dropout": 0,
                 "tp_plan": "auto"})"),
         ACCEL_ERR_INVALID_ARGUMENT, "layers[0].dim_feedforward (5) does not divide"},
        {seq(R"({"type": "transformer_encoder_layer", "d_model": 8, "nhead": 2, "tp_plan": "colwise"})"),
         ACCEL_ERR_INVALID_ARGUMENT, "layers[0].tp_plan"},
        {seq(col + ", " + row, R"(, "tp_plan": {"7": "colwise"})"), ACCEL_ERR_INVALID_ARGUMENT,
         "tp_plan.7: the pattern \"7\" matches no linear"},
        {seq(R"({"type": "linear", "in_features": 4, "out_features": 8, "tp_plan": "sequential"})"),
         ACCEL_ERR_INVALID_ARGUMENT, "layers[0].tp_plan: unknown tp_plan style \"sequential\""},
        {seq(col + ", " + row, R"(, "tp_plan": {"1": "sequence_parallel"})"), ACCEL_ERR_INVALID_ARGUMENT,
         "tp_plan.1: layers[1] is a linear layer, whose tp_plan is colwise"},
    });
}

} // namespace
