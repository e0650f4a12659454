// The structs behind the public opaque handles. Each holds shared_ptrs, so handles can be freed in
// any order: an optimizer keeps its model alive, a prepared object keeps its accelerator's state.
#pragma once

#include <accel/types.h>

#include "accelerator/accelerator.hpp"
#include "data_loader/data_loader_shard.hpp"
#include "model/model.hpp"
#include "optimizer/accelerated_optimizer.hpp"
#include "scheduler/accelerated_scheduler.hpp"

#include <ATen/ATen.h>

#include <memory>

struct accel_accelerator {
    std::shared_ptr<accel::Accelerator> impl;
};

struct accel_model {
    std::shared_ptr<accel::Model> impl;
    bool unwrapped = false; // from unwrap_model: forward without autocast / fp32 conversion
};

struct accel_optimizer {
    std::shared_ptr<accel::AcceleratedOptimizer> impl;
};

struct accel_scheduler {
    std::shared_ptr<accel::AcceleratedScheduler> impl;
};

struct accel_dataloader {
    std::shared_ptr<accel::DataLoaderShard> impl;
};

struct accel_batch {
    accel::Batch batch;
};

struct accel_tensor {
    at::Tensor tensor;
};

namespace accel::capi {

// Moves a new handle to the caller.
template <class Handle, class... Args>
void emit(Handle **out, Args &&...args)
{
    *out = new Handle{std::forward<Args>(args)...};
}

accel_tensor_t *new_tensor(at::Tensor t);

} // namespace accel::capi
