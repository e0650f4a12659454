// big_modeling/device_map: Accelerate's device_map JSON (parse, write back, lookup, coverage check).
#include "big_modeling/device_map.hpp"
#include "catch_error.hpp"
#include "model/model.hpp"

#include <gtest/gtest.h>

using accel::big_modeling::DeviceMap;
using accel::big_modeling::DeviceTarget;
using accel::config::device_map_to_json;
using accel::config::parse_device_map;

#define EXPECT_INVALID(stmt, part_)                                                                                    \
    do {                                                                                                               \
        accel::Error e_ = catch_error([&] { stmt; });                                                                  \
        EXPECT_EQ(e_.code(), ACCEL_ERR_INVALID_ARGUMENT) << e_.what();                                                \
        EXPECT_NE(std::string(e_.what()).find(part_), std::string::npos) << e_.what();                                \
    } while (0)

TEST(DeviceMapJson, ParsesAccelerateValuesInOrder)
{
    DeviceMap m = parse_device_map(
        R"({"model.embed_tokens": 0, "model.layers.0": "cuda:1", "model.layers.1": "cuda", "model.norm": "cpu", "lm_head": "disk"})",
        "device_map");
    ASSERT_EQ(m.size(), 5u);
    EXPECT_EQ(m[0].first, "model.embed_tokens");
    EXPECT_EQ(m[0].second, DeviceTarget::gpu(0));
    EXPECT_EQ(m[1].second, DeviceTarget::gpu(1));
    EXPECT_EQ(m[2].second, DeviceTarget::gpu(0));
    EXPECT_EQ(m[3].second, DeviceTarget::cpu());
    EXPECT_EQ(m[4].first, "lm_head");
    EXPECT_EQ(m[4].second, DeviceTarget::disk());
    EXPECT_EQ(device_map_to_json(m),
              R"({"model.embed_tokens":0,"model.layers.0":1,"model.layers.1":0,"model.norm":"cpu","lm_head":"disk"})");
    EXPECT_TRUE(parse_device_map("{}", "device_map").empty());
}

TEST(DeviceMapJson, RefusesMalformedMapsByName)
{
    EXPECT_INVALID(parse_device_map("[0]", "device_map"), "device_map: expected an object");
    EXPECT_INVALID(parse_device_map("{\"a\": 0", "device_map"), "device_map: malformed JSON");
    EXPECT_INVALID(parse_device_map(nullptr, "device_map"), "device_map: must not be NULL");
    EXPECT_INVALID(parse_device_map(R"({"a": -1})", "device_map"), "device_map[\"a\"]: expected a GPU index");
    EXPECT_INVALID(parse_device_map(R"({"a": 1.5})", "device_map"), "device_map[\"a\"]");
    EXPECT_INVALID(parse_device_map(R"({"a": "mps"})", "device_map"), "device_map[\"a\"]: expected");
    EXPECT_INVALID(parse_device_map(R"({"a": "cuda:x"})", "device_map"), "device_map[\"a\"]");
    EXPECT_INVALID(parse_device_map(R"({"a": "cuda:"})", "device_map"), "device_map[\"a\"]");
    EXPECT_INVALID(parse_device_map(R"({"a": null})", "device_map"), "device_map[\"a\"]");
    EXPECT_INVALID(parse_device_map(R"({"a": 0, "a": "cpu"})", "device_map"), "device_map[\"a\"]: duplicate");
}

TEST(DeviceMapLookup, LongestDottedPrefixWins)
{
    DeviceMap m = parse_device_map(R"({"": "disk", "model.layers.1": 0, "model.layers.1.mlp": "cpu"})", "m");
    EXPECT_EQ(*accel::big_modeling::device_for(m, "model.layers.1.mlp.up_proj.weight"), DeviceTarget::cpu());
    EXPECT_EQ(*accel::big_modeling::device_for(m, "model.layers.1.input_layernorm.weight"), DeviceTarget::gpu(0));
    // "model.layers.10" is not inside "model.layers.1".
    EXPECT_EQ(*accel::big_modeling::device_for(m, "model.layers.10.mlp.up_proj.weight"), DeviceTarget::disk());
    DeviceMap partial = parse_device_map(R"({"model.layers.1": 0})", "m");
    EXPECT_EQ(accel::big_modeling::device_for(partial, "model.layers.10.x"), nullptr);
}

TEST(DeviceMapCheck, EveryTensorCovered)
{
    auto model = accel::make_model_from_json(R"({"type":"mlp","widths":[4,3,2]})");
    std::vector<std::string> names;
    for (const auto &[n, t] : model->named_parameters()) names.push_back(n);
    ASSERT_FALSE(names.empty());
    accel::big_modeling::check_device_map(*model, parse_device_map(R"({"": "cpu"})", "m"), "device_map");
    // Covering all but the last parameter names it.
    std::string last = names.back();
    std::string json = "{";
    for (size_t i = 0; i + 1 < names.size(); ++i) json += (i ? ",\"" : "\"") + names[i] + "\": 0";
    json += "}";
    EXPECT_INVALID(accel::big_modeling::check_device_map(*model, parse_device_map(json.c_str(), "m"), "device_map"),
                   "device_map does not give any device for the following parameters: " + last);
    // A name the model lacks is accepted (Accelerate's check), as long as everything is covered.
    accel::big_modeling::check_device_map(*model, parse_device_map(R"({"": 0, "nope": 0})", "m"), "device_map");
}
