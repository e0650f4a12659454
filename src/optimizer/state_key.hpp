// The key of a parameter's entry in a LibTorch optimizer's state() map.
#pragma once

#include <torch/optim/optimizer.h>

#include <sstream>
#include <string>
#include <type_traits>

namespace accel {

// LibTorch keys an optimizer's per-parameter state by the parameter's TensorImpl: 1.x by its address printed
// into a string (c10::guts::to_string, gone in 2.x), 2.x by the pointer itself.
using StateKey = std::decay_t<decltype(std::declval<torch::optim::Optimizer &>().state())>::key_type;

template <typename K> K make_state_key(void *impl)
{
    if constexpr (std::is_same_v<K, std::string>) {
        std::ostringstream s;
        s << impl;
        return s.str();
    } else {
        return impl;
    }
}

inline StateKey key_of(const at::Tensor &p) { return make_state_key<StateKey>(p.unsafeGetTensorImpl()); }

} // namespace accel
