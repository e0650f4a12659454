#include "config/bnb_quantization_config.hpp"

#include "common/error.hpp"
#include "config/json.hpp"

#include <cjson/cJSON.h>

#include <charconv>
#include <cmath>
#include <memory>

namespace accel::config {

namespace {

// load_and_quantize_model's placement arguments, read by load_checkpoint_and_dispatch's parser (the same names
// and rules there: a strategy name or a map, max_memory and no_split_module_classes with a strategy only).
std::optional<LoadAndDispatchOptions> read_placement(JsonObject &o, const std::string &what)
{
    std::unique_ptr<cJSON, void (*)(cJSON *)> sub(cJSON_CreateObject(), cJSON_Delete);
    bool any = false;
    for (const char *key : {"device_map", "max_memory", "no_split_module_classes", "offload_folder", "offload_state_dict"}) {
        const cJSON *v = o.get_raw(key);
        if (v == nullptr) continue;
        cJSON_AddItemToObject(sub.get(), key, cJSON_Duplicate(v, true));
        any = true;
    }
    if (!any) return std::nullopt;
    std::unique_ptr<char, void (*)(void *)> text(cJSON_PrintUnformatted(sub.get()), cJSON_free);
    if (!text) fail(ACCEL_ERR_RESOURCE_EXHAUSTED, what + ": out of memory");
    return parse_load_and_dispatch_options(text.get(), what);
}

} // namespace

BnbQuantizationConfig parse_bnb_quantization_config(const char *text, const std::string &what)
{
    require(text != nullptr, ACCEL_ERR_INVALID_ARGUMENT, what + ": must not be NULL");
    JsonDocument doc(text, what);
    JsonObject o(doc.root(), what);
    BnbQuantizationConfig c;
    c.load_in_8bit = o.get_bool("load_in_8bit", false);
    c.load_in_4bit = o.get_bool("load_in_4bit", false);
    c.llm_int8_threshold = o.get_double("llm_int8_threshold", 6.0, 0.0, 1e30);
    c.bnb_4bit_quant_type = o.get_enum("bnb_4bit_quant_type", "fp4", {"fp4", "nf4"});
    c.bnb_4bit_use_double_quant = o.get_bool("bnb_4bit_use_double_quant", false);
    const std::string dtype =
        o.get_enum("bnb_4bit_compute_dtype", "fp16", {"fp32", "fp16", "bf16", "float32", "float16", "bfloat16"});
    c.bnb_4bit_compute_dtype = dtype == "float32" ? "fp32" : dtype == "float16" ? "fp16" : dtype == "bfloat16" ? "bf16" : dtype;
    c.skip_modules_given = o.has("skip_modules");
    c.skip_modules = o.get_string_array("skip_modules", {});
    c.keep_in_fp32_modules = o.get_string_array("keep_in_fp32_modules", {});
    c.weights_location = o.get_string("weights_location", "");
    if (o.has("weights_location") && c.weights_location.empty())
        fail(ACCEL_ERR_INVALID_ARGUMENT, what + ".weights_location: must name a checkpoint file or folder");
    c.torch_dtype = get_dtype(o, "torch_dtype");
    if (c.torch_dtype == ACCEL_DTYPE_FLOAT16)
        fail(ACCEL_ERR_UNIMPLEMENTED, o.path_of("torch_dtype") + ": \"float16\" on the CPU: LibTorch 1.13 has no "
                                                                 "float16 matmul there; give \"bfloat16\" or \"float32\"");
    c.placement = read_placement(o, what);
    if (c.placement && c.weights_location.empty())
        fail(ACCEL_ERR_INVALID_ARGUMENT, what + ": device_map, max_memory, no_split_module_classes, offload_folder and "
                                                "offload_state_dict place a model as it is loaded from "
                                                "\"weights_location\" (Accelerate's load_and_quantize_model); give it, "
                                                "or quantize in memory and then accel_model_dispatch");
    o.finish();
    if (c.load_in_8bit == c.load_in_4bit)
        fail(ACCEL_ERR_INVALID_ARGUMENT, what + (c.load_in_8bit ? ": load_in_8bit and load_in_4bit can't be both true"
                                                                : ": load_in_8bit and load_in_4bit can't be both false"));
    return c;
}

std::optional<BnbQuantizationConfig> parse_hf_quantization_config(const std::string &config_json,
                                                                  const std::string &what)
{
    JsonDocument doc(config_json.c_str(), what);
    JsonObject root(doc.root(), what);
    std::optional<JsonObject> q = root.get_object("quantization_config");
    if (!q) return std::nullopt;
    // Folders written before transformers named the method have none: bitsandbytes was the only one.
    const std::string method = q->get_string("quant_method", "bitsandbytes");
    if (method != "bitsandbytes")
        fail(ACCEL_ERR_UNIMPLEMENTED, q->path_of("quant_method") + ": \"" + method +
                                          "\": accel loads bitsandbytes folders only (load_in_4bit / load_in_8bit)");
    BnbQuantizationConfig c;
    // transformers writes each flag twice (the property and its backing field); either says it.
    // Both read (finish() refuses a key never looked up), then either counts.
    const bool in_4bit = q->get_bool("load_in_4bit", false), field_4bit = q->get_bool("_load_in_4bit", false);
    const bool in_8bit = q->get_bool("load_in_8bit", false), field_8bit = q->get_bool("_load_in_8bit", false);
    c.load_in_4bit = in_4bit || field_4bit;
    c.load_in_8bit = in_8bit || field_8bit;
    c.llm_int8_threshold = q->get_double("llm_int8_threshold", 6.0, 0.0, 1e30);
    c.skip_modules_given = q->has("llm_int8_skip_modules");
    c.skip_modules = q->get_string_array("llm_int8_skip_modules", {});
    // Offloading int8 modules to the CPU in float32 changes nothing here: accel computes on the CPU.
    q->get_bool("llm_int8_enable_fp32_cpu_offload", false);
    if (q->get_bool("llm_int8_has_fp16_weight", false))
        fail(ACCEL_ERR_UNIMPLEMENTED, q->path_of("llm_int8_has_fp16_weight") +
                                          ": true (int8 layers that keep 16-bit weights to train) is not built; "
                                          "accel's int8 layers are frozen");
    c.bnb_4bit_quant_type = q->get_enum("bnb_4bit_quant_type", "fp4", {"fp4", "nf4"});
    c.bnb_4bit_use_double_quant = q->get_bool("bnb_4bit_use_double_quant", false);
    // transformers' default compute dtype is float32 (BitsAndBytesConfig with bnb_4bit_compute_dtype=None).
    const std::string dtype = q->get_enum("bnb_4bit_compute_dtype", "float32", {"float32", "float16", "bfloat16"});
    c.bnb_4bit_compute_dtype = dtype == "float32" ? "fp32" : dtype == "float16" ? "fp16" : "bf16";
    const std::string storage = q->get_string("bnb_4bit_quant_storage", "uint8");
    if (storage != "uint8")
        fail(ACCEL_ERR_UNIMPLEMENTED, q->path_of("bnb_4bit_quant_storage") + ": \"" + storage +
                                          "\" (4-bit codes packed in another dtype, for FSDP) is not read; uint8 is");
    q->finish();
    if (c.load_in_8bit == c.load_in_4bit)
        fail(ACCEL_ERR_INVALID_ARGUMENT, q->path() + (c.load_in_8bit ? ": load_in_8bit and load_in_4bit are both true"
                                                                     : ": neither load_in_8bit nor load_in_4bit is true"));
    return c;
}

std::string hf_config_with_quantization(const std::string &config_json, const BnbQuantizationConfig *c)
{
    cJSON *root = cJSON_Parse(config_json.c_str());
    if (root == nullptr || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        fail(ACCEL_ERR_INTERNAL, "hf_config_json: not a JSON object");
    }
    cJSON_DeleteItemFromObjectCaseSensitive(root, "quantization_config");
    if (c != nullptr) {
        // transformers' BitsAndBytesConfig.to_dict(), in its (sorted) key order.
        // An 8-bit config has no 4-bit compute dtype of its own: transformers' default then.
        const char *dtype = c->load_in_8bit || c->bnb_4bit_compute_dtype == "fp32" ? "float32"
                            : c->bnb_4bit_compute_dtype == "bf16" ? "bfloat16" : "float16";
        cJSON *q = cJSON_AddObjectToObject(root, "quantization_config");
        cJSON_AddBoolToObject(q, "_load_in_4bit", c->load_in_4bit);
        cJSON_AddBoolToObject(q, "_load_in_8bit", c->load_in_8bit);
        cJSON_AddStringToObject(q, "bnb_4bit_compute_dtype", dtype);
        cJSON_AddStringToObject(q, "bnb_4bit_quant_storage", "uint8");
        cJSON_AddStringToObject(q, "bnb_4bit_quant_type", c->bnb_4bit_quant_type.c_str());
        cJSON_AddBoolToObject(q, "bnb_4bit_use_double_quant", c->bnb_4bit_use_double_quant);
        cJSON_AddBoolToObject(q, "llm_int8_enable_fp32_cpu_offload", false);
        cJSON_AddBoolToObject(q, "llm_int8_has_fp16_weight", false);
        cJSON *skip = cJSON_AddArrayToObject(q, "llm_int8_skip_modules");
        for (const auto &m : c->skip_modules) cJSON_AddItemToArray(skip, cJSON_CreateString(m.c_str()));
        cJSON_AddNumberToObject(q, "llm_int8_threshold", c->llm_int8_threshold);
        cJSON_AddBoolToObject(q, "load_in_4bit", c->load_in_4bit);
        cJSON_AddBoolToObject(q, "load_in_8bit", c->load_in_8bit);
        cJSON_AddStringToObject(q, "quant_method", "bitsandbytes");
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (text == nullptr) fail(ACCEL_ERR_RESOURCE_EXHAUSTED, "config.json: out of memory");
    std::string out = std::string(text) + "\n";
    cJSON_free(text);
    return out;
}

QuantStateMeta parse_quant_state_meta(const std::string &text, const std::string &what)
{
    JsonDocument doc(text.c_str(), what);
    JsonObject o(doc.root(), what);
    QuantStateMeta m;
    for (const char *key : {"quant_type", "blocksize", "dtype", "shape"})
        require(o.has(key), ACCEL_ERR_INVALID_ARGUMENT, o.path_of(key) + ": missing");
    m.quant_type = o.get_enum("quant_type", "fp4", {"fp4", "nf4"});
    m.blocksize = o.get_int("blocksize", 64, 64, 4096);
    m.dtype = o.get_enum("dtype", "float32", {"float32", "float16", "bfloat16"});
    m.shape = o.get_int_array("shape", 0, int64_t{1} << 40);
    m.nested = o.has("nested_offset");
    m.nested_blocksize = o.get_int("nested_blocksize", 256, 1, int64_t{1} << 20);
    m.nested_dtype = o.get_enum("nested_dtype", "float32", {"float32"});
    m.nested_offset = o.get_double("nested_offset", 0.0, -1e30, 1e30);
    o.finish();
    return m;
}

std::string quant_state_meta_json(const QuantStateMeta &m)
{
    // Key order of bitsandbytes' as_dict: quant_type, blocksize, dtype, shape, then the nested keys.
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "quant_type", m.quant_type.c_str());
    cJSON_AddNumberToObject(root, "blocksize", static_cast<double>(m.blocksize));
    cJSON_AddStringToObject(root, "dtype", m.dtype.c_str());
    cJSON *shape = cJSON_AddArrayToObject(root, "shape");
    for (int64_t d : m.shape) cJSON_AddItemToArray(shape, cJSON_CreateNumber(static_cast<double>(d)));
    if (m.nested) {
        cJSON_AddNumberToObject(root, "nested_blocksize", static_cast<double>(m.nested_blocksize));
        cJSON_AddStringToObject(root, "nested_dtype", m.nested_dtype.c_str());
        // The shortest text that reads back as the same double, as Python's json.dumps writes a float (cJSON's own
        // printing rounds to 15 digits when those read back close enough).
        if (!std::isfinite(m.nested_offset)) fail(ACCEL_ERR_INTERNAL, "quant_state: a non-finite nested_offset");
        char text[64];
        const auto r = std::to_chars(text, text + sizeof text - 1, m.nested_offset);
        *r.ptr = '\0';
        cJSON_AddRawToObject(root, "nested_offset", text);
    }
    char *s = cJSON_PrintUnformatted(root);
    std::string out = s != nullptr ? s : "";
    cJSON_free(s);
    cJSON_Delete(root);
    if (out.empty()) fail(ACCEL_ERR_RESOURCE_EXHAUSTED, "quant_state: could not print its JSON");
    return out;
}

} // namespace accel::config
