// transformers' PreTrainedModel.from_pretrained / save_pretrained over accel's models: a Hugging Face
// folder (config.json + model.safetensors, shards with model.safetensors.index.json, or pytorch_model.bin
// with or without its index) becomes the model config.json describes, with the folder's weights.
#pragma once

#include "model/model.hpp"

#include <memory>
#include <string>

namespace accel {

namespace config {
struct FromPretrainedOptions;
struct SaveModelOptions;
}

struct PretrainedModel {
    std::shared_ptr<Model> model;
    LoadReport report; // what did not match (empty when strict: a mismatch is an error naming tensor and file)
};

// Builds the model of `dir`/config.json and loads the folder's weights (kept in their stored dtype unless
// options.torch_dtype says otherwise). Under zero3_init_flag (a live accelerator with it) the model is built
// partitioned and each process copies only its slice of each parameter out of the mapped files.
PretrainedModel from_pretrained(const std::string &dir, const config::FromPretrainedOptions &options);

// What save_pretrained (and Accelerator::save_model) writes for a model whole on this process: its weights,
// sharded by max_shard_size with an index, and config.json (the model's hf_config_json with torch_dtype, as
// transformers writes it) when the model has a Hugging Face counterpart.
void write_pretrained(const Model &model, const std::string &dir, const config::SaveModelOptions &options);
// Its config.json alone (nothing for a model without a Hugging Face counterpart): a pipeline's stages write the
// weights themselves (parallel/pipeline/stage_checkpoint.hpp).
void write_pretrained_config(const Model &model, const std::string &dir);

} // namespace accel
