// data_loader/data_loader_shard: SeedableRandomSampler order, batching, sharding, GradientState
// reporting (end_of_dataloader / remainder), skip_first_batches and set_epoch
// (spec/data-and-collectives.md §5, §7; training-semantics.md §1, §10).
#include "common/error.hpp"
#include "data_loader/data_loader_shard.hpp"
#include "state/accelerator_state.hpp"
#include "catch_error.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <vector>

using accel::AcceleratorState;
using accel::Batch;
using accel::DataLoaderShard;
using accel::IndexBatches;
using accel::TensorDataset;
using accel::config::DataLoaderOptions;

namespace {

// features[i] = [i, -i] (float), labels[i] = 10 i (int64): a batch tells which samples it holds.
std::shared_ptr<const TensorDataset> dataset(int64_t n, bool labels = true)
{
    auto d = std::make_shared<TensorDataset>();
    at::Tensor idx = at::arange(n, at::kFloat);
    d->features = at::stack({idx, -idx}, 1);
    if (labels) d->labels = at::arange(n, at::kLong) * 10;
    return d;
}

DataLoaderOptions options(int64_t batch_size, bool shuffle, std::optional<uint64_t> seed, bool drop_last = false)
{
    DataLoaderOptions o;
    o.batch_size = batch_size;
    o.shuffle = shuffle;
    o.seed = seed;
    o.drop_last = drop_last;
    return o;
}

std::vector<int64_t> batch_indices(const Batch &b)
{
    at::Tensor col = b.inputs.select(1, 0).to(at::kLong).contiguous();
    return std::vector<int64_t>(col.data_ptr<int64_t>(), col.data_ptr<int64_t>() + col.numel());
}

// Every batch of the loader's next pass.
IndexBatches run_pass(DataLoaderShard &loader)
{
    IndexBatches out;
    while (auto b = loader.next()) out.push_back(batch_indices(*b));
    return out;
}

std::vector<int64_t> flatten(const IndexBatches &batches)
{
    std::vector<int64_t> out;
    for (const auto &b : batches) out.insert(out.end(), b.begin(), b.end());
    return out;
}

// What SeedableRandomSampler yields for pass k: randperm(n) on a CPU generator seeded with seed + k.
std::vector<int64_t> seeded_randperm(int64_t n, uint64_t seed)
{
    at::Generator gen = at::detail::createCPUGenerator(seed);
    at::Tensor p = at::randperm(n, gen, at::TensorOptions().dtype(at::kLong));
    return std::vector<int64_t>(p.data_ptr<int64_t>(), p.data_ptr<int64_t>() + n);
}

std::shared_ptr<AcceleratorState> make_state(int32_t world_size = 1, int32_t rank = 0, bool split = false,
                                             bool even = true)
{
    accel::config::AcceleratorConfig c;
    c.topology.world_size = world_size;
    c.topology.local_world_size = world_size;
    c.topology.rank = rank;
    c.topology.local_rank = rank;
    c.dataloader.split_batches = split;
    c.dataloader.even_batches = even;
    return std::make_shared<AcceleratorState>(c);
}

} // namespace

TEST(DataLoaderShard, SequentialBatchesWithLabels)
{
    DataLoaderShard loader(dataset(7), options(3, false, std::nullopt));
    EXPECT_EQ(loader.length(), 3);
    auto b = loader.next();
    ASSERT_TRUE(b);
    EXPECT_EQ(b->size(), 3);
    EXPECT_TRUE(at::equal(b->inputs, at::tensor({0.f, -0.f, 1.f, -1.f, 2.f, -2.f}).view({3, 2})));
    EXPECT_TRUE(at::equal(b->labels, at::tensor({0, 10, 20}, at::kLong)));
    EXPECT_EQ(batch_indices(*loader.next()), (std::vector<int64_t>{3, 4, 5}));
    auto last = loader.next();
    ASSERT_TRUE(last);
    EXPECT_EQ(batch_indices(*last), (std::vector<int64_t>{6}));
    EXPECT_TRUE(at::equal(last->labels, at::tensor({60}, at::kLong)));
    EXPECT_FALSE(loader.next());
    EXPECT_EQ(loader.epoch(), 1);
}

TEST(DataLoaderShard, NoLabelsLeavesLabelsUndefined)
{
    DataLoaderShard loader(dataset(4, false), options(2, false, std::nullopt));
    auto b = loader.next();
    ASSERT_TRUE(b);
    EXPECT_FALSE(b->labels.defined());
}

TEST(DataLoaderShard, DropLast)
{
    DataLoaderShard loader(dataset(7), options(3, false, std::nullopt, true));
    EXPECT_EQ(loader.length(), 2);
    EXPECT_EQ(run_pass(loader), (IndexBatches{{0, 1, 2}, {3, 4, 5}}));
}

// Pass k with shuffle uses at::randperm(n, generator seeded seed + k) (SeedableRandomSampler).
TEST(DataLoaderShard, SeedableSamplerPassK)
{
    const int64_t n = 23;
    const uint64_t seed = 1234;
    DataLoaderShard loader(dataset(n), options(4, true, seed));
    for (int64_t k = 0; k < 4; ++k) {
        SCOPED_TRACE("pass " + std::to_string(k));
        std::vector<int64_t> want = seeded_randperm(n, seed + static_cast<uint64_t>(k));
        EXPECT_EQ(flatten(loader.pass_batches(k)), want);
        EXPECT_EQ(loader.epoch(), k);
        IndexBatches got = run_pass(loader);
        EXPECT_EQ(flatten(got), want);
        ASSERT_EQ(got.size(), 6u);
        EXPECT_EQ(got.back().size(), 3u);
    }
    // Different passes really differ (so the epoch is used).
    EXPECT_NE(seeded_randperm(n, seed), seeded_randperm(n, seed + 1));
}

TEST(DataLoaderShard, SeedableSamplerLabelsFollowTheOrder)
{
    DataLoaderShard loader(dataset(10), options(5, true, 7));
    auto b = loader.next();
    ASSERT_TRUE(b);
    std::vector<int64_t> idx = batch_indices(*b);
    for (size_t i = 0; i < idx.size(); ++i) EXPECT_EQ(b->labels[static_cast<int64_t>(i)].item<int64_t>(), idx[i] * 10);
}

// Without a seed the loader draws one int64 from the default generator, as Python's
// int(torch.empty((), dtype=torch.int64).random_().item()).
TEST(DataLoaderShard, SeedFromDefaultGenerator)
{
    const int64_t n = 17;
    at::manual_seed(42);
    int64_t python_seed = at::empty({}, at::kLong).random_().item<int64_t>();
    at::manual_seed(42);
    DataLoaderShard loader(dataset(n), options(4, true, std::nullopt));
    EXPECT_EQ(flatten(loader.pass_batches(0)), seeded_randperm(n, static_cast<uint64_t>(python_seed)));
    EXPECT_EQ(flatten(loader.pass_batches(2)), seeded_randperm(n, static_cast<uint64_t>(python_seed) + 2));
    // The same default seed gives the same order; the draw advanced the default generator.
    at::manual_seed(42);
    DataLoaderShard again(dataset(n), options(4, true, std::nullopt));
    EXPECT_EQ(again.pass_batches(0), loader.pass_batches(0));
    DataLoaderShard next_draw(dataset(n), options(4, true, std::nullopt));
    EXPECT_NE(next_draw.pass_batches(0), loader.pass_batches(0));
}

TEST(DataLoaderShard, SetEpoch)
{
    const int64_t n = 12;
    DataLoaderShard loader(dataset(n), options(5, true, 99));
    loader.set_epoch(5);
    EXPECT_EQ(loader.epoch(), 5);
    EXPECT_EQ(flatten(run_pass(loader)), seeded_randperm(n, 99 + 5));
    EXPECT_EQ(loader.epoch(), 6);
    EXPECT_EQ(flatten(run_pass(loader)), seeded_randperm(n, 99 + 6));
    accel::Error e = catch_error([&] { loader.set_epoch(-1); });
    EXPECT_EQ(e.code(), ACCEL_ERR_OUT_OF_RANGE);
    EXPECT_STREQ(e.what(), "epoch: expected >= 0, got -1");
}

TEST(DataLoaderShard, SetEpochMidPassRestartsAndLeavesGradientState)
{
    auto state = make_state();
    DataLoaderShard loader(dataset(9), options(3, true, 5));
    loader.prepare(state);
    ASSERT_TRUE(loader.next());
    EXPECT_TRUE(state->gradient.in_dataloader());
    loader.set_epoch(3);
    EXPECT_FALSE(state->gradient.in_dataloader());
    EXPECT_EQ(flatten(run_pass(loader)), seeded_randperm(9, 5 + 3));
}

// end_of_dataloader is true exactly while the last batch is out; remainder = n % (batch_size * P).
TEST(DataLoaderShard, GradientStateEndOfDataloaderAndRemainder)
{
    auto state = make_state();
    DataLoaderShard loader(dataset(10), options(4, false, std::nullopt));
    loader.prepare(state);
    EXPECT_EQ(loader.prepared_by(), state);
    EXPECT_FALSE(state->gradient.in_dataloader());
    EXPECT_EQ(state->gradient.remainder(), -1);
    for (int pass = 0; pass < 2; ++pass) {
        SCOPED_TRACE("pass " + std::to_string(pass));
        std::vector<bool> ends;
        while (auto b = loader.next()) {
            EXPECT_TRUE(state->gradient.in_dataloader());
            EXPECT_EQ(state->gradient.remainder(), 2);
            ends.push_back(state->gradient.end_of_dataloader());
        }
        EXPECT_EQ(ends, (std::vector<bool>{false, false, true}));
        EXPECT_FALSE(state->gradient.in_dataloader());
        EXPECT_FALSE(state->gradient.end_of_dataloader());
        EXPECT_EQ(state->gradient.remainder(), -1);
    }
}

TEST(DataLoaderShard, RemainderZeroAndDropLast)
{
    auto state = make_state();
    DataLoaderShard exact(dataset(8), options(4, false, std::nullopt));
    exact.prepare(state);
    ASSERT_TRUE(exact.next());
    EXPECT_EQ(state->gradient.remainder(), 0);
    exact.set_epoch(0); // ends the pass

    DataLoaderShard dropping(dataset(10), options(4, false, std::nullopt, true));
    dropping.prepare(state);
    ASSERT_TRUE(dropping.next());
    EXPECT_EQ(state->gradient.remainder(), -1); // Accelerate leaves it unknown with drop_last
    EXPECT_FALSE(state->gradient.end_of_dataloader());
    ASSERT_TRUE(dropping.next());
    EXPECT_TRUE(state->gradient.end_of_dataloader());
    EXPECT_FALSE(dropping.next());
}

TEST(DataLoaderShard, UnpreparedLoaderDoesNotTouchAState)
{
    auto state = make_state();
    DataLoaderShard loader(dataset(4), options(2, false, std::nullopt));
    ASSERT_TRUE(loader.next());
    EXPECT_FALSE(state->gradient.in_dataloader());
    EXPECT_EQ(loader.prepared_by(), nullptr);
}

TEST(DataLoaderShard, NestedLoadersStack)
{
    auto state = make_state();
    DataLoaderShard outer(dataset(6), options(3, false, std::nullopt));
    DataLoaderShard inner(dataset(5), options(2, false, std::nullopt));
    outer.prepare(state);
    inner.prepare(state);
    ASSERT_TRUE(outer.next());
    EXPECT_EQ(state->gradient.remainder(), 0);
    ASSERT_TRUE(inner.next());
    EXPECT_EQ(state->gradient.remainder(), 1); // the most recent loader is the active one
    run_pass(inner);
    EXPECT_EQ(state->gradient.remainder(), 0); // back to the outer loader
    EXPECT_FALSE(state->gradient.end_of_dataloader());
    ASSERT_TRUE(outer.next());
    EXPECT_TRUE(state->gradient.end_of_dataloader());
}

TEST(DataLoaderShard, DestroyedMidPassLeavesGradientState)
{
    auto state = make_state();
    {
        DataLoaderShard loader(dataset(6), options(2, false, std::nullopt));
        loader.prepare(state);
        ASSERT_TRUE(loader.next());
        EXPECT_TRUE(state->gradient.in_dataloader());
    }
    EXPECT_FALSE(state->gradient.in_dataloader());
}

TEST(DataLoaderShard, EmptyDatasetYieldsNothing)
{
    auto state = make_state();
    DataLoaderShard loader(dataset(0), options(2, true, 3));
    loader.prepare(state);
    EXPECT_EQ(loader.length(), 0);
    EXPECT_FALSE(loader.next());
    EXPECT_FALSE(state->gradient.in_dataloader());
}

TEST(DataLoaderShard, PrepareMidPassFails)
{
    DataLoaderShard loader(dataset(6), options(2, false, std::nullopt));
    ASSERT_TRUE(loader.next());
    accel::Error e = catch_error([&] { loader.prepare(make_state()); });
    EXPECT_EQ(e.code(), ACCEL_ERR_FAILED_PRECONDITION);
    EXPECT_STREQ(e.what(), "dataloader: cannot be prepared in the middle of a pass");
}

// ---- sharding through a (hand-built) two-process state --------------------------------------------

TEST(DataLoaderShard, ShardsAcrossProcesses)
{
    // §3.3: range(22), batch_size 3, even_batches: p1 ends with [21, 0, 1].
    for (int32_t r = 0; r < 2; ++r) {
        DataLoaderShard loader(dataset(22), options(3, false, std::nullopt));
        auto state = make_state(2, r);
        loader.prepare(state);
        EXPECT_EQ(loader.length(), 4);
        IndexBatches got;
        std::vector<bool> ends;
        while (auto b = loader.next()) {
            got.push_back(batch_indices(*b));
            ends.push_back(state->gradient.end_of_dataloader());
            EXPECT_EQ(state->gradient.remainder(), 22 % 6);
        }
        EXPECT_EQ(ends, (std::vector<bool>{false, false, false, true}));
        const std::vector<int64_t> last = r == 0 ? std::vector<int64_t>{18, 19, 20} : std::vector<int64_t>{21, 0, 1};
        EXPECT_EQ(got.back(), last);
    }
}

TEST(DataLoaderShard, ShuffledShardsPartitionOnePermutation)
{
    const int64_t n = 24;
    std::vector<int64_t> both;
    for (int32_t r = 0; r < 2; ++r) {
        DataLoaderShard loader(dataset(n), options(3, true, 11));
        loader.prepare(make_state(2, r));
        for (const auto &b : run_pass(loader)) both.insert(both.end(), b.begin(), b.end());
    }
    std::vector<int64_t> perm = seeded_randperm(n, 11);
    // Process 0 gets global batches 0, 2, 4, ...; process 1 gets 1, 3, 5, ...
    std::vector<int64_t> want;
    for (int r = 0; r < 2; ++r)
        for (int64_t k = r; k < n / 3; k += 2) want.insert(want.end(), perm.begin() + k * 3, perm.begin() + k * 3 + 3);
    EXPECT_EQ(both, want);
}

TEST(DataLoaderShard, SplitBatchesRemainderAndCheck)
{
    DataLoaderShard loader(dataset(10), options(4, false, std::nullopt));
    auto state = make_state(2, 1, true);
    loader.prepare(state);
    EXPECT_EQ(loader.length(), 3);
    IndexBatches got = run_pass(loader);
    EXPECT_EQ(got, (IndexBatches{{2, 3}, {6, 7}, {0, 1}}));
    ASSERT_TRUE(loader.next());
    EXPECT_EQ(state->gradient.remainder(), 10 % 4); // split: total batch size = batch_size

    for (int64_t bs : {3, 1}) {
        DataLoaderShard bad(dataset(10), options(bs, false, std::nullopt));
        accel::Error e = catch_error([&] { bad.prepare(make_state(2, 0, true)); });
        EXPECT_EQ(e.code(), ACCEL_ERR_INVALID_ARGUMENT);
        EXPECT_EQ(std::string(e.what()), "dataloader: batch_size " + std::to_string(bs) +
                                             " is not a multiple of the number of processes (2) required by "
                                             "split_batches");
    }
}

// ---- skip_first_batches -----------------------------------------------------------------------------

TEST(DataLoaderShard, SkipFirstBatchesSkipsTheCurrentPassOnly)
{
    const int64_t n = 20;
    DataLoaderShard loader(dataset(n), options(3, true, 8));
    loader.set_epoch(2);
    IndexBatches full = loader.pass_batches(2);
    ASSERT_EQ(full.size(), 7u);
    auto skipped = loader.skip_first_batches(3);
    EXPECT_EQ(skipped->epoch(), 2);
    EXPECT_EQ(skipped->length(), 4);
    EXPECT_EQ(run_pass(*skipped), IndexBatches(full.begin() + 3, full.end()));
    // Later passes are whole again.
    EXPECT_EQ(skipped->epoch(), 3);
    EXPECT_EQ(skipped->length(), 7);
    EXPECT_EQ(run_pass(*skipped), loader.pass_batches(3));
}

TEST(DataLoaderShard, SkipFirstBatchesKeepsTheDrawnSeed)
{
    at::manual_seed(3);
    DataLoaderShard loader(dataset(9), options(2, true, std::nullopt));
    IndexBatches full = loader.pass_batches(0);
    auto skipped = loader.skip_first_batches(1);
    EXPECT_EQ(run_pass(*skipped), IndexBatches(full.begin() + 1, full.end()));
}

TEST(DataLoaderShard, SkipFirstBatchesReportsEndAndKeepsPreparation)
{
    auto state = make_state();
    DataLoaderShard loader(dataset(10), options(4, false, std::nullopt));
    loader.prepare(state);
    auto skipped = loader.skip_first_batches(1);
    EXPECT_EQ(skipped->prepared_by(), state);
    std::vector<bool> ends;
    while (auto b = skipped->next()) ends.push_back(state->gradient.end_of_dataloader());
    EXPECT_EQ(ends, (std::vector<bool>{false, true}));
}

TEST(DataLoaderShard, SkipFirstBatchesBeyondTheEnd)
{
    DataLoaderShard loader(dataset(5), options(2, false, std::nullopt));
    auto skipped = loader.skip_first_batches(10);
    EXPECT_EQ(skipped->length(), 0);
    EXPECT_FALSE(skipped->next());
    auto none = loader.skip_first_batches(0);
    EXPECT_EQ(run_pass(*none), (IndexBatches{{0, 1}, {2, 3}, {4}}));
    accel::Error e = catch_error([&] { loader.skip_first_batches(-1); });
    EXPECT_EQ(e.code(), ACCEL_ERR_OUT_OF_RANGE);
    EXPECT_STREQ(e.what(), "num_batches: expected >= 0, got -1");
}
