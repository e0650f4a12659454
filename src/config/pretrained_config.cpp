#include "config/pretrained_config.hpp"

#include "common/error.hpp"
#include "config/json.hpp"

#include <cjson/cJSON.h>

#include <algorithm>
#include <cstring>
#include <memory>

namespace accel::config {

namespace {

// Model options from_pretrained hands on into the spec unread: their owners' parsers check them there.
// tp_plan: transformers' from_pretrained(tp_plan={...}).
constexpr const char *kForwarded[] = {"frozen", "lora", "empty_init", "tp_plan"};

// GPT2Config keys (and PretrainedConfig's) that do not change what GPT2LMHeadModel computes or trains:
// generation and tokenizer settings, the heads of other GPT-2 classes (summary_*: GPT2DoubleHeadsModel),
// bookkeeping. n_ctx is GPT-2's legacy spelling, unused by transformers since 4.x.
constexpr const char *kGpt2Ignored[] = {
    "model_type", "architectures", "torch_dtype", "transformers_version", "_name_or_path", "use_cache",
    "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id", "n_ctx",
    "summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels", "summary_first_dropout",
    "task_specific_params", "id2label", "label2id", "tokenizer_class", "prefix", "output_attentions",
    "output_hidden_states", "return_dict", "problem_type", "finetuning_task"};

constexpr const char *kLlamaTypes[] = {"llama", "mistral", "qwen2"};

struct JsonPtr {
    cJSON *p = nullptr;
    explicit JsonPtr(cJSON *x) : p(x) {}
    ~JsonPtr() { cJSON_Delete(p); }
    JsonPtr(const JsonPtr &) = delete;
    JsonPtr &operator=(const JsonPtr &) = delete;
    cJSON *release()
    {
        cJSON *x = p;
        p = nullptr;
        return x;
    }
};

bool listed(const char *key, const char *const *begin, const char *const *end)
{
    return std::any_of(begin, end, [&](const char *k) { return std::strcmp(k, key) == 0; });
}

cJSON *parse_or_fail(const std::string &text, const std::string &what)
{
    JsonDocument check(text.c_str(), what); // malformed JSON is reported by position
    cJSON *root = cJSON_Parse(text.c_str());
    if (root == nullptr) fail(ACCEL_ERR_RESOURCE_EXHAUSTED, what + ": out of memory parsing JSON");
    return root;
}

} // namespace

FromPretrainedOptions parse_from_pretrained_options(const char *json, const char *what)
{
    FromPretrainedOptions o;
    JsonDocument doc(json == nullptr ? "{}" : json, what);
    JsonObject root(doc.root(), what);
    o.strict = root.get_bool("strict", true);
    o.adapter = root.get_string("adapter", "");
    if (!(root.is_string("torch_dtype") && root.get_string("torch_dtype", "") == "auto"))
        o.torch_dtype = get_dtype(root, "torch_dtype");
    for (const char *key : kForwarded) {
        const cJSON *v = root.get_raw(key);
        if (v == nullptr) continue;
        std::unique_ptr<char, void (*)(void *)> text(cJSON_PrintUnformatted(v), cJSON_free);
        if (!text) fail(ACCEL_ERR_RESOURCE_EXHAUSTED, root.path_of(key) + ": out of memory");
        o.model_options.emplace_back(key, text.get());
    }
    o.empty_init = root.get_bool("empty_init", false);
    if (o.empty_init && !o.adapter.empty())
        fail(ACCEL_ERR_INVALID_ARGUMENT, std::string(what) + ": adapter and empty_init exclude each other (an empty "
                                         "model has no weights to put an adapter on; load them first)");
    root.finish();
    return o;
}

SavePretrainedOptions parse_save_pretrained_options(const char *json, const char *what)
{
    SavePretrainedOptions o;
    JsonDocument doc(json == nullptr ? "{}" : json, what);
    JsonObject root(doc.root(), what);
    const bool adapter_only = root.get_bool("adapter_only", false), merge = root.get_bool("merge", false);
    if (adapter_only && merge)
        fail(ACCEL_ERR_INVALID_ARGUMENT, std::string(what) + ": adapter_only and merge exclude each other (the "
                                         "adapters alone, or the base weights with the adapters merged in)");
    // The rest are save_model's options: read by its parser from the same text without these two keys.
    JsonPtr rest(cJSON_Duplicate(doc.root(), true));
    if (rest.p == nullptr) fail(ACCEL_ERR_RESOURCE_EXHAUSTED, std::string(what) + ": out of memory");
    cJSON_DeleteItemFromObjectCaseSensitive(rest.p, "adapter_only");
    cJSON_DeleteItemFromObjectCaseSensitive(rest.p, "merge");
    std::unique_ptr<char, void (*)(void *)> text(cJSON_PrintUnformatted(rest.p), cJSON_free);
    if (!text) fail(ACCEL_ERR_RESOURCE_EXHAUSTED, std::string(what) + ": out of memory");
    o.weights = parse_save_model_options(text.get(), what);
    o.weights.adapter_only = adapter_only;
    o.weights.merge = merge;
    return o;
}

std::string spec_from_hf_config(const std::string &config_text, const std::string &what,
                                const std::vector<std::pair<std::string, std::string>> &model_options)
{
    JsonPtr root(parse_or_fail(config_text, what));
    if (!cJSON_IsObject(root.p)) type_error(what, "a JSON object", root.p);
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root.p, "model_type");
    if (mt == nullptr || cJSON_IsNull(mt))
        fail(ACCEL_ERR_INVALID_ARGUMENT, what + ": model_type: required (transformers' config.json names its "
                                                "architecture there: gpt2, llama, mistral, qwen2)");
    if (!cJSON_IsString(mt)) type_error(what + ": model_type", "a string", mt);
    const std::string model_type = mt->valuestring;
    const char *type = nullptr;
    if (model_type == "gpt2") {
        type = "gpt";
        const cJSON *reorder = cJSON_GetObjectItemCaseSensitive(root.p, "reorder_and_upcast_attn");
        if (cJSON_IsTrue(reorder))
            fail(ACCEL_ERR_UNIMPLEMENTED, what + ": reorder_and_upcast_attn: true is not supported (GPT-2's "
                                                 "attention is computed in the weights' dtype)");
        cJSON_DeleteItemFromObjectCaseSensitive(root.p, "reorder_and_upcast_attn");
        for (const char *key : kGpt2Ignored) cJSON_DeleteItemFromObjectCaseSensitive(root.p, key);
    } else if (listed(model_type.c_str(), std::begin(kLlamaTypes), std::end(kLlamaTypes))) {
        type = "llama"; // the llama spec reads the config's keys by their transformers names, model_type too
    } else {
        fail(ACCEL_ERR_UNIMPLEMENTED, what + ": model_type \"" + model_type +
                                          "\" is not supported (supported: gpt2, llama, mistral, qwen2)");
    }
    if (cJSON_GetObjectItemCaseSensitive(root.p, "type") != nullptr)
        fail(ACCEL_ERR_INVALID_ARGUMENT, what + ": type: not a transformers key (the spec's type comes from model_type)");
    cJSON_AddItemToObject(root.p, "type", cJSON_CreateString(type));
    for (const auto &[key, text] : model_options) {
        if (cJSON_GetObjectItemCaseSensitive(root.p, key.c_str()) != nullptr)
            fail(ACCEL_ERR_INVALID_ARGUMENT, what + ": " + key + ": not a transformers key (give it in the options)");
        cJSON *v = cJSON_Parse(text.c_str());
        if (v == nullptr) fail(ACCEL_ERR_RESOURCE_EXHAUSTED, "options_json: " + key + ": out of memory");
        cJSON_AddItemToObject(root.p, key.c_str(), v);
    }
    std::unique_ptr<char, void (*)(void *)> out(cJSON_PrintUnformatted(root.p), cJSON_free);
    if (!out) fail(ACCEL_ERR_RESOURCE_EXHAUSTED, what + ": out of memory");
    return out.get();
}

std::string hf_config_with_dtype(const std::string &config_json, const std::string &dtype)
{
    JsonPtr root(parse_or_fail(config_json, "hf_config_json"));
    cJSON_DeleteItemFromObjectCaseSensitive(root.p, "torch_dtype");
    cJSON_AddItemToObject(root.p, "torch_dtype", cJSON_CreateString(dtype.c_str()));
    std::unique_ptr<char, void (*)(void *)> out(cJSON_Print(root.p), cJSON_free);
    if (!out) fail(ACCEL_ERR_RESOURCE_EXHAUSTED, "config.json: out of memory");
    return std::string(out.get()) + "\n";
}

} // namespace accel::config
