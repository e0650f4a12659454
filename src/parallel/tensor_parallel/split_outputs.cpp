#include "parallel/tensor_parallel/split_outputs.hpp"

#include <algorithm>
#include <mutex>
#include <utility>
#include <vector>

namespace accel::parallel::tp {

namespace {

struct Mark {
    c10::weak_intrusive_ptr<c10::TensorImpl> tensor;
    VocabParallelOutput info;
};

std::mutex g_mutex;
std::vector<Mark> g_marks; // few: expired marks are dropped at each new one

} // namespace

void mark_vocab_parallel(const at::Tensor &logits, VocabParallelOutput info)
{
    std::lock_guard<std::mutex> lock(g_mutex);
    g_marks.erase(std::remove_if(g_marks.begin(), g_marks.end(), [](const Mark &m) { return m.tensor.expired(); }),
                  g_marks.end());
    g_marks.push_back({c10::weak_intrusive_ptr<c10::TensorImpl>(logits.getIntrusivePtr()), std::move(info)});
}

std::optional<VocabParallelOutput> vocab_parallel_of(const at::Tensor &outputs)
{
    if (!outputs.defined()) return std::nullopt;
    std::lock_guard<std::mutex> lock(g_mutex);
    for (const auto &m : g_marks) {
        auto held = m.tensor.lock();
        if (held && held.get() == outputs.unsafeGetTensorImpl()) return m.info;
    }
    return std::nullopt;
}

} // namespace accel::parallel::tp
