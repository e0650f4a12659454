// model/gpt_model: GPT-2's layout and defaults, the causal mask, tied weights, the KV cache and
// activation checkpointing (identical gradients, dropout included).
#include "common/error.hpp"
#include "config/model_spec.hpp"
#include "model/gpt_model.hpp"

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/autograd.h>

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace {

using accel::GptModel;

const char *kTiny = R"({"type": "gpt", "vocab_size": 37, "n_positions": 12, "n_embd": 16, "n_layer": 2,
                        "n_head": 4})";

std::shared_ptr<GptModel> tiny(const std::string &extra = "")
{
    std::string json = kTiny;
    if (!extra.empty()) json = json.substr(0, json.rfind('}')) + ", " + extra + "}";
    auto m = accel::make_model_from_json(json.c_str());
    auto g = std::dynamic_pointer_cast<GptModel>(m);
    EXPECT_NE(g, nullptr);
    return g;
}

std::string spec_error(const std::string &json)
{
    try {
        accel::make_model_from_json(json.c_str());
    } catch (const accel::Error &e) {
        EXPECT_EQ(e.code(), ACCEL_ERR_INVALID_ARGUMENT) << e.what();
        return e.what();
    }
    ADD_FAILURE() << "accepted " << json;
    return "";
}

TEST(GptModel, DefaultsAreGpt2s)
{
    auto spec = accel::config::parse_model_spec(R"({"type": "gpt"})");
    ASSERT_TRUE(spec.gpt.has_value());
    const auto &c = *spec.gpt;
    EXPECT_EQ(c.vocab_size, 50257);
    EXPECT_EQ(c.n_positions, 1024);
    EXPECT_EQ(c.n_embd, 768);
    EXPECT_EQ(c.n_layer, 12);
    EXPECT_EQ(c.n_head, 12);
    EXPECT_EQ(c.inner(), 3072);
    EXPECT_EQ(c.activation_function, "gelu_new");
    EXPECT_DOUBLE_EQ(c.resid_pdrop, 0.1);
    EXPECT_DOUBLE_EQ(c.embd_pdrop, 0.1);
    EXPECT_DOUBLE_EQ(c.attn_pdrop, 0.1);
    EXPECT_DOUBLE_EQ(c.layer_norm_epsilon, 1e-5);
    EXPECT_DOUBLE_EQ(c.initializer_range, 0.02);
    EXPECT_TRUE(c.tie_word_embeddings);
    EXPECT_FALSE(c.activation_checkpointing);
}

TEST(GptModel, BadKeysAreNamed)
{
    EXPECT_EQ(spec_error(R"({"type": "gpt", "n_layers": 2})").rfind("n_layers: unknown key", 0), 0u);
    EXPECT_NE(spec_error(R"({"type": "gpt", "n_embd": 10, "n_head": 4})").find("n_head: must divide n_embd (10)"),
              std::string::npos);
    EXPECT_NE(spec_error(R"({"type": "gpt", "vocab_size": 0})").find("vocab_size:"), std::string::npos);
    EXPECT_NE(spec_error(R"({"type": "gpt", "vocab_size": "50257"})").find("vocab_size:"), std::string::npos);
    EXPECT_NE(spec_error(R"({"type": "gpt", "resid_pdrop": 1.5})").find("resid_pdrop:"), std::string::npos);
    EXPECT_NE(spec_error(R"({"type": "gpt", "layer_norm_epsilon": 0})").find("layer_norm_epsilon:"), std::string::npos);
    EXPECT_NE(spec_error(R"({"type": "gpt", "activation_function": "swiglu"})").find("activation_function:"),
              std::string::npos);
    EXPECT_NE(spec_error(R"({"type": "gpt", "tie_word_embeddings": 1})").find("tie_word_embeddings:"),
              std::string::npos);
    EXPECT_NE(spec_error(R"({"type": "gpt", "activation_checkpointing": "yes"})").find("activation_checkpointing:"),
              std::string::npos);
    EXPECT_NE(spec_error(R"({"type": "gpt", "n_inner": -1})").find("n_inner:"), std::string::npos);
}

TEST(GptModel, NamesAndShapesAreGpt2s)
{
    auto m = tiny();
    std::vector<std::pair<std::string, std::vector<int64_t>>> expected = {
        {"transformer.wte.weight", {37, 16}}, {"transformer.wpe.weight", {12, 16}}};
    for (int i = 0; i < 2; ++i) {
        const std::string p = "transformer.h." + std::to_string(i) + ".";
        for (auto e : std::vector<std::pair<std::string, std::vector<int64_t>>>{
                 {"ln_1.weight", {16}},         {"ln_1.bias", {16}},          {"attn.c_attn.weight", {16, 48}},
                 {"attn.c_attn.bias", {48}},    {"attn.c_proj.weight", {16, 16}}, {"attn.c_proj.bias", {16}},
                 {"ln_2.weight", {16}},         {"ln_2.bias", {16}},          {"mlp.c_fc.weight", {16, 64}},
                 {"mlp.c_fc.bias", {64}},       {"mlp.c_proj.weight", {64, 16}}, {"mlp.c_proj.bias", {16}}})
            expected.emplace_back(p + e.first, e.second);
    }
    expected.push_back({"transformer.ln_f.weight", {16}});
    expected.push_back({"transformer.ln_f.bias", {16}});
    const auto &params = m->named_parameters();
    ASSERT_EQ(params.size(), expected.size());
    for (size_t i = 0; i < params.size(); ++i) {
        EXPECT_EQ(params[i].first, expected[i].first);
        EXPECT_EQ(params[i].second.sizes().vec(), expected[i].second) << expected[i].first;
        EXPECT_TRUE(params[i].second.requires_grad());
    }
    EXPECT_TRUE(m->named_buffers().empty());
    // Tied: lm_head.weight is another name of the token embedding, not a second parameter.
    const at::Tensor *head = m->find_tensor("lm_head.weight");
    ASSERT_NE(head, nullptr);
    EXPECT_TRUE(head->is_same(*m->find_tensor("transformer.wte.weight")));
    auto untied = tiny("\"tie_word_embeddings\": false");
    EXPECT_EQ(untied->named_parameters().back().first, "lm_head.weight");
    EXPECT_EQ(untied->named_parameters().back().second.sizes().vec(), (std::vector<int64_t>{37, 16}));
}

TEST(GptModel, InitialisationIsHfs)
{
    at::manual_seed(0);
    auto m = accel::make_model_from_json(
        R"({"type": "gpt", "vocab_size": 512, "n_positions": 64, "n_embd": 64, "n_layer": 8, "n_head": 4,
            "initializer_range": 0.05})");
    for (const auto &[name, t] : m->named_parameters()) {
        const std::string &n = name; // C++17 lambdas cannot capture a structured binding (clang refuses)
        auto ends = [&n](const std::string &s) { return n.size() >= s.size() && n.substr(n.size() - s.size()) == s; };
        if (ends(".bias")) {
            EXPECT_EQ(t.abs().max().item<float>(), 0.0f) << name;
        } else if (name.find("ln_") != std::string::npos) {
            EXPECT_TRUE(t.eq(1.0f).all().item<bool>()) << name;
        } else {
            // c_proj weights: std initializer_range / sqrt(2 n_layer) = 0.0125; the rest 0.05.
            const double expected = ends("c_proj.weight") ? 0.05 / 4.0 : 0.05;
            EXPECT_NEAR(t.std().item<double>(), expected, expected * 0.1) << name;
            EXPECT_NEAR(t.mean().item<double>(), 0.0, expected * 0.1) << name;
        }
    }
}

TEST(GptModel, ChangingALaterTokenNeverChangesAnEarlierLogit)
{
    at::manual_seed(1);
    auto m = tiny();
    m->train(false);
    at::Tensor ids = at::randint(0, 37, {2, 12}, at::kLong);
    at::NoGradGuard no_grad;
    at::Tensor base = m->forward(ids);
    EXPECT_EQ(base.sizes().vec(), (std::vector<int64_t>{2, 12, 37}));
    for (int64_t t = 0; t < 12; ++t) {
        at::Tensor changed = ids.clone();
        changed.select(1, t).fill_((ids[0][t].item<int64_t>() + 5) % 37);
        at::Tensor out = m->forward(changed);
        EXPECT_TRUE(at::equal(out.narrow(1, 0, t), base.narrow(1, 0, t))) << "position " << t;
        EXPECT_FALSE(at::allclose(out.select(1, t), base.select(1, t))) << "position " << t;
    }
}

TEST(GptModel, KvCacheMatchesTheFullForward)
{
    at::manual_seed(2);
    auto m = tiny();
    m->train(false);
    at::Tensor ids = at::randint(0, 37, {3, 10}, at::kLong);
    at::NoGradGuard no_grad;
    at::Tensor full = m->forward(ids);
    accel::GptKvCache cache;
    at::Tensor first = m->forward_cached(ids.narrow(1, 0, 6), cache);
    EXPECT_EQ(cache.length(), 6);
    EXPECT_TRUE(at::allclose(first, full.narrow(1, 0, 6), 1e-5, 1e-6));
    for (int64_t t = 6; t < 10; ++t) {
        at::Tensor step = m->forward_cached(ids.narrow(1, t, 1), cache);
        EXPECT_TRUE(at::allclose(step.select(1, 0), full.select(1, t), 1e-5, 1e-6)) << t;
    }
    EXPECT_EQ(cache.length(), 10);
    // Beyond n_positions: an error naming the input, not a crash.
    try {
        m->forward_cached(ids.narrow(1, 0, 3), cache);
        ADD_FAILURE() << "13 positions accepted";
    } catch (const accel::Error &e) {
        EXPECT_NE(std::string(e.what()).find("exceed n_positions 12"), std::string::npos) << e.what();
    }
}

TEST(GptModel, BadInputsAreNamed)
{
    auto m = tiny();
    auto code_of = [&](const at::Tensor &x) -> accel_status_t {
        try {
            m->forward(x);
        } catch (const accel::Error &e) {
            EXPECT_NE(std::string(e.what()).find("input:"), std::string::npos) << e.what();
            return e.code();
        }
        return ACCEL_OK;
    };
    EXPECT_EQ(code_of(at::zeros({2, 4}, at::kFloat)), ACCEL_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(code_of(at::zeros({2, 2, 2}, at::kLong)), ACCEL_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(code_of(at::zeros({2, 13}, at::kLong)), ACCEL_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(code_of(at::full({2, 4}, 37, at::kLong)), ACCEL_ERR_OUT_OF_RANGE);
    EXPECT_EQ(code_of(at::full({2, 4}, -1, at::kLong)), ACCEL_ERR_OUT_OF_RANGE);
    EXPECT_EQ(m->forward(at::zeros({5}, at::kLong)).sizes().vec(), (std::vector<int64_t>{5, 37}));
}

// Gradients of every parameter after one forward/backward from the same generator state.
std::map<std::string, at::Tensor> grads_of(bool checkpointing, bool bf16)
{
    at::manual_seed(3);
    auto m = tiny(R"("resid_pdrop": 0.2, "attn_pdrop": 0.2, "embd_pdrop": 0.2)");
    m->set_activation_checkpointing(std::vector<bool>(m->layer_types().size(), checkpointing));
    at::Tensor ids = at::randint(0, 37, {2, 12}, at::kLong);
    at::manual_seed(4);
    at::Tensor logits;
    if (bf16) {
        at::autocast::set_cpu_enabled(true);
        at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
        logits = m->forward(ids).to(at::kFloat);
        at::autocast::set_cpu_enabled(false);
        at::autocast::clear_cache();
    } else {
        logits = m->forward(ids);
    }
    at::Tensor loss = at::cross_entropy_loss(logits.view({-1, 37}), ids.view({-1}));
    loss.backward();
    std::map<std::string, at::Tensor> out;
    for (const auto &[n, p] : m->named_parameters()) out[n] = p.grad().clone();
    out["__rng_after__"] = at::rand({4}); // backward must leave the generator where forward left it
    return out;
}

TEST(GptModel, ActivationCheckpointingGivesIdenticalGradients)
{
    for (bool bf16 : {false, true}) {
        auto plain = grads_of(false, bf16);
        auto recomputed = grads_of(true, bf16);
        ASSERT_EQ(plain.size(), recomputed.size());
        for (const auto &[n, g] : plain) {
            ASSERT_TRUE(g.defined()) << n;
            EXPECT_TRUE(at::equal(g, recomputed[n])) << n << (bf16 ? " (bf16)" : "");
        }
        EXPECT_GT(plain["transformer.h.0.attn.c_attn.weight"].abs().sum().item<double>(), 0.0);
    }
}

TEST(GptModel, UnitsListTheBlocks)
{
    auto m = tiny();
    auto units = m->units();
    ASSERT_EQ(units.size(), 6u); // wte, wpe, h.0, h.1, ln_f, lm_head
    EXPECT_EQ(units[2].name, "transformer.h.0");
    EXPECT_EQ(units[2].type, "gpt_block");
    EXPECT_EQ(units[3].type, "gpt_block");
    ASSERT_EQ(units[3].parameter_names.size(), 12u);
    EXPECT_EQ(units[3].parameter_names[2], "transformer.h.1.attn.c_attn.weight");
    EXPECT_TRUE(units[5].parameter_names.empty()); // tied: the weight is transformer.wte's
    size_t listed = 0;
    for (const auto &u : units) listed += u.parameter_names.size();
    EXPECT_EQ(listed, m->named_parameters().size());
}

TEST(GptModel, LoadsHfSpellings)
{
    auto m = tiny();
    auto src = tiny();
    accel::NamedTensors entries;
    // A GPT2Model file (no "transformer." prefix) with the old attention-mask buffers and a tied head.
    for (const auto &[n, t] : src->named_parameters()) entries.emplace_back(n.substr(12), t.detach() + 1.0);
    entries.emplace_back("h.0.attn.bias", at::ones({1, 1, 12, 12}));
    entries.emplace_back("h.0.attn.masked_bias", at::ones({}));
    entries.emplace_back("lm_head.weight", at::zeros({37, 16}));
    m->load_state_dict(entries, true);
    for (const auto &[n, t] : src->named_parameters())
        EXPECT_TRUE(at::equal(*m->find_tensor(n), t.detach() + 1.0)) << n;
    // Still tied, still one tensor.
    EXPECT_TRUE(m->find_tensor("lm_head.weight")->is_same(*m->find_tensor("transformer.wte.weight")));
    // A wrong shape names the key.
    try {
        m->load_state_dict({{"transformer.wpe.weight", at::zeros({13, 16})}}, false);
        ADD_FAILURE();
    } catch (const accel::Error &e) {
        EXPECT_NE(std::string(e.what()).find("transformer.wpe.weight"), std::string::npos);
    }
}

} // namespace
