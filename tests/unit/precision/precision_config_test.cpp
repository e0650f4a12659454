// config: the mixed-precision sections (GradScalerKwargs, FP8RecipeKwargs) with their JSON paths, and the
// ACCELERATE_FP8_* environment defaults (read only for mixed_precision "fp8"; JSON wins).
#include "common/error.hpp"
#include "config/accelerator_config.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

using accel::config::AcceleratorConfig;
using accel::config::parse_accelerator_config;

namespace {

const char *const kFp8Env[] = {"ACCELERATE_FP8_FORMAT",
                               "ACCELERATE_FP8_MARGIN",
                               "ACCELERATE_FP8_INTERVAL",
                               "ACCELERATE_FP8_AMAX_HISTORY_LEN",
                               "ACCELERATE_FP8_AMAX_COMPUTE_ALGO",
                               "ACCELERATE_FP8_USE_AUTOCAST_DURING_EVAL",
                               "ACCELERATE_FP8_OVERRIDE_FPROP",
                               "ACCELERATE_FP8_OVERRIDE_DGRAD",
                               "ACCELERATE_FP8_OVERRIDE_WGRAD",
                               "ACCELERATE_MIXED_PRECISION"};

class PrecisionConfig : public ::testing::Test {
protected:
    void SetUp() override { clear(); }
    void TearDown() override { clear(); }
    static void clear()
    {
        for (const char *n : kFp8Env) unsetenv(n);
    }
};

std::string error_of(const char *json)
{
    try {
        parse_accelerator_config(json);
    } catch (const accel::Error &e) {
        // (accel_status_name is C API, not part of the internals library.)
        const char *code = e.code() == ACCEL_ERR_INVALID_ARGUMENT ? "ACCEL_ERR_INVALID_ARGUMENT"
                           : e.code() == ACCEL_ERR_UNIMPLEMENTED  ? "ACCEL_ERR_UNIMPLEMENTED"
                                                                  : "other";
        return std::string(code) + ": " + e.what();
    }
    return "no error";
}

} // namespace

TEST_F(PrecisionConfig, Defaults)
{
    AcceleratorConfig c = parse_accelerator_config(nullptr);
    EXPECT_EQ(c.grad_scaler.init_scale, 65536.0);
    EXPECT_EQ(c.grad_scaler.growth_factor, 2.0);
    EXPECT_EQ(c.grad_scaler.backoff_factor, 0.5);
    EXPECT_EQ(c.grad_scaler.growth_interval, 2000);
    EXPECT_TRUE(c.grad_scaler.enabled);
    EXPECT_EQ(c.fp8_recipe.backend, "te");
    EXPECT_EQ(c.fp8_recipe.fp8_format, "HYBRID");
    EXPECT_EQ(c.fp8_recipe.margin, 0);
    EXPECT_EQ(c.fp8_recipe.interval, 1);
    EXPECT_EQ(c.fp8_recipe.amax_history_len, 1024);
    EXPECT_EQ(c.fp8_recipe.amax_compute_algo, "most_recent");
    EXPECT_FALSE(c.fp8_recipe.override_linear_precision[0] || c.fp8_recipe.override_linear_precision[1] ||
                 c.fp8_recipe.override_linear_precision[2]);
    EXPECT_FALSE(c.fp8_recipe.use_autocast_during_eval);
}

TEST_F(PrecisionConfig, GradScalerBadValuesNameThePath)
{
    const std::string p = "ACCEL_ERR_INVALID_ARGUMENT: kwargs_handlers.grad_scaler.";
    EXPECT_EQ(error_of("{\"kwargs_handlers\": {\"grad_scaler\": {\"init_scale\": -2}}}").rfind(p + "init_scale: expected a number > 0", 0), 0u);
    EXPECT_EQ(error_of("{\"kwargs_handlers\": {\"grad_scaler\": {\"init_scale\": 0}}}").rfind(p + "init_scale: expected a number > 0", 0), 0u);
    EXPECT_EQ(error_of("{\"kwargs_handlers\": {\"grad_scaler\": {\"growth_factor\": 1}}}").rfind(p + "growth_factor: expected a number > 1", 0), 0u);
    EXPECT_EQ(error_of("{\"kwargs_handlers\": {\"grad_scaler\": {\"backoff_factor\": 0}}}"),
              p + "backoff_factor: expected a number > 0 and < 1, got 0");
    EXPECT_EQ(error_of("{\"kwargs_handlers\": {\"grad_scaler\": {\"backoff_factor\": 1}}}"),
              p + "backoff_factor: expected a number > 0 and < 1, got 1");
    EXPECT_EQ(error_of("{\"kwargs_handlers\": {\"grad_scaler\": {\"growth_interval\": 0}}}"),
              p + "growth_interval: expected an integer in 1..2147483647, got 0");
    EXPECT_EQ(error_of("{\"kwargs_handlers\": {\"grad_scaler\": {\"growth_interval\": 3000000000}}}"),
              p + "growth_interval: expected an integer in 1..2147483647, got 3000000000");
}

TEST_F(PrecisionConfig, Fp8RecipeValuesAndErrors)
{
    AcceleratorConfig c = parse_accelerator_config(
        "{\"mixed_precision\": \"fp8\", \"kwargs_handlers\": {\"fp8_recipe\": {\"backend\": \"TE\", \"fp8_format\": \"hybrid\","
        " \"margin\": 3, \"interval\": 5, \"amax_history_len\": 7, \"amax_compute_algo\": \"max\","
        " \"override_linear_precision\": [true, false, true], \"use_autocast_during_eval\": true,"
        " \"opt_level\": \"O1\", \"use_mxfp8_block_scaling\": false}}}");
    EXPECT_EQ(c.mixed_precision, ACCEL_MIXED_PRECISION_FP8);
    EXPECT_EQ(c.fp8_recipe.fp8_format, "HYBRID");
    EXPECT_EQ(c.fp8_recipe.margin, 3);
    EXPECT_EQ(c.fp8_recipe.interval, 5);
    EXPECT_EQ(c.fp8_recipe.amax_history_len, 7);
    EXPECT_EQ(c.fp8_recipe.amax_compute_algo, "max");
    EXPECT_TRUE(c.fp8_recipe.override_linear_precision[0]);
    EXPECT_FALSE(c.fp8_recipe.override_linear_precision[1]);
    EXPECT_TRUE(c.fp8_recipe.override_linear_precision[2]);
    EXPECT_TRUE(c.fp8_recipe.use_autocast_during_eval);

    const std::string p = "ACCEL_ERR_INVALID_ARGUMENT: kwargs_handlers.fp8_recipe.";
    EXPECT_EQ(error_of("{\"kwargs_handlers\": {\"fp8_recipe\": {\"fp8_format\": \"E5M2\"}}}").rfind(p + "fp8_format: \"E5M2\" alone is rejected", 0), 0u);
    EXPECT_EQ(error_of("{\"kwargs_handlers\": {\"fp8_recipe\": {\"fp8_format\": \"fp8\"}}}"),
              p + "fp8_format: expected \"E4M3\" or \"HYBRID\", got \"fp8\"");
    EXPECT_EQ(error_of("{\"kwargs_handlers\": {\"fp8_recipe\": {\"amax_history_len\": 0}}}"),
              p + "amax_history_len: expected an integer in 1..1048576, got 0");
    EXPECT_EQ(error_of("{\"kwargs_handlers\": {\"fp8_recipe\": {\"interval\": 0}}}").rfind(p + "interval: expected an integer", 0), 0u);
    EXPECT_EQ(error_of("{\"kwargs_handlers\": {\"fp8_recipe\": {\"margin\": -1}}}"),
              p + "margin: expected an integer in 0..127, got -1");
    EXPECT_EQ(error_of("{\"kwargs_handlers\": {\"fp8_recipe\": {\"amax_compute_algo\": \"avg\"}}}"),
              p + "amax_compute_algo: expected one of \"max\", \"most_recent\", got \"avg\"");
    EXPECT_EQ(error_of("{\"kwargs_handlers\": {\"fp8_recipe\": {\"opt_level\": \"O3\"}}}"),
              p + "opt_level: expected one of \"O1\", \"O2\", got \"O3\"");
    EXPECT_EQ(error_of("{\"kwargs_handlers\": {\"fp8_recipe\": {\"override_linear_precision\": [true, false]}}}"),
              p + "override_linear_precision: expected an array of 3 booleans, got [true,false]");
    EXPECT_EQ(error_of("{\"kwargs_handlers\": {\"fp8_recipe\": {\"backend\": \"msamp\"}}}").rfind(
                  "ACCEL_ERR_UNIMPLEMENTED: kwargs_handlers.fp8_recipe.backend: MS-AMP", 0),
              0u);
}

TEST_F(PrecisionConfig, Fp8EnvironmentDefaultsJsonWins)
{
    setenv("ACCELERATE_FP8_FORMAT", "e4m3", 1);
    setenv("ACCELERATE_FP8_MARGIN", "2", 1);
    setenv("ACCELERATE_FP8_INTERVAL", "3", 1);
    setenv("ACCELERATE_FP8_AMAX_HISTORY_LEN", "32", 1);
    setenv("ACCELERATE_FP8_AMAX_COMPUTE_ALGO", "max", 1);
    setenv("ACCELERATE_FP8_USE_AUTOCAST_DURING_EVAL", "true", 1);
    setenv("ACCELERATE_FP8_OVERRIDE_DGRAD", "1", 1);
    AcceleratorConfig c = parse_accelerator_config("{\"mixed_precision\": \"fp8\"}");
    EXPECT_EQ(c.fp8_recipe.fp8_format, "E4M3");
    EXPECT_EQ(c.fp8_recipe.margin, 2);
    EXPECT_EQ(c.fp8_recipe.interval, 3);
    EXPECT_EQ(c.fp8_recipe.amax_history_len, 32);
    EXPECT_EQ(c.fp8_recipe.amax_compute_algo, "max");
    EXPECT_TRUE(c.fp8_recipe.use_autocast_during_eval);
    EXPECT_TRUE(c.fp8_recipe.override_linear_precision[1]);
    c = parse_accelerator_config(
        "{\"mixed_precision\": \"fp8\", \"kwargs_handlers\": {\"fp8_recipe\": {\"margin\": 0, \"fp8_format\": \"HYBRID\"}}}");
    EXPECT_EQ(c.fp8_recipe.margin, 0);
    EXPECT_EQ(c.fp8_recipe.fp8_format, "HYBRID");
    EXPECT_EQ(c.fp8_recipe.interval, 3);
    // The environment is read only for fp8 (as Accelerate builds the recipe only then).
    setenv("ACCELERATE_FP8_MARGIN", "lots", 1);
    EXPECT_NO_THROW(parse_accelerator_config("{\"mixed_precision\": \"bf16\"}"));
    EXPECT_EQ(error_of("{\"mixed_precision\": \"fp8\"}"),
              "ACCEL_ERR_INVALID_ARGUMENT: environment variable ACCELERATE_FP8_MARGIN: expected an integer in 0..127, "
              "got \"lots\"");
    setenv("ACCELERATE_FP8_MARGIN", "0", 1);
    setenv("ACCELERATE_FP8_FORMAT", "E5M2", 1);
    EXPECT_EQ(error_of("{\"mixed_precision\": \"fp8\"}").rfind(
                  "ACCEL_ERR_INVALID_ARGUMENT: environment variable ACCELERATE_FP8_FORMAT: \"E5M2\" alone", 0),
              0u);
    setenv("ACCELERATE_MIXED_PRECISION", "fp8", 1);
    setenv("ACCELERATE_FP8_FORMAT", "HYBRID", 1);
    EXPECT_EQ(parse_accelerator_config(nullptr).fp8_recipe.amax_history_len, 32);
}
