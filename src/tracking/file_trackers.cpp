// The JSONL and CSV trackers: one line per logged value set (JSONL) or per value (CSV), appended to
// <logging_dir>/<project>/metrics.jsonl / metrics.csv and flushed after every log call, so a run that
// dies keeps everything logged before. A resumed run appends to the same files.
#include "common/error.hpp"
#include "tracking/tracking.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace accel::tracking {

namespace {

std::string number_text(double x)
{
    char b[64];
    if (x == std::floor(x) && std::fabs(x) < 1e15) std::snprintf(b, sizeof b, "%.0f", x);
    else std::snprintf(b, sizeof b, "%.17g", x);
    return b;
}

std::string time_text(double t)
{
    char b[64];
    std::snprintf(b, sizeof b, "%.6f", t);
    return b;
}

class FileTracker : public GeneralTracker {
public:
    FileTracker(std::string name, const std::string &dir, const std::string &file) : name_(std::move(name)), dir_(dir)
    {
        make_dirs(dir);
        path_ = dir + "/" + file;
        f_ = std::fopen(path_.c_str(), "a");
        if (f_ == nullptr)
            fail(errno == EACCES ? ACCEL_ERR_PERMISSION_DENIED : ACCEL_ERR_UNKNOWN,
                 path_ + ": cannot open for the " + name_ + " tracker: " + std::strerror(errno));
        std::fseek(f_, 0, SEEK_END);
        fresh_ = std::ftell(f_) == 0;
    }
    ~FileTracker() override
    {
        if (f_) std::fclose(f_);
    }
    std::string name() const override { return name_; }
    void finish() override
    {
        if (f_ == nullptr) return;
        FILE *f = f_;
        f_ = nullptr;
        if (std::fclose(f) != 0) fail(ACCEL_ERR_UNKNOWN, path_ + ": closing failed: " + std::strerror(errno));
    }
    std::string info_json() const override
    {
        return "{\"name\":" + json_string(name_) + ",\"main_process\":true,\"logging_dir\":" + json_string(dir_) +
               ",\"files\":[" + json_string(path_) + "]}";
    }

protected:
    void write(const std::string &text)
    {
        if (f_ == nullptr) fail(ACCEL_ERR_FAILED_PRECONDITION, path_ + ": the " + name_ + " tracker is finished");
        if (std::fwrite(text.data(), 1, text.size(), f_) != text.size() || std::fflush(f_) != 0)
            fail(ACCEL_ERR_UNKNOWN, path_ + ": write failed: " + std::strerror(errno));
    }
    std::string name_, dir_, path_;
    FILE *f_ = nullptr;
    bool fresh_ = false;
};

// {"project": ..., "wall_time": ..., "config": {...}} once, then {"step": N|null, "wall_time": ..., "values": {...}}
class JsonlTracker : public FileTracker {
public:
    explicit JsonlTracker(const std::string &dir) : FileTracker("jsonl", dir, "metrics.jsonl") {}
    void store_init_configuration(const std::string &project, const config::TrackerInit &init) override
    {
        write("{\"project\":" + json_string(project) + ",\"config\":" + init.config_json + "}\n");
    }
    void log(const config::LogValues &v, int64_t step, double wall_time) override
    {
        write("{\"step\":" + (step >= 0 ? std::to_string(step) : std::string("null")) + ",\"wall_time\":" +
              time_text(wall_time) + ",\"values\":" + v.json + "}\n");
    }
};

std::string csv_field(const std::string &s)
{
    if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
    std::string o = "\"";
    for (char c : s) o += c == '"' ? std::string("\"\"") : std::string(1, c);
    return o + "\"";
}

// step,wall_time,key,value: one row per value, so calls may log different keys. The configuration goes
// to config.json beside it.
class CsvTracker : public FileTracker {
public:
    explicit CsvTracker(const std::string &dir) : FileTracker("csv", dir, "metrics.csv")
    {
        if (fresh_) write("step,wall_time,key,value\n");
    }
    void store_init_configuration(const std::string &, const config::TrackerInit &init) override
    {
        const std::string p = dir_ + "/config.json";
        FILE *f = std::fopen(p.c_str(), "w");
        if (f == nullptr) fail(ACCEL_ERR_UNKNOWN, p + ": cannot write the run configuration: " + std::strerror(errno));
        bool ok = std::fputs((init.config_json + "\n").c_str(), f) >= 0;
        ok = std::fclose(f) == 0 && ok;
        if (!ok) fail(ACCEL_ERR_UNKNOWN, p + ": write failed");
    }
    void log(const config::LogValues &v, int64_t step, double wall_time) override
    {
        std::string rows;
        const std::string s = step >= 0 ? std::to_string(step) : std::string();
        for (const auto &x : v.values)
            rows += s + "," + time_text(wall_time) + "," + csv_field(x.key) + "," +
                    (x.is_text ? csv_field(x.text) : number_text(x.number)) + "\n";
        write(rows);
    }
    std::string info_json() const override
    {
        return "{\"name\":\"csv\",\"main_process\":true,\"logging_dir\":" + json_string(dir_) + ",\"files\":[" +
               json_string(path_) + "," + json_string(dir_ + "/config.json") + "]}";
    }
};

} // namespace

std::unique_ptr<GeneralTracker> make_jsonl_tracker(const std::string &dir) { return std::make_unique<JsonlTracker>(dir); }
std::unique_ptr<GeneralTracker> make_csv_tracker(const std::string &dir) { return std::make_unique<CsvTracker>(dir); }

} // namespace accel::tracking
