// dynamo_backend "ofi" through the C API: a TorchScript model's evaluation runs a frozen, optimize_for_inference copy
// that follows the weights as training changes them; training runs the module as written; other models are refused.
// (A C-API test written in C++: the TorchScript file is made here with LibTorch, which a C program cannot do.)
#include "accel/accel.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/api/module.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr int64_t kBatch = 8, kIn = 6, kHidden = 16, kOut = 3;

// A scripted 2-layer MLP with a buffer, saved to a temporary file.
std::string save_scripted_mlp()
{
    at::manual_seed(7);
    torch::jit::Module m("mlp");
    m.register_attribute("training", c10::BoolType::get(), true); // what nn.Module gives a scripted module
    m.register_parameter("w0", (at::randn({kIn, kHidden}) * 0.4).requires_grad_(), false);
    m.register_parameter("b0", (at::randn({kHidden}) * 0.1).requires_grad_(), false);
    m.register_parameter("w1", (at::randn({kHidden, kOut}) * 0.4).requires_grad_(), false);
    m.register_parameter("b1", at::zeros({kOut}).requires_grad_(), false);
    m.register_buffer("scale", at::full({kOut}, 1.5));
    m.define(R"(
def forward(self, x):
    h = torch.relu(torch.addmm(self.b0, x, self.w0))
    return torch.addmm(self.b1, h, self.w1) * self.scale
)");
    char path[] = "/tmp/accel_ofi_script_XXXXXX";
    const int fd = mkstemp(path);
    EXPECT_GE(fd, 0);
    close(fd);
    m.save(path);
    return path;
}

accel_tensor_t *f32(const std::vector<float> &v, std::vector<int64_t> shape)
{
    accel_tensor_t *t = nullptr;
    const accel_status_t st =
        accel_tensor_create(v.data(), v.size() * sizeof(float), ACCEL_DTYPE_FLOAT32, shape.data(), shape.size(), &t);
    EXPECT_EQ(st, ACCEL_OK) << accel_last_error_message();
    return t;
}

std::vector<float> values(const accel_tensor_t *t)
{
    int64_t n = 0;
    EXPECT_EQ(accel_tensor_get_numel(t, &n), ACCEL_OK);
    std::vector<float> out(static_cast<size_t>(n));
    EXPECT_EQ(accel_tensor_copy_to_buffer(t, out.data(), out.size() * sizeof(float)), ACCEL_OK)
        << accel_last_error_message();
    return out;
}

// One model with its optimizer, prepared by an accelerator with `config`.
struct Prepared {
    accel_accelerator_t *acc = nullptr;
    accel_model_t *model = nullptr;
    accel_optimizer_t *opt = nullptr;
    Prepared(const std::string &path, const char *config)
    {
        EXPECT_EQ(accel_model_create_from_torchscript(path.c_str(), &model), ACCEL_OK) << accel_last_error_message();
        EXPECT_EQ(accel_optimizer_create(model, "{\"type\": \"adamw\", \"lr\": 0.05}", &opt), ACCEL_OK);
        EXPECT_EQ(accel_accelerator_create(config, &acc), ACCEL_OK) << accel_last_error_message();
        EXPECT_EQ(accel_accelerator_prepare(acc, model, opt, nullptr, nullptr), ACCEL_OK) << accel_last_error_message();
    }
    ~Prepared()
    {
        accel_optimizer_free(opt);
        accel_model_free(model);
        accel_accelerator_free(acc);
    }
    std::vector<float> eval(const accel_tensor_t *x, bool no_grad = true)
    {
        EXPECT_EQ(accel_model_eval(model), ACCEL_OK);
        accel_tensor_t *out = nullptr;
        EXPECT_EQ(no_grad ? accel_model_forward_no_grad(model, x, &out) : accel_model_forward(model, x, &out), ACCEL_OK)
            << accel_last_error_message();
        auto v = values(out);
        accel_tensor_free(out);
        return v;
    }
    // A step in training mode, or in eval mode (fine-tuning with dropout off: the frozen copy is kept then, and
    // only its check of the weights' versions sees the step).
    std::vector<float> train_step(const accel_tensor_t *x, const accel_tensor_t *y, bool train_mode = true)
    {
        EXPECT_EQ(train_mode ? accel_model_train(model) : accel_model_eval(model), ACCEL_OK);
        accel_tensor_t *out = nullptr, *loss = nullptr;
        EXPECT_EQ(accel_model_forward(model, x, &out), ACCEL_OK) << accel_last_error_message();
        EXPECT_EQ(accel_loss_compute("mse", out, y, &loss), ACCEL_OK) << accel_last_error_message();
        EXPECT_EQ(accel_accelerator_backward(acc, loss), ACCEL_OK) << accel_last_error_message();
        EXPECT_EQ(accel_optimizer_step(opt), ACCEL_OK);
        EXPECT_EQ(accel_optimizer_zero_grad(opt), ACCEL_OK);
        auto v = values(out);
        accel_tensor_free(out);
        accel_tensor_free(loss);
        return v;
    }
    std::vector<float> weight(const char *name)
    {
        accel_tensor_t *t = nullptr;
        EXPECT_EQ(accel_model_get_tensor(model, name, &t), ACCEL_OK) << accel_last_error_message();
        auto v = values(t);
        accel_tensor_free(t);
        return v;
    }
};

double max_abs_diff(const std::vector<float> &a, const std::vector<float> &b)
{
    EXPECT_EQ(a.size(), b.size());
    double d = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, std::fabs(double(a[i]) - double(b[i])));
    return d;
}

std::vector<float> ramp(size_t n, float step)
{
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = std::sin(step * float(i));
    return v;
}

} // namespace

// Eval outputs equal the plain model's before and after training steps, in training or eval mode (a frozen copy
// kept past an eval-mode step fails); training steps equal the plain model's bit for bit.
TEST(DynamoOfi, TorchScriptEvaluationFollowsTraining)
{
    const std::string path = save_scripted_mlp();
    Prepared ofi(path, "{\"dynamo_backend\": \"OFI\"}");
    Prepared plain(path, nullptr);
    std::remove(path.c_str());
    char *cfg = nullptr;
    ASSERT_EQ(accel_accelerator_get_config_json(ofi.acc, &cfg), ACCEL_OK);
    EXPECT_NE(std::string(cfg).find("\"dynamo_backend\":\"ofi\""), std::string::npos) << cfg;
    accel_string_free(cfg);

    accel_tensor_t *x = f32(ramp(kBatch * kIn, 0.37f), {kBatch, kIn});
    accel_tensor_t *y = f32(ramp(kBatch * kOut, 0.11f), {kBatch, kOut});
    const auto before = plain.eval(x);
    EXPECT_LE(max_abs_diff(ofi.eval(x), before), 1e-6);
    for (int round = 0; round < 2; ++round) {
        for (int step = 0; step < 3; ++step) {
            const auto a = ofi.train_step(x, y), b = plain.train_step(x, y);
            EXPECT_EQ(a, b) << "round " << round << " step " << step; // the module as written: bit for bit
        }
        for (const char *w : {"w0", "b0", "w1", "b1"}) EXPECT_EQ(ofi.weight(w), plain.weight(w)) << w;
        const auto expected = plain.eval(x);
        EXPECT_GT(max_abs_diff(expected, before), 1e-3) << "training changed nothing: a stale copy would pass";
        EXPECT_LE(max_abs_diff(ofi.eval(x), expected), 1e-6) << "round " << round;
        EXPECT_LE(max_abs_diff(ofi.eval(x), expected), 1e-6) << "round " << round << ", the copy reused";
        // An eval forward that records gradients runs the module as written: bit for bit.
        EXPECT_EQ(ofi.eval(x, false), plain.eval(x, false));
        // A step taken in eval mode: the copy made above is stale now.
        const auto before_step = plain.eval(x);
        EXPECT_EQ(ofi.train_step(x, y, false), plain.train_step(x, y, false));
        const auto after_step = plain.eval(x);
        EXPECT_GT(max_abs_diff(after_step, before_step), 1e-3) << "the step changed nothing: a stale copy would pass";
        EXPECT_LE(max_abs_diff(ofi.eval(x), after_step), 1e-6) << "round " << round << ", after an eval-mode step";
    }
    accel_tensor_free(x);
    accel_tensor_free(y);
}

// Models built from a JSON spec have no graph to freeze: refused at prepare, by name.
TEST(DynamoOfi, JsonSpecModelRefusedAtPrepare)
{
    accel_model_t *m = nullptr;
    accel_accelerator_t *acc = nullptr;
    ASSERT_EQ(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [4, 8, 2]}", &m), ACCEL_OK);
    ASSERT_EQ(accel_accelerator_create("{\"dynamo_plugin\": {\"backend\": \"ofi\"}}", &acc), ACCEL_OK)
        << accel_last_error_message();
    EXPECT_EQ(accel_accelerator_prepare(acc, m, nullptr, nullptr, nullptr), ACCEL_ERR_UNIMPLEMENTED);
    const std::string msg = accel_last_error_message();
    EXPECT_NE(msg.find("dynamo_backend: \"OFI\" needs a TorchScript model"), std::string::npos) << msg;
    EXPECT_NE(msg.find("built from torch::nn modules"), std::string::npos) << msg;
    accel_accelerator_free(acc);
    accel_model_free(m);
}

// Under a sharding engine the weights change through collectives the frozen copy cannot see: refused by name.
TEST(DynamoOfi, RefusedUnderSharding)
{
    const std::string path = save_scripted_mlp();
    accel_model_t *m = nullptr;
    accel_accelerator_t *acc = nullptr;
    ASSERT_EQ(accel_model_create_from_torchscript(path.c_str(), &m), ACCEL_OK);
    std::remove(path.c_str());
    ASSERT_EQ(accel_accelerator_create("{\"dynamo_backend\": \"ofi\", \"fsdp_plugin\": {}}", &acc), ACCEL_OK)
        << accel_last_error_message();
    EXPECT_EQ(accel_accelerator_prepare(acc, m, nullptr, nullptr, nullptr), ACCEL_ERR_UNIMPLEMENTED);
    const std::string msg = accel_last_error_message();
    EXPECT_NE(msg.find("\"ofi\" is not supported with fsdp_plugin"), std::string::npos) << msg;
    accel_accelerator_free(acc);
    accel_model_free(m);
}
