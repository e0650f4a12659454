// Giving a tensor's storage back and taking it again, without touching the tensor (or the views and saved
// tensors that share its StorageImpl): what FSDP does with storage().resize_(). The sharding engine frees
// gathered buffers between uses this way, and parameter offload frees the shards it keeps in files.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/TensorImpl.h>

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

// Elements [start, start + numel) of the 1-D tensor `t`, as a tensor on the same StorageImpl, made without
// checking the storage's size now: it stays valid while the storage is released and taken again (a parameter
// shard in its offload file between uses).
inline at::Tensor piece_of(const at::Tensor &t, int64_t start, int64_t numel)
{
    auto impl = c10::make_intrusive<c10::TensorImpl>(c10::Storage(t.storage()), t.key_set(), t.dtype());
    impl->set_storage_offset(t.storage_offset() + start);
    impl->set_sizes_contiguous({numel});
    return at::Tensor(std::move(impl));
}

inline int64_t bytes_of(const at::Tensor &t) { return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0; }

} // namespace accel::parallel
