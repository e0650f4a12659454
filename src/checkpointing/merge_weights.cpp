#include "checkpointing/merge_weights.hpp"

#include "common/files.hpp"
#include "common/json_reader.hpp"
#include "checkpointing/safetensors_format.hpp"
#include "checkpointing/sharded_folder.hpp"
#include "common/error.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <map>
#include <memory>
#include <set>

namespace accel::ckpt {

std::vector<std::pair<std::string, std::string>> index_weight_map(const std::string &index_path)
{
    std::string text = read_small_file(index_path, 256u << 20);
    JsonValue root = parse_json(text.data(), text.size(), index_path);
    if (root.kind != JsonValue::Kind::Object) fail(ACCEL_ERR_DATA_LOSS, index_path + ": not a JSON object");
    // Either the full object (use weight_map) or a bare name -> file map, as load_checkpoint_in_model.
    const JsonValue *map = root.find("weight_map");
    if (map == nullptr) map = &root;
    if (map->kind != JsonValue::Kind::Object) fail(ACCEL_ERR_DATA_LOSS, index_path + ": weight_map is not an object");
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto &[name, v] : map->members) {
        if (v.kind != JsonValue::Kind::String)
            fail(ACCEL_ERR_DATA_LOSS, index_path + ": weight_map[\"" + name + "\"] is not a file name");
        if (v.text.empty() || v.text.find('/') != std::string::npos || v.text == "." || v.text == "..")
            fail(ACCEL_ERR_DATA_LOSS, index_path + ": weight_map[\"" + name + "\"] = \"" + v.text +
                                          "\" is not a plain file name in the index's folder");
        out.emplace_back(name, v.text);
    }
    return out;
}

std::vector<std::string> index_shard_files(const std::string &index_path)
{
    std::set<std::string> files;
    for (const auto &entry : index_weight_map(index_path)) files.insert(entry.second);
    return {files.begin(), files.end()};
}

namespace {

// Writes the entries' header and data into a temporary sibling of `output`, then renames it into place.
void write_merged(const std::vector<MergedTensor> &tensors, const std::string &output)
{
    std::vector<StWriteEntry> entries;
    std::map<std::string, size_t> index;
    for (size_t i = 0; i < tensors.size(); ++i) {
        StWriteEntry e;
        e.name = tensors[i].name;
        e.dtype = tensors[i].dtype;
        e.shape = tensors[i].shape;
        e.nbytes = tensors[i].nbytes();
        index[e.name] = i;
        entries.push_back(std::move(e));
    }
    StringMap meta{{"format", "pt"}};
    std::string header = build_st_header(entries, &meta); // orders `entries` as the reference writer does
    const std::string tmp = join(parent_of(output), "." + basename_of(output) + ".accel-tmp");
    {
        OutFile f(tmp);
        f.write(header.data(), header.size());
        for (const auto &e : entries)
            for (const auto &[data, len] : tensors[index.at(e.name)].spans) f.write(data, len);
        f.close();
    }
    if (std::rename(tmp.c_str(), output.c_str()) != 0) fail_errno(errno, "cannot rename to", output);
    fsync_dir(parent_of(output));
}

} // namespace

uint64_t MergedTensor::nbytes() const
{
    uint64_t n = 0;
    for (const auto &span : spans) n += span.second;
    return n;
}

MergeSource::MergeSource(const std::string &input)
{
    // A checkpoint folder of save_state with SHARDED_STATE_DICT, or its pytorch_model_fsdp_{i} folder.
    std::string sharded;
    if (is_sharded_folder(input)) {
        sharded = input;
    } else if (is_sharded_folder(join(input, sharded_model_folder(0)))) {
        if (is_dir(join(input, sharded_model_folder(1))))
            fail(ACCEL_ERR_INVALID_ARGUMENT, "\"" + input + "\" holds the weights of several models (" +
                                                 sharded_model_folder(0) + ", " + sharded_model_folder(1) +
                                                 ", ...); name the folder of the one to merge");
        sharded = join(input, sharded_model_folder(0));
    }
    if (!sharded.empty()) {
        // Each tensor's pieces, in offset order, are its bytes (saved under tp: the runs of each slice's pieces
        // that make up the whole tensor; the vocabulary's padding rows are left out).
        folder_ = std::make_unique<ShardedFolder>(sharded);
        const auto &meta = folder_->meta().tensors;
        for (size_t i = 0; i < meta.size(); ++i)
            tensors_.push_back({meta[i].name, meta[i].dtype, meta[i].shape, folder_->whole_spans(i)});
        return;
    }
    std::string index = input;
    if (is_dir(input)) {
        index = join(input, "model.safetensors.index.json");
        if (!exists(index)) {
            if (exists(join(input, "pytorch_model.bin.index.json")))
                fail(ACCEL_ERR_UNIMPLEMENTED, "\"" + input + "\" holds pickle shards (pytorch_model.bin.index.json); "
                                              "merge-weights joins safetensors shards only");
            for (const auto &name : list_dir(input))
                if (name.find("_rank") != std::string::npos && name.size() > 4 && name.substr(name.size() - 4) == ".bin")
                    fail(ACCEL_ERR_UNIMPLEMENTED, "\"" + input + "\" holds per-rank pickles (" + name +
                                                  ", Accelerate's use_dcp=False layout); accel merges its own "
                                                  "SHARDED_STATE_DICT folders and safetensors shards");
            fail(ACCEL_ERR_NOT_FOUND, "\"" + input + "\" has no model.safetensors.index.json");
        }
    }
    const std::string dir = parent_of(index);
    std::set<std::string> names;
    for (const auto &file : index_shard_files(index)) {
        const std::string path = join(dir, file);
        maps_.push_back(std::make_unique<MappedFile>(path));
        const MappedFile &m = *maps_.back();
        StHeader h = parse_st_header(m.data(), m.size(), path);
        for (const auto &t : h.tensors) {
            if (!names.insert(t.name).second)
                fail(ACCEL_ERR_DATA_LOSS, path + ": tensor \"" + t.name + "\" also appears in another shard");
            tensors_.push_back({t.name, t.dtype, t.shape, {{m.data() + h.data_start() + t.begin, t.nbytes()}}});
        }
    }
}

MergeSource::~MergeSource() = default;

size_t merge_safetensors_shards(const std::string &input, const std::string &output)
{
    const MergeSource source(input);
    write_merged(source.tensors(), output);
    return source.tensors().size();
}

} // namespace accel::ckpt
