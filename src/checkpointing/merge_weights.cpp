#include "checkpointing/merge_weights.hpp"

#include "common/files.hpp"
#include "common/json_reader.hpp"
#include "checkpointing/safetensors_format.hpp"
#include "common/error.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <memory>
#include <set>

namespace accel::ckpt {

std::vector<std::string> index_shard_files(const std::string &index_path)
{
    std::string text = read_small_file(index_path, 256u << 20);
    JsonValue root = parse_json(text.data(), text.size(), index_path);
    if (root.kind != JsonValue::Kind::Object) fail(ACCEL_ERR_DATA_LOSS, index_path + ": not a JSON object");
    // Either the full object (use weight_map) or a bare name -> file map, as load_checkpoint_in_model.
    const JsonValue *map = root.find("weight_map");
    if (map == nullptr) map = &root;
    if (map->kind != JsonValue::Kind::Object) fail(ACCEL_ERR_DATA_LOSS, index_path + ": weight_map is not an object");
    std::set<std::string> files;
    for (const auto &[name, v] : map->members) {
        if (v.kind != JsonValue::Kind::String)
            fail(ACCEL_ERR_DATA_LOSS, index_path + ": weight_map[\"" + name + "\"] is not a file name");
        if (v.text.empty() || v.text.find('/') != std::string::npos || v.text == "." || v.text == "..")
            fail(ACCEL_ERR_DATA_LOSS, index_path + ": weight_map[\"" + name + "\"] = \"" + v.text +
                                          "\" is not a plain file name in the index's folder");
        files.insert(v.text);
    }
    return {files.begin(), files.end()};
}

size_t merge_safetensors_shards(const std::string &input, const std::string &output)
{
    std::string index = input;
    if (is_dir(input)) {
        index = join(input, "model.safetensors.index.json");
        if (!exists(index)) {
            if (exists(join(input, "pytorch_model.bin.index.json")))
                fail(ACCEL_ERR_UNIMPLEMENTED, "\"" + input + "\" holds pickle shards (pytorch_model.bin.index.json); "
                                              "merge-weights joins safetensors shards only");
            for (const auto &name : list_dir(input))
                if (name.find("_rank") != std::string::npos && name.size() > 4 && name.substr(name.size() - 4) == ".bin")
                    fail(ACCEL_ERR_UNIMPLEMENTED, "\"" + input + "\" holds per-rank shards (" + name +
                                                  "), which sharded training will write; merging them is not yet "
                                                  "supported by accel");
            fail(ACCEL_ERR_NOT_FOUND, "\"" + input + "\" has no model.safetensors.index.json");
        }
    }
    const std::string dir = parent_of(index);
    std::vector<std::unique_ptr<MappedFile>> maps;
    std::vector<StWriteEntry> entries;
    std::set<std::string> names;
    for (const auto &file : index_shard_files(index)) {
        const std::string path = join(dir, file);
        maps.push_back(std::make_unique<MappedFile>(path));
        const MappedFile &m = *maps.back();
        StHeader h = parse_st_header(m.data(), m.size(), path);
        for (const auto &t : h.tensors) {
            if (!names.insert(t.name).second)
                fail(ACCEL_ERR_DATA_LOSS, path + ": tensor \"" + t.name + "\" also appears in another shard");
            StWriteEntry e;
            e.name = t.name;
            e.dtype = t.dtype;
            e.shape = t.shape;
            e.nbytes = t.nbytes();
            e.data = m.data() + h.data_start() + t.begin;
            entries.push_back(std::move(e));
        }
    }
    StringMap meta{{"format", "pt"}};
    std::string header = build_st_header(entries, &meta);
    const std::string tmp = join(parent_of(output), "." + basename_of(output) + ".accel-tmp");
    {
        OutFile f(tmp);
        f.write(header.data(), header.size());
        for (const auto &e : entries)
            if (e.nbytes > 0) f.write(e.data, e.nbytes);
        f.close();
    }
    if (std::rename(tmp.c_str(), output.c_str()) != 0) fail_errno(errno, "cannot rename to", output);
    fsync_dir(parent_of(output));
    return entries.size();
}

} // namespace accel::ckpt
