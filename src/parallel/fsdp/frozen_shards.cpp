#include "parallel/fsdp/frozen_shards.hpp"

#include "parallel/fsdp/storage.hpp"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>

namespace accel::parallel {

TensorPiece FrozenFlat::piece(size_t i, int32_t rank) const
{
    const int64_t begin = offsets[i], end = begin + params[i].numel();
    const int64_t lo = rank * shard_numel, hi = lo + shard_numel;
    const int64_t a = std::max(begin, lo), b = std::min(end, hi);
    return TensorPiece{rank, a - begin, std::max<int64_t>(0, b - a)};
}

at::Tensor FrozenFlat::local_piece(size_t i, int32_t rank) const
{
    const TensorPiece p = piece(i, rank);
    if (p.numel == 0) return {};
    return shard.narrow(0, offsets[i] + p.offset - rank * shard_numel, p.numel);
}

namespace {

void point(FrozenFlat &f)
{
    for (size_t i = 0; i < f.params.size(); ++i)
        f.params[i].set_data(f.full.narrow(0, f.offsets[i], f.params[i].numel()).view(f.params[i].sizes()));
}

} // namespace

std::vector<FrozenFlat> pack_frozen(const std::vector<std::pair<std::string, at::Tensor>> &params, int32_t world,
                                    int32_t rank, const std::function<void(const at::Tensor &, const at::Tensor &)> &fill,
                                    const std::function<void(const at::Tensor &)> &sync)
{
    at::NoGradGuard no_grad;
    std::vector<FrozenFlat> out;
    std::vector<at::ScalarType> dtypes; // one flat per dtype, in the order the dtypes first appear
    for (const auto &[name, p] : params) {
        auto it = std::find(dtypes.begin(), dtypes.end(), p.scalar_type());
        if (it == dtypes.end()) {
            dtypes.push_back(p.scalar_type());
            out.emplace_back();
            it = dtypes.end() - 1;
        }
        FrozenFlat &f = out[static_cast<size_t>(it - dtypes.begin())];
        f.names.push_back(name);
        f.params.push_back(p);
        f.offsets.push_back(f.numel);
        f.numel += p.numel();
    }
    for (FrozenFlat &f : out) {
        f.padded = (f.numel + world - 1) / world * world;
        f.shard_numel = f.padded / world;
        f.full = at::zeros({f.padded}, f.params[0].options().requires_grad(false));
        for (size_t i = 0; i < f.params.size(); ++i) fill(f.params[i], f.full.narrow(0, f.offsets[i], f.params[i].numel()));
        if (sync) sync(f.full);
        f.shard = f.full.narrow(0, rank * f.shard_numel, f.shard_numel).clone();
        point(f);
        release_full(f);
    }
    return out;
}

void allocate_full(FrozenFlat &f)
{
    if (f.gathered) return;
    allocate_storage(f.full, bytes_of(f.full));
    f.gathered = true;
}

void fill_full(FrozenFlat &f, const std::vector<at::Tensor> &parts)
{
    at::NoGradGuard no_grad;
    for (size_t r = 0; r < parts.size(); ++r)
        f.full.narrow(0, static_cast<int64_t>(r) * f.shard_numel, f.shard_numel).copy_(parts[r]);
}

void write_back(FrozenFlat &f, int32_t rank)
{
    at::NoGradGuard no_grad;
    if (f.gathered) f.shard.copy_(f.full.narrow(0, rank * f.shard_numel, f.shard_numel));
}

void release_full(FrozenFlat &f)
{
    if (!f.gathered) return;
    release_storage(f.full);
    f.gathered = false;
}

void unpack(FrozenFlat &f)
{
    at::NoGradGuard no_grad;
    for (auto &p : f.params) p.set_data(p.detach().clone());
}

} // namespace accel::parallel
