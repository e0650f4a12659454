// big_modeling/empty_init: models built with "empty_init": true have meta parameters, are refused where values are
// needed (naming the first meta parameter), and become the same model as a normally built one once loaded.
#include "big_modeling/empty_init.hpp"
#include "big_modeling/module_sizes.hpp"
#include "catch_error.hpp"
#include "common/files.hpp"
#include "config/checkpoint_options.hpp"
#include "config/pretrained_config.hpp"
#include "model/pretrained.hpp"
#include "model/model.hpp"
#include "precision/autocast.hpp"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include <cstdlib>

namespace {

const char *kGpt = R"({"type": "gpt", "vocab_size": 11, "n_positions": 8, "n_embd": 8, "n_layer": 2, "n_head": 2,
                      "resid_pdrop": 0, "embd_pdrop": 0, "attn_pdrop": 0)";
const char *kLlama = R"({"type": "llama", "vocab_size": 13, "hidden_size": 8, "intermediate_size": 12,
                        "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
                        "tie_word_embeddings": false)";

std::string spec(const char *base, bool empty) { return std::string(base) + (empty ? R"(, "empty_init": true})" : "}"); }

void expect_all_meta(const accel::Model &m)
{
    ASSERT_FALSE(m.named_parameters().empty());
    for (const auto &[name, p] : m.named_parameters()) EXPECT_TRUE(p.is_meta()) << name;
}

// A normally built model and an empty one loaded from its state dict compute the same logits.
void check_loads_into_same_model(const char *base)
{
    auto full = accel::make_model_from_json(spec(base, false).c_str());
    auto empty = accel::make_model_from_json(spec(base, true).c_str());
    expect_all_meta(*empty);
    ASSERT_EQ(full->named_parameters().size(), empty->named_parameters().size());
    for (size_t i = 0; i < full->named_parameters().size(); ++i) {
        const auto &[fn, ft] = full->named_parameters()[i];
        const auto &[en, et] = empty->named_parameters()[i];
        EXPECT_EQ(fn, en);
        EXPECT_EQ(ft.sizes(), et.sizes()) << fn;
        EXPECT_EQ(ft.scalar_type(), et.scalar_type()) << fn;
        EXPECT_EQ(ft.requires_grad(), et.requires_grad()) << fn;
    }
    const at::Tensor ids = at::tensor({1, 4, 2, 7}, at::kLong).view({1, 4});
    accel::Error e = catch_error([&] { accel::forward(*empty, ids, false); });
    EXPECT_EQ(e.code(), ACCEL_ERR_FAILED_PRECONDITION);
    EXPECT_EQ(std::string(e.what()).rfind("forward: the model's \"" + empty->named_parameters()[0].first +
                                              "\" is on the meta device (built with empty_init)",
                                          0),
              0u)
        << e.what();
    e = catch_error([&] { empty->check_tensor_access("generate"); });
    EXPECT_EQ(e.code(), ACCEL_ERR_FAILED_PRECONDITION);
    empty->check_tensor_access("load_checkpoint", /*loading=*/true); // loading is what materialises it

    empty->load_state_dict(full->state_dict(false), true);
    for (const auto &[name, p] : empty->named_parameters()) {
        EXPECT_FALSE(p.is_meta()) << name;
        EXPECT_TRUE(p.device().is_cpu()) << name;
    }
    empty->check_materialized("forward");
    at::NoGradGuard no_grad;
    EXPECT_TRUE(at::equal(accel::forward(*full, ids, false), accel::forward(*empty, ids, false)));
}

} // namespace

TEST(EmptyInit, GptParametersOnMetaThenLoaded) { check_loads_into_same_model(kGpt); }

TEST(EmptyInit, LlamaParametersOnMetaThenLoaded) { check_loads_into_same_model(kLlama); }

TEST(EmptyInit, TiedHeadIsTheEmbeddingBeforeAndAfterLoading)
{
    auto empty = accel::make_model_from_json(spec(kGpt, true).c_str());
    const at::Tensor *head = empty->find_tensor("lm_head.weight");
    ASSERT_NE(head, nullptr);
    EXPECT_TRUE(head->is_meta());
    auto full = accel::make_model_from_json(spec(kGpt, false).c_str());
    empty->load_state_dict(full->state_dict(true), true);
    EXPECT_FALSE(head->is_meta());
    EXPECT_TRUE(at::equal(*head, *full->find_tensor("transformer.wte.weight")));
}

TEST(EmptyInit, PartialLoadNamesWhatIsStillEmpty)
{
    auto full = accel::make_model_from_json(spec(kLlama, false).c_str());
    auto empty = accel::make_model_from_json(spec(kLlama, true).c_str());
    accel::NamedTensors some;
    for (const auto &e : full->state_dict(false))
        if (e.first != "model.norm.weight") some.push_back(e);
    empty->load_state_dict(some, false);
    EXPECT_EQ(accel::big_modeling::first_meta_tensor(*empty), "model.norm.weight");
    accel::Error e = catch_error([&] { empty->check_materialized("forward"); });
    EXPECT_EQ(e.code(), ACCEL_ERR_FAILED_PRECONDITION);
    EXPECT_NE(std::string(e.what()).find("\"model.norm.weight\" is on the meta device"), std::string::npos) << e.what();
}

TEST(EmptyInit, BuffersStayRealAsInitEmptyWeightsDefault)
{
    auto m = accel::make_model_from_json(R"({"type": "sequential", "empty_init": true, "layers": [
        {"type": "linear", "in_features": 3, "out_features": 4}, {"type": "batch_norm", "num_features": 4}]})");
    expect_all_meta(*m);
    ASSERT_FALSE(m->named_buffers().empty());
    for (const auto &[name, b] : m->named_buffers()) EXPECT_FALSE(b.is_meta()) << name;
}

TEST(EmptyInit, ModuleSizesEqualTheFullModels)
{
    auto full = accel::make_model_from_json(spec(kLlama, false).c_str());
    auto empty = accel::make_model_from_json(spec(kLlama, true).c_str());
    const auto a = accel::big_modeling::compute_module_sizes(*full, std::nullopt);
    const auto b = accel::big_modeling::compute_module_sizes(*empty, 16);
    EXPECT_EQ(a.order, b.order);
    for (const auto &n : a.order) EXPECT_EQ(a.at(n), 2 * b.at(n)) << n; // float32 counted as float16
    EXPECT_GT(a.at(""), 0);
}

TEST(EmptyInit, SpecKeyIsABoolean)
{
    accel::Error e = catch_error([] { accel::make_model_from_json(R"({"type": "mlp", "widths": [2, 2], "empty_init": 1})"); });
    EXPECT_EQ(e.code(), ACCEL_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("empty_init"), std::string::npos) << e.what();
}

TEST(EmptyInit, HugeModelBuildsWithoutItsMemory)
{
    // 464 M parameters, 1.86 GB in float32: built one tensor at a time, never held whole.
    auto m = accel::make_model_from_json(R"({"type": "llama", "vocab_size": 32000, "hidden_size": 4096,
        "intermediate_size": 11008, "num_hidden_layers": 1, "num_attention_heads": 32, "empty_init": true})");
    expect_all_meta(*m);
    EXPECT_EQ(accel::big_modeling::compute_module_sizes(*m, std::nullopt).at(""), int64_t{464531456} * 4);
}

TEST(EmptyInit, FromPretrainedReadsConfigOnlyThenLoads)
{
    char tmpl[] = "/tmp/accel_empty_init_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    const std::string dir = tmpl;
    auto full = accel::make_model_from_json(spec(kLlama, false).c_str());
    accel::write_pretrained(*full, dir, {});
    auto options = accel::config::parse_from_pretrained_options(R"({"empty_init": true, "torch_dtype": "bfloat16"})",
                                                                "options_json");
    auto empty = accel::from_pretrained(dir, options).model;
    expect_all_meta(*empty);
    for (const auto &[name, p] : empty->named_parameters()) EXPECT_EQ(p.scalar_type(), at::kBFloat16) << name;
    // Loading the folder's weights (float32 there) materialises the bfloat16 parameters with converted values.
    empty->load_state_dict(full->state_dict(false), true);
    for (const auto &[name, p] : empty->named_parameters()) {
        EXPECT_FALSE(p.is_meta()) << name;
        EXPECT_TRUE(at::equal(p, full->find_tensor(name)->to(at::kBFloat16))) << name;
    }
    accel::Error e = catch_error([] {
        accel::config::parse_from_pretrained_options(R"({"empty_init": true, "adapter": "x"})", "options_json");
    });
    EXPECT_EQ(e.code(), ACCEL_ERR_INVALID_ARGUMENT);
    accel::remove_all(dir);
}
