// The device mesh's rank layout (pure arithmetic: no communicator), for many shapes, and the mesh of a
// world of one.
#include "common/error.hpp"
#include "distributed/communicator.hpp"
#include "distributed/device_mesh.hpp"
#include "distributed/thread_communicator.hpp"

#include <ATen/ATen.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

using namespace accel::distributed;

namespace {

const MeshDim kAll[] = {MeshDim::DpReplicate, MeshDim::DpShard, MeshDim::Cp, MeshDim::Tp,
                        MeshDim::Dp,          MeshDim::DpShardCp, MeshDim::DpCp, MeshDim::Pp};

std::vector<MeshShape> shapes()
{
    std::vector<MeshShape> out;
    for (int32_t r = 1; r <= 3; ++r)
        for (int32_t s = 1; s <= 3; ++s)
            for (int32_t c = 1; c <= 3; ++c)
                for (int32_t t = 1; t <= 3; ++t) out.push_back(mesh_shape(r, s, c, t));
    out.push_back(mesh_shape(2, 4, 1, 8));
    out.push_back(mesh_shape(1, 16, 2, 2));
    out.push_back(mesh_shape(4, 1, 1, 1));
    out.push_back(mesh_shape(2, 1, 1, 2, 2)); // pipeline stages outside the axes
    out.push_back(mesh_shape(1, 1, 1, 1, 4));
    return out;
}

// Which axes a dimension spans (what its members may differ on).
std::set<int32_t> axes(MeshDim d)
{
    switch (d) {
    case MeshDim::DpReplicate: return {0};
    case MeshDim::DpShard: return {1};
    case MeshDim::Cp: return {2};
    case MeshDim::Tp: return {3};
    case MeshDim::Dp: return {0, 1};
    case MeshDim::DpShardCp: return {1, 2};
    case MeshDim::DpCp: return {0, 1, 2};
    case MeshDim::Pp: return {}; // stages differ outside the axes: members agree on every axis
    }
    return {};
}

} // namespace

TEST(DeviceMeshLayout, CoordinatesRoundTripWithTpFastest)
{
    for (const MeshShape &shape : shapes())
        for (int32_t r = 0; r < shape.world(); ++r) {
            const auto c = mesh_coordinates(shape, r);
            const int32_t inner = shape.stage_size(); // the axes within a pipeline stage, pp slowest of all
            EXPECT_EQ(mesh_rank(shape, c), r % inner) << shape.describe();
            EXPECT_EQ(c[3], r % shape.sizes[3]) << shape.describe(); // tp is the fastest axis
            EXPECT_EQ(c[0], r % inner / (inner / shape.sizes[0])) << shape.describe(); // dp_replicate the slowest axis
            EXPECT_EQ(mesh_group_rank(shape, MeshDim::Pp, r), r / inner) << shape.describe();
        }
}

TEST(DeviceMeshLayout, GroupsPartitionTheWorldAndAgreeWithCoordinates)
{
    for (const MeshShape &shape : shapes())
        for (MeshDim d : kAll) {
            const auto groups = mesh_groups(shape, d);
            ASSERT_EQ(static_cast<int32_t>(groups.size()) * shape.size(d), shape.world()) << shape.describe() << " " << mesh_dim_name(d);
            std::vector<int32_t> seen;
            for (const auto &g : groups) {
                ASSERT_EQ(static_cast<int32_t>(g.size()), shape.size(d));
                EXPECT_TRUE(std::is_sorted(g.begin(), g.end()));
                for (size_t i = 0; i < g.size(); ++i) {
                    seen.push_back(g[i]);
                    // Every member finds the same group, and its index in it is its rank within the group.
                    EXPECT_EQ(mesh_group(shape, d, g[i]), g) << shape.describe() << " " << mesh_dim_name(d);
                    EXPECT_EQ(mesh_group_rank(shape, d, g[i]), static_cast<int32_t>(i));
                    // Members agree on every axis the dimension does not span.
                    const auto a = mesh_coordinates(shape, g[0]), b = mesh_coordinates(shape, g[i]);
                    for (int32_t x = 0; x < kMeshAxes; ++x) {
                        if (!axes(d).count(x)) { EXPECT_EQ(a[static_cast<size_t>(x)], b[static_cast<size_t>(x)]); }
                    }
                }
            }
            std::sort(seen.begin(), seen.end());
            for (int32_t r = 0; r < shape.world(); ++r) EXPECT_EQ(seen[static_cast<size_t>(r)], r);
        }
}

TEST(DeviceMeshLayout, TensorParallelGroupsAreConsecutiveRanks)
{
    for (const MeshShape &shape : shapes())
        for (int32_t r = 0; r < shape.world(); ++r) {
            const auto g = mesh_group(shape, MeshDim::Tp, r);
            const int32_t first = r - r % shape.sizes[3];
            for (size_t i = 0; i < g.size(); ++i) EXPECT_EQ(g[i], first + static_cast<int32_t>(i));
        }
}

TEST(DeviceMeshLayout, AccelerateExamples)
{
    // sharding-and-parallelism.md §4: 8 processes, dp_shard 2 x tp 4: ranks 0-3 and 4-7 are the TP groups.
    const MeshShape a = mesh_shape(1, 2, 1, 4);
    EXPECT_EQ(mesh_groups(a, MeshDim::Tp), (std::vector<std::vector<int32_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
    EXPECT_EQ(mesh_groups(a, MeshDim::DpShard), (std::vector<std::vector<int32_t>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
    EXPECT_EQ(mesh_group_rank(a, MeshDim::Dp, 6), 1); // data shard 1
    // dp_replicate 2 x dp_shard 2 x tp 2 (docs/guides/parallelism.md's picture).
    const MeshShape b = mesh_shape(2, 2, 1, 2);
    EXPECT_EQ(mesh_coordinates(b, 5), (std::array<int32_t, kMeshAxes>{1, 0, 0, 1}));
    EXPECT_EQ(mesh_groups(b, MeshDim::DpReplicate), (std::vector<std::vector<int32_t>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
    EXPECT_EQ(mesh_groups(b, MeshDim::DpShard), (std::vector<std::vector<int32_t>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
    EXPECT_EQ(mesh_groups(b, MeshDim::Dp), (std::vector<std::vector<int32_t>>{{0, 2, 4, 6}, {1, 3, 5, 7}}));
    EXPECT_EQ(mesh_group(b, MeshDim::DpShardCp, 7), mesh_group(b, MeshDim::DpShard, 7));
    EXPECT_EQ(mesh_group_rank(b, MeshDim::Dp, 6), 3);
    // Today's HYBRID_SHARD on 2 nodes of 2: the node groups shard, the same local ranks replicate.
    const MeshShape h = mesh_shape(2, 2, 1, 1);
    EXPECT_EQ(mesh_groups(h, MeshDim::DpShard), (std::vector<std::vector<int32_t>>{{0, 1}, {2, 3}}));
    EXPECT_EQ(mesh_groups(h, MeshDim::DpReplicate), (std::vector<std::vector<int32_t>>{{0, 2}, {1, 3}}));
    // pp 2 x dp_replicate 2 x tp 2 (Megatron's order, pp slowest): stage 0 is ranks 0-3, each pp group one
    // rank of each stage at the same place.
    const MeshShape p = mesh_shape(2, 1, 1, 2, 2);
    EXPECT_EQ(mesh_groups(p, MeshDim::Pp), (std::vector<std::vector<int32_t>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
    EXPECT_EQ(mesh_groups(p, MeshDim::Tp), (std::vector<std::vector<int32_t>>{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
    EXPECT_EQ(mesh_groups(p, MeshDim::DpReplicate), (std::vector<std::vector<int32_t>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
    EXPECT_EQ(p.describe(), "pp 2 x dp_replicate 2 x dp_shard 1 x cp 1 x tp 2");
}

TEST(DeviceMeshLayout, BadShapesAreRefused)
{
    try {
        mesh_shape(1, 0, 1, 1);
        FAIL() << "a size of 0 was accepted";
    } catch (const accel::Error &e) {
        EXPECT_EQ(e.code(), ACCEL_ERR_INVALID_ARGUMENT);
        EXPECT_NE(std::string(e.what()).find("dp_shard_size"), std::string::npos) << e.what();
    }
    EXPECT_THROW(mesh_coordinates(mesh_shape(2, 1, 1, 1), 2), accel::Error);
    try {
        DeviceMesh(mesh_shape(2, 1, 1, 1), make_single_communicator());
        FAIL() << "a mesh of 2 over a world of 1 was accepted";
    } catch (const accel::Error &e) {
        EXPECT_EQ(e.code(), ACCEL_ERR_INVALID_ARGUMENT);
        EXPECT_NE(std::string(e.what()).find("2 processes"), std::string::npos) << e.what();
    }
}

TEST(DeviceMeshLayout, WorldOfOne)
{
    const auto world = make_single_communicator();
    DeviceMesh mesh(mesh_shape(1, 1, 1, 1), world);
    for (MeshDim d : kAll) {
        EXPECT_EQ(mesh.size(d), 1);
        EXPECT_EQ(mesh.rank_in(d), 0);
        EXPECT_EQ(mesh.group(d), world); // a group of everyone is the world itself
    }
    EXPECT_NE(mesh.to_json().find("\"dp_shard_cp\": {\"size\": 1, \"rank\": 0}"), std::string::npos) << mesh.to_json();
}

// Every rank of 8 threads builds dp_replicate 2 x dp_shard 2 x tp 2 (and 12 threads 3 x 1 x 2 x 2): each
// group's communicator reaches exactly the members the layout names (a sum of world ranks over it), and
// the mesh reports each rank's index.
TEST(DeviceMeshLayout, ThreadedGroupsReachTheirMembers)
{
    for (const MeshShape &shape : {mesh_shape(2, 2, 1, 2), mesh_shape(3, 1, 2, 2), mesh_shape(1, 2, 1, 1, 2)})
        run_on_threads(shape.world(), [&shape](const std::shared_ptr<Communicator> &world) {
            DeviceMesh mesh(shape, world);
            for (MeshDim d : kAll) {
                const auto members = mesh_group(shape, d, world->rank());
                ASSERT_EQ(mesh.group(d)->size(), static_cast<int32_t>(members.size())) << mesh_dim_name(d);
                ASSERT_EQ(mesh.group(d)->rank(), mesh.rank_in(d)) << mesh_dim_name(d);
                ASSERT_EQ(members[static_cast<size_t>(mesh.rank_in(d))], world->rank());
                at::Tensor t = at::full({1}, static_cast<int64_t>(world->rank()), at::kLong);
                mesh.group(d)->allreduce(t, ReduceOp::Sum);
                int64_t expected = 0;
                for (int32_t m : members) expected += m;
                ASSERT_EQ(t.item<int64_t>(), expected) << shape.describe() << " " << mesh_dim_name(d);
            }
        });
}
