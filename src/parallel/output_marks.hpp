// Facts about a model's output that the loss needs and the tensor cannot carry (its logits hold one tensor-parallel
// rank's vocabulary columns, or one context-parallel rank's part of the sequence): the model marks the output,
// compute_loss looks it up, whether the loss is computed by train_step or by accel_loss on the tensor
// accel_model_forward returned. A mark lives as long as the tensor it marks (weakly held).
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

namespace accel::parallel {

template <class Info>
class OutputMarks {
public:
    void mark(const at::Tensor &t, Info info)
    {
        std::lock_guard<std::mutex> lock(mutex_);
        marks_.erase(std::remove_if(marks_.begin(), marks_.end(), [](const Mark &m) { return m.tensor.expired(); }),
                     marks_.end()); // few: expired marks are dropped at each new one
        marks_.push_back({c10::weak_intrusive_ptr<c10::TensorImpl>(t.getIntrusivePtr()), std::move(info)});
    }
    std::optional<Info> find(const at::Tensor &t) const
    {
        if (!t.defined()) return std::nullopt;
        std::lock_guard<std::mutex> lock(mutex_);
        for (const auto &m : marks_) {
            auto held = m.tensor.lock();
            if (held && held.get() == t.unsafeGetTensorImpl()) return m.info;
        }
        return std::nullopt;
    }

private:
    struct Mark {
        c10::weak_intrusive_ptr<c10::TensorImpl> tensor;
        Info info;
    };
    mutable std::mutex mutex_;
    std::vector<Mark> marks_;
};

} // namespace accel::parallel
