// data_loader/batch_sampler_shard: Accelerate's BatchSamplerShard, checked against every row of the
// test-vector tables of spec/data-and-collectives.md §3.3 and against its length formula.
//
// The "dynamic batch sizes" rows of §3.3 (an inner sampler that is a plain list of batches with no
// batch_size) are not reproduced: our inner batches always come from make_batches(), so they always
// have a batch_size.
#include "common/error.hpp"
#include "data_loader/batch_sampler_shard.hpp"

#include <gtest/gtest.h>

#include <numeric>
#include <set>
#include <string>

using accel::IndexBatches;
using accel::make_batches;
using accel::shard_batches;
using accel::ShardSpec;
using accel::sharded_length;

namespace {

std::vector<int64_t> range(int64_t n)
{
    std::vector<int64_t> v(static_cast<size_t>(n));
    std::iota(v.begin(), v.end(), 0);
    return v;
}

ShardSpec spec(int32_t P, int32_t r, bool split, bool even)
{
    ShardSpec s;
    s.num_processes = P;
    s.process_index = r;
    s.split_batches = split;
    s.even_batches = even;
    return s;
}

// The batches of process r for range(n) cut into batches of bs (the inner BatchSampler), sharded over P.
IndexBatches shard(int64_t n, int64_t bs, bool drop_last, int32_t P, int32_t r, bool split, bool even)
{
    return shard_batches(make_batches(range(n), bs, drop_last), bs, drop_last, spec(P, r, split, even));
}

// The first k round-robin batches of process p with batch size 3 and P = 2: [6j+3p, 6j+3p+1, 6j+3p+2].
IndexBatches no_split_prefix(int p, int k)
{
    IndexBatches out;
    for (int j = 0; j < k; ++j) out.push_back({6 * j + 3 * p, 6 * j + 3 * p + 1, 6 * j + 3 * p + 2});
    return out;
}

// The first k split pieces of process p with batch size 4 and P = 2: [4j+2p, 4j+2p+1].
IndexBatches split_prefix(int p, int k)
{
    IndexBatches out;
    for (int j = 0; j < k; ++j) out.push_back({4 * j + 2 * p, 4 * j + 2 * p + 1});
    return out;
}

IndexBatches cat(IndexBatches a, const IndexBatches &b)
{
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

struct Row {
    int64_t n;
    bool drop_last;
    bool even;
    IndexBatches p0, p1;
};

std::string describe(const Row &row, bool split)
{
    return std::string(split ? "split bs 4" : "no split bs 3") + ", range(" + std::to_string(row.n) +
           "), drop_last=" + (row.drop_last ? "T" : "F") + ", even_batches=" + (row.even ? "T" : "F");
}

void check_rows(const std::vector<Row> &rows, int64_t bs, bool split)
{
    for (const Row &row : rows) {
        SCOPED_TRACE(describe(row, split));
        IndexBatches got0 = shard(row.n, bs, row.drop_last, 2, 0, split, row.even);
        IndexBatches got1 = shard(row.n, bs, row.drop_last, 2, 1, split, row.even);
        EXPECT_EQ(got0, row.p0);
        EXPECT_EQ(got1, row.p1);
        EXPECT_EQ(sharded_length(row.n, bs, row.drop_last, spec(2, 0, split, row.even)),
                  static_cast<int64_t>(row.p0.size()));
        EXPECT_EQ(sharded_length(row.n, bs, row.drop_last, spec(2, 1, split, row.even)),
                  static_cast<int64_t>(row.p1.size()));
    }
}

} // namespace

TEST(MakeBatches, CutsOrderKeepingOrDroppingTheTail)
{
    EXPECT_EQ(make_batches({5, 3, 1, 0, 2}, 2, false), (IndexBatches{{5, 3}, {1, 0}, {2}}));
    EXPECT_EQ(make_batches({5, 3, 1, 0, 2}, 2, true), (IndexBatches{{5, 3}, {1, 0}}));
    EXPECT_EQ(make_batches(range(4), 2, true), (IndexBatches{{0, 1}, {2, 3}}));
    EXPECT_EQ(make_batches(range(2), 3, false), (IndexBatches{{0, 1}}));
    EXPECT_TRUE(make_batches(range(2), 3, true).empty());
    EXPECT_TRUE(make_batches({}, 3, false).empty());
}

// §3.3, "No split, batch_size 3" — every row.
TEST(BatchSamplerShard, SpecTableNoSplitBatchSize3)
{
    const std::vector<Row> rows = {
        // range(24), drop_last F or T, even T
        {24, false, true, no_split_prefix(0, 4), no_split_prefix(1, 4)},
        {24, true, true, no_split_prefix(0, 4), no_split_prefix(1, 4)},
        // range(21)
        {21, false, true, no_split_prefix(0, 4), cat(no_split_prefix(1, 3), {{0, 1, 2}})},
        {21, true, true, no_split_prefix(0, 3), no_split_prefix(1, 3)},
        // range(22)
        {22, false, true, no_split_prefix(0, 4), cat(no_split_prefix(1, 3), {{21, 0, 1}})},
        // range(20)
        {20, false, true, cat(no_split_prefix(0, 3), {{18, 19, 0}}), cat(no_split_prefix(1, 3), {{1, 2, 3}})},
        {20, true, true, no_split_prefix(0, 3), no_split_prefix(1, 3)},
        // range(2)
        {2, false, true, {{0, 1, 0}}, {{1, 0, 1}}},
        {2, true, true, {}, {}},
        // even_batches = False
        {21, false, false, no_split_prefix(0, 4), no_split_prefix(1, 3)},
        {22, false, false, no_split_prefix(0, 4), cat(no_split_prefix(1, 3), {{21}})},
        {20, false, false, cat(no_split_prefix(0, 3), {{18, 19}}), no_split_prefix(1, 3)},
        {2, false, false, {{0, 1}}, {}},
    };
    check_rows(rows, 3, false);
}

// §3.3, "Split, batch_size 4 (piece 2)" — every row.
TEST(BatchSamplerShard, SpecTableSplitBatchSize4)
{
    const std::vector<Row> rows = {
        // range(24), drop_last F or T, even T
        {24, false, true, split_prefix(0, 6), split_prefix(1, 6)},
        {24, true, true, split_prefix(0, 6), split_prefix(1, 6)},
        // range(22)
        {22, false, true, split_prefix(0, 6), cat(split_prefix(1, 5), {{0, 1}})},
        {22, true, true, split_prefix(0, 5), split_prefix(1, 5)},
        // range(21)
        {21, false, true, cat(split_prefix(0, 5), {{20, 0}}), cat(split_prefix(1, 5), {{1, 2}})},
        // range(2)
        {2, false, true, {{0, 1}}, {{0, 1}}},
        // even_batches = False
        {22, false, false, split_prefix(0, 6), split_prefix(1, 5)},
        {21, false, false, cat(split_prefix(0, 5), {{20}}), split_prefix(1, 5)},
        {2, false, false, {{0, 1}}, {}},
    };
    check_rows(rows, 4, true);
}

// The even_batches = False variants of the range(24) rows give the same batches (no tail to fill).
TEST(BatchSamplerShard, ExactMultipleIgnoresEvenBatches)
{
    for (bool drop_last : {false, true}) {
        EXPECT_EQ(shard(24, 3, drop_last, 2, 0, false, false), no_split_prefix(0, 4));
        EXPECT_EQ(shard(24, 3, drop_last, 2, 1, false, false), no_split_prefix(1, 4));
        EXPECT_EQ(shard(24, 4, drop_last, 2, 0, true, false), split_prefix(0, 6));
        EXPECT_EQ(shard(24, 4, drop_last, 2, 1, true, false), split_prefix(1, 6));
    }
}

TEST(BatchSamplerShard, SingleProcessIsIdentity)
{
    for (bool split : {false, true})
        for (bool even : {false, true}) {
            IndexBatches inner = make_batches(range(10), 3, false);
            EXPECT_EQ(shard_batches(inner, 3, false, spec(1, 0, split, even)), inner);
            EXPECT_EQ(sharded_length(10, 3, false, spec(1, 0, split, even)), 4);
            EXPECT_EQ(sharded_length(10, 3, true, spec(1, 0, split, even)), 3);
        }
}

TEST(BatchSamplerShard, ThreeProcessesFillFromTheStart)
{
    // 7 samples, batch size 2, P = 3: inner [0,1] [2,3] [4,5] [6]; the last round is [6,0] [1,2] [3,4].
    EXPECT_EQ(shard(7, 2, false, 3, 0, false, true), (IndexBatches{{0, 1}, {6, 0}}));
    EXPECT_EQ(shard(7, 2, false, 3, 1, false, true), (IndexBatches{{2, 3}, {1, 2}}));
    EXPECT_EQ(shard(7, 2, false, 3, 2, false, true), (IndexBatches{{4, 5}, {3, 4}}));
    EXPECT_EQ(shard(7, 2, false, 3, 0, false, false), (IndexBatches{{0, 1}, {6}}));
    EXPECT_EQ(shard(7, 2, false, 3, 1, false, false), (IndexBatches{{2, 3}}));
    EXPECT_EQ(shard(7, 2, false, 3, 2, false, false), (IndexBatches{{4, 5}}));
    // Fewer samples than one process's batch: the data is cycled.
    for (int r = 0; r < 3; ++r) EXPECT_EQ(shard(1, 5, false, 3, r, false, true), (IndexBatches{{0, 0, 0, 0, 0}}));
}

TEST(BatchSamplerShard, SplitRequiresMultipleOfNumProcesses)
{
    try {
        shard(12, 3, false, 2, 0, true, true);
        FAIL() << "expected an error";
    } catch (const accel::Error &e) {
        EXPECT_EQ(e.code(), ACCEL_ERR_INVALID_ARGUMENT);
        EXPECT_STREQ(e.what(), "batch_size: with split_batches it must be a multiple of the number of processes (2), "
                               "got 3");
    }
    // BatchSamplerShard rejects batch_size 1 too (1 % 2 != 0): a piece would be empty.
    EXPECT_THROW(shard(12, 1, false, 2, 0, true, true), accel::Error);
}

// sharded_length == the number of batches produced, for P = 1, 2, 3, dataset sizes 1..40, batch sizes
// 1..5 and every flag combination; with even_batches every process gets the same number of full batches.
TEST(BatchSamplerShard, LengthFormulaMatchesProducedBatches)
{
    for (int32_t P = 1; P <= 3; ++P)
        for (int64_t n = 1; n <= 40; ++n)
            for (int64_t bs = 1; bs <= 5; ++bs)
                for (bool split : {false, true})
                    for (bool drop_last : {false, true})
                        for (bool even : {false, true}) {
                            if (split && P > 1 && bs % P != 0) continue; // rejected (see above)
                            SCOPED_TRACE("P=" + std::to_string(P) + " n=" + std::to_string(n) + " bs=" +
                                         std::to_string(bs) + " split=" + std::to_string(split) + " drop_last=" +
                                         std::to_string(drop_last) + " even=" + std::to_string(even));
                            const int64_t piece = split ? bs / P : bs;
                            std::set<int64_t> seen;
                            std::vector<size_t> counts;
                            for (int32_t r = 0; r < P; ++r) {
                                IndexBatches got = shard(n, bs, drop_last, P, r, split, even);
                                ASSERT_EQ(sharded_length(n, bs, drop_last, spec(P, r, split, even)),
                                          static_cast<int64_t>(got.size()))
                                    << "process " << r;
                                counts.push_back(got.size());
                                for (const auto &b : got) {
                                    ASSERT_FALSE(b.empty());
                                    ASSERT_LE(static_cast<int64_t>(b.size()), piece);
                                    if ((even && P > 1) || drop_last) {
                                        ASSERT_EQ(static_cast<int64_t>(b.size()), piece) << "process " << r;
                                    }
                                    for (int64_t i : b) {
                                        ASSERT_GE(i, 0);
                                        ASSERT_LT(i, n);
                                        seen.insert(i);
                                    }
                                }
                            }
                            if (even) {
                                for (size_t c : counts) ASSERT_EQ(c, counts[0]);
                            }
                            // Without drop_last every sample is seen by some process.
                            if (!drop_last) {
                                ASSERT_EQ(static_cast<int64_t>(seen.size()), n);
                            }
                        }
}

// Without padding (drop_last or no tail) the processes' batches are disjoint and in round-robin order.
TEST(BatchSamplerShard, DisjointWithoutPadding)
{
    for (int32_t P = 2; P <= 3; ++P)
        for (int64_t n = 1; n <= 30; ++n) {
            std::multiset<int64_t> all;
            for (int32_t r = 0; r < P; ++r)
                for (const auto &b : shard(n, 2, true, P, r, false, true)) all.insert(b.begin(), b.end());
            const int64_t full_rounds = (n / 2) / P;
            EXPECT_EQ(static_cast<int64_t>(all.size()), full_rounds * P * 2);
            for (int64_t i = 0; i < full_rounds * P * 2; ++i) EXPECT_EQ(all.count(i), 1u);
        }
}
