#include "parallel/fsdp/param_offload.hpp"

#include "common/offload_files.hpp"
#include "parallel/fsdp/storage.hpp"

#include <ATen/ATen.h>

#include <future>

namespace accel::parallel {

ParamOffload::ParamOffload(const std::string &device, const std::string &nvme_path, const std::string &path_key,
                           int32_t rank, size_t num_units)
{
    if (device != "nvme") return;
    files_ = std::make_unique<OffloadFiles>(nvme_path, "param", rank, path_key);
    in_memory_.assign(num_units, 1);
}

ParamOffload::~ParamOffload() = default;

std::function<void()> ParamOffload::start_page_out(size_t unit, const at::Tensor &shard)
{
    if (!files_ || !in_memory_[unit]) return [] {};
    auto writing = std::make_shared<std::future<void>>(std::async(std::launch::async, [this, unit, shard] {
        files_->write(unit, {{shard.data_ptr(), static_cast<size_t>(bytes_of(shard))}});
    }));
    return [this, unit, shard, writing] {
        writing->get(); // a failed write leaves the shard in memory
        release_storage(shard);
        in_memory_[unit] = false;
    };
}

std::function<void()> ParamOffload::start_page_in(size_t unit, const at::Tensor &shard)
{
    if (!out(unit)) return [] {};
    allocate_storage(shard, bytes_of(shard));
    in_memory_[unit] = true; // its memory is taken now
    auto reading = std::make_shared<std::future<void>>(std::async(std::launch::async, [this, unit, shard] {
        files_->read(unit, {{shard.data_ptr(), static_cast<size_t>(bytes_of(shard))}});
    }));
    return [this, unit, shard, reading] {
        try {
            reading->get();
        } catch (...) {
            release_storage(shard); // still only in the file
            in_memory_[unit] = false;
            throw;
        }
    };
}

at::Tensor ParamOffload::values(size_t unit, const at::Tensor &shard) const
{
    if (!out(unit)) return shard.detach();
    at::Tensor t = at::empty(shard.sizes(), shard.options().requires_grad(false));
    files_->read(unit, {{t.data_ptr(), static_cast<size_t>(bytes_of(t))}});
    return t;
}

void ParamOffload::store(size_t unit, const at::Tensor &shard, const at::Tensor &values)
{
    if (!out(unit)) {
        shard.detach().copy_(values);
        return;
    }
    const at::Tensor t = values.to(shard.scalar_type()).contiguous();
    try {
        files_->write(unit, {{t.data_ptr(), static_cast<size_t>(bytes_of(t))}});
    } catch (...) {
        // The file may be cut short now: the values stay in memory instead.
        allocate_storage(shard, bytes_of(shard));
        shard.detach().copy_(t);
        in_memory_[unit] = true;
        throw;
    }
}

} // namespace accel::parallel
