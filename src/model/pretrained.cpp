#include "model/pretrained.hpp"

#include "checkpointing/checkpointing.hpp"
#include "checkpointing/mapped_tensor.hpp"
#include "checkpointing/merge_weights.hpp"
#include "common/error.hpp"
#include "common/files.hpp"
#include "config/bnb_quantization_config.hpp"
#include "config/pretrained_config.hpp"
#include "model/lora.hpp"
#include "parallel/fsdp/zero_init.hpp"
#include "parallel/pipeline/stage_init.hpp"
#include "quantization/quantize_model.hpp"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>

namespace accel {

namespace {

// config.json's limit: larger is not a config.
constexpr size_t kMaxConfigBytes = 16u << 20;

// A folder's weights, each tensor with the file it came from (messages name both).
struct FolderWeights {
    NamedTensors tensors;
    std::map<std::string, std::string> file_of; // tensor name -> file path
    std::vector<std::string> files;
};

void add_file(FolderWeights &w, const std::string &path)
{
    for (auto &[name, t] : ckpt::read_weights_file(path)) {
        auto [it, fresh] = w.file_of.emplace(name, path);
        if (!fresh)
            fail(ACCEL_ERR_DATA_LOSS, "tensor \"" + name + "\" is in both " + it->second + " and " + path);
        w.tensors.emplace_back(name, std::move(t));
    }
    w.files.push_back(path);
}

// Reads one index's shards (every listed shard must exist and hold what the index says it does).
void add_index(FolderWeights &w, const std::string &dir, const std::string &index)
{
    const auto weight_map = ckpt::index_weight_map(index);
    std::set<std::string> read;
    for (const auto &[name, file] : weight_map) {
        if (!read.insert(file).second) continue;
        const std::string path = join(dir, file);
        if (!exists(path))
            fail(ACCEL_ERR_NOT_FOUND, index + ": tensor \"" + name + "\" is in shard " + file + ", which does not exist");
        add_file(w, path);
    }
    for (const auto &[name, file] : weight_map)
        if (w.file_of.count(name) == 0)
            fail(ACCEL_ERR_DATA_LOSS, index + ": tensor \"" + name + "\" is listed in " + file + ", which does not hold it");
}

// transformers' order (modeling_utils): model.safetensors, a safetensors index, pytorch_model.bin, a torch index; so a
// folder holding both a whole file and shards (a sharded save over an older whole one) reads as transformers reads it.
FolderWeights read_folder_weights(const std::string &dir)
{
    FolderWeights w;
    for (const char *file : {"model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                             "pytorch_model.bin.index.json"}) {
        const std::string path = join(dir, file);
        if (!exists(path)) continue;
        if (std::string(file).find(".index.json") != std::string::npos) add_index(w, dir, path);
        else add_file(w, path);
        return w;
    }
    fail(ACCEL_ERR_NOT_FOUND, "path: \"" + dir + "\" holds no weights (model.safetensors, model.safetensors.index.json, "
                                                 "pytorch_model.bin or pytorch_model.bin.index.json)");
}

const char *dtype_name(at::ScalarType t)
{
    switch (t) {
    case at::kBFloat16: return "bfloat16";
    case at::kHalf: return "float16";
    case at::kDouble: return "float64";
    default: return "float32";
    }
}

at::ScalarType scalar_type(accel_dtype_t d)
{
    switch (d) {
    case ACCEL_DTYPE_BFLOAT16: return at::kBFloat16;
    case ACCEL_DTYPE_FLOAT16: return at::kHalf;
    case ACCEL_DTYPE_FLOAT64: return at::kDouble;
    default: return at::kFloat;
    }
}

// The dtype the model takes: torch_dtype when given, else the stored weights' (transformers' "auto": the
// first floating-point tensor's), else float32.
at::ScalarType target_dtype(const FolderWeights &w, const config::FromPretrainedOptions &o)
{
    if (o.torch_dtype) return scalar_type(*o.torch_dtype);
    // A pre-quantized folder's statistics are float32 whatever the model's dtype.
    for (const auto &e : w.tensors)
        if (at::isFloatingType(e.second.scalar_type()) && !is_quant_state_name(e.first)) return e.second.scalar_type();
    return at::kFloat;
}

// nn.Module.to(dtype) for the floating-point parameters and buffers, in place: the tensor objects stay the
// same (the model's layers hold them), only their data changes. A partitioned parameter converts its slice.
void convert_floating(Model &model, at::ScalarType dtype, parallel::PartitionedAtInit *partitioned)
{
    at::NoGradGuard no_grad;
    // LoRA adapters stay float32 over a 16-bit base, as PEFT keeps them (autocast_adapter_dtype).
    const std::set<std::string> adapters = adapter_parameter_names(model);
    for (const auto *list : {&model.named_parameters(), &model.named_buffers()})
        for (const auto &e : *list)
            if (e.second.defined() && at::isFloatingType(e.second.scalar_type()) && e.second.scalar_type() != dtype &&
                adapters.count(e.first) == 0) {
                if (partitioned != nullptr && partitioned->holds(e.second)) partitioned->convert(e.second, dtype);
                else const_cast<at::Tensor &>(e.second).set_data(e.second.to(dtype));
            }
}

std::string file_of(const FolderWeights &w, const std::string &name)
{
    auto it = w.file_of.find(name);
    return it == w.file_of.end() ? std::string("?") : it->second;
}

// Shapes first, each mismatch naming the tensor and its file (transformers' "size mismatch" error).
void check_shapes(const Model &model, const FolderWeights &w)
{
    for (const auto &[name, t] : w.tensors) {
        const at::Tensor *dst = model.find_tensor(name);
        if (dst != nullptr && dst->sizes() != t.sizes())
            fail(ACCEL_ERR_INVALID_ARGUMENT, "tensor \"" + name + "\" in " + file_of(w, name) + " has shape " +
                                                 c10::str(t.sizes()) + ", the model's is " + c10::str(dst->sizes()));
    }
}

void check_strict(const LoadReport &report, const FolderWeights &w, const std::string &dir)
{
    if (!report.unexpected.empty())
        fail(ACCEL_ERR_INVALID_ARGUMENT, "tensor \"" + report.unexpected[0] + "\" in " + file_of(w, report.unexpected[0]) +
                                             " is not a tensor of the model" +
                                             (report.unexpected.size() > 1 ? " (and " + std::to_string(report.unexpected.size() - 1) + " more)" : "") +
                                             "; {\"strict\": false} skips such tensors");
    if (!report.missing.empty()) {
        std::string files;
        for (const auto &f : w.files) files += (files.empty() ? "" : ", ") + basename_of(f);
        fail(ACCEL_ERR_INVALID_ARGUMENT, "tensor \"" + report.missing[0] + "\" of the model is in none of the weight files of " +
                                             dir + " (" + files + ")" +
                                             (report.missing.size() > 1 ? " (and " + std::to_string(report.missing.size() - 1) + " more missing)" : "") +
                                             "; {\"strict\": false} keeps such tensors as initialised");
    }
}

std::shared_ptr<Model> build(const std::string &dir, const config::FromPretrainedOptions &options,
                             const std::shared_ptr<parallel::PartitionedAtInit> &partitioned, bool quantized)
{
    const std::string config_path = join(dir, "config.json");
    if (!exists(config_path)) fail(ACCEL_ERR_NOT_FOUND, "path: \"" + dir + "\" has no config.json");
    std::string text = read_small_file(config_path, kMaxConfigBytes);
    // The quantization is applied after building (quantize_for_folder); the model's own config is the float one,
    // and save_pretrained writes the quantization its layers have.
    if (quantized) text = config::hf_config_with_quantization(text, nullptr);
    // A quantized model is built on meta and its layers made quantized there, so that the float model never
    // takes memory (transformers builds it under init_empty_weights too): loading gives the tensors memory.
    std::vector<std::pair<std::string, std::string>> model_options = options.model_options;
    if (quantized) {
        model_options.erase(std::remove_if(model_options.begin(), model_options.end(),
                                           [](const auto &kv) { return kv.first == "empty_init"; }),
                            model_options.end());
        model_options.emplace_back("empty_init", "true");
    }
    const std::string spec = config::spec_from_hf_config(text, config_path, model_options);
    ParameterFn partition;
    if (partitioned) partition = [&partitioned](const at::Tensor &p) { partitioned->partition(p); };
    try {
        return make_model_from_json(spec.c_str(), partition);
    } catch (const Error &e) {
        throw Error(e.code(), config_path + ": " + e.what());
    }
}

// config.json's "quantization_config" (a folder saved quantized by transformers or accel), read before anything is
// built so that another quant_method is refused at once.
std::optional<config::BnbQuantizationConfig> folder_quantization(const std::string &dir)
{
    const std::string path = join(dir, "config.json");
    if (!exists(path)) return std::nullopt; // build() says so
    return config::parse_hf_quantization_config(read_small_file(path, kMaxConfigBytes), path);
}

// A pre-quantized folder: the model built from config.json takes the folder's dtype and has the layers the config
// names quantized (transformers' replace_with_bnb_linear before loading), so that the folder's bitsandbytes
// tensors (weight, absmax, quant_map, nested_*, quant_state, SCB) load into tensors of their shapes.
// The model is on meta (build), so the layers are made in structure only; `w` is null for empty_init (no weights
// read: the model stays on meta, in torch_dtype or float32).
void quantize_for_folder(Model &model, const config::BnbQuantizationConfig &c, FolderWeights *w,
                         const config::FromPretrainedOptions &options, const std::string &dir)
{
    const std::string what = join(dir, "config.json") + ": quantization_config";
    if (w != nullptr) tensors_from_bnb_folder(w->tensors, [w](const std::string &name) { return file_of(*w, name); });
    const at::ScalarType dtype =
        w != nullptr ? target_dtype(*w, options) : options.torch_dtype ? scalar_type(*options.torch_dtype) : at::kFloat;
    convert_floating(model, dtype, nullptr);
    try {
        quantize_model(model, c);
    } catch (const Error &e) {
        throw Error(e.code(), what + ": " + e.what());
    }
}

} // namespace

PretrainedModel from_pretrained(const std::string &dir_in, const config::FromPretrainedOptions &options)
{
    const std::string dir = normalize_path(dir_in);
    if (!exists(dir)) fail(ACCEL_ERR_NOT_FOUND, "path: \"" + dir + "\" does not exist");
    if (!is_dir(dir)) fail(ACCEL_ERR_INVALID_ARGUMENT, "path: \"" + dir + "\" is a file; from_pretrained reads a folder");
    // zero3_init_flag (as accel_model_create_from_json) or FSDP's cpu_ram_efficient_loading: built partitioned
    // while such an accelerator lives.
    auto partitioned = parallel::PartitionedAtInit::for_new_model(true);
    const std::optional<config::BnbQuantizationConfig> quantization = folder_quantization(dir);
    if (quantization && partitioned)
        fail(ACCEL_ERR_UNIMPLEMENTED, join(dir, "config.json") + ": quantization_config: a pre-quantized folder is not "
                                      "loaded partitioned (" + partitioned->flag() + "; Accelerate refuses a quantized "
                                      "model under DeepSpeed and FSDP)");
    PretrainedModel out;
    out.model = build(dir, options, quantization ? nullptr : partitioned, quantization.has_value());
    Model &model = *out.model;
    if (quantization && options.empty_init) quantize_for_folder(model, *quantization, nullptr, options, dir);
    if (options.empty_init) {
        // No weights are read: the model is config.json's, on the meta device, in torch_dtype (float32 for "auto",
        // as transformers' from_config).
        if (options.torch_dtype && !quantization) convert_floating(model, scalar_type(*options.torch_dtype), nullptr);
        return out;
    }
    // The model's files are read once they are known to match what config.json built (a mapped safetensors
    // file is paged in only where a copy reads it).
    FolderWeights w = read_folder_weights(dir);
    const bool sliced = partitioned && partitioned->holds_any();
    // Built as a pipeline stage (stage_init.hpp): the other stages' tensors are never read.
    const std::shared_ptr<parallel::pp::StageAtInit> stage = parallel::pp::StageAtInit::of(model);
    const auto elsewhere = [&stage, &model](const std::string &name) {
        const at::Tensor *t = model.find_tensor(name);
        return stage && t != nullptr && stage->elsewhere(*t);
    };
    if (stage)
        w.tensors.erase(std::remove_if(w.tensors.begin(), w.tensors.end(), [&](const auto &e) { return elsewhere(e.first); }),
                        w.tensors.end());
    if (quantization) quantize_for_folder(model, *quantization, &w, options, dir);
    check_shapes(model, w);
    if (!quantization) convert_floating(model, target_dtype(w, options), sliced ? partitioned.get() : nullptr);
    std::vector<std::pair<at::Tensor, at::Tensor>> copies;
    out.report = model.load_state_dict(w.tensors, false, [&copies](const at::Tensor &dst, const at::Tensor &src) {
        copies.emplace_back(dst, src);
    });
    // LoRA adapters are new tensors (a "lora" option): no base folder holds them, as with PEFT's get_peft_model.
    const std::set<std::string> adapters = adapter_parameter_names(model);
    auto &missing = out.report.missing;
    missing.erase(std::remove_if(missing.begin(), missing.end(),
                                 [&](const auto &n) { return adapters.count(n) != 0 || elsewhere(n); }),
                  missing.end());
    if (options.strict) check_strict(out.report, w, dir);
    ckpt::CopyBatch batch;
    for (auto &[dst, src] : copies) {
        // Partitioned: this process's slice only, out of the file (the rest is never read).
        if (sliced && partitioned->holds(dst)) {
            int64_t offset = 0;
            const at::Tensor mine = partitioned->slice_of(dst, offset);
            // A range of a mapped file's tensor: CopyBatch preads just those bytes (not through the map).
            batch.add(mine, src.reshape({-1}).narrow(0, offset, mine.numel()));
        } else {
            batch.add(dst, src);
        }
    }
    batch.run();
    // A damaged or mismatched quantization state fails here, naming its tensor, not in the first forward.
    if (quantization) check_quantized_layers(model);
    if (!options.adapter.empty()) {
        if (sliced)
            fail(ACCEL_ERR_UNIMPLEMENTED, std::string("options.adapter: under ") + partitioned->flag() +
                                              " (a partitioned model); load the adapter without the flag, or give a "
                                              "\"lora\" option and load_state");
        load_adapter(model, options.adapter);
    }
    if (sliced) model.forward_hooks = partitioned;
    return out;
}

void write_pretrained(const Model &model, const std::string &dir, const config::SaveModelOptions &options)
{
    // LoRA: PEFT's adapter folder alone, or the weights with the adapters merged in (merge_and_unload).
    if (options.adapter_only) return save_adapter(model, dir);
    const NamedTensors sd = options.merge ? merged_state_dict(model) : model.state_dict(options.safe_serialization);
    ckpt::write_model_weights(dir, sd, options.safe_serialization, options.max_shard_size);
    write_pretrained_config(model, dir);
}

void write_pretrained_config(const Model &model, const std::string &dir)
{
    std::string hf = model.hf_config_json();
    if (hf.empty()) return;
    at::ScalarType dtype = at::kFloat;
    for (const auto &e : model.named_parameters())
        if (at::isFloatingType(e.second.scalar_type())) {
            dtype = e.second.scalar_type();
            break;
        }
    hf = config::hf_config_with_dtype(hf, dtype_name(dtype));
    // transformers' quantization_config of a quantized model (reads only: linear_slots is not const).
    const auto quantization = quantization_config_of(const_cast<Model &>(model));
    hf = config::hf_config_with_quantization(hf, quantization ? &*quantization : nullptr);
    write_file_durably(join(dir, "config.json"), hf.data(), hf.size());
}

} // namespace accel
