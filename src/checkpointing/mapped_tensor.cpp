#include "checkpointing/mapped_tensor.hpp"

#include "common/job_pool.hpp"
#include "common/error.hpp"

#include <ATen/core/grad_mode.h>
#include <ATen/ATen.h>

#include <algorithm>
#include <functional>

namespace accel::ckpt {

namespace {

// The storage context of a mapped tensor. The deleter's address identifies such storages.
struct MappedRegion {
    std::shared_ptr<MappedFile> file;
    size_t offset; // of the storage's first byte in the file
};

void delete_region(void *ctx) { delete static_cast<MappedRegion *>(ctx); }

// The file range holding a contiguous tensor's bytes, when its storage is a mapped region.
const MappedRegion *region_of(const at::Tensor &t)
{
    if (!t.defined() || !t.device().is_cpu() || !t.is_contiguous() || t.numel() == 0) return nullptr;
    const c10::DataPtr &dp = t.storage().data_ptr();
    if (dp.get_deleter() != &delete_region) return nullptr;
    return static_cast<const MappedRegion *>(dp.get_context());
}


} // namespace

at::Tensor mapped_tensor(const std::shared_ptr<MappedFile> &file, size_t offset, at::IntArrayRef sizes,
                         at::ScalarType dtype)
{
    void *data = const_cast<uint8_t *>(file->data() + offset);
    auto *region = new MappedRegion{file, offset};
    return at::for_blob(data, sizes)
        .context(region, &delete_region)
        .options(at::TensorOptions().dtype(dtype))
        .make_tensor();
}

void CopyBatch::add(const at::Tensor &dst, const at::Tensor &src)
{
    Copy c{dst, src, nullptr, 0, false};
    if (const MappedRegion *r = region_of(src); r != nullptr && !dst.is_same(src)) {
        c.file = r->file.get();
        c.offset = r->offset + static_cast<size_t>(src.storage_offset()) * src.element_size();
        // Straight into the destination when its bytes are the file's; else (dtype conversion, a strided
        // destination) into a temporary first. Either way the bytes come with pread, never through the map,
        // so a file cut short meanwhile is an error, not SIGBUS.
        c.via_temporary = !(dst.device().is_cpu() && dst.is_contiguous() && dst.scalar_type() == src.scalar_type());
    }
    // Tied parameters appear under several names and share memory: the last copy into the same bytes
    // wins, as it did when the copies ran one after the other (run() runs them concurrently).
    if (dst.numel() > 0) {
        auto [it, inserted] = by_destination_.emplace(Range{dst.data_ptr(), dst.nbytes()}, copies_.size());
        if (!inserted) {
            copies_[it->second] = std::move(c);
            return;
        }
    }
    copies_.push_back(std::move(c));
}

void CopyBatch::run()
{
    std::vector<std::function<void()>> jobs;
    size_t bytes = 0;
    for (const Copy &c : copies_) {
        bytes += c.dst.nbytes();
        if (c.file == nullptr) {
            // Grad mode is per thread: the copy into a parameter must not be recorded on any of them.
            jobs.emplace_back([&c] {
                at::NoGradGuard no_grad;
                c.dst.copy_(c.src);
            });
            continue;
        }
        if (c.via_temporary) {
            jobs.emplace_back([&c] {
                at::Tensor tmp = at::empty(c.src.sizes(), c.src.options());
                c.file->read_at(tmp.data_ptr(), c.offset, tmp.nbytes());
                at::NoGradGuard no_grad;
                c.dst.copy_(tmp);
            });
            continue;
        }
        char *dst = static_cast<char *>(c.dst.data_ptr());
        add_piece_jobs(jobs, c.dst.nbytes(), [&c, dst](size_t at, size_t len) { c.file->read_at(dst + at, c.offset + at, len); });
    }
    // pread writes behind autograd's back: mark the tensors changed, as copy_ would have (also when a
    // read failed, as some may then hold new values).
    auto bump = [this] {
        for (const Copy &c : copies_)
            if (c.file != nullptr && !c.via_temporary) c.dst.unsafeGetTensorImpl()->bump_version();
        copies_.clear();
        by_destination_.clear();
    };
    try {
        run_jobs(jobs, io_threads_for(bytes));
    } catch (...) {
        bump();
        throw;
    }
    bump();
}

} // namespace accel::ckpt
