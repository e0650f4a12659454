// TensorBoard's event files: TFRecord records (uint64 length, masked CRC-32C of the length, the
// payload, masked CRC-32C of the payload; little-endian) holding Event messages built with protobuf
// from tensorboard.proto. The first event carries file_version "brain.Event:2"; numbers become scalar
// summaries (simple_value), strings and the run configuration text summaries (the text plugin), as
// torch.utils.tensorboard's SummaryWriter writes them. File name as SummaryWriter's:
// events.out.tfevents.<10-digit seconds>.<host>.<pid>.<n><filename_suffix>.
#include "common/error.hpp"
#include "tracking/crc32c.hpp"
#include "tracking/tensorboard.pb.h"
#include "tracking/tracking.hpp"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

namespace accel::tracking {

namespace {

std::atomic<int> g_file_uid{0};

double now_seconds()
{
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void put_le(std::string &out, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
}

class TensorBoardTracker : public GeneralTracker {
public:
    explicit TensorBoardTracker(std::string dir) : dir_(std::move(dir)) {}
    ~TensorBoardTracker() override
    {
        if (f_) std::fclose(f_);
    }
    std::string name() const override { return "tensorboard"; }

    void store_init_configuration(const std::string &, const config::TrackerInit &init) override
    {
        make_dirs(dir_);
        char host[256] = "localhost";
        gethostname(host, sizeof host - 1);
        char base[512];
        std::snprintf(base, sizeof base, "events.out.tfevents.%010lld.%s.%d.%d", static_cast<long long>(now_seconds()),
                      host, static_cast<int>(getpid()), g_file_uid.fetch_add(1));
        path_ = dir_ + "/" + base + init.tensorboard_filename_suffix.value_or("");
        flush_secs_ = static_cast<double>(init.tensorboard_flush_secs);
        f_ = std::fopen(path_.c_str(), "wb");
        if (f_ == nullptr)
            fail(errno == EACCES ? ACCEL_ERR_PERMISSION_DENIED : ACCEL_ERR_UNKNOWN,
                 path_ + ": cannot create the TensorBoard event file: " + std::strerror(errno));
        tensorboard::Event first;
        first.set_wall_time(now_seconds());
        first.set_file_version("brain.Event:2");
        write_event(first, true);
        // The run configuration as a text summary (Accelerate's TensorBoard tracker stores it as hparams).
        tensorboard::Event e;
        e.set_wall_time(now_seconds());
        add_text(*e.mutable_summary(), "config", init.config_json);
        write_event(e, true);
    }

    void log(const config::LogValues &v, int64_t step, double wall_time) override
    {
        tensorboard::Event e;
        e.set_wall_time(wall_time);
        e.set_step(step >= 0 ? step : 0);
        auto *summary = e.mutable_summary();
        for (const auto &x : v.values) {
            if (x.is_text) {
                add_text(*summary, x.key, x.text);
            } else {
                auto *value = summary->add_value();
                value->set_tag(x.key);
                value->set_simple_value(static_cast<float>(x.number));
            }
        }
        write_event(e, now_seconds() - last_flush_ >= flush_secs_);
    }

    void finish() override
    {
        if (f_ == nullptr) return;
        FILE *f = f_;
        f_ = nullptr;
        if (std::fclose(f) != 0) fail(ACCEL_ERR_UNKNOWN, path_ + ": closing failed: " + std::strerror(errno));
    }

    std::string info_json() const override
    {
        return "{\"name\":\"tensorboard\",\"main_process\":true,\"logging_dir\":" + json_string(dir_) + ",\"files\":[" +
               json_string(path_) + "]}";
    }

private:
    // torch.utils.tensorboard's text(): tag "<tag>/text_summary", a DT_STRING tensor of shape [1], the
    // text plugin's metadata.
    static void add_text(tensorboard::Summary &summary, const std::string &tag, const std::string &text)
    {
        auto *value = summary.add_value();
        value->set_tag(tag + "/text_summary");
        auto *plugin = value->mutable_metadata()->mutable_plugin_data();
        plugin->set_plugin_name("text");
        tensorboard::TextPluginData data;
        data.set_version(0);
        plugin->set_content(data.SerializeAsString());
        auto *tensor = value->mutable_tensor();
        tensor->set_dtype(tensorboard::DT_STRING);
        tensor->mutable_tensor_shape()->add_dim()->set_size(1);
        tensor->add_string_val(text);
    }

    void write_event(const tensorboard::Event &e, bool flush)
    {
        if (f_ == nullptr) fail(ACCEL_ERR_FAILED_PRECONDITION, path_ + ": the tensorboard tracker is finished");
        std::string payload;
        if (!e.SerializeToString(&payload)) fail(ACCEL_ERR_INTERNAL, path_ + ": cannot serialize an Event");
        std::string record;
        put_le(record, payload.size(), 8);
        put_le(record, masked_crc32c(record.data(), 8), 4);
        record += payload;
        put_le(record, masked_crc32c(payload.data(), payload.size()), 4);
        if (std::fwrite(record.data(), 1, record.size(), f_) != record.size())
            fail(ACCEL_ERR_UNKNOWN, path_ + ": write failed: " + std::strerror(errno));
        if (flush) {
            if (std::fflush(f_) != 0) fail(ACCEL_ERR_UNKNOWN, path_ + ": write failed: " + std::strerror(errno));
            last_flush_ = now_seconds();
        }
    }

    std::string dir_, path_;
    FILE *f_ = nullptr;
    double flush_secs_ = 120;
    double last_flush_ = 0;
};

} // namespace

std::unique_ptr<GeneralTracker> make_tensorboard_tracker(const std::string &dir)
{
    return std::make_unique<TensorBoardTracker>(dir);
}

} // namespace accel::tracking
