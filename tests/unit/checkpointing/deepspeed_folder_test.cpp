// checkpointing/deepspeed_folder: DeepSpeed's partition arithmetic (ZeRO-1/2: a group cut evenly after padding
// to 2 x world; ZeRO-3: every parameter cut on its own), files written from it read back whole and by range
// (parameters, optimizer state, buffers, frozen parameters), and a folder with a missing or an extra rank file is DATA_LOSS
// naming it. The pickled DeepSpeed/torch objects read back as plain values. Under tensor parallelism: each tp rank's
// files (mp_rank_XX) read on their own, joined whole by accel_tp_slicing, and a damaged record named.
#include "checkpointing/deepspeed_folder.hpp"
#include "checkpointing/pickle.hpp"
#include "checkpointing/torch_archive.hpp"
#include "common/error.hpp"
#include "common/files.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "fresh_dir.hpp"

#include <unistd.h>

#include <string>

using namespace accel;
using namespace accel::ckpt;

namespace {

std::vector<std::tuple<size_t, int64_t, int64_t, int64_t>> runs_of(const DsPartition &p, int32_t rank, size_t g)
{
    std::vector<std::tuple<size_t, int64_t, int64_t, int64_t>> out;
    for (const auto &r : p.runs(rank, g)) out.emplace_back(r.param, r.param_offset, r.numel, r.flat_offset);
    return out;
}

using Runs = std::vector<std::tuple<size_t, int64_t, int64_t, int64_t>>;

// Parameters "a" (5 elements) and "b" (2 x 2), one group; buffer "m" (3 elements).
std::vector<DsParam> two_params() { return {{"a", {5}, 0}, {"b", {2, 2}, 0}}; }

// Writes the folder a `world`-process run of `stage` leaves, for parameters a = 0..4, b = 10..13 and AdamW-like
// state exp_avg = parameter + 100 (step 7), then returns the folder.
std::string write_folder(const std::string &name, int stage, int32_t world)
{
    const std::string dir = fresh_dir(name);
    const DsPartition part(two_params(), 1, stage, world);
    const at::Tensor whole[2] = {at::arange(5, at::kFloat), at::arange(10, 14, at::kFloat)};
    for (int32_t r = 0; r < world; ++r) {
        DsRankState s;
        s.rank = r;
        at::Tensor flat = at::zeros({part.flat_numel(0)}), avg = at::zeros({part.flat_numel(0)});
        for (const auto &run : part.runs(r, 0)) {
            flat.narrow(0, run.flat_offset, run.numel).copy_(whole[run.param].narrow(0, run.param_offset, run.numel));
            avg.narrow(0, run.flat_offset, run.numel).copy_(whole[run.param].narrow(0, run.param_offset, run.numel) + 100);
        }
        s.fp32 = {flat};
        s.group_state = {py_dict({{py_str("step"), py_tensor(at::full({}, 7.0))}, {py_str("exp_avg"), py_tensor(avg)}})};
        s.group_options = {py_dict({{py_str("lr"), py_float(0.5)}})};
        // A frozen parameter "f" = 20..24: whole in the module (ZeRO-1/2), cut as ZeRO-3 cuts parameters.
        const at::Tensor f = at::arange(20, 25, at::kFloat);
        s.module = {{"a", at::empty({0})}, {"b", at::empty({0})}, {"f", stage == 3 ? at::empty({0}) : f}, {"m", at::full({3}, 9.0)}};
        s.buffer_names = {"m"};
        s.frozen_shapes = {{"f", {5}}};
        const int64_t ps = (5 + world - 1) / world, lo = std::min<int64_t>(5, r * ps), hi = std::min<int64_t>(5, lo + ps);
        at::Tensor fragment = at::zeros({ps});
        if (hi > lo) fragment.narrow(0, 0, hi - lo).copy_(f.narrow(0, lo, hi - lo));
        s.frozen_fragments = {{"f", stage == 3 ? fragment : f}};
        if (stage == 3 || r == 0)
            save_torch_file(join(dir, deepspeed_model_states_name(stage, r)), *deepspeed_model_states(part, s));
        save_torch_file(join(dir, deepspeed_optim_states_name(r, false)), *deepspeed_optim_states(part, s));
    }
    return dir;
}

at::Tensor read(const ShardedSource &src, const std::string &name, int64_t offset, int64_t n)
{
    at::Tensor out = at::empty({n});
    src.read(name, offset, out);
    return out;
}

} // namespace

TEST(DeepSpeedFolder, Zero2CutsTheGroupEvenlyAfterPadding)
{
    // 9 elements over 2 ranks: padded to 12 (a multiple of 2 x 2), partitions of 6; rank 1 ends in 3 of padding.
    const DsPartition p(two_params(), 1, 2, 2);
    EXPECT_EQ(p.flat_numel(0), 6);
    EXPECT_EQ(p.padding(0, 0), 0);
    EXPECT_EQ(p.padding(1, 0), 3);
    EXPECT_EQ(runs_of(p, 0, 0), (Runs{{0, 0, 5, 0}, {1, 0, 1, 5}}));
    EXPECT_EQ(runs_of(p, 1, 0), (Runs{{1, 1, 3, 0}}));
}

TEST(DeepSpeedFolder, Zero3CutsEveryParameter)
{
    // a: 3 + 2 (1 padding), b: 2 + 2; rank r's flat is its part of a, then of b.
    const DsPartition p(two_params(), 1, 3, 2);
    EXPECT_EQ(p.flat_numel(0), 5);
    EXPECT_EQ(p.padding(1, 0), 0);
    EXPECT_EQ(runs_of(p, 0, 0), (Runs{{0, 0, 3, 0}, {1, 0, 2, 3}}));
    EXPECT_EQ(runs_of(p, 1, 0), (Runs{{0, 3, 2, 0}, {1, 2, 2, 3}}));
}

TEST(DeepSpeedFolder, ReadsBackWholeAndByRange)
{
    for (int stage : {1, 2, 3}) {
        for (int32_t world : {1, 2, 3}) {
            SCOPED_TRACE("stage " + std::to_string(stage) + ", world " + std::to_string(world));
            const std::string dir = write_folder("read", stage, world);
            ASSERT_TRUE(is_deepspeed_folder(dir));
            const DsFolder f = read_deepspeed_folder(dir);
            EXPECT_EQ(f.stage, stage);
            EXPECT_EQ(f.world, world);
            EXPECT_EQ(f.model.names(), (std::vector<std::string>{"a", "b", "m", "f"}));
            EXPECT_TRUE(at::equal(read(f.model, "f", 1, 4), at::arange(21, 25, at::kFloat)));
            std::vector<int64_t> shape;
            ASSERT_TRUE(f.model.find("b", shape));
            EXPECT_EQ(shape, (std::vector<int64_t>{2, 2}));
            EXPECT_TRUE(at::equal(read(f.model, "a", 0, 5), at::arange(5, at::kFloat)));
            EXPECT_TRUE(at::equal(read(f.model, "b", 1, 3), at::arange(11, 14, at::kFloat)));
            EXPECT_TRUE(at::equal(read(f.model, "m", 0, 3), at::full({3}, 9.0)));
            EXPECT_EQ(f.optimizer.names(), (std::vector<std::string>{"state.0.exp_avg", "state.1.exp_avg"}));
            EXPECT_TRUE(at::equal(read(f.optimizer, "state.1.exp_avg", 0, 4), at::arange(110, 114, at::kFloat)));
            // The rest: each parameter takes its group's step; the group its hyperparameters and both ids.
            const PyObj &state = *f.optimizer_rest->get("state");
            ASSERT_EQ(state.map.size(), 2u);
            EXPECT_EQ(state.get_int_key(1)->get("step")->tensor.item<double>(), 7.0);
            const PyObj &group = *f.optimizer_rest->get("param_groups")->items.at(0);
            EXPECT_EQ(group.get("lr")->f, 0.5);
            EXPECT_EQ(group.get("params")->items.size(), 2u);
            remove_all(dir);
        }
    }
}

TEST(DeepSpeedFolder, MissingOrExtraRankFileIsDataLoss)
{
    const std::string dir = write_folder("damaged", 2, 2);
    const std::string rank1 = join(dir, deepspeed_optim_states_name(1, false));
    const std::string rank2 = join(dir, deepspeed_optim_states_name(2, false));
    auto expect_named = [&dir](const std::string &named) {
        try {
            read_deepspeed_folder(dir);
            ADD_FAILURE() << "no error";
        } catch (const Error &e) {
            EXPECT_EQ(e.code(), ACCEL_ERR_DATA_LOSS);
            EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
        }
    };
    ASSERT_EQ(std::rename(rank1.c_str(), rank2.c_str()), 0); // rank 1's file missing (and one for rank 2)
    expect_named(rank1);
    ASSERT_EQ(std::rename(rank2.c_str(), rank1.c_str()), 0);
    save_torch_file(rank2, *py_dict()); // one file too many: written by a larger run into the same folder
    expect_named(rank2);
    remove_all(dir);
}

TEST(DeepSpeedFolder, PickledObjectsReadAsPlainValues)
{
    const auto obj = py_list({py_call("torch.Size", {py_tuple({py_int(2), py_int(3)})}),
                              py_call("deepspeed.runtime.zero.config.ZeroStageEnum", {py_int(3)}),
                              py_call("builtins.set", {py_list()}),
                              py_call("deepspeed.runtime.fp16.loss_scaler.LossScaler", {py_float(1.0)})});
    const std::string bytes = pickle_dumps(*obj, [](const at::Tensor &) { return StorageRef{}; });
    EXPECT_NE(bytes.find("ctorch\nSize\n"), std::string::npos);
    const PyRef back = pickle_loads(reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size(), {}, "test");
    ASSERT_EQ(back->items.size(), 4u);
    EXPECT_EQ(back->items[0]->kind, PyObj::Kind::Tuple);
    EXPECT_EQ(back->items[0]->items.at(1)->i, 3);
    EXPECT_EQ(back->items[1]->kind, PyObj::Kind::Int);
    EXPECT_EQ(back->items[1]->i, 3);
    EXPECT_EQ(back->items[2]->kind, PyObj::Kind::List);
    EXPECT_EQ(back->items[3]->kind, PyObj::Kind::Global);
    // Any other global stays refused.
    const std::string evil = "cos\nsystem\n(S'true'\ntR.";
    EXPECT_THROW(pickle_loads(reinterpret_cast<const uint8_t *>(evil.data()), evil.size(), {}, "test"), Error);
}

namespace {

// The folder tp 2 x `world` data-parallel ranks leave: "w" (whole 3 x 2 = 0..5, split along dim 0 and padded to 4
// rows: mp_rank r holds rows 2r, 2r + 1) and "r" (replicated, 7 and 8), with accel's record of the split, each
// entry of `slicing` as given (dim, groups, whole).
std::string write_tp_folder(const std::string &name, int stage, int32_t world, const std::vector<PyRef> &slicing = {})
{
    const std::string dir = fresh_dir(name);
    const at::Tensor w = at::cat({at::arange(6, at::kFloat).view({3, 2}), at::zeros({1, 2})}); // padded to 4 rows
    for (int32_t mp = 0; mp < 2; ++mp) {
        const DsPartition part({{"w", {2, 2}, 0}, {"r", {2}, 0}}, 1, stage, world);
        const at::Tensor whole[2] = {w.narrow(0, 2 * mp, 2).reshape({-1}), at::arange(7, 9, at::kFloat)};
        for (int32_t r = 0; r < world; ++r) {
            DsRankState s;
            s.rank = r;
            s.mp_rank = mp;
            s.mp_world = 2;
            if (slicing.empty()) s.tp_slicing = {{"w", DsSlicing{0, 1, 3}}}; // else the given record, below
            at::Tensor flat = at::zeros({part.flat_numel(0)});
            for (const auto &run : part.runs(r, 0))
                flat.narrow(0, run.flat_offset, run.numel).copy_(whole[run.param].narrow(0, run.param_offset, run.numel));
            s.fp32 = {flat};
            // AdamW-like state over the flat partition: exp_avg = the parameters + 100, step 3.
            s.group_state = {py_dict({{py_str("step"), py_tensor(at::full({}, 3.0))}, {py_str("exp_avg"), py_tensor(flat + 100)}})};
            s.group_options = {py_dict({{py_str("lr"), py_float(0.5)}})};
            s.module = {{"w", at::empty({0})}, {"r", at::empty({0})}};
            PyRef states = deepspeed_model_states(part, s);
            if (!slicing.empty()) py_set(*states, "accel_tp_slicing", py_dict({{py_str("w"), slicing.at(static_cast<size_t>(mp))}}));
            if (stage == 3 || r == 0) save_torch_file(join(dir, deepspeed_model_states_name(stage, r, mp)), *states);
            save_torch_file(join(dir, deepspeed_optim_states_name(r, false, mp)), *deepspeed_optim_states(part, s));
        }
    }
    return dir;
}

template <typename Fn> void expect_failure(Fn &&fn, accel_status_t code, const std::vector<std::string> &named)
{
    try {
        fn();
        ADD_FAILURE() << "no error";
    } catch (const Error &e) {
        EXPECT_EQ(e.code(), code) << e.what();
        for (const auto &n : named) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
    }
}

PyRef slicing_entry(int64_t dim, int64_t groups, int64_t whole)
{
    return py_tuple({py_int(dim), py_int(groups), py_int(whole)});
}

} // namespace

TEST(DeepSpeedFolder, TensorParallelRanksReadAndJoined)
{
    for (int stage : {2, 3}) {
        SCOPED_TRACE("stage " + std::to_string(stage));
        const std::string dir = write_tp_folder("tp", stage, 2);
        EXPECT_EQ(deepspeed_mp_world(dir), 2);
        // DeepSpeed's names: mp_rank_01 for tp rank 1.
        EXPECT_TRUE(exists(join(dir, "zero_pp_rank_1_mp_rank_01_optim_states.pt")));
        EXPECT_TRUE(exists(join(dir, stage == 3 ? "zero_pp_rank_1_mp_rank_01_model_states.pt" : "mp_rank_01_model_states.pt")));
        // Each tp rank reads its own slices.
        const DsFolder f = read_deepspeed_folder(dir, 1);
        EXPECT_EQ(f.mp_rank, 1);
        EXPECT_EQ(f.mp_world, 2);
        ASSERT_EQ(f.slicing.count("w"), 1u);
        EXPECT_EQ(f.slicing.at("w").whole, 3);
        EXPECT_TRUE(at::equal(read(f.model, "w", 0, 4), at::tensor({4.f, 5.f, 0.f, 0.f})));
        // Whole: the slices joined, the padding row dropped; the replicated tensor once.
        const TensorList whole = read_deepspeed_whole(dir).model;
        ASSERT_EQ(whole.size(), 2u);
        EXPECT_EQ(whole[0].first, "w");
        EXPECT_TRUE(at::equal(whole[0].second, at::arange(6, at::kFloat).view({3, 2})));
        EXPECT_TRUE(at::equal(whole[1].second, at::arange(7, 9, at::kFloat)));
        // The optimizer's state in PyTorch's per-parameter form: w's moments joined as w is, r's from mp_rank 00.
        const DsWhole all = read_deepspeed_whole(dir);
        const PyObj &state = *all.optimizer->get("state");
        ASSERT_NE(state.get_int_key(0), nullptr);
        ASSERT_NE(state.get_int_key(0)->get("exp_avg"), nullptr);
        EXPECT_TRUE(at::equal(state.get_int_key(0)->get("exp_avg")->tensor, at::arange(6, at::kFloat).view({3, 2}) + 100));
        EXPECT_TRUE(at::equal(state.get_int_key(1)->get("exp_avg")->tensor, at::arange(107, 109, at::kFloat)));
        EXPECT_EQ(state.get_int_key(1)->get("step")->tensor.item<double>(), 3.0);
        EXPECT_EQ(all.optimizer->get("param_groups")->items.at(0)->get("params")->items.size(), 2u);
        expect_failure([&] { read_deepspeed_folder(dir, 2); }, ACCEL_ERR_OUT_OF_RANGE, {dir, "mp_rank 2"});
        remove_all(dir);
    }
}

TEST(DeepSpeedFolder, DamagedTensorParallelRecordIsDataLoss)
{
    // A model-parallel rank's files missing: mp_world_size says 2, the folder holds 1.
    {
        const std::string dir = write_tp_folder("tp_missing", 2, 2);
        for (int32_t r = 0; r < 2; ++r) std::remove(join(dir, deepspeed_optim_states_name(r, false, 1)).c_str());
        expect_failure([&] { read_deepspeed_folder(dir, 0); }, ACCEL_ERR_DATA_LOSS,
                       {join(dir, "mp_rank_00_model_states.pt"), "mp_world_size"});
        remove_all(dir);
    }
    // accel_tp_slicing malformed, or slices that cannot join into the recorded size: named.
    {
        const std::string dir = write_tp_folder("tp_malformed", 2, 2, {py_tuple({py_int(0), py_int(1)}), slicing_entry(0, 1, 3)});
        expect_failure([&] { (void)read_deepspeed_whole(dir); }, ACCEL_ERR_DATA_LOSS, {"mp_rank_00_model_states.pt", "accel_tp_slicing"});
        remove_all(dir);
    }
    {
        const std::string dir = write_tp_folder("tp_too_long", 3, 2, {slicing_entry(0, 1, 100), slicing_entry(0, 1, 100)});
        expect_failure([&] { (void)read_deepspeed_whole(dir); }, ACCEL_ERR_DATA_LOSS, {"\"w\"", "do not join"});
        remove_all(dir);
    }
    {
        const std::string dir = write_tp_folder("tp_bad_dim", 3, 2, {slicing_entry(5, 1, 3), slicing_entry(5, 1, 3)});
        expect_failure([&] { (void)read_deepspeed_whole(dir); }, ACCEL_ERR_DATA_LOSS, {"\"w\"", "do not join"});
        remove_all(dir);
    }
}
