// config/model_spec: the model JSON spec; errors inside the layer list name "layers[i].key".
#include "common/error.hpp"
#include "config/model_spec.hpp"

#include <gtest/gtest.h>

#include <string>

using accel::config::parse_model_spec;

namespace {

accel::Error spec_error(const char *json)
{
    try {
        parse_model_spec(json);
    } catch (const accel::Error &e) {
        return e;
    }
    ADD_FAILURE() << "expected an accel::Error for " << json;
    return accel::Error(ACCEL_OK, "");
}

#define EXPECT_SPEC_ERROR(json, msg_)                                                                                  \
    do {                                                                                                               \
        accel::Error e_ = spec_error(json);                                                                            \
        EXPECT_EQ(e_.code(), ACCEL_ERR_INVALID_ARGUMENT) << e_.what();                                                 \
        EXPECT_EQ(std::string(e_.what()), std::string(msg_));                                                          \
    } while (0)

} // namespace

TEST(ModelSpec, MlpExpandsIntoLayers)
{
    auto spec = parse_model_spec("{\"type\": \"mlp\", \"widths\": [4, 8, 8, 2], \"activation\": \"gelu\","
                                 " \"dropout\": 0.1}");
    std::vector<std::string> types;
    for (const auto &l : spec.layers) types.push_back(l.type);
    EXPECT_EQ(types, (std::vector<std::string>{"linear", "gelu", "dropout", "linear", "gelu", "dropout", "linear"}));
    EXPECT_EQ(spec.layers[0].in_features, 4);
    EXPECT_EQ(spec.layers[0].out_features, 8);
    EXPECT_DOUBLE_EQ(spec.layers[2].p, 0.1);
    EXPECT_EQ(spec.layers[6].out_features, 2);
}

TEST(ModelSpec, SequentialLayers)
{
    auto spec = parse_model_spec(
        "{\"type\": \"sequential\", \"layers\": [{\"type\": \"conv2d\", \"in_channels\": 1, \"out_channels\": 4,"
        " \"kernel_size\": 3, \"padding\": 1}, {\"type\": \"relu\"}, {\"type\": \"flatten\"},"
        " {\"type\": \"linear\", \"in_features\": 64, \"out_features\": 10, \"bias\": false}]}");
    ASSERT_EQ(spec.layers.size(), 4u);
    EXPECT_EQ(spec.layers[0].kernel_size, 3);
    EXPECT_EQ(spec.layers[0].padding, 1);
    EXPECT_EQ(spec.layers[2].start_dim, 1);
    EXPECT_FALSE(spec.layers[3].bias);
}

TEST(ModelSpec, ErrorsNameTheLayerPath)
{
    EXPECT_SPEC_ERROR("{\"type\": \"sequential\", \"layers\": [{\"type\": \"relu\"}, {\"type\": \"relu\"},"
                      " {\"type\": \"linear\", \"in_features\": 0, \"out_features\": 2}]}",
                      "layers[2].in_features: expected an integer in 1..2147483648, got 0");
    EXPECT_SPEC_ERROR("{\"type\": \"sequential\", \"layers\": [{\"type\": \"linear\", \"in_features\": 3}]}",
                      "layers[0].out_features: required for a linear layer");
    EXPECT_SPEC_ERROR("{\"type\": \"sequential\", \"layers\": [{\"type\": \"relu\", \"inplace\": true}]}",
                      "layers[0].inplace: unknown key (known keys: type)");
    EXPECT_SPEC_ERROR("{\"type\": \"sequential\", \"layers\": [{\"type\": \"layer_norm\","
                      " \"normalized_shape\": [4, \"x\"]}]}",
                      "layers[0].normalized_shape[1]: expected an integer in 1..2147483648, got \"x\"");
    EXPECT_SPEC_ERROR("{\"type\": \"sequential\", \"layers\": [{\"type\": \"dropout\", \"p\": 1.5}]}",
                      "layers[0].p: expected a number >= 0 and <= 1, got 1.5");
    EXPECT_SPEC_ERROR("{\"type\": \"sequential\", \"layers\": [{}]}", "layers[0].type: required");
    {
        accel::Error e = spec_error("{\"type\": \"sequential\", \"layers\": [{\"type\": \"lstm\"}]}");
        EXPECT_EQ(e.code(), ACCEL_ERR_INVALID_ARGUMENT);
        const std::string msg = e.what();
        EXPECT_EQ(msg.rfind("layers[0].type: expected one of \"linear\", \"conv2d\", ", 0), 0u) << msg;
        EXPECT_NE(msg.find(", got \"lstm\""), std::string::npos) << msg;
    }
    EXPECT_SPEC_ERROR("{\"type\": \"sequential\", \"layers\": []}", "layers: expected at least one layer");
    EXPECT_SPEC_ERROR("{\"type\": \"sequential\", \"layers\": [3]}", "layers[0]: expected a JSON object, got 3");
}

TEST(ModelSpec, TopLevelErrors)
{
    EXPECT_SPEC_ERROR("{}", "type: required (\"mlp\", \"sequential\", \"gpt\" or \"llama\")");
    EXPECT_SPEC_ERROR("{\"type\": \"mlp\"}", "widths: required for an mlp");
    EXPECT_SPEC_ERROR("{\"type\": \"mlp\", \"widths\": [4]}",
                      "widths: expected at least 2 sizes (inputs and outputs), got 1");
    EXPECT_SPEC_ERROR("{\"type\": \"mlp\", \"widths\": [4, 2], \"layers\": []}",
                      "layers: unknown key (known keys: activation, base_model_tp_plan, bias, dropout, empty_init, frozen, lora, "
                      "tp_plan, type, widths)");
    EXPECT_SPEC_ERROR("{\"type\": \"mlp\", \"widths\": [4, 2], \"bias\": 1}", "bias: expected true or false, got 1");
    accel::Error e = spec_error(nullptr);
    EXPECT_STREQ(e.what(), "spec_json: must not be NULL");
}
