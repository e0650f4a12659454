// DeviceMesh: the processes of a job laid out on the dimensions of Accelerate's ParallelismConfig, in its
// order dp_replicate, dp_shard, cp, tp, with tp fastest (consecutive ranks form a TP group, inside one
// machine), plus its flattened groups: dp (dp_replicate x dp_shard), dp_shard_cp (what FSDP shards over)
// and dp_cp (what the loss is averaged over). Built once per accelerator from the parallelism sizes and
// the world communicator; every sub-communicator is created at construction, in one fixed order, on every
// rank, so no later call has to be collective over the world. Parts ask it for their group and rank
// (docs/guides/parallelism.md).
//
// The layout arithmetic (sizes + rank -> coordinates and group members) is pure and exposed below, so it is
// tested without any communicator.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace accel::distributed {

class Communicator;

// The mesh's dimensions and flattened groups. The first four are the mesh's axes, slowest first.
enum class MeshDim : int32_t { DpReplicate = 0, DpShard = 1, Cp = 2, Tp = 3, Dp = 4, DpShardCp = 5, DpCp = 6, Pp = 7 };
constexpr int32_t kMeshAxes = 4;
constexpr int32_t kMeshGroups = 8;
// "dp_replicate", "dp_shard", "cp", "tp", "dp", "dp_shard_cp", "dp_cp", "pp".
const char *mesh_dim_name(MeshDim dim);

struct MeshShape {
    std::array<int32_t, kMeshAxes> sizes{1, 1, 1, 1}; // dp_replicate, dp_shard, cp, tp
    int32_t pp = 1;                                     // pipeline stages, outside the axes (slowest)
    int32_t size(MeshDim dim) const;                    // an axis's size, or the product a group flattens
    int32_t stage_size() const { return size(MeshDim::DpReplicate) * size(MeshDim::DpShard) * size(MeshDim::Cp) * size(MeshDim::Tp); }
    int32_t world() const { return pp * stage_size(); }
    // "dp_replicate 2 x dp_shard 2 x cp 1 x tp 1" (prefixed "pp 2 x " with stages), for messages.
    std::string describe() const;
};

MeshShape mesh_shape(int32_t dp_replicate, int32_t dp_shard, int32_t cp, int32_t tp, int32_t pp = 1);

// A rank's coordinate on each axis (rank = pp_stage * stage_size + ((r * dp_shard + s) * cp + c) * tp + t).
// Throws INTERNAL for a rank outside the mesh. mesh_rank gives the rank within the stage.
std::array<int32_t, kMeshAxes> mesh_coordinates(const MeshShape &shape, int32_t rank);
int32_t mesh_rank(const MeshShape &shape, const std::array<int32_t, kMeshAxes> &coordinates);
// The members of `rank`'s group along `dim` (the ranks that differ from it only on the dimension's axes),
// ascending; a rank's index in it is its rank within the group.
std::vector<int32_t> mesh_group(const MeshShape &shape, MeshDim dim, int32_t rank);
// Every group along `dim`, ordered by their first member: the order the mesh creates them in.
std::vector<std::vector<int32_t>> mesh_groups(const MeshShape &shape, MeshDim dim);
// `rank`'s index within its group along `dim` (its coordinate, flattened row-major for a group of axes).
int32_t mesh_group_rank(const MeshShape &shape, MeshDim dim, int32_t rank);

class DeviceMesh {
public:
    // Collective over `world` (every rank builds the same shape). INVALID_ARGUMENT when the shape's product
    // is not the world's size.
    DeviceMesh(const MeshShape &shape, std::shared_ptr<Communicator> world);

    const MeshShape &shape() const { return shape_; }
    const std::shared_ptr<Communicator> &world() const { return world_; }
    int32_t rank() const { return rank_; }
    // This rank's group along `dim`: the world itself where the group is everyone, a one-process
    // communicator where it is this rank alone.
    const std::shared_ptr<Communicator> &group(MeshDim dim) const { return groups_[static_cast<size_t>(dim)]; }
    int32_t size(MeshDim dim) const { return shape_.size(dim); }
    int32_t rank_in(MeshDim dim) const { return mesh_group_rank(shape_, dim, rank_); }
    // The mesh as JSON: sizes of every dimension and group, and this rank's index in each.
    std::string to_json() const;

private:
    MeshShape shape_;
    std::shared_ptr<Communicator> world_;
    int32_t rank_ = 0;
    std::array<std::shared_ptr<Communicator>, kMeshGroups> groups_;
};

} // namespace accel::distributed
