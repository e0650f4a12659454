#include "config/tracking_config.hpp"

#include "common/error.hpp"
#include "config/json.hpp"

#include <cjson/cJSON.h>

#include <algorithm>
#include <cmath>
#include <memory>

namespace accel::config {

const std::vector<std::string> &builtin_trackers()
{
    static const std::vector<std::string> names = {"jsonl", "csv", "tensorboard"};
    return names;
}

std::vector<std::string> checked_log_with(const std::vector<std::string> &names, const std::string &path)
{
    static const std::vector<std::string> elsewhere = {"wandb", "comet_ml", "aim", "mlflow", "clearml",
                                                       "dvclive", "swanlab", "trackio"};
    std::vector<std::string> out;
    auto add = [&](const std::string &n) {
        if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
    };
    for (size_t i = 0; i < names.size(); ++i) {
        std::string n = names[i];
        std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
        const std::string where = path + (names.size() > 1 ? "[" + std::to_string(i) + "]" : "");
        if (n == "all") {
            for (const auto &b : builtin_trackers()) add(b);
        } else if (std::find(builtin_trackers().begin(), builtin_trackers().end(), n) != builtin_trackers().end()) {
            add(n);
        } else if (std::find(elsewhere.begin(), elsewhere.end(), n) != elsewhere.end()) {
            fail(ACCEL_ERR_UNIMPLEMENTED, where + ": \"" + names[i] +
                                              "\" is not built into accel (jsonl, csv, tensorboard and all are); "
                                              "register a callback tracker with accel_accelerator_add_tracker to feed it");
        } else {
            fail(ACCEL_ERR_INVALID_ARGUMENT, where + ": expected one of \"jsonl\", \"csv\", \"tensorboard\", \"all\", got \"" +
                                                 names[i] + "\"");
        }
    }
    return out;
}

namespace {

std::string print_compact(const cJSON *node)
{
    std::unique_ptr<char, void (*)(void *)> text(cJSON_PrintUnformatted(node), cJSON_free);
    if (!text) fail(ACCEL_ERR_RESOURCE_EXHAUSTED, "out of memory printing JSON");
    return text.get();
}

void flatten(const cJSON *obj, const std::string &prefix, const std::string &path, std::vector<LogValue> &out, int depth)
{
    if (depth > 8) fail(ACCEL_ERR_INVALID_ARGUMENT, path + ": nested deeper than 8 levels");
    for (const cJSON *e = obj->child; e != nullptr; e = e->next) {
        const std::string key = prefix.empty() ? e->string : prefix + "/" + e->string;
        const std::string where = path + "." + e->string;
        if (std::string(e->string).empty()) fail(ACCEL_ERR_INVALID_ARGUMENT, where + ": empty key");
        LogValue v;
        v.key = key;
        if (cJSON_IsNumber(e)) {
            if (!std::isfinite(e->valuedouble)) type_error(where, "a finite number", e);
            v.number = e->valuedouble;
        } else if (cJSON_IsString(e)) {
            v.is_text = true;
            v.text = e->valuestring;
        } else if (cJSON_IsObject(e)) {
            flatten(e, key, where, out, depth + 1);
            continue;
        } else {
            type_error(where, "a number, a string or an object of those", e);
        }
        for (const auto &o : out)
            if (o.key == key) fail(ACCEL_ERR_INVALID_ARGUMENT, where + ": \"" + key + "\" appears twice");
        out.push_back(std::move(v));
    }
}

} // namespace

LogValues parse_log_values(const char *values_json)
{
    JsonDocument doc(values_json, "values_json");
    if (!cJSON_IsObject(doc.root())) type_error("values_json", "a JSON object", doc.root());
    LogValues v;
    flatten(doc.root(), "", "values_json", v.values, 0);
    if (v.values.empty()) fail(ACCEL_ERR_INVALID_ARGUMENT, "values_json: no values to log ({})");
    v.json = print_compact(doc.root());
    return v;
}

TrackerInit parse_tracker_init(const char *config_json, const char *init_kwargs_json, const std::vector<std::string> &trackers)
{
    TrackerInit t;
    if (config_json != nullptr) {
        JsonDocument doc(config_json, "config_json");
        if (!cJSON_IsObject(doc.root())) type_error("config_json", "a JSON object", doc.root());
        t.config_json = print_compact(doc.root());
    }
    if (init_kwargs_json != nullptr) {
        JsonDocument doc(init_kwargs_json, "init_kwargs_json");
        JsonObject root(doc.root(), "init_kwargs_json");
        for (const cJSON *e = doc.root()->child; e != nullptr; e = e->next) {
            const std::string name = e->string;
            if (std::find(trackers.begin(), trackers.end(), name) == trackers.end()) {
                std::string list;
                for (const auto &n : trackers) list += (list.empty() ? "" : ", ") + n;
                fail(ACCEL_ERR_INVALID_ARGUMENT, root.path_of(name.c_str()) + ": not an active tracker (active: " +
                                                     (list.empty() ? "none" : list) + ")");
            }
            auto sub = root.get_object(name.c_str());
            if (!sub) continue;
            t.kwargs_json[name] = print_compact(e);
            if (name == "tensorboard") {
                t.tensorboard_filename_suffix = sub->get_optional_string("filename_suffix");
                if (t.tensorboard_filename_suffix && t.tensorboard_filename_suffix->find('/') != std::string::npos)
                    fail(ACCEL_ERR_INVALID_ARGUMENT, sub->path_of("filename_suffix") + ": must not contain '/'");
                t.tensorboard_flush_secs = sub->get_int("flush_secs", 120, 0, 86400);
                sub->finish();
            } else if (name == "jsonl" || name == "csv") {
                sub->finish(); // no options
            }
            // callback trackers get their object as it is
        }
        root.finish();
    }
    return t;
}

} // namespace accel::config
