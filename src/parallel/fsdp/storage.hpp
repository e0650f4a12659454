// Giving a tensor's storage back and taking it again, without touching the tensor (or the views and saved
// tensors that share its StorageImpl): what FSDP does with storage().resize_(). The sharding engine frees
// gathered buffers between uses this way, and parameter offload frees the shards it keeps in files.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/StorageImpl.h>

#include <cstdint>

namespace accel::parallel {

inline void release_storage(const at::Tensor &t)
{
    c10::StorageImpl *st = t.storage().unsafeGetStorageImpl();
    st->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
    st->set_nbytes(0);
}

inline void allocate_storage(const at::Tensor &t, int64_t nbytes)
{
    c10::StorageImpl *st = t.storage().unsafeGetStorageImpl();
    st->set_data_ptr_noswap(st->allocator()->allocate(static_cast<size_t>(nbytes)));
    st->set_nbytes(static_cast<size_t>(nbytes));
}

inline int64_t bytes_of(const at::Tensor &t) { return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0; }

} // namespace accel::parallel
