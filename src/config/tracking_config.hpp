// JSON of the tracker calls (init_trackers' config and init_kwargs, log's values) to typed values, and
// the names `log_with` accepts. Only src/config/ reads JSON; src/tracking/ sees these structs.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace accel::config {

// The trackers built into accel, in the order "all" expands to.
const std::vector<std::string> &builtin_trackers();

// log_with's entries checked and expanded ("all" -> every built-in; duplicates dropped). Accelerate's
// trackers that accel does not build in (wandb, comet_ml, ...) are ACCEL_ERR_UNIMPLEMENTED pointing to
// callback trackers; anything else ACCEL_ERR_INVALID_ARGUMENT. `path` names the key in messages.
std::vector<std::string> checked_log_with(const std::vector<std::string> &names, const std::string &path);

// One value of accelerator.log(values): a number (TensorBoard scalar) or a text. Nested objects are
// flattened to "outer/inner" keys.
struct LogValue {
    std::string key;
    bool is_text = false;
    double number = 0;
    std::string text;
};

struct LogValues {
    std::vector<LogValue> values;
    std::string json; // the object as compact JSON text (for JSONL and callbacks)
};

// `values_json` must be a JSON object of numbers, strings, or objects of those (no arrays, booleans,
// nulls): each wrong entry is ACCEL_ERR_INVALID_ARGUMENT naming `values_json.<key>`.
LogValues parse_log_values(const char *values_json);

// init_trackers(project_name, config, init_kwargs).
struct TrackerInit {
    std::string config_json = "{}";                   // compact JSON object
    std::map<std::string, std::string> kwargs_json;   // per tracker name: its init_kwargs as compact JSON
    std::optional<std::string> tensorboard_filename_suffix; // init_kwargs.tensorboard.filename_suffix
    int64_t tensorboard_flush_secs = 120;                     // init_kwargs.tensorboard.flush_secs
};

// `trackers` are the active tracker names: init_kwargs keys must be among them. NULL JSON means {}.
TrackerInit parse_tracker_init(const char *config_json, const char *init_kwargs_json,
                               const std::vector<std::string> &trackers);

} // namespace accel::config
