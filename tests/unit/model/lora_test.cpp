// model/lora: LoRA adapters as PEFT makes them (spec keys, names, init, frozen base), their computation against a
// hand-written y = x Wᵀ + b + s (x Aᵀ Bᵀ) and against the merged weights, activation checkpointing (dropout
// included), the optimizer's state, and adapter_model.safetensors / adapter_config.json as PEFT writes them.
#include "checkpointing/safetensors.hpp"
#include "common/error.hpp"
#include "common/files.hpp"
#include "config/optimizer_config.hpp"
#include "config/pretrained_config.hpp"
#include "model/gpt_model.hpp"
#include "model/lora.hpp"
#include "model/pretrained.hpp"
#include "optimizer/accelerated_optimizer.hpp"

#include <ATen/autocast_mode.h>
#include <ATen/core/grad_mode.h>
#include <cjson/cJSON.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <tuple>

namespace {

const char *kGpt = R"({"type": "gpt", "vocab_size": 37, "n_positions": 12, "n_embd": 16, "n_layer": 2, "n_head": 4,
                       "resid_pdrop": 0, "embd_pdrop": 0, "attn_pdrop": 0)";

std::shared_ptr<accel::Model> gpt(const std::string &lora, int seed = 3)
{
    at::manual_seed(seed);
    std::string json = std::string(kGpt) + (lora.empty() ? "" : ", \"lora\": " + lora) + "}";
    return accel::make_model_from_json(json.c_str());
}

std::string error_of(const std::string &json, accel_status_t code = ACCEL_ERR_INVALID_ARGUMENT)
{
    try {
        accel::make_model_from_json(json.c_str());
    } catch (const accel::Error &e) {
        EXPECT_EQ(e.code(), code) << e.what();
        return e.what();
    }
    ADD_FAILURE() << "accepted " << json;
    return "";
}

// Random B (PEFT starts it at 0, where the adapters would change nothing a test could see).
void randomize_adapters(accel::Model &m)
{
    at::NoGradGuard no_grad;
    for (const auto &[name, p] : m.named_parameters())
        if (name.find(".lora_B.") != std::string::npos) at::Tensor(p).normal_(0.0, 0.5);
}

at::Tensor ids()
{
    at::manual_seed(17);
    return at::randint(0, 37, {2, 12}, at::kLong);
}

TEST(Lora, BadKeysAreRefusedByName)
{
    const std::string g = std::string(kGpt) + ", \"lora\": ";
    EXPECT_NE(error_of(g + R"({"rank": 8}})").find("lora.rank"), std::string::npos);
    EXPECT_NE(error_of(g + R"({"r": 0}})").find("lora.r"), std::string::npos);
    EXPECT_NE(error_of(g + R"({"bias": "some"}})").find("lora.bias"), std::string::npos);
    EXPECT_NE(error_of(g + R"({"lora_dropout": 1}})").find("lora.lora_dropout"), std::string::npos);
    EXPECT_NE(error_of(g + R"({"target_modules": ["q_proj"]}})").find("lora.target_modules"), std::string::npos);
    EXPECT_NE(error_of(g + R"({"target_modules": "(["}})").find("lora.target_modules"), std::string::npos);
    // A spec model has no PEFT default: target_modules is required, and the message names a module.
    const std::string e = error_of(R"({"type": "mlp", "widths": [4, 8, 2], "lora": {}})");
    EXPECT_NE(e.find("lora.target_modules"), std::string::npos) << e;
    EXPECT_NE(e.find("\"0\""), std::string::npos) << e;
}

TEST(Lora, NamesFreezingAndUnitsAsPeft)
{
    auto m = gpt(R"({"r": 4, "target_modules": ["c_attn", "mlp.c_proj"]})");
    std::vector<std::string> names, trainable;
    for (const auto &[n, p] : m->named_parameters()) {
        names.push_back(n);
        if (p.requires_grad()) trainable.push_back(n);
    }
    const std::vector<std::string> want = {
        "transformer.h.0.attn.c_attn.lora_A.weight", "transformer.h.0.attn.c_attn.lora_B.weight",
        "transformer.h.0.mlp.c_proj.lora_A.weight", "transformer.h.0.mlp.c_proj.lora_B.weight",
        "transformer.h.1.attn.c_attn.lora_A.weight", "transformer.h.1.attn.c_attn.lora_B.weight",
        "transformer.h.1.mlp.c_proj.lora_A.weight", "transformer.h.1.mlp.c_proj.lora_B.weight"};
    EXPECT_EQ(trainable, want);
    // Right after the base layer's bias: a layer's parameters stay together (sharding units, parameter_layers).
    auto at = [&](const std::string &n) { return std::find(names.begin(), names.end(), n) - names.begin(); };
    EXPECT_EQ(at("transformer.h.0.attn.c_attn.lora_A.weight"), at("transformer.h.0.attn.c_attn.bias") + 1);
    EXPECT_EQ(at("transformer.h.1.mlp.c_proj.lora_B.weight"), at("transformer.h.1.mlp.c_proj.bias") + 2);
    const auto layers = m->parameter_layers();
    EXPECT_EQ(layers[static_cast<size_t>(at("transformer.h.1.attn.c_attn.lora_A.weight"))], 2u);
    bool listed = false;
    for (const auto &u : m->units())
        if (u.name == "transformer.h.0")
            listed = std::find(u.parameter_names.begin(), u.parameter_names.end(),
                               "transformer.h.0.mlp.c_proj.lora_B.weight") != u.parameter_names.end();
    EXPECT_TRUE(listed);
    // Shapes as PEFT's: A [r, in], B [out, r] (c_attn: 16 -> 48, Conv1D weight [in, out]).
    EXPECT_EQ(m->find_tensor("transformer.h.0.attn.c_attn.lora_A.weight")->sizes(), (at::IntArrayRef{4, 16}));
    EXPECT_EQ(m->find_tensor("transformer.h.0.attn.c_attn.lora_B.weight")->sizes(), (at::IntArrayRef{48, 4}));
    // gpt2's PEFT default is c_attn; "c_proj" matches both attention and MLP projections (suffix rule).
    auto d = gpt("{}");
    EXPECT_NE(d->find_tensor("transformer.h.1.attn.c_attn.lora_A.weight"), nullptr);
    EXPECT_EQ(d->find_tensor("transformer.h.1.attn.c_proj.lora_A.weight"), nullptr);
    auto c = gpt(R"({"target_modules": ["c_proj"]})");
    EXPECT_NE(c->find_tensor("transformer.h.1.attn.c_proj.lora_A.weight"), nullptr);
    EXPECT_NE(c->find_tensor("transformer.h.1.mlp.c_proj.lora_A.weight"), nullptr);
    auto all = gpt(R"({"target_modules": "all-linear", "bias": "lora_only"})");
    EXPECT_TRUE(all->find_tensor("transformer.h.0.mlp.c_fc.bias")->requires_grad());
    EXPECT_FALSE(all->find_tensor("transformer.h.0.ln_1.bias")->requires_grad());
    auto b = gpt(R"({"bias": "all"})");
    EXPECT_TRUE(b->find_tensor("transformer.h.0.ln_1.bias")->requires_grad());
    EXPECT_FALSE(b->find_tensor("transformer.h.0.ln_1.weight")->requires_grad());
    auto rx = gpt(R"({"target_modules": ".*\\.h\\.1\\.attn\\.c_attn"})");
    EXPECT_EQ(rx->find_tensor("transformer.h.0.attn.c_attn.lora_A.weight"), nullptr);
    EXPECT_NE(rx->find_tensor("transformer.h.1.attn.c_attn.lora_A.weight"), nullptr);
}

TEST(Lora, InitialisedAsPeftSoTheModelStartsAsTheBase)
{
    auto base = gpt("");
    auto m = gpt(R"({"r": 8, "lora_alpha": 16, "target_modules": ["c_attn", "c_fc"]})");
    const at::Tensor a = *m->find_tensor("transformer.h.0.mlp.c_fc.lora_A.weight");
    const double bound = 1.0 / std::sqrt(16.0); // kaiming_uniform_(a=sqrt(5)) over fan_in 16
    EXPECT_LE(a.abs().max().item<double>(), bound);
    EXPECT_GT(a.abs().max().item<double>(), 0.8 * bound);
    EXPECT_EQ(m->find_tensor("transformer.h.0.mlp.c_fc.lora_B.weight")->abs().sum().item<double>(), 0.0);
    // The base weights are drawn before the adapters: the same seed gives the same base, and B = 0 the same logits.
    at::NoGradGuard no_grad;
    EXPECT_TRUE(at::equal(base->forward(ids()), m->forward(ids())));
}

// y = x Wᵀ + b + s (x Aᵀ) Bᵀ on spec linears: values and every trainable gradient against autograd of the formula.
TEST(Lora, SpecLinearsEqualTheHandWrittenFormula)
{
    at::manual_seed(9);
    auto m = accel::make_model_from_json(
        R"({"type": "mlp", "widths": [6, 10, 3], "lora": {"r": 2, "lora_alpha": 6, "target_modules": ["0", "2"],
            "use_rslora": true}})");
    randomize_adapters(*m);
    const double s = 6.0 / std::sqrt(2.0);
    auto t = [&](const std::string &n) { return m->find_tensor(n)->detach().clone().requires_grad_(true); };
    at::Tensor w0 = t("0.weight"), b0 = t("0.bias"), a0 = t("0.lora_A.weight"), bb0 = t("0.lora_B.weight");
    at::Tensor w2 = t("2.weight"), b2 = t("2.bias"), a2 = t("2.lora_A.weight"), bb2 = t("2.lora_B.weight");
    at::manual_seed(4);
    at::Tensor x = at::randn({5, 6});
    at::Tensor h = at::relu(at::linear(x, w0, b0) + at::linear(at::linear(x, a0), bb0) * s);
    at::Tensor want = at::linear(h, w2, b2) + at::linear(at::linear(h, a2), bb2) * s;
    want.pow(2).sum().backward();
    at::Tensor got = m->forward(x);
    EXPECT_TRUE(at::allclose(got, want, 1e-6, 1e-6));
    got.pow(2).sum().backward();
    for (const auto &[n, ref] : std::map<std::string, at::Tensor>{
             {"0.lora_A.weight", a0}, {"0.lora_B.weight", bb0}, {"2.lora_A.weight", a2}, {"2.lora_B.weight", bb2}})
        EXPECT_TRUE(at::allclose(m->find_tensor(n)->grad(), ref.grad(), 1e-5, 1e-6)) << n;
    EXPECT_FALSE(m->find_tensor("0.weight")->grad().defined());
    EXPECT_FALSE(m->find_tensor("2.bias")->grad().defined());
}

// The adapted gpt computes what the plain gpt computes with W + s B A (Conv1D: its transpose) in each layer.
TEST(Lora, GptEqualsItsMergedWeights)
{
    auto m = gpt(R"({"r": 4, "lora_alpha": 8, "target_modules": "all-linear"})");
    randomize_adapters(*m);
    const accel::NamedTensors merged = accel::merged_state_dict(*m);
    for (const auto &[n, t] : merged) EXPECT_EQ(n.find("lora"), std::string::npos) << n;
    auto plain = gpt("", 99);
    plain->load_state_dict(merged, true);
    at::NoGradGuard no_grad;
    at::Tensor got = m->forward(ids()), want = plain->forward(ids());
    EXPECT_TRUE(at::allclose(got, want, 1e-5, 1e-5)) << (got - want).abs().max().item<float>();
    EXPECT_GT((got - gpt("")->forward(ids())).abs().max().item<float>(), 1e-2); // the adapters do change the result
}

// Recomputed blocks (gpt) and decoder layers (llama) give the adapters the same gradients, lora dropout included
// (the generator is restored).
void checkpointing_changes_no_gradient(const std::string &model, const std::string &targets)
{
    std::map<std::string, at::Tensor> grads[2];
    for (int ckpt = 0; ckpt < 2; ++ckpt) {
        at::manual_seed(3);
        std::string json = model + ", \"activation_checkpointing\": " + (ckpt ? "true" : "false") +
                           R"(, "lora": {"r": 4, "lora_dropout": 0.3, "target_modules": )" + targets + "}}";
        auto m = accel::make_model_from_json(json.c_str());
        ASSERT_EQ(m->activation_checkpointing(), ckpt == 1);
        randomize_adapters(*m);
        at::manual_seed(21);
        m->forward(ids()).pow(2).mean().backward();
        for (const auto &[n, p] : m->named_parameters())
            if (p.requires_grad()) grads[ckpt][n] = p.grad();
    }
    ASSERT_EQ(grads[0].size(), 8u);
    for (const auto &[n, g] : grads[0]) {
        ASSERT_TRUE(grads[1][n].defined()) << n;
        EXPECT_TRUE(at::allclose(grads[1][n], g, 1e-6, 1e-7)) << n;
        EXPECT_GT(g.abs().max().item<float>(), 0.0f) << n;
    }
}

TEST(Lora, ActivationCheckpointingChangesNoGradient)
{
    checkpointing_changes_no_gradient(kGpt, R"(["c_attn", "c_fc"])");
    checkpointing_changes_no_gradient(R"({"type": "llama", "vocab_size": 37, "hidden_size": 16, "intermediate_size": 24,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2)", R"(["q_proj", "down_proj"])");
}

// AdamW holds state for the adapters only; training leaves every base weight's bytes as they were.
TEST(Lora, OptimizerStateOnlyForAdaptersAndBaseBytesKept)
{
    auto m = gpt(R"({"r": 4, "target_modules": ["c_attn", "c_proj"]})");
    std::map<std::string, at::Tensor> before;
    int64_t adapter_numel = 0;
    for (const auto &[n, p] : m->named_parameters()) {
        before[n] = p.detach().clone();
        if (p.requires_grad()) adapter_numel += p.numel();
    }
    accel::AcceleratedOptimizer opt(m, accel::config::parse_optimizer_config(R"({"type": "adamw", "lr": 0.01})"));
    for (int step = 0; step < 3; ++step) {
        opt.zero_grad();
        m->forward(ids()).pow(2).mean().backward();
        opt.step();
    }
    // exp_avg and exp_avg_sq per adapter (float32); LibTorch's step counters are not tensors of the parameters'.
    EXPECT_GE(opt.state_bytes(), 2 * 4 * adapter_numel);
    EXPECT_LT(opt.state_bytes(), 2 * 4 * adapter_numel + 1024);
    for (const auto &[n, p] : m->named_parameters()) {
        const bool same = at::equal(p, before[n]);
        if (p.requires_grad()) EXPECT_FALSE(same) << n << " did not train";
        else EXPECT_TRUE(same) << n << " changed";
    }
}

std::map<std::string, std::vector<int64_t>> keys_of(const std::string &file)
{
    std::map<std::string, std::vector<int64_t>> out;
    for (const auto &[n, t] : accel::ckpt::load_safetensors(file).tensors) out[n] = t.sizes().vec();
    return out;
}

TEST(Lora, AdapterFilesAsPeftWritesThem)
{
    char tmpl[] = "/tmp/accel_lora_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    const std::string dir = std::string(tmpl) + "/adapter";
    auto m = gpt(R"({"r": 4, "lora_alpha": 32, "lora_dropout": 0.05, "target_modules": ["c_attn"], "bias": "lora_only"})");
    randomize_adapters(*m);
    accel::save_adapter(*m, dir, {"gpt2-tiny", nullptr});
    const auto keys = keys_of(dir + "/adapter_model.safetensors");
    const std::map<std::string, std::vector<int64_t>> want = {
        {"base_model.model.transformer.h.0.attn.c_attn.lora_A.weight", {4, 16}},
        {"base_model.model.transformer.h.0.attn.c_attn.lora_B.weight", {48, 4}},
        {"base_model.model.transformer.h.0.attn.c_attn.bias", {48}},
        {"base_model.model.transformer.h.1.attn.c_attn.lora_A.weight", {4, 16}},
        {"base_model.model.transformer.h.1.attn.c_attn.lora_B.weight", {48, 4}},
        {"base_model.model.transformer.h.1.attn.c_attn.bias", {48}}};
    EXPECT_EQ(keys, want);
    const auto loaded = accel::ckpt::load_safetensors(dir + "/adapter_model.safetensors");
    size_t checked = 0;
    for (const auto &[n, t] : loaded.tensors) // the values: the model's, under PEFT's names
        if (n.rfind("base_model.model.", 0) == 0) {
            EXPECT_TRUE(at::equal(t, *m->find_tensor(n.substr(17)))) << n;
            ++checked;
        }
    EXPECT_EQ(checked, 6u);
    ASSERT_EQ(loaded.metadata.size(), 1u);
    EXPECT_EQ(loaded.metadata[0].first, "format");
    EXPECT_EQ(loaded.metadata[0].second, "pt");
    const std::string text = accel::read_small_file(dir + "/adapter_config.json", 1 << 16);
    cJSON *cfg = cJSON_Parse(text.c_str());
    ASSERT_NE(cfg, nullptr) << text;
    auto str = [&](const char *k) { const cJSON *v = cJSON_GetObjectItem(cfg, k); return cJSON_IsString(v) ? std::string(v->valuestring) : "?"; };
    auto num = [&](const char *k) { return cJSON_GetNumberValue(cJSON_GetObjectItem(cfg, k)); };
    EXPECT_EQ(str("peft_type"), "LORA");
    EXPECT_EQ(str("task_type"), "CAUSAL_LM");
    EXPECT_EQ(str("base_model_name_or_path"), "gpt2-tiny");
    EXPECT_EQ(str("bias"), "lora_only");
    EXPECT_EQ(num("r"), 4);
    EXPECT_EQ(num("lora_alpha"), 32);
    EXPECT_DOUBLE_EQ(num("lora_dropout"), 0.05);
    EXPECT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(cfg, "fan_in_fan_out"))); // GPT-2's Conv1D
    EXPECT_TRUE(cJSON_IsFalse(cJSON_GetObjectItem(cfg, "use_rslora")));
    const cJSON *targets = cJSON_GetObjectItem(cfg, "target_modules");
    ASSERT_TRUE(cJSON_IsArray(targets));
    EXPECT_EQ(std::string(cJSON_GetArrayItem(targets, 0)->valuestring), "c_attn");
    cJSON_Delete(cfg);
    // bias "all": every bias of the model, under PEFT's names.
    auto all = gpt(R"({"target_modules": ["c_fc"], "bias": "all"})");
    accel::save_adapter(*all, dir + "2");
    EXPECT_EQ(keys_of(dir + "2/adapter_model.safetensors").count("base_model.model.transformer.ln_f.bias"), 1u);
    // A model without adapters has nothing to save.
    try {
        accel::save_adapter(*gpt(""), dir + "3");
        ADD_FAILURE() << "saved a model without adapters";
    } catch (const accel::Error &e) {
        EXPECT_EQ(e.code(), ACCEL_ERR_FAILED_PRECONDITION);
    }
    accel::remove_all(tmpl);
}

// save_pretrained's merge folder loads as a plain model computing what the adapted one computes; from_pretrained with
// a "lora" option loads a base folder strictly (the adapters are new) and keeps the adapters float32 over a bf16 base.
TEST(Lora, PretrainedFoldersMergeAndAdapt)
{
    char tmpl[] = "/tmp/accel_lora_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    const std::string dir = std::string(tmpl) + "/merged";
    auto m = gpt(R"({"r": 4, "target_modules": ["c_attn", "c_fc"]})");
    randomize_adapters(*m);
    accel::config::SaveModelOptions merge;
    merge.merge = true;
    accel::write_pretrained(*m, dir, merge);
    accel::config::FromPretrainedOptions plain;
    auto base = accel::from_pretrained(dir, plain).model;
    EXPECT_EQ(base->find_tensor("transformer.h.0.attn.c_attn.lora_A.weight"), nullptr);
    {
        at::NoGradGuard no_grad;
        EXPECT_TRUE(at::allclose(base->forward(ids()), m->forward(ids()), 1e-5, 1e-5));
    }
    accel::config::FromPretrainedOptions adapt;
    adapt.model_options = {{"lora", R"({"r": 2})"}};
    adapt.torch_dtype = ACCEL_DTYPE_BFLOAT16;
    auto fresh = accel::from_pretrained(dir, adapt);
    EXPECT_TRUE(fresh.report.missing.empty());
    EXPECT_EQ(fresh.model->find_tensor("transformer.h.1.attn.c_attn.lora_A.weight")->scalar_type(), at::kFloat);
    EXPECT_EQ(fresh.model->find_tensor("transformer.h.1.attn.c_attn.weight")->scalar_type(), at::kBFloat16);
    accel::remove_all(tmpl);
}

// An adapter folder written by save_adapter loads back onto the base model (from_pretrained's "adapter" option) and
// computes what the adapted model computed; adapter_config.json is read as PEFT writes it (its bookkeeping keys and
// defaults accepted, features accel does not build refused by name).
TEST(Lora, AdapterFolderLoadsBackOntoTheBase)
{
    char tmpl[] = "/tmp/accel_lora_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    const std::string root = tmpl;
    auto m = gpt(R"({"r": 4, "lora_alpha": 12, "target_modules": ["c_attn", "mlp.c_proj"], "bias": "lora_only"})");
    randomize_adapters(*m);
    {
        at::NoGradGuard no_grad;
        at::Tensor(*m->find_tensor("transformer.h.0.attn.c_attn.bias")).add_(0.25); // a trained bias travels too
    }
    accel::save_adapter(*m, root + "/adapter");
    accel::write_pretrained(*gpt(""), root + "/base", {}); // the same seed: m's base weights
    accel::config::FromPretrainedOptions opts;
    opts.adapter = root + "/adapter";
    auto loaded = accel::from_pretrained(root + "/base", opts).model;
    EXPECT_EQ(loaded->named_parameters().size(), m->named_parameters().size());
    {
        at::NoGradGuard no_grad;
        EXPECT_TRUE(at::allclose(loaded->forward(ids()), m->forward(ids()), 1e-6, 1e-6));
    }
    EXPECT_TRUE(loaded->find_tensor("transformer.h.1.mlp.c_proj.lora_B.weight")->requires_grad());
    try {
        accel::load_adapter(*loaded, root + "/adapter");
        ADD_FAILURE() << "adapters loaded twice";
    } catch (const accel::Error &e) {
        EXPECT_EQ(e.code(), ACCEL_ERR_FAILED_PRECONDITION);
    }
    // PEFT's own file: its bookkeeping and default-valued keys pass; a feature accel lacks is named.
    const std::string peft = R"({"alpha_pattern": {}, "base_model_name_or_path": "gpt2", "bias": "none",
        "fan_in_fan_out": true, "inference_mode": true, "init_lora_weights": true, "layers_to_transform": null,
        "loftq_config": {}, "lora_alpha": 16, "lora_dropout": 0.05, "megatron_core": "megatron.core",
        "modules_to_save": null, "peft_type": "LORA", "r": 8, "rank_pattern": {}, "revision": null,
        "target_modules": ["c_attn"], "task_type": "CAUSAL_LM", "use_dora": false, "use_rslora": false})";
    const auto c = accel::config::parse_peft_adapter_config(peft, "adapter_config.json");
    EXPECT_EQ(c.r, 8);
    EXPECT_DOUBLE_EQ(c.scaling(), 2.0);
    EXPECT_EQ(c.target_modules, std::vector<std::string>{"c_attn"});
    for (const auto &[edit, code, key] : std::vector<std::tuple<std::string, accel_status_t, std::string>>{
             {R"("use_dora": true)", ACCEL_ERR_UNIMPLEMENTED, "use_dora"},
             {R"("modules_to_save": ["lm_head"])", ACCEL_ERR_UNIMPLEMENTED, "modules_to_save"},
             {R"("peft_type": "IA3")", ACCEL_ERR_UNIMPLEMENTED, "peft_type"},
             {R"("r": 0)", ACCEL_ERR_INVALID_ARGUMENT, "r"}}) {
        const std::string name = edit.substr(0, edit.find(':'));
        std::string text = peft;
        const size_t at = text.find(name + ": ");
        const size_t end = text.find_first_of(",}", text.find(':', at));
        text.replace(at, end - at, edit);
        try {
            accel::config::parse_peft_adapter_config(text, "dir/adapter_config.json");
            ADD_FAILURE() << "accepted " << edit;
        } catch (const accel::Error &e) {
            EXPECT_EQ(e.code(), code) << e.what();
            EXPECT_EQ(std::string(e.what()).rfind("dir/adapter_config.json: " + key, 0), 0u) << e.what();
        }
    }
    accel::remove_all(tmpl);
}

// Under bf16 autocast (mixed_precision "bf16") the adapters stay float32 parameters with float32 gradients, and the
// adapted model computes and differentiates what it does in float32, to bf16's precision.
TEST(Lora, Bf16AutocastComputesWithFloat32Adapters)
{
    std::map<std::string, at::Tensor> grads[2];
    at::Tensor logits[2];
    for (int bf16 = 0; bf16 < 2; ++bf16) {
        auto m = gpt(R"({"r": 4, "target_modules": ["c_attn", "c_fc"]})");
        randomize_adapters(*m);
        if (bf16) {
            at::autocast::set_cpu_enabled(true);
            at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
        }
        logits[bf16] = m->forward(ids()).to(at::kFloat);
        if (bf16) {
            at::autocast::set_cpu_enabled(false);
            at::autocast::clear_cache();
        }
        at::cross_entropy_loss(logits[bf16].view({-1, 37}), ids().view({-1})).backward();
        for (const auto &[n, p] : m->named_parameters())
            if (p.requires_grad()) {
                EXPECT_EQ(p.scalar_type(), at::kFloat) << n;
                EXPECT_EQ(p.grad().scalar_type(), at::kFloat) << n;
                grads[bf16][n] = p.grad();
            }
    }
    EXPECT_TRUE(at::allclose(logits[1], logits[0], 0.05, 0.05)) << (logits[1] - logits[0]).abs().max().item<float>();
    for (const auto &[n, g] : grads[0]) {
        const double scale = g.abs().max().item<double>();
        EXPECT_LT((grads[1][n] - g).abs().max().item<double>(), 0.1 * scale + 1e-6) << n;
    }
}

} // namespace
