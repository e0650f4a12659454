#include "config/lora_config.hpp"

#include "common/error.hpp"
#include "config/json.hpp"

#include <cjson/cJSON.h>

#include <cmath>
#include <iterator>
#include <regex>
#include <set>

namespace accel::config {

double LoraConfig::scaling() const
{
    const double rank = static_cast<double>(r);
    return use_rslora ? lora_alpha / std::sqrt(rank) : lora_alpha / rank;
}

namespace {

// The keys that change the computation, shared by the spec's "lora" object and adapter_config.json.
LoraConfig read_lora_keys(JsonObject &o)
{
    LoraConfig c;
    c.r = o.get_int("r", c.r, 1, int64_t(1) << 31);
    c.lora_alpha = o.get_double("lora_alpha", c.lora_alpha, 0.0, 1e9, true);
    // PEFT applies nn.Dropout(p); p = 1 would zero every adapter input.
    c.lora_dropout = o.get_double("lora_dropout", c.lora_dropout, 0.0, 1.0, false, true);
    c.bias = o.get_enum("bias", c.bias, {"none", "all", "lora_only"});
    c.use_rslora = o.get_bool("use_rslora", false);
    if (o.has("target_modules")) {
        c.targets_given = true;
        if (o.is_string("target_modules")) {
            const std::string s = o.get_string("target_modules", "");
            if (s == "all-linear") {
                c.all_linear = true;
            } else {
                try {
                    std::regex check(s); // refused now rather than when the model is adapted
                } catch (const std::regex_error &e) {
                    fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("target_modules") + ": \"" + s + "\" is neither "
                                                     "\"all-linear\" nor a valid regular expression (" + e.what() + ")");
                }
                c.target_regex = s;
            }
        } else {
            c.target_modules = o.get_string_array("target_modules", {});
            if (c.target_modules.empty())
                fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("target_modules") + ": expected at least one module name");
            for (size_t i = 0; i < c.target_modules.size(); ++i)
                if (c.target_modules[i].empty())
                    fail(ACCEL_ERR_INVALID_ARGUMENT,
                         o.path_of("target_modules") + "[" + std::to_string(i) + "]: expected a module name, got \"\"");
        }
    }
    return c;
}

// A value that leaves a PEFT option at its default: null, false, an empty object or array.
bool is_default(const cJSON *v)
{
    return cJSON_IsNull(v) || cJSON_IsFalse(v) || ((cJSON_IsObject(v) || cJSON_IsArray(v)) && v->child == nullptr);
}

} // namespace

LoraConfig parse_lora_config(JsonObject &o)
{
    LoraConfig c = read_lora_keys(o);
    o.finish();
    return c;
}

namespace {

LoraConfig peft_adapter_config(const std::string &text, const std::string &what)
{
    JsonDocument doc(text.c_str(), what);
    JsonObject o(doc.root(), "");
    const std::string type = o.get_string("peft_type", "LORA");
    if (type != "LORA")
        fail(ACCEL_ERR_UNIMPLEMENTED, o.path_of("peft_type") + ": \"" + type + "\" adapters are not supported (LoRA only)");
    LoraConfig c = read_lora_keys(o);
    if (!c.targets_given)
        fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("target_modules") + ": required in an adapter's config");
    // Bookkeeping: what PEFT records about the adapter without changing what it computes (fan_in_fan_out follows
    // the layer's own layout here; init_lora_weights only decides the initial values, which the file replaces;
    // megatron_core and qalora_group_size only matter with megatron_config / use_qalora, which must be defaults;
    // runtime_config is how PEFT places adapters on devices).
    static const char *const kIgnored[] = {"task_type",        "base_model_name_or_path", "revision",
                                           "inference_mode",   "fan_in_fan_out",          "init_lora_weights",
                                           "auto_mapping",     "peft_version",            "megatron_core",
                                           "qalora_group_size", "runtime_config"};
    std::set<std::string> known(std::begin(kIgnored), std::end(kIgnored));
    for (const char *k : {"peft_type", "r", "lora_alpha", "lora_dropout", "target_modules", "bias", "use_rslora"})
        known.insert(k);
    for (const cJSON *v = o.node()->child; v != nullptr; v = v->next)
        if (v->string != nullptr && known.count(v->string) == 0 && !is_default(v))
            fail(ACCEL_ERR_UNIMPLEMENTED, o.path_of(v->string) + ": " + describe(v) + " is not supported (LoRA adapters "
                                          "with PEFT's defaults for everything but r, lora_alpha, lora_dropout, "
                                          "target_modules, bias and use_rslora)");
    return c;
}

} // namespace

LoraConfig parse_peft_adapter_config(const std::string &text, const std::string &what)
{
    try {
        return peft_adapter_config(text, what);
    } catch (const Error &e) {
        const std::string msg = e.what();
        throw Error(e.code(), msg.rfind(what, 0) == 0 ? msg : what + ": " + msg);
    }
}

std::vector<std::string> default_lora_targets(const std::string &hf_config_json)
{
    if (hf_config_json.empty()) return {};
    cJSON *root = cJSON_Parse(hf_config_json.c_str());
    std::string type;
    if (root != nullptr) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "model_type");
        if (cJSON_IsString(t)) type = t->valuestring;
        cJSON_Delete(root);
    }
    if (type == "gpt2") return {"c_attn"};
    if (type == "llama" || type == "mistral" || type == "qwen2") return {"q_proj", "v_proj"};
    return {};
}

std::string lora_config_to_peft_json(const LoraConfig &c, const std::vector<std::string> &targets, bool fan_in_fan_out,
                                     const std::string &task_type, const std::string &base_model_name_or_path)
{
    JsonWriter w;
    w.add("peft_type", "LORA");
    if (task_type.empty()) w.add_null("task_type");
    else w.add("task_type", task_type);
    if (base_model_name_or_path.empty()) w.add_null("base_model_name_or_path");
    else w.add("base_model_name_or_path", base_model_name_or_path);
    w.add_null("revision");
    w.add("inference_mode", true); // as PEFT's save_pretrained records it
    w.add("r", c.r);
    if (c.all_linear) w.add("target_modules", "all-linear");
    else if (c.target_regex) w.add("target_modules", *c.target_regex);
    else w.add("target_modules", targets);
    // An integral alpha as an integer, as PEFT's configs carry it (lora_alpha: int).
    if (c.lora_alpha == std::floor(c.lora_alpha) && c.lora_alpha < 9e15) w.add("lora_alpha", static_cast<int64_t>(c.lora_alpha));
    else w.add("lora_alpha", c.lora_alpha);
    w.add("lora_dropout", c.lora_dropout);
    w.add("fan_in_fan_out", fan_in_fan_out);
    w.add("bias", c.bias);
    w.add("use_rslora", c.use_rslora);
    w.add_null("modules_to_save");
    w.add("init_lora_weights", true);
    w.add_null("layers_to_transform");
    w.add_null("layers_pattern");
    w.begin_object("rank_pattern").end_object();
    w.begin_object("alpha_pattern").end_object();
    w.add("use_dora", false);
    return w.str();
}

} // namespace accel::config
