// The bindings' smoke scenario (conventions.md, "Tests") through include/accel/accel.hpp.
//   accel_cpp_smoke_test <scratch dir for the checkpoint>
#include <accel/accel.hpp>

#include "expect.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

int main(int argc, char **argv)
{
    const std::string ckpt = std::string(argc > 1 ? argv[1] : "cpp-checkpoint") + "/ckpt";
    const std::string model_spec = R"({"type": "mlp", "widths": [4, 8, 3]})";
    try {
        accel::set_seed(0);
        std::vector<float> x;
        std::vector<std::int64_t> y;
        for (int i = 0; i < 24; ++i) { // 6 batches: 2 trained, 2 after the save, repeated after the load, 1 more
            y.push_back(i % 3);
            for (int j = 0; j < 4; ++j)
                x.push_back(static_cast<float>((i * 7 + j * 3) % 11) / 11.0f);
        }
        auto features = accel::Tensor::from(x, {24, 4});
        auto labels = accel::Tensor::from(y, {24});

        auto acc = std::make_unique<accel::Accelerator>(R"({"gradient_accumulation_steps": 2})");
        auto model = accel::Model::from_json(model_spec);
        accel::Optimizer opt(model, R"({"type": "sgd", "lr": 0.1})");
        accel::Scheduler sched(opt, R"({"type": "linear", "num_warmup_steps": 0, "num_training_steps": 10})");
        accel::DataLoader dl(features, &labels, R"({"batch_size": 4})");
        acc->prepare(&model, &opt, &dl, &sched);
        EXPECT(acc->gradient_accumulation_steps() == 2);
        // Object collectives in one process (several: tests/distributed/dist_objects.c).
        EXPECT(acc->gather_object(std::string("a\0b", 3)) == std::vector<std::string>{std::string("a\0b", 3)});
        EXPECT(acc->broadcast_object_list({"x", ""}) == (std::vector<std::string>{"x", ""}));
        EXPECT(acc->broadcast_object("y") == "y");
        EXPECT(acc->gather_object_json("[1, 2]") == "[1, 2]" && acc->broadcast_object_json("{}") == "{}");
        try {
            (void)acc->gather_object_json("{}");
            EXPECT(false);
        } catch (const accel::Error &e) {
            EXPECT(e.status() == ACCEL_ERR_INVALID_ARGUMENT);
        }

        const std::string p0 = model.parameter_name(0);
        const auto before = model.get_tensor(p0).to_vector<float>();
        std::vector<bool> syncs;
        for (int i = 0; i < 2; ++i) {
            auto batch = dl.next_batch();
            EXPECT(batch);
            auto scope = acc->accumulate(model);
            auto loss = accel::compute_loss("cross_entropy", model.forward(batch.inputs()), batch.labels());
            EXPECT(loss.item() > 0.0);
            acc->backward(loss);
            opt.step();
            sched.step();
            opt.zero_grad();
            syncs.push_back(acc->sync_gradients());
        }
        EXPECT(syncs == (std::vector<bool>{false, true}));
        EXPECT(acc->step() == 2 && sched.step_count() == 1);
        EXPECT(model.get_tensor(p0).to_vector<float>() != before);

        // save_state / load_state: two more steps after the load repeat the two steps after the save exactly
        // (weights, optimizer, scheduler, accumulate()'s step and the loader's position are restored).
        // Saved asynchronously: the two steps below run while the files are written, and change nothing in them.
        EXPECT(acc->save_state(ckpt, R"({"async": true})") == ckpt);
        const auto saved = model.get_tensor(p0).to_vector<float>();
        const auto saved_step = acc->step();
        const auto saved_sched_steps = sched.step_count();
        auto two_steps = [&] {
            for (int i = 0; i < 2; ++i) {
                auto batch = dl.next_batch();
                EXPECT(batch);
                acc->train_step(model, opt, &sched, batch, "cross_entropy"); // enters accumulate() itself
            }
            return model.get_tensor(p0).to_vector<float>();
        };
        const auto first = two_steps();
        const auto first_step = acc->step();
        acc->wait_for_checkpoint();
        // merge_weights needs shards (an index or a SHARDED_STATE_DICT folder); a plain save is NOT_FOUND.
        try {
            accel::merge_weights(ckpt, ckpt + "-merged");
            EXPECT(!"no exception");
        } catch (const accel::Error &e) {
            EXPECT(e.status() == ACCEL_ERR_NOT_FOUND);
        }
        EXPECT(first != saved && first_step == saved_step + 2);
        acc->load_state(ckpt);
        EXPECT(model.get_tensor(p0).to_vector<float>() == saved);
        EXPECT(acc->step() == saved_step && sched.step_count() == saved_sched_steps);
        EXPECT(two_steps() == first && acc->step() == first_step);

        // An invalid config throws accel::Error naming the JSON path.
        try {
            accel::Accelerator bad(R"({"kwargs_handlers": {"autocast": {"enabled": "yes"}}})");
            EXPECT(!"no exception");
        } catch (const accel::Error &e) {
            EXPECT(e.status() == ACCEL_ERR_INVALID_ARGUMENT);
            EXPECT(std::string(e.what()).find("kwargs_handlers.autocast.enabled") != std::string::npos);
            EXPECT(std::string(e.status_name()) == "ACCEL_ERR_INVALID_ARGUMENT");
        }

        // accelerator.profile(): a scope writes output_trace_dir/profile_0.json (no output_trace_dir: refused).
        {
            accel::Accelerator prof(R"({"kwargs_handlers": {"profile": {"output_trace_dir": ")" + ckpt + R"(-traces"}}})");
            auto scope = prof.profile();
            scope.end();
            std::FILE *f = std::fopen((ckpt + "-traces/profile_0.json").c_str(), "r");
            EXPECT(f != nullptr);
            if (f) std::fclose(f);
            accel::Accelerator bare;
            try {
                (void)bare.profile();
                EXPECT(!"no exception");
            } catch (const accel::Error &e) {
                EXPECT(e.status() == ACCEL_ERR_FAILED_PRECONDITION);
            }
        }

        // Automatic resume: nothing on a fresh start, the newest automatic checkpoint once there is one; without
        // automatic naming there is nothing to look for.
        try {
            (void)acc->load_latest_state();
            EXPECT(!"no exception");
        } catch (const accel::Error &e) {
            EXPECT(e.status() == ACCEL_ERR_FAILED_PRECONDITION);
        }
        {
            std::filesystem::remove_all(ckpt + "-project"); // a fresh start, whatever an earlier run left
            accel::Accelerator resumer(R"({"project_config": {"project_dir": ")" + ckpt +
                                       R"(-project", "automatic_checkpoint_naming": true}})");
            auto m = accel::Model::from_json(model_spec);
            resumer.prepare(&m, nullptr, nullptr, nullptr);
            EXPECT(!resumer.load_latest_state());
            // the header has no automatic-naming save (a NULL folder): the C call
            EXPECT(accel_accelerator_save_state(resumer.get(), nullptr) == ACCEL_OK);
            EXPECT(resumer.load_latest_state());
        }

        // The header reads only a tensor's own element type, and a wrong one names both dtypes (issue 43.5).
        try {
            const auto ids = accel::Tensor::from(std::vector<std::int32_t>{1, 2, 3}, {3});
            (void)ids.to_vector<float>();
            EXPECT(!"no exception");
        } catch (const accel::Error &e) {
            EXPECT(e.status() == ACCEL_ERR_INVALID_ARGUMENT);
            EXPECT(std::string(e.what()).find("the tensor's dtype is int32, the buffer's element type is float32") !=
                   std::string::npos);
        }
        EXPECT((accel::Tensor::from(std::vector<std::int32_t>{1, 2, 3}, {3}).to_vector<std::int32_t>() ==
                std::vector<std::int32_t>{1, 2, 3}));
        // The no-grad forward gives the forward's values.
        {
            auto b = dl.next_batch();
            model.eval();
            EXPECT(model.forward_no_grad(b.inputs()).to_vector<float>() == model.forward(b.inputs()).to_vector<float>());
            model.train();
        }

        // get_state_dict: the model's keys in order, the values get_tensor reads.
        {
            const auto sd = acc->get_state_dict(model);
            EXPECT(sd.size() == model.num_parameters());
            for (std::size_t i = 0; i < sd.size(); ++i) {
                EXPECT(sd[i].first == model.parameter_name(i));
                EXPECT(sd[i].second.to_vector<float>() == model.get_tensor(sd[i].first).to_vector<float>());
            }
        }

        // Free the accelerator before its children: they stay usable.
        acc.reset();
        auto batch = dl.next_batch();
        EXPECT((model.forward(batch.inputs()).shape() == std::vector<std::int64_t>{4, 3}));
        opt.step();
    } catch (const accel::Error &e) {
        std::fprintf(stderr, "accel_cpp_smoke_test: %s: %s\n", e.status_name(), e.what());
        return 1;
    }
    std::puts("cpp smoke test passed");
    return 0;
}
