// `accel estimate-memory MODEL [--dtypes ...]`: the memory a model needs to load and to train with Adam,
// laid out and computed as `accelerate estimate-memory` does (spec: cli-and-launch.md §5). MODEL is what
// accel can read without a model hub: a JSON model spec (a file, or the JSON text itself), a TorchScript
// file, or safetensors weights (a file, an index, or a folder holding either; only headers are read).
#include "checkpointing/merge_weights.hpp"
#include "checkpointing/safetensors_format.hpp"
#include "cli/commands.hpp"
#include "common/error.hpp"
#include "common/files.hpp"
#include "common/json_reader.hpp"

#include <accel/big_modeling.h>
#include <accel/model.h>
#include <accel/tensor.h>
#include <accel/status.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace accel::cli {

namespace {

const char *kEstimateUsage =
    "usage: accel estimate-memory MODEL [--dtypes DTYPE ...]\n"
    "\n"
    "Prints, per dtype, the largest layer, the total size and the memory to train with Adam, as\n"
    "`accelerate estimate-memory` does (sizes are the float32 model's divided by 1, 2, 4 or 8; training with\n"
    "Adam is 4x the float32 size, 2x for float16/bfloat16, N/A for int8/int4).\n"
    "\n"
    "MODEL: a JSON model spec (a .json file, or the JSON text, e.g. '{\"type\": \"gpt\"}'), a TorchScript\n"
    "file, or safetensors weights: model.safetensors, model.safetensors.index.json, or a folder holding one.\n"
    "A JSON spec or TorchScript file is built to count its parameters (a spec with \"empty_init\": true\n"
    "without their memory); safetensors\n"
    "weights are counted from their headers only. A layer is a module that owns parameters directly; a\n"
    "GPT-2 block (transformer.h.<i>) or Llama decoder layer (model.layers.<i>) counts as one layer, as\n"
    "transformers' _no_split_modules makes it.\n"
    "\n"
    "  --dtypes   any of float32 float16 bfloat16 int8 int4 (default: float32 float16 int8 int4)\n"
    "\n"
    "Exit status: 0; 1 when MODEL cannot be read; 2 bad arguments.\n";

struct Tensor {
    std::string name;
    uint64_t numel = 0;
};

// The module a parameter belongs to, for "largest layer": its name without the last part, except that
// decoder blocks are one layer: GPT-2's "...h.<i>.…" and the Llama family's "...layers.<i>.…" (transformers'
// _no_split_modules: GPT2Block, LlamaDecoderLayer).
std::string layer_of(const std::string &name)
{
    for (const std::string list : {"h.", "layers."}) {
        // "<list><digits>." at the start of the name or after a dot.
        for (size_t pos = name.find(list); pos != std::string::npos; pos = name.find(list, pos + 1)) {
            if (pos > 0 && name[pos - 1] != '.') continue;
            size_t end = pos + list.size();
            while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
            if (end > pos + list.size() && end < name.size() && name[end] == '.') return name.substr(0, end);
        }
    }
    auto dot = name.rfind('.');
    return dot == std::string::npos ? name : name.substr(0, dot);
}

std::vector<Tensor> from_safetensors(const std::string &model)
{
    std::vector<std::string> files;
    std::string index = model;
    if (is_dir(model)) {
        index = join(model, "model.safetensors.index.json");
        if (!exists(index)) {
            const std::string single = join(model, "model.safetensors");
            if (!exists(single)) fail(ACCEL_ERR_NOT_FOUND, "\"" + model + "\" has neither model.safetensors nor "
                                                            "model.safetensors.index.json");
            files.push_back(single);
        }
    }
    if (files.empty()) {
        if (index.size() > 5 && index.compare(index.size() - 5, 5, ".json") == 0) {
            for (const auto &f : ckpt::index_shard_files(index)) files.push_back(join(parent_of(index), f));
        } else {
            files.push_back(model);
        }
    }
    std::vector<Tensor> out;
    for (const auto &path : files) {
        MappedFile m(path); // pages of the header only are touched
        ckpt::StHeader h = ckpt::parse_st_header(m.data(), m.size(), path);
        for (const auto &t : h.tensors) out.push_back({t.name, ckpt::st_numel(t.shape, path)});
    }
    return out;
}

std::vector<Tensor> from_model(const std::string &model)
{
    std::string spec;
    const bool inline_json = !model.empty() && model[0] == '{';
    const bool json_file = model.size() > 5 && model.compare(model.size() - 5, 5, ".json") == 0;
    accel_model_t *m = nullptr;
    accel_status_t st;
    if (inline_json || json_file) {
        spec = inline_json ? model : read_small_file(model, 16u << 20);
        st = accel_model_create_from_json(spec.c_str(), &m);
    } else {
        st = accel_model_create_from_torchscript(model.c_str(), &m);
    }
    if (st != ACCEL_OK) fail(st, accel_last_error_message());
    // Each parameter's element count from compute_module_sizes at int8 (min(1 byte, its element size) each): it
    // reads shapes only, so a spec with "empty_init": true (parameters on the meta device) is counted too.
    char *sizes_json = nullptr;
    if (accel_model_compute_module_sizes(m, "{\"dtype\": \"int8\"}", &sizes_json) != ACCEL_OK) {
        accel_model_free(m);
        fail(ACCEL_ERR_INTERNAL, std::string("reading the model's parameters: ") + accel_last_error_message());
    }
    const std::string text(sizes_json);
    accel_string_free(sizes_json);
    const JsonValue doc = parse_json(text.data(), text.size(), "module sizes");
    const JsonValue *sizes = doc.find("sizes");
    std::vector<Tensor> out;
    size_t n = 0;
    if (accel_model_get_num_parameters(m, &n) != ACCEL_OK) n = 0;
    for (size_t i = 0; i < n; ++i) {
        const char *name = nullptr;
        const JsonValue *numel = nullptr;
        if (accel_model_get_parameter_name(m, i, &name) == ACCEL_OK && sizes != nullptr) numel = sizes->find(name);
        if (numel == nullptr || !numel->is_uint) {
            accel_model_free(m);
            fail(ACCEL_ERR_INTERNAL, std::string("reading the model's parameters: no size for ") + (name ? name : "?"));
        }
        out.push_back({name, numel->uint_value});
    }
    accel_model_free(m);
    return out;
}

// Accelerate's convert_bytes: divide by 1024 until below it, Python's round(x, 2) and a unit name.
std::string convert_bytes(double size)
{
    static const char *units[] = {"bytes", "KB", "MB", "GB", "TB", "PB"};
    int u = 0;
    while (size >= 1024.0 && u < 5) {
        size /= 1024.0;
        ++u;
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.2f", std::round(size * 100.0) / 100.0);
    std::string s = buf; // Python prints round(2.5, 2) as 2.5 and round(2.0, 2) as 2.0
    while (s.size() > 1 && s.back() == '0' && s[s.size() - 2] != '.') s.pop_back();
    return s + " " + units[u];
}

// Python's str.center: the extra space, if any, goes to the right unless the free width is odd and the
// text length is odd too (CPython: left = pad / 2 + (pad & width & 1)).
std::string center(const std::string &text, size_t width)
{
    if (text.size() >= width) return text;
    const size_t pad = width - text.size();
    const size_t left = pad / 2 + (pad & width & 1);
    return std::string(left, ' ') + text + std::string(pad - left, ' ');
}

std::string repeat(const char *s, size_t n)
{
    std::string out;
    for (size_t i = 0; i < n; ++i) out += s;
    return out;
}

void print_table(const std::string &title, const std::vector<std::string> &headers,
                 const std::vector<std::vector<std::string>> &rows)
{
    std::vector<size_t> w(headers.size());
    for (size_t i = 0; i < headers.size(); ++i) {
        w[i] = headers[i].size() + 2;
        for (const auto &r : rows) w[i] = std::max(w[i], r[i].size() + 2);
    }
    size_t inner = w.size() - 1;
    for (size_t x : w) inner += x;
    if (title.size() + 2 > inner) {
        w.back() += title.size() + 2 - inner;
        inner = title.size() + 2;
    }
    auto line = [&](const char *l, const char *mid, const char *r) {
        std::string s = l;
        for (size_t i = 0; i < w.size(); ++i) s += repeat("─", w[i]) + (i + 1 < w.size() ? mid : "");
        return s + r;
    };
    auto row = [&](const std::vector<std::string> &cells) {
        std::string s = "│";
        for (size_t i = 0; i < w.size(); ++i) s += center(cells[i], w[i]) + "│";
        return s;
    };
    std::printf("%s\n", (std::string("┌") + repeat("─", inner) + "┐").c_str());
    std::printf("│%s│\n", center(title, inner).c_str());
    std::printf("%s\n%s\n%s\n", line("├", "┬", "┤").c_str(), row(headers).c_str(), line("├", "┼", "┤").c_str());
    for (const auto &r : rows) std::printf("%s\n", row(r).c_str());
    std::printf("%s\n", line("└", "┴", "┘").c_str());
}

} // namespace

int estimate_memory_main(int argc, char **argv)
{
    std::string model;
    std::vector<std::string> dtypes;
    bool in_dtypes = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help") {
            std::fputs(kEstimateUsage, stdout);
            return 0;
        }
        if (a == "--dtypes") {
            in_dtypes = true;
        } else if (in_dtypes && a.rfind("--", 0) != 0) {
            if (a != "float32" && a != "float16" && a != "bfloat16" && a != "int8" && a != "int4") {
                std::fprintf(stderr, "accel estimate-memory: --dtypes: unknown dtype \"%s\" (float32, float16, bfloat16, "
                                     "int8, int4)\n", a.c_str());
                return 2;
            }
            dtypes.push_back(a);
        } else if (a.rfind("--", 0) == 0) {
            std::fprintf(stderr, "accel estimate-memory: unknown option %s\n%s", a.c_str(), kEstimateUsage);
            return 2;
        } else if (model.empty()) {
            model = a;
            in_dtypes = false;
        } else {
            std::fprintf(stderr, "accel estimate-memory: one MODEL expected, got also \"%s\"\n", a.c_str());
            return 2;
        }
    }
    if (model.empty()) {
        std::fputs(kEstimateUsage, stderr);
        return 2;
    }
    if (in_dtypes && dtypes.empty()) {
        std::fprintf(stderr, "accel estimate-memory: --dtypes needs at least one dtype\n");
        return 2;
    }
    if (dtypes.empty()) dtypes = {"float32", "float16", "int8", "int4"};

    std::vector<Tensor> tensors;
    try {
        const bool inline_json = model[0] == '{';
        const bool safetensors = !inline_json && (is_dir(model) || (model.size() > 12 && model.find(".safetensors") != std::string::npos));
        if (!inline_json && !exists(model)) fail(ACCEL_ERR_NOT_FOUND, "\"" + model + "\" does not exist");
        tensors = safetensors ? from_safetensors(model) : from_model(model);
    } catch (const Error &e) {
        std::fprintf(stderr, "accel estimate-memory: %s: %s\n", accel_status_name(e.code()), e.what());
        return 1;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "accel estimate-memory: %s\n", e.what());
        return 1;
    }
    // float32 bytes, as Accelerate builds the model in float32 and divides for other dtypes.
    double total = 0;
    std::map<std::string, double> layers;
    for (const auto &t : tensors) {
        total += 4.0 * static_cast<double>(t.numel);
        layers[layer_of(t.name)] += 4.0 * static_cast<double>(t.numel);
    }
    double largest = 0;
    for (const auto &l : layers) largest = std::max(largest, l.second);

    std::vector<std::vector<std::string>> rows;
    for (const auto &d : dtypes) {
        const double div = d == "float32" ? 1 : (d == "float16" || d == "bfloat16") ? 2 : d == "int8" ? 4 : 8;
        const std::string train = d == "float32" ? convert_bytes(4 * total)
                                  : (d == "float16" || d == "bfloat16") ? convert_bytes(2 * total)
                                                                        : "N/A";
        rows.push_back({d, convert_bytes(largest / div), convert_bytes(total / div), train});
    }
    print_table("Memory Usage for loading `" + model + "`", {"dtype", "Largest Layer", "Total Size", "Training using Adam"},
                rows);
    return 0;
}

} // namespace accel::cli
