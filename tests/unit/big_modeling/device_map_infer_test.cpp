// big_modeling/device_map_infer: Accelerate's infer_auto_device_map / get_balanced_memory on hand-computed cases
// (tests/python/device_map_reference.py compares with the real Accelerate on GPT and Llama trees).
#include "big_modeling/device_map_infer.hpp"
#include "catch_error.hpp"
#include "config/device_map.hpp"
#include "model/model.hpp"

#include <gtest/gtest.h>

using accel::config::device_map_to_json;
using accel::config::DeviceTarget;
using accel::config::MaxMemory;
namespace bm = accel::big_modeling;

namespace {
// Layers "0" (linear 4->4: 80 bytes), "1" (relu: nothing), "2" (80 bytes), "3" (linear 4->2: 40 bytes).
std::shared_ptr<accel::Model> four_layers()
{
    return accel::make_model_from_json(R"({"type": "sequential", "empty_init": true, "layers": [
        {"type": "linear", "in_features": 4, "out_features": 4}, {"type": "relu"},
        {"type": "linear", "in_features": 4, "out_features": 4}, {"type": "linear", "in_features": 4, "out_features": 2}]})");
}

std::string infer(const accel::Model &m, const MaxMemory &budgets, std::optional<int32_t> bits = std::nullopt,
                  const std::vector<std::string> &no_split = {})
{
    return device_map_to_json(bm::infer_auto_device_map(m, budgets, no_split, bits));
}
} // namespace

TEST(InferAutoDeviceMap, SizesAndLargestLayer)
{
    auto m = four_layers();
    const auto sizes = bm::compute_module_sizes(*m, std::nullopt);
    EXPECT_EQ(sizes.at(""), 200);
    EXPECT_EQ(sizes.at("0"), 80);
    EXPECT_EQ(sizes.at("0.bias"), 16);
    EXPECT_EQ(sizes.at("1"), 0);
    const bm::ModuleTree tree(*m);
    const auto [size, names] = bm::get_max_layer_size(tree, bm::top_level_items(tree), sizes, {});
    EXPECT_EQ(size, 80);
    EXPECT_EQ(names, (std::vector<std::string>{"0", "2"}));
}

TEST(InferAutoDeviceMap, CpuKeepsRoomForTheLargestLayerThenDisk)
{
    auto m = four_layers();
    // 200 - 80 (the largest layer to come) = 120: "0" fits; then the largest left is "3" (40): 80 + 80 <= 160.
    EXPECT_EQ(infer(*m, {{DeviceTarget::cpu(), 200}}), R"({"":"cpu"})");
    // 170 - 80 = 90: "0" and "1" fit, "2" (170 - 40 = 130 < 160) does not: disk from there on.
    EXPECT_EQ(infer(*m, {{DeviceTarget::cpu(), 170}}), R"({"0":"cpu","1":"cpu","2":"disk","3":"disk"})");
    // 150 - 80 = 70 < 80: everything on disk.
    EXPECT_EQ(infer(*m, {{DeviceTarget::cpu(), 150}}), R"({"":"disk"})");
    // GPU 0 must keep room for the largest layer too: 100 - 80 = 20 holds nothing, the CPU takes over.
    EXPECT_EQ(infer(*m, {{DeviceTarget::gpu(0), 100}, {DeviceTarget::cpu(), 170}}),
              R"({"0":"cpu","1":"cpu","2":"disk","3":"disk"})");
    // 260 on GPU 0: 180 for "0", "1", "2" (80 + 0 + 80 <= 260 - 40), then "3" (200 <= 260).
    EXPECT_EQ(infer(*m, {{DeviceTarget::gpu(0), 260}, {DeviceTarget::cpu(), 1000}}), R"({"":0})");
    // 190 - 40 < 160: "2" goes to GPU 1, which keeps no reserve (only GPU 0 and the CPU bring layers back).
    EXPECT_EQ(infer(*m, {{DeviceTarget::gpu(0), 190}, {DeviceTarget::gpu(1), 200}}),
              R"({"0":0,"1":0,"2":1,"3":1})");
    // As float16 every size halves: 170 - 40 holds it all.
    EXPECT_EQ(infer(*m, {{DeviceTarget::cpu(), 170}}, 16), R"({"":"cpu"})");
}

TEST(InferAutoDeviceMap, SplitsModulesUnlessNoSplit)
{
    // A GPT-2 of n_embd 4: wte 256 bytes, wpe 64, each block 976 (its largest part mlp.c_fc: 320), ln_f 32.
    auto m = accel::make_model_from_json(R"({"type": "gpt", "vocab_size": 16, "n_positions": 4, "n_embd": 4,
        "n_layer": 2, "n_head": 1, "empty_init": true})");
    const auto sizes = bm::compute_module_sizes(*m, std::nullopt);
    ASSERT_EQ(sizes.at("transformer.h.0"), 976);
    ASSERT_EQ(sizes.at("transformer.h.0.mlp.c_fc"), 320);
    ASSERT_EQ(sizes.at("transformer"), 2304);
    // 2104 bytes of CPU. Splittable, the reserve is c_fc's 320: the embeddings and block 0 fit (1296), block 1 is
    // split and its parts fill the CPU up to mlp.c_fc, which goes to disk with the rest.
    const MaxMemory cpu{{DeviceTarget::cpu(), 2104}};
    const std::string split = infer(*m, cpu);
    EXPECT_EQ(split, R"({"transformer.wte":"cpu","lm_head":"cpu","transformer.wpe":"cpu","transformer.h.0":"cpu",)"
                     R"("transformer.h.1.ln_1":"cpu","transformer.h.1.attn":"cpu","transformer.h.1.ln_2":"cpu",)"
                     R"("transformer.h.1.mlp":"disk","transformer.ln_f":"disk"})");
    // GPT2Block unsplittable: the reserve is a whole block (976), so block 0 no longer fits: disk from there.
    const std::string whole = infer(*m, cpu, std::nullopt, {"GPT2Block"});
    EXPECT_EQ(whole, R"({"transformer.wte":"cpu","lm_head":"cpu","transformer.wpe":"cpu","transformer.h":"disk",)"
                     R"("transformer.ln_f":"disk"})");
    EXPECT_EQ(whole, infer(*m, cpu, std::nullopt, {"gpt_block"}));
    // The tied head goes with the embedding.
    EXPECT_NE(whole.find("\"lm_head\":\"cpu\""), std::string::npos) << whole;
}

TEST(InferAutoDeviceMap, BalancedMemorySpreadsOverGpus)
{
    auto m = four_layers();
    // 200 / 2 GPUs = 100, plus 1.25 x the mean innermost module (200 / 3 = 66): 182 for GPU 0; the last keeps its own.
    const MaxMemory balanced =
        bm::get_balanced_memory(*m, {{DeviceTarget::gpu(0), 1000}, {DeviceTarget::gpu(1), 1000}, {DeviceTarget::cpu(), 1000}},
                                {}, std::nullopt, false);
    EXPECT_EQ(accel::config::max_memory_to_json(balanced), R"({"0":182,"1":1000,"cpu":1000})");
    // low_zero: GPU 0 gets what the others cannot hold (200 - 1000 < 0: nothing).
    const MaxMemory low = bm::get_balanced_memory(
        *m, {{DeviceTarget::gpu(0), 1000}, {DeviceTarget::gpu(1), 1000}, {DeviceTarget::cpu(), 1000}}, {}, std::nullopt, true);
    EXPECT_EQ(accel::config::max_memory_to_json(low), R"({"0":0,"1":1000,"cpu":1000})");
    // Without GPUs the budgets stay as they are.
    const MaxMemory cpu = bm::get_balanced_memory(*m, {{DeviceTarget::cpu(), 7}}, {}, std::nullopt, false);
    EXPECT_EQ(accel::config::max_memory_to_json(cpu), R"({"cpu":7})");
}

TEST(InferAutoDeviceMap, CleanDeviceMapMergesWholeModules)
{
    auto map = accel::config::parse_device_map(
        R"({"a.x.0": 0, "a.x.1": 0, "a.y": 0, "b.0": "cpu", "b.1": "disk", "c": "disk"})", "m");
    bm::clean_device_map(map);
    EXPECT_EQ(device_map_to_json(map), R"({"a":0,"b.0":"cpu","b.1":"disk","c":"disk"})");
    map = accel::config::parse_device_map(R"({"a": 1, "b.0": 1})", "m");
    bm::clean_device_map(map);
    EXPECT_EQ(device_map_to_json(map), R"({"":1})");
}

TEST(InferAutoDeviceMapOptions, AccelerateArgumentsAndErrors)
{
    auto o = accel::config::parse_infer_device_map_options(
        R"({"max_memory": {"cpu": "1GiB", "disk": 5, "1": "2MB", "0": "1Gb"}, "no_split_module_classes": "GPT2Block",
            "dtype": "torch.bfloat16", "balanced": true, "low_zero": true})",
        "options_json");
    ASSERT_TRUE(o.max_memory);
    EXPECT_EQ(accel::config::max_memory_to_json(*o.max_memory), R"({"0":125000000,"1":2000000,"cpu":1073741824,"disk":5})");
    EXPECT_EQ(o.no_split_module_classes, std::vector<std::string>{"GPT2Block"});
    EXPECT_EQ(*o.dtype_bits, 16);
    auto expect = [](const char *json, accel_status_t code, const std::string &part) {
        accel::Error e = catch_error([&] { accel::config::parse_infer_device_map_options(json, "options_json"); });
        EXPECT_EQ(e.code(), code) << json << ": " << e.what();
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    };
    expect(R"({"max_memory": {"gpu": 1}})", ACCEL_ERR_INVALID_ARGUMENT, "device \"gpu\" is not recognized");
    expect(R"({"max_memory": {"mps": 1}})", ACCEL_ERR_UNIMPLEMENTED, "mps");
    expect(R"({"max_memory": {"cpu": -1}})", ACCEL_ERR_INVALID_ARGUMENT, "options_json.max_memory[\"cpu\"]");
    expect(R"({"max_memory": {"cpu": "100"}})", ACCEL_ERR_INVALID_ARGUMENT, "is not in a valid format");
    expect(R"({"max_memory": {"cpu": "0GB"}})", ACCEL_ERR_INVALID_ARGUMENT, "is not in a valid format");
    expect(R"({"max_memory": {"cpu": "xGB"}})", ACCEL_ERR_INVALID_ARGUMENT, "is not in a valid format");
    expect(R"({"max_memory": [1]})", ACCEL_ERR_INVALID_ARGUMENT, "options_json.max_memory: expected an object");
    expect(R"({"dtype": "float17"})", ACCEL_ERR_INVALID_ARGUMENT, "options_json.dtype: expected a torch dtype");
    expect(R"({"low_zero": true})", ACCEL_ERR_INVALID_ARGUMENT, "low_zero: only with");
    expect(R"({"verbose": true})", ACCEL_ERR_INVALID_ARGUMENT, "verbose");
    expect(R"({"no_split_module_classes": 3})", ACCEL_ERR_INVALID_ARGUMENT, "no_split_module_classes");
}
