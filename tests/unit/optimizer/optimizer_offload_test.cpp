// Optimizer offload with several units (deepspeed_plugin models are one unit, so the distributed tests only
// reach that case): an optimizer sharded over one flat shard per parameter, with "nvme" offload, steps to the
// same shards and state bit for bit as the same optimizer without offload, with the next unit's state read
// and the previous one's written while a unit steps; at most three units' state is in memory during a step
// and none after it; a parameter without a gradient keeps its state where it is; state dicts bring it in.
#include "model/model.hpp"
#include "config/optimizer_config.hpp"
#include "optimizer/accelerated_optimizer.hpp"
#include "optimizer/optimizer_offload.hpp"
#include "common/offload_files.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

namespace {

// An optimizer over one flat shard per trainable parameter of an MLP (world 1), as the sharding engine
// hands it over, and the shards.
struct Sharded {
    std::shared_ptr<accel::AcceleratedOptimizer> opt;
    std::vector<at::Tensor> shards;
};

Sharded make_sharded(const char *optimizer, accel::PageFn page = nullptr)
{
    at::manual_seed(0);
    auto model = accel::make_model_from_json("{\"type\": \"mlp\", \"widths\": [16, 32, 32, 32, 32, 32, 8]}");
    Sharded s;
    s.opt = std::make_shared<accel::AcceleratedOptimizer>(model, accel::config::parse_optimizer_config(optimizer));
    accel::parallel::ShardLayout l;
    l.page = std::move(page);
    l.gather = [](size_t, const at::Tensor &shard) { return shard; }; // one rank: the shard is the whole unit
    for (const auto &p : model->parameters()) {
        const size_t u = l.params.size();
        l.params.push_back(p);
        l.unit_params.push_back({u});
        l.param_unit.push_back(u);
        l.param_offset.push_back(0);
        l.shard_numel.push_back(p.numel());
        s.shards.push_back(p.detach().reshape({-1}).clone().requires_grad_(true));
    }
    s.opt->shard_over(s.shards, l, nullptr, nullptr, nullptr);
    return s;
}

void set_grads(Sharded &s, int step, bool skip_one)
{
    for (size_t i = 0; i < s.shards.size(); ++i) {
        if (skip_one && i == 2) {
            s.shards[i].mutable_grad().reset();
            continue;
        }
        at::manual_seed(100 * step + static_cast<int64_t>(i));
        s.shards[i].mutable_grad() = at::randn_like(s.shards[i]);
    }
}

} // namespace

TEST(OptimizerOffload, ManyUnitsBitwiseAndBounded)
{
    for (const char *optimizer : {"{\"type\": \"adamw\", \"lr\": 0.01, \"weight_decay\": 0.1}",
                                  "{\"type\": \"sgd\", \"lr\": 0.1, \"momentum\": 0.9}",
                                  "{\"type\": \"rmsprop\", \"lr\": 0.01, \"centered\": true, \"momentum\": 0.5}"}) {
        SCOPED_TRACE(optimizer);
        Sharded ref = make_sharded(optimizer), got = make_sharded(optimizer);
        const std::string base = "/tmp/accel-offload-unit-" + std::to_string(::getpid());
        got.opt->offload("nvme", std::make_unique<accel::OffloadFiles>(base, "optimizer", 0, "nvme_path"));
        for (int step = 0; step < 5; ++step) {
            set_grads(ref, step, step == 3);
            set_grads(got, step, step == 3);
            ref.opt->step();
            got.opt->step();
            EXPECT_EQ(got.opt->state_bytes(), 0) << "no state in memory after a step";
            for (size_t i = 0; i < ref.shards.size(); ++i) {
                EXPECT_TRUE(at::equal(ref.shards[i], got.shards[i])) << "step " << step << ", shard " << i;
                EXPECT_TRUE(got.shards[i].grad().defined() == ref.shards[i].grad().defined()) << "gradients put back";
            }
        }
        const int64_t total = ref.opt->state_bytes();
        EXPECT_EQ(got.opt->offloaded_bytes(), total);
        // Three of the largest units' state (32 x 32 weights) at most: 3072 of the 5032 elements' state.
        int64_t largest = 0;
        for (const auto &t : ref.shards) largest = std::max<int64_t>(largest, t.numel());
        int64_t elements = 0;
        for (const auto &t : ref.shards) elements += t.numel();
        ASSERT_EQ(elements, 5032);
        const int64_t per_element = total / elements;
        EXPECT_GT(got.opt->peak_state_bytes(), 0);
        EXPECT_LE(got.opt->peak_state_bytes(), 3 * largest * per_element);
        EXPECT_LT(got.opt->peak_state_bytes(), total);
        // The state dict brings every unit's state in, equal to the reference's; then it is out again.
        accel::PyRef a = ref.opt->state_dict(), b = got.opt->state_dict();
        EXPECT_EQ(got.opt->state_bytes(), 0);
        const accel::PyObj *sa = a->get("state"), *sb = b->get("state");
        ASSERT_TRUE(sa != nullptr && sb != nullptr);
        ASSERT_EQ(sa->map.size(), sb->map.size());
        for (size_t k = 0; k < sa->map.size(); ++k)
            for (size_t j = 0; j < sa->map[k].second->map.size(); ++j) {
                const auto &va = *sa->map[k].second->map[j].second, &vb = *sb->map[k].second->map[j].second;
                if (va.kind == accel::PyObj::Kind::Tensor) EXPECT_TRUE(at::equal(va.tensor, vb.tensor));
                else EXPECT_EQ(va.i, vb.i);
            }
        got.opt.reset(); // the files go with it
        EXPECT_EQ(::rmdir(base.c_str()), 0) << "the offload folder should be empty";
    }
}

// Parameter offload's paging around the step (ShardLayout::page, recorded here instead of moving files): shard
// k + 1's read starts before shard k steps and is waited for only when k + 1 steps; shard k's write starts after
// its step, once k - 1's is over; at most three shards are in memory or in flight; every started read and
// write is waited for. With and without the optimizer state in files too; the result is the unpaged step's.
TEST(OptimizerOffload, ParameterShardsPagedAheadOfTheStep)
{
    for (bool state_in_files : {false, true}) {
        SCOPED_TRACE(state_in_files ? "optimizer state in files too" : "parameters only");
        std::vector<std::string> log;
        std::vector<int> held; // per shard: 1 while in memory or being read/written
        int most_held = 0;
        auto page = [&](size_t i, bool in) -> std::function<void()> {
            if (held.size() <= i) held.resize(i + 1, 0);
            log.push_back(std::string(in ? "read " : "write ") + std::to_string(i));
            held[i] = 1;
            int n = 0;
            for (int h : held) n += h;
            most_held = std::max(most_held, n);
            return [&log, &held, i, in] {
                log.push_back(std::string(in ? "have " : "wrote ") + std::to_string(i));
                if (!in) held[i] = 0;
            };
        };
        const char *adamw = "{\"type\": \"adamw\", \"lr\": 0.01, \"weight_decay\": 0.1}";
        Sharded ref = make_sharded(adamw), got = make_sharded(adamw, page);
        const std::string base = "/tmp/accel-offload-paging-" + std::to_string(::getpid());
        if (state_in_files) {
            got.opt->offload("nvme", std::make_unique<accel::OffloadFiles>(base, "optimizer", 0, "nvme_path"));
        }
        set_grads(ref, 0, true); // shard 2 has no gradient: neither stepped nor paged
        set_grads(got, 0, true);
        ref.opt->step();
        got.opt->step();
        for (size_t i = 0; i < ref.shards.size(); ++i) EXPECT_TRUE(at::equal(ref.shards[i], got.shards[i]));
        const std::vector<std::string> expected = {
            "read 0", "have 0", "read 1", "write 0", "have 1", "read 3", "wrote 0", "write 1", "have 3", "read 4",
            "wrote 1", "write 3", "have 4", "read 5", "wrote 3", "write 4", "have 5", "read 6", "wrote 4", "write 5",
            "have 6", "read 7", "wrote 5", "write 6", "have 7", "read 8", "wrote 6", "write 7", "have 8", "read 9",
            "wrote 7", "write 8", "have 9", "read 10", "wrote 8", "write 9", "have 10", "read 11", "wrote 9",
            "write 10", "have 11", "wrote 10", "write 11", "wrote 11"};
        ASSERT_EQ(ref.shards.size(), 12u);
        EXPECT_EQ(log, expected);
        EXPECT_EQ(most_held, 3);
        got.opt.reset();
        if (state_in_files) {
            EXPECT_EQ(::rmdir(base.c_str()), 0);
        }
    }
}
