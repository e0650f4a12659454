// Mixed precision through the Accelerator: fp16's gradient scaler wired into backward, optimizer step,
// scheduler and clipping (training-semantics.md §3, §5, §6), the fp16 kernel probe, autocast begin/end,
// and FP8 preparation of JSON and TorchScript models.
#include "accelerator/accelerator.hpp"
#include "common/error.hpp"
#include "config/optimizer_config.hpp"
#include "config/scheduler_config.hpp"
#include "model/model.hpp"
#include "optimizer/accelerated_optimizer.hpp"
#include "precision/autocast.hpp"
#include "precision/grad_scaler.hpp"
#include "scheduler/accelerated_scheduler.hpp"
#include "catch_error.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/api/module.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <unistd.h>

using accel::Accelerator;
using accel::Model;

namespace {

constexpr const char *kMlp = "{\"type\": \"mlp\", \"widths\": [6, 16, 16, 3]}";
constexpr const char *kFp16NoAutocast =
    "{\"mixed_precision\": \"fp16\", \"kwargs_handlers\": {\"autocast\": {\"enabled\": false}}}";

std::shared_ptr<Model> make_model(uint64_t seed = 0, const char *spec = kMlp)
{
    at::manual_seed(seed);
    return accel::make_model_from_json(spec);
}

std::shared_ptr<accel::AcceleratedOptimizer> make_optimizer(const std::shared_ptr<Model> &m,
                                                            const char *json = "{\"type\": \"adamw\", \"lr\": 0.01}")
{
    return std::make_shared<accel::AcceleratedOptimizer>(m, accel::config::parse_optimizer_config(json));
}

bool same_parameters(const Model &a, const Model &b)
{
    for (size_t i = 0; i < a.named_parameters().size(); ++i)
        if (!at::equal(a.named_parameters()[i].second, b.named_parameters()[i].second)) return false;
    return true;
}

// One training step as a C user writes it: forward (wrapped), loss, backward, clip, step, zero_grad.
double step(Accelerator &acc, Model &m, accel::AcceleratedOptimizer &opt, const at::Tensor &x, const at::Tensor &y,
            double max_norm = -1.0, accel::AcceleratedScheduler *sched = nullptr)
{
    acc.accumulate_begin();
    at::Tensor loss = accel::compute_loss(accel::LossKind::Mse, accel::forward(m, x, true), y);
    acc.backward(loss);
    double norm = 0.0;
    // As Accelerate's examples: clip only when gradients are synchronised (unscaling happens once per step).
    if (max_norm >= 0.0 && acc.state()->gradient.sync_gradients()) norm = acc.clip_grad_norm(m, max_norm, 2.0);
    opt.step();
    if (sched != nullptr) sched->step();
    opt.zero_grad();
    acc.accumulate_end();
    return norm;
}

} // namespace

TEST(MixedPrecision, Fp16NeedsFp16KernelsOnThisDevice)
{
    std::string why;
    if (accel::fp16_autocast_available(at::kCPU, &why)) GTEST_SKIP() << "this LibTorch has fp16 CPU kernels";
    EXPECT_NE(why.find("Half"), std::string::npos) << why;
    auto e = catch_error([] { Accelerator acc("{\"mixed_precision\": \"fp16\"}"); });
    EXPECT_EQ(e.code(), ACCEL_ERR_UNIMPLEMENTED);
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("mixed_precision: \"fp16\" needs fp16 kernels, and this LibTorch has none on the CPU (", 0), 0u)
        << msg;
    EXPECT_NE(msg.find("kwargs_handlers.autocast.enabled to false"), std::string::npos) << msg;
}

TEST(MixedPrecision, Fp16WithoutAutocastHasAScaler)
{
    Accelerator acc(kFp16NoAutocast);
    ASSERT_NE(acc.scaler(), nullptr);
    EXPECT_EQ(acc.scaler()->get_scale(), 65536.0);
    Accelerator off("{\"mixed_precision\": \"fp16\", \"kwargs_handlers\": {\"autocast\": {\"enabled\": false},"
                    " \"grad_scaler\": {\"enabled\": false}}}");
    EXPECT_EQ(off.scaler(), nullptr);
    // Only fp16 gets a scaler (Accelerate's rule), whatever grad_scaler says.
    Accelerator bf16("{\"mixed_precision\": \"bf16\", \"kwargs_handlers\": {\"grad_scaler\": {\"init_scale\": 8}}}");
    EXPECT_EQ(bf16.scaler(), nullptr);
}

// Scaling by powers of two is exact, so fp32 compute with the loss scaler trains bit for bit like fp32,
// clipping included (the norm is taken after unscaling).
TEST(MixedPrecision, ScalerWithFp32ComputeEqualsFp32Bitwise)
{
    Accelerator plain("{}");
    Accelerator scaled("{\"mixed_precision\": \"fp16\", \"kwargs_handlers\": {\"autocast\": {\"enabled\": false},"
                       " \"grad_scaler\": {\"growth_interval\": 2}}}");
    auto ma = make_model(1), mb = make_model(1);
    auto oa = make_optimizer(ma), ob = make_optimizer(mb);
    plain.prepare_model(*ma);
    plain.prepare_optimizer(oa);
    scaled.prepare_model(*mb);
    scaled.prepare_optimizer(ob);
    at::manual_seed(5);
    for (int i = 0; i < 6; ++i) {
        at::Tensor x = at::randn({8, 6}), y = at::randn({8, 3});
        double na = step(plain, *ma, *oa, x, y, 0.5), nb = step(scaled, *mb, *ob, x, y, 0.5);
        EXPECT_EQ(na, nb) << i;
        EXPECT_FALSE(ob->step_was_skipped());
    }
    EXPECT_TRUE(same_parameters(*ma, *mb));
    EXPECT_EQ(scaled.scaler()->get_scale(), 65536.0 * 8); // grown after steps 2, 4, 6
}

TEST(MixedPrecision, ClipGradNormEqualsTheHandComputedNormAfterUnscaling)
{
    Accelerator acc(kFp16NoAutocast);
    auto m = make_model(2), ref = make_model(2);
    auto opt = make_optimizer(m);
    acc.prepare_model(*m);
    acc.prepare_optimizer(opt);
    at::manual_seed(6);
    at::Tensor x = at::randn({8, 6}), y = at::randn({8, 3});
    // The reference gradients: plain fp32.
    accel::compute_loss(accel::LossKind::Mse, ref->forward(x), y).backward();
    double sq = 0.0;
    for (const auto &p : ref->parameters()) sq += p.grad().to(at::kDouble).pow(2).sum().item<double>();
    acc.accumulate_begin();
    acc.backward(accel::compute_loss(accel::LossKind::Mse, accel::forward(*m, x, true), y));
    // Before clipping the gradients are scaled by 65536.
    EXPECT_TRUE(at::equal(m->parameters()[0].grad(), ref->parameters()[0].grad() * 65536));
    const double norm = acc.clip_grad_norm(*m, 1e9, 2.0);
    EXPECT_NEAR(norm, std::sqrt(sq), 1e-6 * std::sqrt(sq));
    for (size_t i = 0; i < ref->parameters().size(); ++i)
        EXPECT_TRUE(at::equal(m->parameters()[i].grad(), ref->parameters()[i].grad())) << i;
    // Unscaling happens once per optimizer step.
    auto e = catch_error([&] { acc.clip_grad_norm(*m, 1.0, 2.0); });
    EXPECT_EQ(e.code(), ACCEL_ERR_FAILED_PRECONDITION);
    EXPECT_EQ(catch_error([&] { acc.clip_grad_value(*m, 1.0); }).code(), ACCEL_ERR_FAILED_PRECONDITION);
    opt->step(); // does not unscale again
    EXPECT_FALSE(opt->step_was_skipped());
    opt->zero_grad();
    acc.accumulate_end();
    EXPECT_EQ(acc.scaler()->get_growth_tracker(), 1);
}

TEST(MixedPrecision, ClipGradValueUnscalesFirst)
{
    Accelerator acc(kFp16NoAutocast);
    auto m = make_model(3), ref = make_model(3);
    auto opt = make_optimizer(m);
    acc.prepare_model(*m);
    acc.prepare_optimizer(opt);
    at::Tensor x = at::randn({8, 6}), y = at::randn({8, 3});
    accel::compute_loss(accel::LossKind::Mse, ref->forward(x), y).backward();
    acc.backward(accel::compute_loss(accel::LossKind::Mse, accel::forward(*m, x, true), y));
    acc.clip_grad_value(*m, 0.01);
    for (size_t i = 0; i < ref->parameters().size(); ++i)
        EXPECT_TRUE(at::equal(m->parameters()[i].grad(), ref->parameters()[i].grad().clamp(-0.01, 0.01))) << i;
}

TEST(MixedPrecision, NonFiniteGradientsSkipTheOptimizerAndSchedulerStep)
{
    Accelerator acc(kFp16NoAutocast);
    auto m = make_model(4), before = make_model(4);
    auto opt = make_optimizer(m);
    auto sched = std::make_shared<accel::AcceleratedScheduler>(
        opt, accel::config::parse_scheduler_config("{\"type\": \"linear\", \"num_training_steps\": 10}"));
    acc.prepare_model(*m);
    acc.prepare_optimizer(opt);
    acc.prepare_scheduler(*sched);
    at::Tensor x = at::randn({8, 6}), y = at::randn({8, 3});
    at::Tensor bad = x.clone();
    bad[3][2] = std::numeric_limits<float>::quiet_NaN();
    const double lr0 = sched->last_lr();

    step(acc, *m, *opt, bad, y, -1.0, sched.get());
    EXPECT_TRUE(opt->step_was_skipped());
    EXPECT_TRUE(acc.optimizer_step_was_skipped());
    EXPECT_TRUE(same_parameters(*m, *before)); // no update
    EXPECT_EQ(sched->step_count(), 0);          // the scheduler did not step either
    EXPECT_EQ(sched->last_lr(), lr0);
    EXPECT_EQ(acc.scaler()->get_scale(), 32768.0);
    EXPECT_EQ(acc.scaler()->get_growth_tracker(), 0);

    step(acc, *m, *opt, x, y, -1.0, sched.get());
    EXPECT_FALSE(opt->step_was_skipped());
    EXPECT_FALSE(acc.optimizer_step_was_skipped());
    EXPECT_FALSE(same_parameters(*m, *before));
    EXPECT_EQ(sched->step_count(), 1);
    EXPECT_EQ(acc.scaler()->get_scale(), 32768.0);
    EXPECT_EQ(acc.scaler()->get_growth_tracker(), 1);

    // A scale so large that the scaled gradients overflow: skipped, then backed off until they fit.
    Accelerator huge("{\"mixed_precision\": \"fp16\", \"kwargs_handlers\": {\"autocast\": {\"enabled\": false},"
                     " \"grad_scaler\": {\"init_scale\": 1e38, \"backoff_factor\": 0.001}}}");
    auto m2 = make_model(4);
    auto o2 = make_optimizer(m2);
    huge.prepare_model(*m2);
    huge.prepare_optimizer(o2);
    at::Tensor big_y = y * 1e6;
    int skipped = 0;
    for (int i = 0; i < 10 && (i == 0 || o2->step_was_skipped()); ++i) {
        step(huge, *m2, *o2, x, big_y);
        skipped += o2->step_was_skipped();
    }
    EXPECT_GE(skipped, 1);
    EXPECT_FALSE(o2->step_was_skipped());
    EXPECT_LT(huge.scaler()->get_scale(), 1e38);
}

TEST(MixedPrecision, AccumulationScalesEveryMicroStepAndUpdatesOnSync)
{
    Accelerator acc("{\"mixed_precision\": \"fp16\", \"gradient_accumulation_steps\": 2,"
                    " \"kwargs_handlers\": {\"autocast\": {\"enabled\": false}}}");
    Accelerator ref("{\"gradient_accumulation_steps\": 2}");
    auto m = make_model(5), mr = make_model(5);
    auto opt = make_optimizer(m), optr = make_optimizer(mr);
    acc.prepare_model(*m);
    acc.prepare_optimizer(opt);
    ref.prepare_model(*mr);
    ref.prepare_optimizer(optr);
    at::manual_seed(8);
    for (int i = 0; i < 4; ++i) {
        at::Tensor x = at::randn({4, 6}), y = at::randn({4, 3});
        step(acc, *m, *opt, x, y, 1.0);
        step(ref, *mr, *optr, x, y, 1.0);
        EXPECT_EQ(acc.scaler()->get_growth_tracker(), (i + 1) / 2) << i; // update() only on sync steps
    }
    EXPECT_TRUE(same_parameters(*m, *mr));
}

TEST(MixedPrecision, UnscaleGradients)
{
    Accelerator acc(kFp16NoAutocast);
    auto m = make_model(6);
    auto opt = make_optimizer(m), stranger = make_optimizer(m);
    acc.prepare_model(*m);
    acc.prepare_optimizer(opt);
    at::Tensor x = at::randn({4, 6}), y = at::randn({4, 3});
    // Before any backward there is no scale to unscale by.
    EXPECT_EQ(catch_error([&] { acc.unscale_gradients(nullptr); }).code(), ACCEL_ERR_FAILED_PRECONDITION);
    acc.backward(accel::compute_loss(accel::LossKind::Mse, accel::forward(*m, x, true), y));
    at::Tensor g = m->parameters()[0].grad().clone();
    EXPECT_EQ(catch_error([&] { acc.unscale_gradients(stranger.get()); }).code(), ACCEL_ERR_FAILED_PRECONDITION);
    acc.unscale_gradients(opt.get());
    EXPECT_TRUE(at::equal(m->parameters()[0].grad(), g / 65536));
    EXPECT_EQ(catch_error([&] { acc.unscale_gradients(nullptr); }).code(), ACCEL_ERR_FAILED_PRECONDITION);
    // Without a scaler it does nothing.
    Accelerator plain("{}");
    EXPECT_NO_THROW(plain.unscale_gradients(nullptr));
}

TEST(MixedPrecision, AutocastBeginEnd)
{
    at::Tensor a = at::randn({4, 4});
    Accelerator bf16("{\"mixed_precision\": \"bf16\"}");
    bf16.autocast_begin();
    EXPECT_EQ(at::matmul(a, a).scalar_type(), at::kBFloat16);
    bf16.autocast_begin(); // nests
    bf16.autocast_end();
    EXPECT_EQ(at::matmul(a, a).scalar_type(), at::kBFloat16);
    bf16.autocast_end();
    EXPECT_EQ(at::matmul(a, a).scalar_type(), at::kFloat);
    EXPECT_EQ(catch_error([&] { bf16.autocast_end(); }).code(), ACCEL_ERR_FAILED_PRECONDITION);

    Accelerator fp8("{\"mixed_precision\": \"fp8\"}"); // fp8 also runs bf16 autocast
    fp8.autocast_begin();
    EXPECT_EQ(at::matmul(a, a).scalar_type(), at::kBFloat16);
    fp8.autocast_end();

    Accelerator none("{}");
    none.autocast_begin();
    EXPECT_EQ(at::matmul(a, a).scalar_type(), at::kFloat);
    none.autocast_end();

    Accelerator off("{\"mixed_precision\": \"bf16\", \"kwargs_handlers\": {\"autocast\": {\"enabled\": false}}}");
    bf16.autocast_begin();
    off.autocast_begin(); // autocast(enabled=False) inside an enabled one switches it off
    EXPECT_EQ(at::matmul(a, a).scalar_type(), at::kFloat);
    off.autocast_end();
    EXPECT_EQ(at::matmul(a, a).scalar_type(), at::kBFloat16);
    bf16.autocast_end();
    // A scope left open is closed when its accelerator goes away.
    {
        Accelerator tmp("{\"mixed_precision\": \"bf16\"}");
        tmp.autocast_begin();
    }
    EXPECT_EQ(at::matmul(a, a).scalar_type(), at::kFloat);
}

TEST(MixedPrecision, Fp8ForwardOfAPreparedModel)
{
    Accelerator acc("{\"mixed_precision\": \"fp8\", \"kwargs_handlers\": {\"fp8_recipe\": {\"amax_history_len\": 4}}}");
    auto m = make_model(7), plain = make_model(7);
    acc.prepare_model(*m);
    acc.prepare_model(*m); // idempotent
    at::Tensor x = at::randn({16, 6}) * 3;
    at::Tensor exact = plain->forward(x);
    at::Tensor first = accel::forward(*m, x, true);
    EXPECT_EQ(first.scalar_type(), at::kFloat);
    EXPECT_FALSE(at::equal(first, exact));
    EXPECT_TRUE(at::allclose(first, exact, 0.15, 0.15));
    // Delayed scaling: the second forward uses scales computed from the first one's amax.
    at::Tensor second = accel::forward(*m, x, true);
    EXPECT_FALSE(at::equal(first, second));
    // Unwrapped, the model is the plain fp32 one.
    EXPECT_TRUE(at::equal(accel::forward(*m, x, false), exact));
    // In eval mode FP8 is off (use_autocast_during_eval false): only bf16 autocast remains.
    m->train(false);
    plain->train(false);
    at::Tensor bf16_ref;
    {
        accel::AutocastScope scope(at::kBFloat16, true);
        bf16_ref = plain->forward(x).to(at::kFloat);
    }
    EXPECT_TRUE(at::equal(accel::forward(*m, x, true), bf16_ref));

    Accelerator eval_fp8("{\"mixed_precision\": \"fp8\", \"kwargs_handlers\": {\"fp8_recipe\":"
                         " {\"use_autocast_during_eval\": true}}}");
    auto e = make_model(7);
    eval_fp8.prepare_model(*e);
    e->train(false);
    EXPECT_FALSE(at::equal(accel::forward(*e, x, true), bf16_ref));
}

// A regression onto an exact linear target: fp32 drives the loss towards 0, while FP8's rounding leaves a
// noise floor, so this checks that FP8 training converges; the within-5 % comparison with fp32 is made on
// the example's classification task (tests/capi/test_precision.c).
TEST(MixedPrecision, Fp8TrainingConverges)
{
    Accelerator a("{}"), b("{\"mixed_precision\": \"fp8\"}");
    auto ma = make_model(9), mb = make_model(9);
    auto oa = make_optimizer(ma), ob = make_optimizer(mb);
    a.prepare_model(*ma);
    a.prepare_optimizer(oa);
    b.prepare_model(*mb);
    b.prepare_optimizer(ob);
    at::manual_seed(10);
    at::Tensor w_true = at::randn({6, 3});
    double la = 0, lb = 0, first = 0;
    for (int i = 0; i < 300; ++i) {
        at::Tensor x = at::randn({32, 6}), y = at::matmul(x, w_true);
        at::Tensor lossa = accel::compute_loss(accel::LossKind::Mse, accel::forward(*ma, x, true), y);
        at::Tensor lossb = accel::compute_loss(accel::LossKind::Mse, accel::forward(*mb, x, true), y);
        a.backward(lossa);
        b.backward(lossb);
        oa->step();
        ob->step();
        oa->zero_grad();
        ob->zero_grad();
        if (i == 0) first = lossb.item<double>();
        if (i >= 280) {
            la += lossa.item<double>();
            lb += lossb.item<double>();
        }
    }
    EXPECT_GT(first, 1.0); // the targets have variance ~6
    EXPECT_LT(la / 20, 0.05) << "fp32 " << la / 20;
    EXPECT_LT(lb / 20, 0.05) << "fp8 " << lb / 20 << " (from " << first << ")";
}

TEST(MixedPrecision, Fp8RejectsTorchScriptModelsAtPrepare)
{
    torch::jit::Module module("m");
    module.register_parameter("w", at::ones({2, 2}), false);
    module.define("def forward(self, x):\n    return x @ self.w\n");
    char path[] = "/tmp/accel_fp8_script_XXXXXX";
    int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    close(fd);
    module.save(path);
    auto m = accel::load_torchscript_model(path);
    std::remove(path);
    Accelerator acc("{\"mixed_precision\": \"fp8\"}");
    auto e = catch_error([&] { acc.prepare_model(*m); });
    EXPECT_EQ(e.code(), ACCEL_ERR_UNIMPLEMENTED);
    EXPECT_NE(std::string(e.what()).find("not supported for TorchScript models"), std::string::npos) << e.what();
    EXPECT_EQ(m->prepared_by, nullptr); // nothing half-prepared
    Accelerator bf16("{\"mixed_precision\": \"bf16\"}");
    EXPECT_NO_THROW(bf16.prepare_model(*m));
    // Nor can a TorchScript model (no layers) recompute layers: refused at prepare, the model untouched.
    torch::jit::Module trainable("t");
    trainable.register_parameter("w", at::ones({2, 2}).requires_grad_(), false);
    trainable.define("def forward(self, x):\n    return x @ self.w\n");
    char path2[] = "/tmp/accel_ckpt_script_XXXXXX";
    fd = mkstemp(path2);
    ASSERT_GE(fd, 0);
    close(fd);
    trainable.save(path2);
    auto m2 = accel::load_torchscript_model(path2);
    std::remove(path2);
    Accelerator ac("{\"fsdp_plugin\": {\"activation_checkpointing\": true}}");
    auto e2 = catch_error([&] { ac.prepare_model(*m2); });
    EXPECT_EQ(e2.code(), ACCEL_ERR_UNIMPLEMENTED);
    EXPECT_NE(std::string(e2.what()).find("fsdp_plugin.activation_checkpointing: this model has no layers"),
              std::string::npos) << e2.what();
    EXPECT_EQ(m2->prepared_by, nullptr);
    EXPECT_EQ(m2->forward_hooks, nullptr); // the sharding engine released it
}

TEST(MixedPrecision, TransformerEncoderLayer)
{
    const char *spec = "{\"type\": \"sequential\", \"layers\": [{\"type\": \"transformer_encoder_layer\", \"d_model\": 16,"
                       " \"nhead\": 4, \"dim_feedforward\": 32, \"dropout\": 0.0, \"batch_first\": true},"
                       " {\"type\": \"flatten\"}, {\"type\": \"linear\", \"in_features\": 80, \"out_features\": 3}]}";
    auto m = make_model(11, spec);
    std::vector<std::string> names;
    for (const auto &p : m->named_parameters()) names.push_back(p.first);
    // PyTorch's state-dict keys.
    EXPECT_EQ(names.front(), "0.self_attn.in_proj_weight");
    EXPECT_NE(std::find(names.begin(), names.end(), "0.linear2.bias"), names.end());
    EXPECT_EQ(names.back(), "2.bias");
    at::Tensor x = at::randn({2, 5, 16}); // (batch, seq, d_model)
    at::Tensor y = m->forward(x);
    EXPECT_EQ(y.sizes(), at::IntArrayRef({2, 3}));
    // batch_first is a transpose around PyTorch's (seq, batch, d_model) layer: sample 0 alone gives the same.
    EXPECT_TRUE(at::allclose(m->forward(x.narrow(0, 0, 1)), y.narrow(0, 0, 1), 1e-5, 1e-5));
    for (const char *mp : {"bf16", "fp8"}) {
        const std::string config = std::string("{\"mixed_precision\": \"") + mp + "\"}";
        Accelerator acc(config.c_str());
        auto mm = make_model(11, spec);
        acc.prepare_model(*mm);
        at::Tensor out = accel::forward(*mm, x, true);
        EXPECT_EQ(out.scalar_type(), at::kFloat) << mp;
        EXPECT_TRUE(at::allclose(out, y, 0.1, 0.1)) << mp;
        accel::compute_loss(accel::LossKind::Mse, out, at::zeros({2, 3})).backward();
        for (const auto &p : mm->named_parameters()) EXPECT_TRUE(p.second.grad().defined()) << mp << " " << p.first;
    }
}

// A 16-bit activation (a linear layer's output under autocast) reaching a layer norm, alone or as a
// transformer layer's residual stream: upcast first (LibTorch 1.13's CPU layer norm refuses bfloat16 input
// with float32 weights: "expected scalar type BFloat16 but found Float" before the fix).
TEST(MixedPrecision, LayerNormAfterA16BitActivation)
{
    const char *spec = "{\"type\": \"sequential\", \"layers\": [{\"type\": \"linear\", \"in_features\": 16,"
                       " \"out_features\": 16}, {\"type\": \"transformer_encoder_layer\", \"d_model\": 16, \"nhead\": 4,"
                       " \"dim_feedforward\": 32, \"dropout\": 0.0, \"batch_first\": true}, {\"type\": \"linear\","
                       " \"in_features\": 16, \"out_features\": 16}, {\"type\": \"layer_norm\", \"normalized_shape\": [16]},"
                       " {\"type\": \"flatten\"}, {\"type\": \"linear\", \"in_features\": 80, \"out_features\": 3}]}";
    auto m = make_model(11, spec);
    at::Tensor x = at::randn({2, 5, 16});
    at::Tensor y = m->forward(x);
    Accelerator acc("{\"mixed_precision\": \"bf16\"}");
    auto mm = make_model(11, spec);
    acc.prepare_model(*mm);
    at::Tensor out = accel::forward(*mm, x, true);
    EXPECT_EQ(out.scalar_type(), at::kFloat);
    EXPECT_TRUE(at::allclose(out, y, 0.1, 0.1)) << (out - y).abs().max().item<double>();
    EXPECT_FALSE(at::equal(out, y)); // it did compute in bfloat16
    accel::compute_loss(accel::LossKind::Mse, out, at::zeros({2, 3})).backward();
    for (const auto &p : mm->named_parameters()) EXPECT_TRUE(p.second.grad().defined()) << p.first;
    // Under sharding's bf16 policy the layers' parameters are bfloat16 themselves: their 16-bit input stays
    // 16-bit (an upcast input met bfloat16 weights: "expected scalar type Float but found BFloat16").
    for (const char *plugin : {"\"fsdp_plugin\": {}", "\"fsdp_plugin\": {\"auto_wrap_policy\": \"TRANSFORMER_BASED_WRAP\", "
                                                   "\"transformer_cls_names_to_wrap\": [\"transformer_encoder_layer\"]}"}) {
        SCOPED_TRACE(plugin);
        Accelerator sharded(("{\"mixed_precision\": \"bf16\", " + std::string(plugin) + "}").c_str());
        auto sm = make_model(11, spec);
        sharded.prepare_model(*sm);
        at::Tensor so = accel::forward(*sm, x, true);
        EXPECT_EQ(so.scalar_type(), at::kFloat);
        EXPECT_TRUE(at::allclose(so, y, 0.1, 0.1)) << (so - y).abs().max().item<double>();
        sharded.backward(accel::compute_loss(accel::LossKind::Mse, so, at::zeros({2, 3})));
        for (const auto &p : sm->named_parameters()) EXPECT_EQ(p.second.scalar_type(), at::kBFloat16) << p.first;
    }
}
