// GradientState: whether this micro-step syncs gradients, and which prepared data loader is running.
#pragma once

#include "config/accelerator_config.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace accel {

// What a running data loader tells the gradient state (DataLoaderStateMixin in Accelerate).
struct DataLoaderProgress {
    bool end_of_dataloader = false;
    int64_t remainder = -1;
};

class GradientState {
public:
    explicit GradientState(const config::GradientAccumulationPlugin &plugin) : plugin_(plugin) {}

    const config::GradientAccumulationPlugin &plugin() const { return plugin_; }
    int64_t num_steps() const { return plugin_.num_steps; }
    bool sync_gradients() const { return sync_gradients_; }
    void set_sync_gradients(bool v) { sync_gradients_ = v; }

    // A prepared loader registers itself when a pass begins and leaves when it ends (a stack: nested loops).
    void enter_dataloader(const DataLoaderProgress *p) { active_.push_back(p); }
    void leave_dataloader(const DataLoaderProgress *p)
    {
        auto it = std::find(active_.rbegin(), active_.rend(), p);
        if (it != active_.rend()) active_.erase(std::next(it).base());
    }
    bool in_dataloader() const { return !active_.empty(); }
    bool end_of_dataloader() const { return in_dataloader() && active_.back()->end_of_dataloader; }
    int64_t remainder() const { return in_dataloader() ? active_.back()->remainder : -1; }

private:
    config::GradientAccumulationPlugin plugin_;
    bool sync_gradients_ = true;
    std::vector<const DataLoaderProgress *> active_;
};

} // namespace accel
