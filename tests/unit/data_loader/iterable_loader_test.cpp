// data_loader/iterable_loader: iterable datasets prepared on several processes, played one rank after the
// other (replay_communicator.hpp). IterableDatasetShard (spec/data-and-collectives.md §4): the tables are the
// spec's example and hand-worked tails; dispatch_batches (§6): the batches equal those the map-style
// dispatcher gives over the same samples, for every combination below. Resume: the batches after
// load_state_dict equal the uninterrupted run's, on 1 and 2 processes, with and without dataset state.
#include "data_loader/collate.hpp"
#include "data_loader/data_loader_shard.hpp"
#include "data_loader/iterable_loader.hpp"
#include "replay_communicator.hpp"
#include "state/accelerator_state.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

using accel::AcceleratorState;
using accel::DataLoaderShard;
using accel::IndexBatches;
using accel::IterableLoader;
using accel::test::Broadcasts;
using accel::test::ReplayCommunicator;

namespace {

// Samples 0..n-1: inputs [i, -i], labels 10 i. Its state is the next sample.
class Stream : public accel::IterableSource {
public:
    Stream(int64_t n, bool stateful) : n_(n), stateful_(stateful) {}
    void set_epoch(int64_t epoch) override
    {
        epoch_ = epoch;
        next_ = 0;
    }
    std::optional<accel::Sample> next() override
    {
        if (next_ >= n_) return std::nullopt;
        const auto i = static_cast<float>(next_);
        accel::Sample s;
        s.inputs = at::tensor({i, -i});
        s.labels = at::tensor(10 * next_, at::kLong);
        ++next_;
        ++reads;
        return s;
    }
    bool stateful() const override { return stateful_; }
    std::string state() override { return std::to_string(next_); }
    void load_state(const std::string &s) override { next_ = std::stoll(s); }
    int64_t epoch_ = -1;
    int64_t reads = 0;

private:
    int64_t n_, next_ = 0;
    bool stateful_;
};

accel::CollateFn stack()
{
    return [](const std::vector<accel::Sample> &s, const std::vector<int64_t> &ids) {
        return accel::collate_samples(s, ids, accel::config::CollateOptions{});
    };
}

accel::config::DataLoaderOptions options(int64_t batch_size, bool drop_last = false, int64_t workers = 0)
{
    accel::config::DataLoaderOptions o;
    o.batch_size = batch_size;
    o.drop_last = drop_last;
    o.num_workers = workers; // iterable: one thread reading ahead
    o.prefetch_factor = 2;
    return o;
}

// dispatch unset: Accelerate's default (True for iterable datasets, False for map-style ones).
std::shared_ptr<AcceleratorState> make_state(int32_t world, int32_t rank, bool split, std::optional<bool> dispatch,
                                             const std::shared_ptr<Broadcasts> &log)
{
    accel::config::AcceleratorConfig c;
    c.topology.world_size = world;
    c.topology.local_world_size = world;
    c.topology.rank = rank;
    c.topology.local_rank = rank;
    c.dataloader.split_batches = split;
    c.dataloader.dispatch_batches = dispatch;
    auto s = std::make_shared<AcceleratorState>(c);
    s->comm = std::make_shared<ReplayCommunicator>(rank, world, log);
    return s;
}

std::vector<int64_t> values(const at::Tensor &t)
{
    at::Tensor c = t.to(at::kLong).contiguous();
    return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

struct Seen {
    IndexBatches batches;
    std::vector<bool> ends;
};

Seen take(DataLoaderShard &loader, const std::shared_ptr<AcceleratorState> &state, int64_t max = -1)
{
    Seen s;
    while (max < 0 || static_cast<int64_t>(s.batches.size()) < max) {
        auto b = loader.next();
        if (!b) break;
        std::vector<int64_t> idx = values(b->indices);
        EXPECT_EQ(values(b->inputs.select(1, 0)), idx); // the samples travelled with their positions
        EXPECT_EQ(values(b->labels), values(b->indices * 10));
        s.batches.push_back(idx);
        if (state) s.ends.push_back(state->gradient.end_of_dataloader());
    }
    return s;
}

// One pass per rank of an iterable loader over n samples.
std::vector<Seen> iterable_ranks(int32_t world, int64_t n, accel::config::DataLoaderOptions o, bool split, bool dispatch)
{
    auto log = std::make_shared<Broadcasts>();
    std::vector<Seen> out;
    for (int32_t r = 0; r < world; ++r) {
        // Ranks other than 0 read nothing when dispatching: their stream is empty to prove it.
        auto stream = std::make_shared<Stream>(dispatch && r != 0 ? 0 : n, true);
        DataLoaderShard loader(std::make_shared<IterableLoader>(stream, stack(), o), o);
        auto state = make_state(world, r, split, dispatch ? std::nullopt : std::optional<bool>(false), log);
        loader.prepare(state);
        out.push_back(take(loader, state));
        EXPECT_FALSE(state->gradient.in_dataloader());
        EXPECT_TRUE(log->to_rank[static_cast<size_t>(r)].empty()) << "rank " << r << " left broadcasts unread";
    }
    return out;
}

// The map-style dispatcher over a tensor dataset of the same samples.
std::vector<Seen> map_ranks(int32_t world, int64_t n, accel::config::DataLoaderOptions o, bool split)
{
    auto log = std::make_shared<Broadcasts>();
    std::vector<Seen> out;
    auto data = std::make_shared<accel::TensorDataset>();
    at::Tensor idx = at::arange(n, at::kFloat);
    data->features = at::stack({idx, -idx}, 1);
    data->labels = at::arange(n, at::kLong) * 10;
    o.seed = 1;
    for (int32_t r = 0; r < world; ++r) {
        DataLoaderShard loader(data, o);
        auto state = make_state(world, r, split, true, log);
        loader.prepare(state);
        out.push_back(take(loader, state));
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

TEST(IterableLoader, ShardFollowsTheSpecExample)
{
    // Stream 0..7, batch_size 4, P = 2: p0 yields 0,1,2,3 and p1 4,5,6,7; split_batches: p0 0,1,4,5, p1 2,3,6,7.
    auto seen = iterable_ranks(2, 8, options(4), false, false);
    EXPECT_EQ(seen[0].batches, (IndexBatches{{0, 1, 2, 3}}));
    EXPECT_EQ(seen[1].batches, (IndexBatches{{4, 5, 6, 7}}));
    seen = iterable_ranks(2, 8, options(4), true, false);
    EXPECT_EQ(seen[0].batches, (IndexBatches{{0, 1}, {4, 5}}));
    EXPECT_EQ(seen[1].batches, (IndexBatches{{2, 3}, {6, 7}}));
    EXPECT_EQ(seen[1].ends, last_only(2));
}

TEST(IterableLoader, ShardUnevenEnds)
{
    // range(10), batch 2, P 2: chunks of 4; the last [8, 9] is completed with the first chunk's 0, 1.
    auto seen = iterable_ranks(2, 10, options(2), false, false);
    EXPECT_EQ(seen[0].batches, (IndexBatches{{0, 1}, {4, 5}, {8, 9}}));
    EXPECT_EQ(seen[1].batches, (IndexBatches{{2, 3}, {6, 7}, {0, 1}}));
    // drop_last: the short chunk goes.
    seen = iterable_ranks(2, 10, options(2, true), false, false);
    EXPECT_EQ(seen[1].batches, (IndexBatches{{2, 3}, {6, 7}}));
    // No full chunk at all: the buffer repeats itself, [0, 1, 2] -> [0, 1, 2, 0].
    seen = iterable_ranks(2, 3, options(2), false, false);
    EXPECT_EQ(seen[0].batches, (IndexBatches{{0, 1}}));
    EXPECT_EQ(seen[1].batches, (IndexBatches{{2, 0}}));
    // split, batch 4 (2 each): range(6) -> [0..3], [4, 5, 0, 1].
    seen = iterable_ranks(2, 6, options(4), true, false);
    EXPECT_EQ(seen[0].batches, (IndexBatches{{0, 1}, {4, 5}}));
    EXPECT_EQ(seen[1].batches, (IndexBatches{{2, 3}, {0, 1}}));
}

TEST(IterableLoader, DispatchTables)
{
    // range(21), batch 3, P 2 (spec §6): rounds of 2 batches; the last round [18, 19, 20] + [0, 1].
    auto seen = iterable_ranks(2, 21, options(3), false, true);
    EXPECT_EQ(seen[0].batches, (IndexBatches{{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19}}));
    EXPECT_EQ(seen[1].batches, (IndexBatches{{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {20, 0}}));
    EXPECT_EQ(seen[0].ends, last_only(4));
    EXPECT_EQ(seen[1].ends, last_only(4));
}

TEST(IterableLoader, DispatchEqualsTheMapStyleDispatcher)
{
    for (int32_t world : {2, 3})
        for (int64_t n : {0, 1, 2, 7, 12, 21, 22})
            for (int64_t bs : {1, 2, 3, 4})
                for (bool split : {false, true})
                    for (bool drop : {false, true}) {
                        if (split && bs % world != 0) continue;
                        SCOPED_TRACE("P " + std::to_string(world) + " n " + std::to_string(n) + " bs " + std::to_string(bs) +
                                     (split ? " split" : "") + (drop ? " drop_last" : ""));
                        auto got = iterable_ranks(world, n, options(bs, drop, n % 2), split, true); // reading ahead or not
                        auto want = map_ranks(world, n, options(bs, drop), split);
                        for (int32_t r = 0; r < world; ++r) {
                            EXPECT_EQ(got[static_cast<size_t>(r)].batches, want[static_cast<size_t>(r)].batches) << "rank " << r;
                            EXPECT_EQ(got[static_cast<size_t>(r)].ends, want[static_cast<size_t>(r)].ends) << "rank " << r;
                        }
                    }
}

TEST(IterableLoader, NoLengthAndOneProcess)
{
    auto stream = std::make_shared<Stream>(7, false);
    DataLoaderShard loader(std::make_shared<IterableLoader>(stream, stack(), options(3)), options(3));
    EXPECT_THROW(loader.length(), accel::Error);
    auto seen = take(loader, nullptr);
    EXPECT_EQ(seen.batches, (IndexBatches{{0, 1, 2}, {3, 4, 5}, {6}}));
    EXPECT_EQ(stream->epoch_, 0);
    seen = take(loader, nullptr);
    EXPECT_EQ(stream->epoch_, 1);
    EXPECT_EQ(seen.batches.size(), 3u);
}

// Takes `first` batches of pass 1, saves, reads the rest; a new run loads the state: the rest again.
void check_resume(int32_t world, bool dispatch, bool stateful, int64_t first, int64_t workers)
{
    const int64_t n = 23;
    const auto o = options(2, false, workers);
    std::vector<Seen> rest(static_cast<size_t>(world));
    std::vector<accel::PyRef> saved(static_cast<size_t>(world));
    auto log = std::make_shared<Broadcasts>();
    for (int32_t r = 0; r < world; ++r) {
        auto stream = std::make_shared<Stream>(dispatch && r != 0 ? 0 : n, stateful);
        DataLoaderShard loader(std::make_shared<IterableLoader>(stream, stack(), o), o);
        auto state = world > 1 ? make_state(world, r, false, dispatch ? std::nullopt : std::optional<bool>(false), log) : nullptr;
        if (state) loader.prepare(state);
        take(loader, state); // pass 0
        take(loader, state, first);
        saved[static_cast<size_t>(r)] = loader.state_dict();
        rest[static_cast<size_t>(r)] = take(loader, state);
        EXPECT_FALSE(rest[static_cast<size_t>(r)].batches.empty());
    }
    log = std::make_shared<Broadcasts>();
    for (int32_t r = 0; r < world; ++r) {
        auto stream = std::make_shared<Stream>(dispatch && r != 0 ? 0 : n, stateful);
        DataLoaderShard loader(std::make_shared<IterableLoader>(stream, stack(), o), o);
        auto state = world > 1 ? make_state(world, r, false, dispatch ? std::nullopt : std::optional<bool>(false), log) : nullptr;
        if (state) loader.prepare(state);
        // Every process writes dl_state_dict.bin; any one of them is what the next run reads.
        loader.load_state_dict(*saved[static_cast<size_t>(world - 1 - r)], "dl_state_dict.bin")();
        EXPECT_EQ(take(loader, state).batches, rest[static_cast<size_t>(r)].batches) << "rank " << r;
        if (stateful && (!dispatch || r == 0)) {
            // Each batch taken stood for batch_size x P samples of the stream; on P > 1 the pass's first chunk
            // (the tail's padding) is read again, the rest is not.
            EXPECT_EQ(stream->reads, n - first * 2 * world + (world > 1 ? 2 * world : 0))
                << "rank " << r << ": resumed from the state, without re-reading";
        }
        EXPECT_EQ(stream->epoch_, dispatch && r != 0 ? -1 : 1);
    }
}

TEST(IterableLoader, ResumeMidPass)
{
    for (int64_t workers : {0, 1, 3}) // with a reading thread the state saved is still the one after the last batch taken
        for (bool stateful : {true, false}) {
            SCOPED_TRACE(std::string(stateful ? "stateful" : "re-read") + ", num_workers " + std::to_string(workers));
            check_resume(1, false, stateful, 3, workers);
            check_resume(2, false, stateful, 3, workers);
            check_resume(2, true, stateful, 2, workers);
        }
}

TEST(IterableLoader, ResumeOnAnotherProcessCountRestartsThePass)
{
    const auto o = options(2);
    auto stream = std::make_shared<Stream>(9, true);
    DataLoaderShard loader(std::make_shared<IterableLoader>(stream, stack(), o), o);
    take(loader, nullptr, 2);
    accel::PyRef saved = loader.state_dict();
    for (auto &[k, v] : saved->map)
        if (k->s == "_accel_num_processes") v = accel::py_int(2); // saved on 2 processes
    auto again = std::make_shared<Stream>(9, true);
    DataLoaderShard resumed(std::make_shared<IterableLoader>(again, stack(), o), o);
    resumed.load_state_dict(*saved, "dl_state_dict.bin")();
    EXPECT_EQ(take(resumed, nullptr).batches, (IndexBatches{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8}}));
}
