// A loss given as JSON instead of a bare name: {"type": "causal_lm", "ignore_index": -100}.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace accel::config {

struct LossConfig {
    std::string type;
    std::optional<int64_t> ignore_index; // cross_entropy, nll, causal_lm only
};

LossConfig parse_loss_config(const char *json);

} // namespace accel::config
