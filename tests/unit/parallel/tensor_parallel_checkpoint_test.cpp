// Checkpoints of tensor parallelism inside the sharding engine (whole_state.hpp: the optimizer state joined over tp
// for save_state, whole tensors cut to each rank's slices for load_state) and of tp dropout's generators
// (rng_checkpoint.hpp), on 2 and 4 ranks played by threads, a gpt with a vocabulary of 37 (padded under tp).
#include "catch_error.hpp"
#include "config/optimizer_config.hpp"
#include "distributed/communicator.hpp"
#include "distributed/thread_communicator.hpp"
#include "model/gpt_model.hpp"
#include "model/model.hpp"
#include "optimizer/accelerated_optimizer.hpp"
#include "ops/loss.hpp"
#include "parallel/tensor_parallel/rng_checkpoint.hpp"
#include "parallel/tensor_parallel/rng_tracker.hpp"
#include "parallel/tensor_parallel/slicing.hpp"
#include "parallel/tensor_parallel/whole_state.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace dist = accel::distributed;
namespace tp = accel::parallel::tp;

namespace {

const char *kGpt = R"({"type": "gpt", "vocab_size": 37, "n_positions": 8, "n_embd": 16, "n_layer": 1, "n_head": 4,
    "attn_pdrop": 0.5})";

std::shared_ptr<accel::Model> gpt(uint64_t seed)
{
    at::manual_seed(seed);
    auto m = accel::make_model_from_json(kGpt);
    m->train(false);
    return m;
}

std::vector<std::string> names_in_id_order(const accel::AcceleratedOptimizer &o)
{
    std::vector<std::string> out;
    for (const auto &g : o.param_names_by_group()) out.insert(out.end(), g.begin(), g.end());
    return out;
}

const accel::PyObj &entry(const accel::PyObj &sd, size_t id) { return *sd.get("state")->get_int_key(static_cast<int64_t>(id)); }

// After an AdamW step on the same batch, the state dict joined over tp holds one process's moments (the padding
// rows dropped) and cut again gives each rank its slices bit for bit; replicated parameters' entries are left as
// they are. Whole weights (one process's state dict) are cut into the slices the plan gave each rank.
void check_optimizer_state(int32_t world)
{
    const auto adamw = accel::config::parse_optimizer_config(R"({"type": "adamw", "lr": 0.01})");
    at::manual_seed(52);
    const at::Tensor ids = at::randint(0, 37, {2, 8}, at::kLong), labels = at::randint(0, 37, {2, 8}, at::kLong);
    const accel::Loss causal(accel::LossKind::CausalLm);
    auto ref = gpt(51);
    accel::AcceleratedOptimizer ref_opt(ref, adamw);
    accel::compute_loss(causal, ref->forward(ids), labels).backward();
    ref_opt.step();
    const accel::PyRef ref_sd = ref_opt.state_dict();
    const auto whole_weights = gpt(51)->state_dict(false); // untrained: what each rank's model was cut from
    std::vector<std::shared_ptr<accel::Model>> models;
    for (int32_t r = 0; r < world; ++r) models.push_back(gpt(51));
    dist::run_on_threads(world, [&](const std::shared_ptr<dist::Communicator> &comm) {
        const int32_t r = comm->rank();
        auto &m = dynamic_cast<accel::GptModel &>(*models[static_cast<size_t>(r)]);
        m.apply_tensor_parallel(comm);
        const std::string at_rank = " (rank " + std::to_string(r) + " of " + std::to_string(world) + ")";
        for (const auto &[name, t] : tp::sliced_weights(m, whole_weights)) {
            const at::Tensor &mine = *m.find_tensor(name);
            ASSERT_EQ(t.sizes(), mine.sizes()) << name << at_rank;
            EXPECT_TRUE(at::equal(t, mine)) << name << at_rank << ": the slice the plan gave this rank";
        }
        accel::AcceleratedOptimizer opt(models[static_cast<size_t>(r)], adamw);
        accel::compute_loss(causal, m.forward(ids), labels).backward();
        opt.step();
        const std::vector<std::string> names = names_in_id_order(opt);
        const accel::PyRef sd = opt.state_dict();
        const accel::PyRef joined = tp::joined_optimizer_state(m, *sd, names);
        const accel::PyRef sliced = tp::sliced_optimizer_state(m, *joined, names);
        const auto &plan = m.tensor_parallel_slicing();
        for (size_t id = 0; id < names.size(); ++id) {
            const auto it = plan.find(names[id]);
            for (const auto &[key, v] : entry(*sd, id).map) {
                if (v->kind != accel::PyObj::Kind::Tensor || v->tensor.dim() == 0) continue;
                const std::string what = names[id] + "." + key->s + at_rank;
                const at::Tensor &j = entry(*joined, id).get(key->s)->tensor, &s = entry(*sliced, id).get(key->s)->tensor;
                const at::Tensor &want = entry(*ref_sd, id).get(key->s)->tensor;
                ASSERT_EQ(j.sizes(), want.sizes()) << what;
                EXPECT_LE((j - want).abs().max().item<double>(), 1e-6) << what;
                EXPECT_TRUE(at::equal(s, v->tensor)) << what << ": joined and cut again";
                if (it == plan.end()) {
                    EXPECT_TRUE(j.is_same(v->tensor)) << what << ": replicated, left as it is";
                }
            }
        }
        // Moments of another shape than the parameter (factored) are refused by name, not joined wrongly.
        accel::PyRef odd = std::make_shared<accel::PyObj>(*sd);
        for (auto &kv : odd->map)
            if (kv.first->s == "state")
                for (auto &e : (kv.second = std::make_shared<accel::PyObj>(*kv.second))->map)
                    if (plan.count(names[static_cast<size_t>(e.first->i)])) {
                        e.second = accel::py_dict();
                        accel::py_set(*e.second, "exp_avg", accel::py_tensor(at::zeros({3})));
                    }
        const accel::Error e = catch_error([&] { tp::joined_optimizer_state(m, *odd, names); });
        EXPECT_EQ(e.code(), ACCEL_ERR_UNIMPLEMENTED) << e.what();
        EXPECT_NE(std::string(e.what()).find("factored"), std::string::npos) << e.what();
    });
}

TEST(TensorParallelCheckpoint, EngineOptimizerStateJoinedAndCut)
{
    check_optimizer_state(2);
    check_optimizer_state(4);
}

// save_state's random states carry each rank's tp dropout generator with its tp rank and size; loading them on the
// same rank of the same mesh draws the masks the saved run drew next; another rank's (or another tp size's) states
// leave the generator as it is; damaged ones are DATA_LOSS, and the keys never reach the default generators' loader.
TEST(TensorParallelDropout, GeneratorStateInCheckpoints)
{
    const int32_t world = 2;
    std::vector<std::shared_ptr<accel::Model>> models;
    for (int32_t r = 0; r < world; ++r) models.push_back(gpt(61));
    dist::run_on_threads(world, [&](const std::shared_ptr<dist::Communicator> &comm) {
        const int32_t r = comm->rank();
        auto model = models[static_cast<size_t>(r)];
        dynamic_cast<accel::GptModel &>(*model).apply_tensor_parallel(comm);
        const std::vector<std::shared_ptr<accel::Model>> prepared{model};
        auto g = dynamic_cast<accel::GptModel &>(*model).tensor_parallel_dropout();
        ASSERT_TRUE(g != nullptr);
        const at::Tensor x = at::ones({64});
        g->dropout(x, 0.5); // the run so far
        auto saved = accel::py_dict();
        tp::add_tracker_states(*saved, prepared);
        const at::Tensor next = g->dropout(x, 0.5); // what the uninterrupted run draws next
        g->dropout(x, 0.5);
        accel::PyObj file = *saved;
        tp::take_tracker_states(file, prepared, "random_states")();
        EXPECT_TRUE(file.map.empty()) << "the tracker's keys were left for the default generators' loader";
        EXPECT_TRUE(at::equal(g->dropout(x, 0.5), next)) << "rank " << r << ": restored masks";
        // The other rank's file: this rank keeps its own generator.
        accel::PyObj other = *saved;
        for (auto &kv : other.map)
            if (kv.first->s == "rng_tracker_tp") kv.second = accel::py_list({accel::py_int(1 - r), accel::py_int(world)});
        const at::Tensor state = g->state();
        tp::take_tracker_states(other, prepared, "random_states")();
        EXPECT_TRUE(at::equal(g->state(), state)) << "rank " << r << ": another rank's generator state was loaded";
        accel::PyObj damaged = *saved;
        for (auto &kv : damaged.map)
            if (kv.first->s == "rng_tracker_states") kv.second->map.front().second = accel::py_tensor(at::zeros({3}));
        const accel::Error e = catch_error([&] { tp::take_tracker_states(damaged, prepared, "random_states_0.pkl"); });
        EXPECT_EQ(e.code(), ACCEL_ERR_DATA_LOSS) << e.what();
        EXPECT_NE(std::string(e.what()).find("random_states_0.pkl"), std::string::npos) << e.what();
    });
}

} // namespace
