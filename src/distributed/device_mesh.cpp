#include "distributed/device_mesh.hpp"

#include "common/error.hpp"
#include "distributed/communicator.hpp"

#include <set>

namespace accel::distributed {

namespace {

// The axes each dimension or flattened group spans (Accelerate's dp_dim_names, dp_shard_cp_dim_names,
// dp_cp_dim_names), slowest first.
std::vector<int32_t> axes_of(MeshDim dim)
{
    switch (dim) {
    case MeshDim::DpReplicate: return {0};
    case MeshDim::DpShard: return {1};
    case MeshDim::Cp: return {2};
    case MeshDim::Tp: return {3};
    case MeshDim::Dp: return {0, 1};
    case MeshDim::DpShardCp: return {1, 2};
    case MeshDim::DpCp: return {0, 1, 2};
    case MeshDim::Pp: return {}; // outside the axes: handled where a group is listed
    }
    fail(ACCEL_ERR_INTERNAL, "device mesh: unknown dimension " + std::to_string(static_cast<int32_t>(dim)));
}

} // namespace

const char *mesh_dim_name(MeshDim dim)
{
    static const char *const names[kMeshGroups] = {"dp_replicate", "dp_shard", "cp", "tp", "dp", "dp_shard_cp", "dp_cp", "pp"};
    const auto i = static_cast<int32_t>(dim);
    return i >= 0 && i < kMeshGroups ? names[i] : "?";
}

int32_t MeshShape::size(MeshDim dim) const
{
    if (dim == MeshDim::Pp) return pp;
    int32_t n = 1;
    for (int32_t a : axes_of(dim)) n *= sizes[static_cast<size_t>(a)];
    return n;
}

std::string MeshShape::describe() const
{
    std::string out = pp > 1 ? "pp " + std::to_string(pp) + " x " : std::string();
    for (int32_t a = 0; a < kMeshAxes; ++a)
        out += std::string(a ? " x " : "") + mesh_dim_name(static_cast<MeshDim>(a)) + " " + std::to_string(sizes[static_cast<size_t>(a)]);
    return out;
}

MeshShape mesh_shape(int32_t dp_replicate, int32_t dp_shard, int32_t cp, int32_t tp, int32_t pp)
{
    MeshShape s;
    s.sizes = {dp_replicate, dp_shard, cp, tp};
    s.pp = pp;
    if (pp < 1) fail(ACCEL_ERR_INVALID_ARGUMENT, "parallelism_config.pp_size: must be at least 1, got " + std::to_string(pp));
    for (int32_t a = 0; a < kMeshAxes; ++a)
        if (s.sizes[static_cast<size_t>(a)] < 1)
            fail(ACCEL_ERR_INVALID_ARGUMENT, std::string("parallelism_config.") + mesh_dim_name(static_cast<MeshDim>(a)) +
                                                 "_size: must be at least 1, got " + std::to_string(s.sizes[static_cast<size_t>(a)]));
    return s;
}

std::array<int32_t, kMeshAxes> mesh_coordinates(const MeshShape &shape, int32_t rank)
{
    if (rank < 0 || rank >= shape.world())
        fail(ACCEL_ERR_INTERNAL, "device mesh: rank " + std::to_string(rank) + " is outside the mesh (" + shape.describe() + ")");
    rank %= shape.stage_size(); // the axes lie within one pipeline stage
    std::array<int32_t, kMeshAxes> c{};
    for (int32_t a = kMeshAxes - 1; a >= 0; --a) { // tp fastest
        const int32_t n = shape.sizes[static_cast<size_t>(a)];
        c[static_cast<size_t>(a)] = rank % n;
        rank /= n;
    }
    return c;
}

int32_t mesh_rank(const MeshShape &shape, const std::array<int32_t, kMeshAxes> &coordinates)
{
    int32_t rank = 0;
    for (int32_t a = 0; a < kMeshAxes; ++a) rank = rank * shape.sizes[static_cast<size_t>(a)] + coordinates[static_cast<size_t>(a)];
    return rank;
}

std::vector<int32_t> mesh_group(const MeshShape &shape, MeshDim dim, int32_t rank)
{
    const std::array<int32_t, kMeshAxes> mine = mesh_coordinates(shape, rank);
    const int32_t inner = shape.stage_size();
    std::vector<int32_t> members;
    if (dim == MeshDim::Pp) { // the same place in every stage
        for (int32_t k = 0; k < shape.pp; ++k) members.push_back(k * inner + rank % inner);
        return members;
    }
    const int32_t stage_base = rank - rank % inner;
    const std::vector<int32_t> axes = axes_of(dim);
    // Counting row-major over the group's axes, the others held at this rank's coordinates: ranks come out
    // ascending, and a member's position is its flattened coordinate.
    std::array<int32_t, kMeshAxes> c = mine;
    for (int32_t a : axes) c[static_cast<size_t>(a)] = 0;
    for (int32_t k = 0, n = shape.size(dim); k < n; ++k) {
        members.push_back(stage_base + mesh_rank(shape, c));
        for (size_t i = axes.size(); i-- > 0;) { // next coordinate, last axis fastest
            auto &v = c[static_cast<size_t>(axes[i])];
            if (++v < shape.sizes[static_cast<size_t>(axes[i])]) break;
            v = 0;
        }
    }
    return members;
}

std::vector<std::vector<int32_t>> mesh_groups(const MeshShape &shape, MeshDim dim)
{
    std::vector<std::vector<int32_t>> out;
    for (int32_t r = 0; r < shape.world(); ++r) {
        std::vector<int32_t> g = mesh_group(shape, dim, r);
        if (g.front() == r) out.push_back(std::move(g));
    }
    return out;
}

int32_t mesh_group_rank(const MeshShape &shape, MeshDim dim, int32_t rank)
{
    const std::array<int32_t, kMeshAxes> c = mesh_coordinates(shape, rank);
    if (dim == MeshDim::Pp) return rank / shape.stage_size();
    int32_t index = 0;
    for (int32_t a : axes_of(dim)) index = index * shape.sizes[static_cast<size_t>(a)] + c[static_cast<size_t>(a)];
    return index;
}

DeviceMesh::DeviceMesh(const MeshShape &shape, std::shared_ptr<Communicator> world)
    : shape_(shape), world_(std::move(world))
{
    if (shape_.world() != world_->size())
        fail(ACCEL_ERR_INVALID_ARGUMENT, "parallelism_config: " + shape_.describe() + " is " + std::to_string(shape_.world()) +
                                             " processes, but the job has " + std::to_string(world_->size()));
    rank_ = world_->rank();
    // Every rank walks the same groups in the same order, so the collective new_group calls match. A group
    // of everyone is the world, a group of one needs no peers, and a member list made once (dp_shard_cp is
    // dp_shard while cp is 1) is made once: none of these call new_group, on any rank alike.
    std::set<std::vector<int32_t>> made;
    std::vector<std::pair<std::vector<int32_t>, std::shared_ptr<Communicator>>> mine; // the groups holding this rank
    for (int32_t d = 0; d < kMeshGroups; ++d) {
        const auto dim = static_cast<MeshDim>(d);
        for (const auto &members : mesh_groups(shape_, dim)) {
            if (static_cast<int32_t>(members.size()) == world_->size() || members.size() == 1 || made.count(members)) continue;
            made.insert(members);
            if (auto c = world_->new_group(members)) mine.emplace_back(members, std::move(c));
        }
        const std::vector<int32_t> own = mesh_group(shape_, dim, rank_);
        std::shared_ptr<Communicator> &g = groups_[static_cast<size_t>(d)];
        if (static_cast<int32_t>(own.size()) == world_->size()) g = world_;
        else if (own.size() == 1) g = make_single_communicator();
        else
            for (const auto &m : mine)
                if (m.first == own) g = m.second;
        if (!g) fail(ACCEL_ERR_INTERNAL, std::string("device mesh: no communicator for this rank's ") + mesh_dim_name(dim) + " group");
    }
}

std::string DeviceMesh::to_json() const
{
    std::string out = "{\"world_size\": " + std::to_string(shape_.world()) + ", \"rank\": " + std::to_string(rank_);
    for (int32_t d = 0; d < kMeshGroups; ++d) {
        const auto dim = static_cast<MeshDim>(d);
        out += std::string(", \"") + mesh_dim_name(dim) + "\": {\"size\": " + std::to_string(size(dim)) +
               ", \"rank\": " + std::to_string(rank_in(dim)) + "}";
    }
    return out + "}";
}

} // namespace accel::distributed
