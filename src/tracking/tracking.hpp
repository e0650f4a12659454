// Experiment trackers (Accelerate's tracking.py): log_with's built-in trackers (jsonl, csv,
// tensorboard) and callback trackers a C caller registers, driven by init_trackers / log /
// end_training on the main process only, as Accelerate does. Files go under
// <project_config.logging_dir>/<project_name>/.
#pragma once

#include "config/tracking_config.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace accel::tracking {

// Event kinds a callback tracker receives (the values of accel_tracker_event_t).
enum class Event : int32_t { Init = 0, Log = 1, Finish = 2 };

// Returns 0 to go on; anything else is the status the accel call that triggered it fails with.
using Callback = std::function<int32_t(Event event, const std::string &json, int64_t step)>;

class GeneralTracker {
public:
    virtual ~GeneralTracker() = default;
    virtual std::string name() const = 0;
    virtual void store_init_configuration(const std::string &project_name, const config::TrackerInit &init) = 0;
    virtual void log(const config::LogValues &values, int64_t step, double wall_time) = 0;
    virtual void finish() = 0;
    // get_tracker: what the tracker is and where it writes, as JSON.
    virtual std::string info_json() const = 0;
};

std::unique_ptr<GeneralTracker> make_jsonl_tracker(const std::string &dir);
std::unique_ptr<GeneralTracker> make_csv_tracker(const std::string &dir);
std::unique_ptr<GeneralTracker> make_tensorboard_tracker(const std::string &dir);
std::unique_ptr<GeneralTracker> make_callback_tracker(const std::string &name, Callback callback);

// The trackers of one Accelerator.
class Trackers {
public:
    // `log_with` already checked (config::checked_log_with); logging_dir from project_config.
    Trackers(std::vector<std::string> log_with, std::optional<std::string> logging_dir, bool main_process);
    ~Trackers();

    void add_callback(const std::string &name, Callback callback); // before init
    void init(const char *project_name, const char *config_json, const char *init_kwargs_json);
    void log(const char *values_json, int64_t step);
    void end_training();
    std::string tracker_json(const char *name) const;
    bool initialized() const { return initialized_; }

private:
    std::vector<std::string> names() const;
    std::vector<std::string> log_with_;
    std::optional<std::string> logging_dir_;
    bool main_;
    std::vector<std::pair<std::string, Callback>> callbacks_;
    std::vector<std::unique_ptr<GeneralTracker>> active_;
    bool initialized_ = false;
};

// JSON string literal of `s` (for the lines the file trackers write).
std::string json_string(const std::string &s);
// Creates `dir` and its parents (0777 & umask); fails naming the folder.
void make_dirs(const std::string &dir);

} // namespace accel::tracking
