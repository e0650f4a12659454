// Which weights a folder holding both a whole file and shards gives (a sharded save_model over an older whole one,
// e.g. a pipeline's stage-by-stage shards): accel_model_load_checkpoint reads as Accelerate's
// load_checkpoint_in_model (pytorch_model.bin, model.safetensors, then the one *.index.json) and from_pretrained as
// transformers (model.safetensors, its index, pytorch_model.bin, its index), so both keep reading the whole file as
// the references do; two indexes are refused as Accelerate refuses them, and a path to an index reads its shards.
// ~0.1 s.
#include "catch_error.hpp"
#include "checkpointing/checkpointing.hpp"
#include "common/error.hpp"
#include "common/files.hpp"
#include "config/checkpoint_options.hpp"
#include "config/pretrained_config.hpp"
#include "model/model.hpp"
#include "model/pretrained.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "fresh_dir.hpp"

#include <string>

namespace {

const char *kGpt = R"({"type": "gpt", "vocab_size": 11, "n_positions": 8, "n_embd": 8, "n_layer": 2, "n_head": 2})";

std::shared_ptr<accel::Model> gpt(int seed)
{
    at::manual_seed(seed);
    return accel::make_model_from_json(kGpt);
}

at::Tensor weight(const accel::TensorList &tensors, const std::string &name)
{
    for (const auto &[n, t] : tensors)
        if (n == name) return t;
    ADD_FAILURE() << "no " << name;
    return at::zeros({1});
}

} // namespace

TEST(WeightsFolderOrder, WholeFileBeforeShardsAsTheReferences)
{
    const std::string dir = fresh_dir("both");
    const auto whole = gpt(1), sharded = gpt(2);
    accel::write_pretrained(*whole, dir, accel::config::SaveModelOptions{});
    accel::config::SaveModelOptions small;
    small.max_shard_size = 2000; // several shards and model.safetensors.index.json beside the older model.safetensors
    accel::write_pretrained(*sharded, dir, small);
    ASSERT_TRUE(accel::exists(dir + "/model.safetensors"));
    ASSERT_TRUE(accel::exists(dir + "/model.safetensors.index.json"));
    const std::string name = "transformer.h.1.mlp.c_fc.weight";
    const at::Tensor first = *whole->find_tensor(name), second = *sharded->find_tensor(name);
    ASSERT_FALSE(at::equal(first, second));

    EXPECT_TRUE(at::equal(weight(accel::ckpt::read_model_weights(dir), name), first));
    EXPECT_TRUE(at::equal(*accel::from_pretrained(dir, accel::config::FromPretrainedOptions{}).model->find_tensor(name), first));
    // The index itself, or the folder without the whole file: the shards.
    EXPECT_TRUE(at::equal(weight(accel::ckpt::read_model_weights(dir + "/model.safetensors.index.json"), name), second));
    accel::remove_all(dir + "/model.safetensors");
    EXPECT_TRUE(at::equal(weight(accel::ckpt::read_model_weights(dir), name), second));
    EXPECT_TRUE(at::equal(*accel::from_pretrained(dir, accel::config::FromPretrainedOptions{}).model->find_tensor(name), second));
    // Two indexes and no whole file: Accelerate's load_checkpoint_in_model refuses to guess.
    accel::config::SaveModelOptions pickles = small;
    pickles.safe_serialization = false;
    accel::write_pretrained(*whole, dir, pickles);
    const accel::Error e = catch_error([&] { accel::ckpt::read_model_weights(dir); });
    EXPECT_EQ(e.code(), ACCEL_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("more than one .index.json"), std::string::npos) << e.what();
    accel::remove_all(dir);
}
