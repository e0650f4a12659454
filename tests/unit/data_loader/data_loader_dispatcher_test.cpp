// data_loader/data_loader_dispatcher: dispatch_batches (spec/data-and-collectives.md §6). The expected
// tables are worked out by hand from the spec: P inner batches (or one, with split_batches) per step,
// slice [r*b, (r+1)*b) with b = size // P, and a short last step completed with the first P samples of
// the first step (b + 1). Several processes are played one after the other through a fake communicator
// that records rank 0's broadcasts and replays them to the other ranks.
#include "common/error.hpp"
#include "data_loader/data_loader_dispatcher.hpp"
#include "data_loader/data_loader_shard.hpp"
#include "distributed/communicator.hpp"
#include "state/accelerator_state.hpp"
#include "replay_communicator.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <deque>
#include <memory>
#include <vector>

using accel::AcceleratorState;
using accel::Batch;
using accel::DataLoaderShard;
using accel::dispatch_slice;
using accel::dispatch_steps;
using accel::dispatched_length;
using accel::DispatchSpec;
using accel::DispatchStep;
using accel::IndexBatches;
using accel::TensorDataset;
using accel::test::Broadcasts;
using accel::test::ReplayCommunicator;

namespace {

// ---- data --------------------------------------------------------------------------------------------

// features[i] = [i, -i] (float), labels[i] = 10 i: a batch tells which samples it holds. With `garbage`
// every value is -7, for ranks whose own copy of the data must not be read.
std::shared_ptr<const TensorDataset> dataset(int64_t n, bool garbage = false)
{
    auto d = std::make_shared<TensorDataset>();
    at::Tensor idx = at::arange(n, at::kFloat);
    d->features = at::stack({idx, -idx}, 1);
    d->labels = at::arange(n, at::kLong) * 10;
    if (garbage) {
        d->features.fill_(-7);
        d->labels.fill_(-7);
    }
    return d;
}

accel::config::DataLoaderOptions options(int64_t batch_size, bool drop_last = false, bool shuffle = false,
                                         uint64_t seed = 5)
{
    accel::config::DataLoaderOptions o;
    o.batch_size = batch_size;
    o.drop_last = drop_last;
    o.shuffle = shuffle;
    o.seed = seed;
    return o;
}

std::shared_ptr<AcceleratorState> make_state(int32_t world, int32_t rank, bool split,
                                             const std::shared_ptr<Broadcasts> &log, bool dispatch = true)
{
    accel::config::AcceleratorConfig c;
    c.topology.world_size = world;
    c.topology.local_world_size = world;
    c.topology.rank = rank;
    c.topology.local_rank = rank;
    c.dataloader.split_batches = split;
    c.dataloader.dispatch_batches = dispatch;
    auto s = std::make_shared<AcceleratorState>(c);
    if (log) s->comm = std::make_shared<ReplayCommunicator>(rank, world, log);
    return s;
}

std::vector<int64_t> values(const at::Tensor &t)
{
    at::Tensor c = t.to(at::kLong).contiguous();
    return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

// What one rank saw in a pass: its indices per batch, and the gradient state after each batch.
struct Seen {
    IndexBatches batches;
    std::vector<bool> ends;
    std::vector<int64_t> remainders;
};

Seen run_pass(DataLoaderShard &loader, const std::shared_ptr<AcceleratorState> &state)
{
    Seen s;
    while (auto b = loader.next()) {
        std::vector<int64_t> idx = values(b->indices);
        // Inputs and labels travelled with the indices, from rank 0's data.
        EXPECT_EQ(values(b->inputs.select(1, 0)), idx);
        EXPECT_EQ(values(b->labels), values(b->indices * 10));
        s.batches.push_back(idx);
        s.ends.push_back(state->gradient.end_of_dataloader());
        s.remainders.push_back(state->gradient.remainder());
    }
    EXPECT_FALSE(state->gradient.in_dataloader());
    return s;
}

// One pass on every rank (rank 0 first, recording), each rank with its own loader over `n` samples.
std::vector<Seen> run_ranks(int32_t world, int64_t n, accel::config::DataLoaderOptions o, bool split,
                            std::vector<int64_t> *lengths = nullptr)
{
    auto log = std::make_shared<Broadcasts>();
    std::vector<Seen> out;
    for (int32_t r = 0; r < world; ++r) {
        DataLoaderShard loader(dataset(n, r != 0), o);
        auto state = make_state(world, r, split, log);
        loader.prepare(state);
        EXPECT_TRUE(loader.dispatches());
        if (lengths) lengths->push_back(loader.length());
        out.push_back(run_pass(loader, state));
        EXPECT_TRUE(log->to_rank[static_cast<size_t>(r)].empty()) << "rank " << r << " left broadcasts unread";
    }
    return out;
}

std::vector<bool> last_only(size_t n)
{
    std::vector<bool> v(n, false);
    if (n) v.back() = true;
    return v;
}

} // namespace

// ---- the pure rules -----------------------------------------------------------------------------------

TEST(DataLoaderDispatcher, StepsConcatenateRoundsAndPadTheTail)
{
    DispatchSpec s;
    s.num_processes = 2;
    // range(21), batch 3: 7 inner batches; the 4th round holds one batch of 3 -> + [0, 1] (first 2 samples).
    IndexBatches inner = accel::make_batches({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20},
                                             3, false);
    EXPECT_EQ(dispatch_steps(inner, s), (std::vector<DispatchStep>{{{0, 1, 2, 3, 4, 5}, 6},
                                                                   {{6, 7, 8, 9, 10, 11}, 6},
                                                                   {{12, 13, 14, 15, 16, 17}, 6},
                                                                   {{18, 19, 20, 0, 1}, 3}}));
    // drop_last: the short round is not dispatched.
    s.drop_last = true;
    EXPECT_EQ(dispatch_steps(inner, s).size(), 3u);
    EXPECT_EQ(dispatch_steps(inner, s).back(), (DispatchStep{{12, 13, 14, 15, 16, 17}, 6}));
    // range(22): the last round is [18, 19, 20] + [21] = 4 samples, a multiple of 2: no padding.
    s.drop_last = false;
    inner.push_back({21});
    inner[6] = {18, 19, 20};
    EXPECT_EQ(dispatch_steps(inner, s).back(), (DispatchStep{{18, 19, 20, 21}, 4}));
}

TEST(DataLoaderDispatcher, StepsWithSplitBatchesAndThreeProcesses)
{
    DispatchSpec split;
    split.num_processes = 2;
    split.split_batches = true;
    // range(21), batch 4, split: one inner batch per step; [20] + [0, 1].
    IndexBatches inner{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}, {16, 17, 18, 19}, {20}};
    auto steps = dispatch_steps(inner, split);
    ASSERT_EQ(steps.size(), 6u);
    EXPECT_EQ(steps[1], (DispatchStep{{4, 5, 6, 7}, 4}));
    EXPECT_EQ(steps[5], (DispatchStep{{20, 0, 1}, 1}));

    DispatchSpec three;
    three.num_processes = 3;
    // range(20), batch 3: rounds of 3 batches; the last round is [18, 19] -> + [0, 1, 2].
    IndexBatches inner3{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {9, 10, 11}, {12, 13, 14}, {15, 16, 17}, {18, 19}};
    auto steps3 = dispatch_steps(inner3, three);
    ASSERT_EQ(steps3.size(), 3u);
    EXPECT_EQ(steps3[0], (DispatchStep{{0, 1, 2, 3, 4, 5, 6, 7, 8}, 9}));
    EXPECT_EQ(steps3[2], (DispatchStep{{18, 19, 0, 1, 2}, 2}));
    // A first batch smaller than P pads with what it has: [0, 1] + [0, 1].
    EXPECT_EQ(dispatch_steps(IndexBatches{{0, 1}}, three), (std::vector<DispatchStep>{{{0, 1, 0, 1}, 2}}));
    EXPECT_TRUE(dispatch_steps(IndexBatches{}, three).empty());
}

TEST(DataLoaderDispatcher, SliceAndLength)
{
    auto spec = [](int32_t p, int32_t r, bool split = false, bool drop = false) {
        DispatchSpec s;
        s.num_processes = p;
        s.process_index = r;
        s.split_batches = split;
        s.drop_last = drop;
        return s;
    };
    using Range = std::pair<int64_t, int64_t>;
    EXPECT_EQ(dispatch_slice(6, 6, spec(2, 0)), (Range{0, 3}));
    EXPECT_EQ(dispatch_slice(6, 6, spec(2, 1)), (Range{3, 6}));
    EXPECT_EQ(dispatch_slice(3, 5, spec(2, 1)), (Range{2, 4})); // b = 3 // 2 + 1
    EXPECT_EQ(dispatch_slice(2, 5, spec(3, 2)), (Range{2, 3})); // b = 0 + 1
    EXPECT_EQ(dispatch_slice(1, 2, spec(3, 2)), (Range{2, 2})); // clamped like a Python slice
    EXPECT_EQ(dispatch_slice(4, 4, spec(2, 1)), (Range{2, 4}));

    EXPECT_EQ(dispatched_length(7, spec(2, 0, true)), 7);
    EXPECT_EQ(dispatched_length(7, spec(2, 1, false, true)), 3);
    EXPECT_EQ(dispatched_length(7, spec(2, 1)), 4);
    EXPECT_EQ(dispatched_length(7, spec(3, 0)), 3);
    EXPECT_EQ(dispatched_length(6, spec(3, 0, false, true)), 2);
    EXPECT_EQ(dispatched_length(0, spec(2, 0)), 0);
}

// ---- prepared loaders on several (replayed) ranks -----------------------------------------------------

TEST(DataLoaderDispatcher, TwoRanksPaddedTail)
{
    std::vector<int64_t> lengths;
    auto seen = run_ranks(2, 21, options(3), false, &lengths);
    EXPECT_EQ(lengths, (std::vector<int64_t>{4, 4}));
    EXPECT_EQ(seen[0].batches, (IndexBatches{{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19}}));
    EXPECT_EQ(seen[1].batches, (IndexBatches{{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {20, 0}}));
    for (const auto &s : seen) {
        EXPECT_EQ(s.ends, last_only(4));
        // -1 until the last step, which reports the observed size: gather_for_metrics keeps 3 of 4.
        EXPECT_EQ(s.remainders, (std::vector<int64_t>{-1, -1, -1, 3}));
    }
}

TEST(DataLoaderDispatcher, DropLastAndUnpaddedTail)
{
    std::vector<int64_t> lengths;
    auto seen = run_ranks(2, 21, options(3, true), false, &lengths);
    EXPECT_EQ(lengths, (std::vector<int64_t>{3, 3}));
    EXPECT_EQ(seen[1].batches, (IndexBatches{{3, 4, 5}, {9, 10, 11}, {15, 16, 17}}));
    EXPECT_EQ(seen[1].remainders.back(), 6);
    // range(22): the last step is [18, 19, 20, 21], split 2 + 2.
    seen = run_ranks(2, 22, options(3), false);
    EXPECT_EQ(seen[0].batches.back(), (std::vector<int64_t>{18, 19}));
    EXPECT_EQ(seen[1].batches.back(), (std::vector<int64_t>{20, 21}));
    EXPECT_EQ(seen[1].remainders.back(), 4);
}

TEST(DataLoaderDispatcher, PrefetchWorkersOnRankZero)
{
    // num_workers: rank 0 reads its steps on worker threads; the steps, slices and tail are the same.
    auto o = options(3, false, true, 9);
    const auto want = run_ranks(2, 21, o, false);
    for (int64_t workers : {1, 3}) {
        o.num_workers = workers;
        o.prefetch_factor = 1;
        auto seen = run_ranks(2, 21, o, false);
        for (size_t r = 0; r < 2; ++r) {
            EXPECT_EQ(seen[r].batches, want[r].batches) << workers << " workers, rank " << r;
            EXPECT_EQ(seen[r].remainders, want[r].remainders);
        }
    }
}

TEST(DataLoaderDispatcher, SplitBatches)
{
    std::vector<int64_t> lengths;
    auto seen = run_ranks(2, 21, options(4), true, &lengths);
    EXPECT_EQ(lengths, (std::vector<int64_t>{6, 6}));
    EXPECT_EQ(seen[0].batches, (IndexBatches{{0, 1}, {4, 5}, {8, 9}, {12, 13}, {16, 17}, {20}}));
    EXPECT_EQ(seen[1].batches, (IndexBatches{{2, 3}, {6, 7}, {10, 11}, {14, 15}, {18, 19}, {0}}));
    EXPECT_EQ(seen[0].remainders.back(), 1);
    EXPECT_EQ(seen[1].ends, last_only(6));
}

TEST(DataLoaderDispatcher, ThreeRanks)
{
    std::vector<int64_t> lengths;
    auto seen = run_ranks(3, 20, options(3), false, &lengths);
    EXPECT_EQ(lengths, (std::vector<int64_t>{3, 3, 3}));
    EXPECT_EQ(seen[0].batches, (IndexBatches{{0, 1, 2}, {9, 10, 11}, {18}}));
    EXPECT_EQ(seen[1].batches, (IndexBatches{{3, 4, 5}, {12, 13, 14}, {19}}));
    EXPECT_EQ(seen[2].batches, (IndexBatches{{6, 7, 8}, {15, 16, 17}, {0}}));
    EXPECT_EQ(seen[2].remainders.back(), 2);
}

TEST(DataLoaderDispatcher, EmptyPass)
{
    std::vector<int64_t> lengths;
    auto seen = run_ranks(2, 2, options(3, true), false, &lengths); // drop_last: no batch at all
    EXPECT_EQ(lengths, (std::vector<int64_t>{0, 0}));
    EXPECT_TRUE(seen[0].batches.empty());
    EXPECT_TRUE(seen[1].batches.empty());
}

TEST(DataLoaderDispatcher, ShuffledEpochsFollowRankZerosSampler)
{
    const int64_t n = 24;
    const uint64_t seed = 11;
    auto log = std::make_shared<Broadcasts>();
    std::vector<std::vector<int64_t>> per_rank(2);
    for (int32_t r = 0; r < 2; ++r) {
        // Rank 1 even has another seed: prepare takes rank 0's, and only rank 0 shuffles anyway.
        DataLoaderShard loader(dataset(n, r != 0), options(3, false, true, seed + 100 * r));
        auto state = make_state(2, r, false, log);
        loader.prepare(state);
        for (int pass = 0; pass < 2; ++pass)
            for (const auto &b : run_pass(loader, state).batches)
                per_rank[static_cast<size_t>(r)].insert(per_rank[static_cast<size_t>(r)].end(), b.begin(), b.end());
        EXPECT_EQ(loader.epoch(), 2);
    }
    // Pass k: SeedableRandomSampler's randperm seeded with seed + k; each step of 6 goes 3 + 3.
    std::vector<std::vector<int64_t>> want(2);
    for (int64_t k = 0; k < 2; ++k) {
        at::Generator gen = at::detail::createCPUGenerator(seed + static_cast<uint64_t>(k));
        std::vector<int64_t> perm = values(at::randperm(n, gen, at::TensorOptions().dtype(at::kLong)));
        for (int64_t step = 0; step < n / 6; ++step)
            for (int r = 0; r < 2; ++r)
                want[static_cast<size_t>(r)].insert(want[static_cast<size_t>(r)].end(), perm.begin() + step * 6 + r * 3,
                                                    perm.begin() + step * 6 + r * 3 + 3);
    }
    EXPECT_EQ(per_rank, want);
}

TEST(DataLoaderDispatcher, SkipFirstBatchesAndPosition)
{
    auto log = std::make_shared<Broadcasts>();
    for (int32_t r = 0; r < 2; ++r) {
        DataLoaderShard loader(dataset(21, r != 0), options(3));
        auto state = make_state(2, r, false, log);
        loader.prepare(state);
        auto skipped = loader.skip_first_batches(2);
        EXPECT_TRUE(skipped->dispatches());
        EXPECT_EQ(skipped->length(), 2);
        auto first = skipped->next();
        ASSERT_TRUE(first);
        EXPECT_EQ(skipped->position().batches_yielded, 3);
        Seen rest = run_pass(*skipped, state);
        // The padding still comes from the (skipped) first step.
        EXPECT_EQ(values(first->indices), (r == 0 ? std::vector<int64_t>{12, 13, 14} : std::vector<int64_t>{15, 16, 17}));
        EXPECT_EQ(rest.batches, (IndexBatches{r == 0 ? std::vector<int64_t>{18, 19} : std::vector<int64_t>{20, 0}}));
        EXPECT_EQ(rest.remainders, (std::vector<int64_t>{3}));
        // A resumed checkpoint position does the same.
        DataLoaderShard resumed(dataset(21, r != 0), options(3));
        auto resumed_state = make_state(2, r, false, log);
        resumed.prepare(resumed_state);
        resumed.restore_position({loader.position().seed, 0, 3});
        EXPECT_EQ(resumed.length(), 1);
        EXPECT_EQ(run_pass(resumed, resumed_state).batches, rest.batches);
        EXPECT_TRUE(log->to_rank[static_cast<size_t>(r)].empty());
    }
}

TEST(DataLoaderDispatcher, NeedsACommunicatorAndOnlyAppliesToSeveralProcesses)
{
    DataLoaderShard loader(dataset(6), options(2));
    try {
        loader.prepare(make_state(2, 0, false, nullptr));
        ADD_FAILURE() << "expected an error";
    } catch (const accel::Error &e) {
        EXPECT_EQ(e.code(), ACCEL_ERR_FAILED_PRECONDITION);
        EXPECT_STREQ(e.what(), "dataloader: dispatch_batches needs the process communicator of all 2 processes");
    }
    DataLoaderShard single(dataset(6), options(4));
    auto state = make_state(1, 0, false, nullptr);
    single.prepare(state);
    EXPECT_FALSE(single.dispatches());
    EXPECT_EQ(run_pass(single, state).remainders, (std::vector<int64_t>{6 % 4, 6 % 4}));
    DataLoaderShard off(dataset(6), options(2));
    auto log = std::make_shared<Broadcasts>();
    off.prepare(make_state(2, 0, false, log, false));
    EXPECT_FALSE(off.dispatches());
}

// Rank 0 failing to read a step (here: labels it does not have) must not leave the other ranks waiting
// for that step's broadcasts until the collective timeout: they get ABORTED at once.
TEST(DataLoaderDispatcher, RankZeroFailureStopsEveryRank)
{
    auto log = std::make_shared<Broadcasts>();
    auto bad = std::make_shared<TensorDataset>(*dataset(8));
    bad->labels = bad->labels.narrow(0, 0, 5); // samples 5..7 have no label on rank 0
    {
        DataLoaderShard loader(bad, options(2));
        loader.prepare(make_state(2, 0, false, log));
        EXPECT_TRUE(loader.next().has_value()); // samples 0..3
        EXPECT_ANY_THROW(loader.next());        // 4..7
    }
    DataLoaderShard loader(dataset(8), options(2));
    loader.prepare(make_state(2, 1, false, log));
    EXPECT_TRUE(loader.next().has_value());
    try {
        loader.next();
        ADD_FAILURE() << "expected ACCEL_ERR_ABORTED";
    } catch (const accel::Error &e) {
        EXPECT_EQ(e.code(), ACCEL_ERR_ABORTED);
        EXPECT_NE(std::string(e.what()).find("rank 0 failed to read the batch"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(log->to_rank[1].empty());
}
