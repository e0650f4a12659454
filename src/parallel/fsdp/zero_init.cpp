#include "parallel/fsdp/zero_init.hpp"

#include "common/allocator.hpp"
#include "common/error.hpp"
#include "distributed/communicator.hpp"
#include "parallel/fsdp/storage.hpp"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <mutex>

namespace accel::parallel {

namespace {

struct Scope {
    std::shared_ptr<distributed::Communicator> comm;
    const char *flag;
    bool pretrained_only;
};

std::mutex scopes_mutex;
std::vector<std::weak_ptr<Scope>> scopes; // oldest first

// Parameters at least this large give their freed memory back to the kernel at once.
constexpr int64_t kTrimBytes = 1 << 20;

std::string why(const char *flag)
{
    return std::string("the model was built partitioned (") + flag +
           "): its parameters exist only as each process's slices until an accelerator prepares it";
}

} // namespace

std::shared_ptr<void> PartitionedAtInit::scope(std::shared_ptr<distributed::Communicator> comm, const char *flag,
                                               bool pretrained_only)
{
    auto s = std::make_shared<Scope>(Scope{std::move(comm), flag, pretrained_only});
    std::lock_guard<std::mutex> lock(scopes_mutex);
    scopes.push_back(s);
    return s;
}

std::shared_ptr<PartitionedAtInit> PartitionedAtInit::for_new_model(bool pretrained)
{
    std::lock_guard<std::mutex> lock(scopes_mutex);
    scopes.erase(std::remove_if(scopes.begin(), scopes.end(), [](const auto &w) { return w.expired(); }), scopes.end());
    for (auto it = scopes.rbegin(); it != scopes.rend(); ++it)
        if (auto s = it->lock(); s && (pretrained || !s->pretrained_only))
            return std::make_shared<PartitionedAtInit>(s->comm, s->flag);
    return nullptr;
}

std::shared_ptr<PartitionedAtInit> PartitionedAtInit::of(const Model &model)
{
    auto p = std::dynamic_pointer_cast<PartitionedAtInit>(model.forward_hooks);
    return p && p->holds_any() ? p : nullptr;
}

PartitionedAtInit::PartitionedAtInit(std::shared_ptr<distributed::Communicator> comm, const char *flag)
    : comm_(std::move(comm)), flag_(flag)
{
}

void PartitionedAtInit::partition(const at::Tensor &param)
{
    at::NoGradGuard no_grad;
    // Parameters of the models accel builds own their storage whole (freed and taken again below).
    if (!param.is_contiguous() || param.storage_offset() != 0 || param.storage().nbytes() != static_cast<size_t>(bytes_of(param)))
        fail(ACCEL_ERR_INTERNAL, std::string(flag_) + ": a parameter that does not own its storage cannot be partitioned");
    at::Tensor flat = param.detach().view({-1});
    if (comm_->size() > 1) comm_->broadcast(flat, 0);
    const int64_t n = flat.numel(), world = comm_->size(), per = (n + world - 1) / world;
    const int64_t begin = std::min(n, comm_->rank() * per), end = std::min(n, begin + per);
    Slice s{param, at::zeros({per}, flat.options())};
    s.mine.narrow(0, 0, end - begin).copy_(flat.narrow(0, begin, end - begin));
    release_storage(param);
    slices_.push_back(std::move(s));
    // The tuned allocator keeps freed memory for the next step; here it must stop counting at once, or
    // building partitioned would hold as much as building whole.
    if (bytes_of(param) >= kTrimBytes) return_free_memory();
}

std::vector<PartitionedAtInit::Slice>::iterator PartitionedAtInit::find(const at::Tensor &param)
{
    return std::find_if(slices_.begin(), slices_.end(), [&](const Slice &s) {
        return s.param.unsafeGetTensorImpl() == param.unsafeGetTensorImpl();
    });
}

bool PartitionedAtInit::holds(const at::Tensor &param) const
{
    return std::any_of(slices_.begin(), slices_.end(), [&](const Slice &s) {
        return s.param.unsafeGetTensorImpl() == param.unsafeGetTensorImpl();
    });
}

void PartitionedAtInit::gather(const Slice &s, const at::Tensor &dst)
{
    const int64_t n = s.param.numel(), per = s.mine.numel();
    if (comm_->size() == 1) {
        dst.copy_(s.mine.narrow(0, 0, n));
        return;
    }
    // 16-bit slices move as bytes (Gloo in LibTorch 1.13 gathers no bfloat16); the bytes are the same.
    const bool bits = s.mine.element_size() == 2;
    std::vector<at::Tensor> parts = comm_->allgather(bits ? s.mine.view(at::kByte) : s.mine);
    if (bits)
        for (auto &part : parts) part = part.view(s.mine.scalar_type());
    for (int64_t r = 0; r < static_cast<int64_t>(parts.size()) && r * per < n; ++r)
        dst.narrow(0, r * per, std::min(per, n - r * per)).copy_(parts[static_cast<size_t>(r)].narrow(0, 0, std::min(per, n - r * per)));
}

void PartitionedAtInit::gather_into(const at::Tensor &param, const at::Tensor &dst)
{
    auto it = find(param);
    if (it == slices_.end()) fail(ACCEL_ERR_INTERNAL, std::string(flag_) + ": a parameter that was not partitioned");
    at::NoGradGuard no_grad;
    gather(*it, dst);
    slices_.erase(it);
}

at::Tensor PartitionedAtInit::slice_of(const at::Tensor &param, int64_t &offset)
{
    auto it = find(param);
    if (it == slices_.end()) fail(ACCEL_ERR_INTERNAL, std::string(flag_) + ": a parameter that was not partitioned");
    // The same split as partition(): ceil(n / world) elements per process, the last ones padded.
    const int64_t n = param.numel(), per = it->mine.numel();
    const int64_t begin = std::min(n, comm_->rank() * per), end = std::min(n, begin + per);
    offset = begin;
    return it->mine.narrow(0, 0, end - begin);
}

void PartitionedAtInit::convert(const at::Tensor &param, at::ScalarType dtype)
{
    auto it = find(param);
    if (it == slices_.end()) fail(ACCEL_ERR_INTERNAL, std::string(flag_) + ": a parameter that was not partitioned");
    at::NoGradGuard no_grad;
    it->mine = it->mine.to(dtype);
    // A tensor of the new dtype and the parameter's shape with no memory (never the whole parameter's bytes).
    at::Tensor shell = at::empty({0}, param.options().dtype(dtype));
    shell.unsafeGetTensorImpl()->set_sizes_contiguous(param.sizes());
    param.set_data(shell);
}

void PartitionedAtInit::restore_all()
{
    at::NoGradGuard no_grad;
    for (auto &s : slices_) {
        allocate_storage(s.param, bytes_of(s.param));
        gather(s, s.param.detach().view({-1}));
    }
    slices_.clear();
}

at::Tensor PartitionedAtInit::before_forward(const at::Tensor &)
{
    fail(ACCEL_ERR_FAILED_PRECONDITION, std::string("model: cannot compute: ") + why(flag_));
}

void PartitionedAtInit::check_access(const char *what) const
{
    fail(ACCEL_ERR_FAILED_PRECONDITION, std::string(what) + ": cannot read or write parameters: " + why(flag_));
}

} // namespace accel::parallel
