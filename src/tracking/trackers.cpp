#include "common/error.hpp"
#include "tracking/tracking.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

namespace accel::tracking {

std::string json_string(const std::string &s)
{
    std::string o = "\"";
    for (unsigned char c : s) {
        switch (c) {
        case '"': o += "\\\""; break;
        case '\\': o += "\\\\"; break;
        case '\n': o += "\\n"; break;
        case '\r': o += "\\r"; break;
        case '\t': o += "\\t"; break;
        default:
            if (c < 0x20) {
                char b[8];
                std::snprintf(b, sizeof b, "\\u%04x", c);
                o += b;
            } else {
                o += static_cast<char>(c);
            }
        }
    }
    return o + "\"";
}

void make_dirs(const std::string &dir)
{
    for (size_t i = 1; i <= dir.size(); ++i) {
        if (i < dir.size() && dir[i] != '/') continue;
        std::string d = dir.substr(0, i);
        struct stat st{};
        if (stat(d.c_str(), &st) == 0) {
            if (!S_ISDIR(st.st_mode)) fail(ACCEL_ERR_FAILED_PRECONDITION, d + ": exists and is not a folder");
            continue;
        }
        if (mkdir(d.c_str(), 0777) != 0 && errno != EEXIST)
            fail(errno == EACCES ? ACCEL_ERR_PERMISSION_DENIED : ACCEL_ERR_UNKNOWN,
                 d + ": cannot create the logging folder: " + std::strerror(errno));
    }
}

Trackers::Trackers(std::vector<std::string> log_with, std::optional<std::string> logging_dir, bool main_process)
    : log_with_(std::move(log_with)), logging_dir_(std::move(logging_dir)), main_(main_process)
{
}

Trackers::~Trackers()
{
    // Files are complete after every log call; closing here only flushes (errors have nowhere to go).
    for (auto &t : active_) {
        try {
            t->finish();
        } catch (...) {
        }
    }
}

std::vector<std::string> Trackers::names() const
{
    std::vector<std::string> n = log_with_;
    for (const auto &c : callbacks_) n.push_back(c.first);
    return n;
}

void Trackers::add_callback(const std::string &name, Callback callback)
{
    if (initialized_)
        fail(ACCEL_ERR_FAILED_PRECONDITION, "add_tracker: init_trackers was already called; add trackers before it");
    if (name.empty()) fail(ACCEL_ERR_INVALID_ARGUMENT, "name: must not be empty");
    for (const auto &n : names())
        if (n == name) fail(ACCEL_ERR_INVALID_ARGUMENT, "name: a tracker named \"" + name + "\" already exists");
    if (name == "all" || std::find(config::builtin_trackers().begin(), config::builtin_trackers().end(), name) !=
                             config::builtin_trackers().end())
        fail(ACCEL_ERR_INVALID_ARGUMENT, "name: \"" + name + "\" is a built-in tracker's name");
    callbacks_.emplace_back(name, std::move(callback));
}

void Trackers::init(const char *project_name, const char *config_json, const char *init_kwargs_json)
{
    if (project_name == nullptr) fail(ACCEL_ERR_INVALID_ARGUMENT, "project_name: must not be NULL");
    const std::string project = project_name;
    if (project.empty() || project == "." || project == ".." || project.find('/') != std::string::npos)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "project_name: \"" + project +
                                             "\" must be a non-empty folder name (no '/', not . or ..)");
    // Every rank checks its arguments, so a bad call fails everywhere, not only on the main process.
    config::TrackerInit init = config::parse_tracker_init(config_json, init_kwargs_json, names());
    if (initialized_) fail(ACCEL_ERR_FAILED_PRECONDITION, "init_trackers: already called (call end_training first)");
    // No trackers configured: nothing to start, as Accelerate (a program logs the same with or without log_with).
    std::vector<std::unique_ptr<GeneralTracker>> made;
    if (main_) {
        const std::string dir = logging_dir_.value_or(".") + "/" + project;
        for (const auto &n : log_with_) {
            if (n == "jsonl") made.push_back(make_jsonl_tracker(dir));
            else if (n == "csv") made.push_back(make_csv_tracker(dir));
            else if (n == "tensorboard") made.push_back(make_tensorboard_tracker(dir));
        }
        for (const auto &[n, cb] : callbacks_) made.push_back(make_callback_tracker(n, cb));
        for (auto &t : made) t->store_init_configuration(project, init);
    }
    active_ = std::move(made);
    initialized_ = true;
}

void Trackers::log(const char *values_json, int64_t step)
{
    config::LogValues v = config::parse_log_values(values_json);
    if (!initialized_) {
        if (names().empty()) return; // no trackers at all: Accelerate's log does nothing
        fail(ACCEL_ERR_FAILED_PRECONDITION, "log: init_trackers was not called");
    }
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    for (auto &t : active_) t->log(v, step, now);
}

void Trackers::end_training()
{
    std::vector<std::unique_ptr<GeneralTracker>> closing = std::move(active_);
    active_.clear();
    initialized_ = false;
    for (auto &t : closing) t->finish();
}

std::string Trackers::tracker_json(const char *name) const
{
    if (name == nullptr) fail(ACCEL_ERR_INVALID_ARGUMENT, "name: must not be NULL");
    auto all = names();
    if (std::find(all.begin(), all.end(), name) == all.end()) {
        std::string list;
        for (const auto &n : all) list += (list.empty() ? "" : ", ") + n;
        fail(ACCEL_ERR_NOT_FOUND, std::string("name: no tracker named \"") + name + "\" (trackers: " +
                                      (list.empty() ? "none" : list) + ")");
    }
    if (!initialized_) fail(ACCEL_ERR_FAILED_PRECONDITION, "get_tracker: init_trackers was not called");
    if (!main_)
        // Accelerate hands other processes a blank tracker that does nothing.
        return "{\"name\":" + json_string(name) + ",\"main_process\":false}";
    for (const auto &t : active_)
        if (t->name() == name) return t->info_json();
    fail(ACCEL_ERR_INTERNAL, std::string("tracker \"") + name + "\" is not active");
}

// ---- callback trackers -----------------------------------------------------------------------------

namespace {

class CallbackTracker : public GeneralTracker {
public:
    CallbackTracker(std::string name, Callback cb) : name_(std::move(name)), cb_(std::move(cb)) {}
    std::string name() const override { return name_; }

    void store_init_configuration(const std::string &project, const config::TrackerInit &init) override
    {
        auto kw = init.kwargs_json.find(name_);
        call(Event::Init, "{\"project_name\":" + json_string(project) + ",\"config\":" + init.config_json +
                              ",\"init_kwargs\":" + (kw == init.kwargs_json.end() ? std::string("{}") : kw->second) + "}",
             -1, "init_trackers");
    }
    void log(const config::LogValues &v, int64_t step, double) override { call(Event::Log, v.json, step, "log"); }
    void finish() override
    {
        if (finished_) return;
        finished_ = true;
        call(Event::Finish, "{}", -1, "end_training");
    }
    std::string info_json() const override
    {
        return "{\"name\":" + json_string(name_) + ",\"main_process\":true,\"callback\":true}";
    }

private:
    void call(Event e, const std::string &json, int64_t step, const char *what)
    {
        int32_t rc = cb_(e, json, step);
        if (rc != 0)
            fail(static_cast<accel_status_t>(rc), std::string(what) + ": tracker \"" + name_ +
                                                      "\"'s callback returned status " + std::to_string(rc));
    }
    std::string name_;
    Callback cb_;
    bool finished_ = false;
};

} // namespace

std::unique_ptr<GeneralTracker> make_callback_tracker(const std::string &name, Callback callback)
{
    return std::make_unique<CallbackTracker>(name, std::move(callback));
}

} // namespace accel::tracking
